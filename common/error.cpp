#include "common/error.h"

namespace baton {

void throw_config_error(const std::string& where, const std::string& message) {
  throw ConfigError(where.empty() ? message : where + ": " + message);
}

}  // namespace baton
