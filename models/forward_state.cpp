#include "models/forward_state.h"

namespace baton {

ForwardState& forward_state() {
  thread_local ForwardState state;
  return state;
}

ForwardStateGuard::ForwardStateGuard(const ForwardState& state)
    : previous_(forward_state()) {
  forward_state() = state;
}

ForwardStateGuard::~ForwardStateGuard() {
  forward_state() = previous_;
}

}  // namespace baton
