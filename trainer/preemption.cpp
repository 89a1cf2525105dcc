#include "trainer/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace baton {

namespace {

std::atomic<int> received{0};
std::atomic<unsigned> grace_seconds{0};

/// Only async-signal-safe calls below: they run inside signal handlers.
void say(const char* text) {
  size_t n = 0;
  while (text[n] != '\0') {
    ++n;
  }
  (void)!::write(STDERR_FILENO, text, n);
}

/// Ends the process as an untrapped SIGTERM does.
void die_of_sigterm() {
  ::signal(SIGTERM, SIG_DFL);
  ::raise(SIGTERM);  // delivered when the running handler returns
}

void on_grace_over(int) {
  say("error: [preemption] checkpoint.preemption_grace_seconds ran out "
      "before the run stopped: exiting at once; the checkpoints saved "
      "before are whole\n");
  die_of_sigterm();
}

void on_signal(int sig) {
  int none = 0;
  if (received.compare_exchange_strong(none, sig)) {
    say(sig == SIGTERM
            ? "baton: SIGTERM received: stopping at the next step boundary "
              "(a second SIGTERM stops at once)\n"
            : "baton: SIGUSR1 received: stopping at the next step boundary "
              "(a SIGTERM stops at once)\n");
    if (grace_seconds.load() > 0) {
      ::alarm(grace_seconds.load());
    }
    return;
  }
  if (sig == SIGTERM) {
    say("error: [preemption] a second signal: exiting at once; the "
        "checkpoints saved before are whole\n");
    die_of_sigterm();
  }
}

}  // namespace

void Preemption::install(std::chrono::seconds grace) {
  grace_seconds = static_cast<unsigned>(grace.count());
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGUSR1);
  // Restarted, so that no blocking call of a library sees EINTR.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  struct sigaction timer {};
  timer.sa_handler = on_grace_over;
  sigemptyset(&timer.sa_mask);
  timer.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &timer, nullptr);
}

int Preemption::requested() {
  return received.load();
}

}  // namespace baton
