#include "trainer/fault_injection.h"

#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "common/error.h"
#include "parallel/dist/launch_env.h"

namespace baton {

const FaultInjection& FaultInjection::get() {
  static const FaultInjection faults = [] {
    FaultInjection f;
    const char* spec = std::getenv("BATON_INJECT_FAULT");
    if (spec == nullptr || *spec == '\0') {
      return f;
    }
    const std::string where = std::string("BATON_INJECT_FAULT=") + spec;
    char kind[16] = {0};
    long long rank = -1;
    long long step = -1;
    long long attempts = -1;
    char tail = 0;
    const int fields = std::sscanf(
        spec,
        "%15[a-z]:%lld:%lld:%lld%c",
        kind,
        &rank,
        &step,
        &attempts,
        &tail);
    if (fields != 3 && (fields != 4 || attempts < 1)) {
      throw_config_error(
          where,
          "malformed; allowed: KIND:RANK:STEP[:ATTEMPTS] with KIND throw, "
          "kill, hang, killsave, stallsave or badblas and ATTEMPTS >= 1");
    }
    f.kind_ = kind;
    if (f.kind_ != "throw" && f.kind_ != "kill" && f.kind_ != "hang" &&
        f.kind_ != "killsave" && f.kind_ != "stallsave" &&
        f.kind_ != "badblas") {
      throw_config_error(
          where,
          "KIND: '" + f.kind_ +
              "'; allowed: throw, kill, hang, killsave, stallsave or badblas");
    }
    f.rank_ = rank;
    f.step_ = step;
    // Only in the first ATTEMPTS attempts of a job that restarts.
    const char* attempt = std::getenv(dist::kBatonRestartCountEnv);
    if (fields == 4 && attempt != nullptr && std::atoll(attempt) >= attempts) {
      f.kind_.clear();
    }
    return f;
  }();
  return faults;
}

bool FaultInjection::kill_during_save(int64_t rank, int64_t step) const {
  return kind_ == "killsave" && rank_ == rank && step_ == step;
}

bool FaultInjection::stall_during_save(int64_t rank, int64_t step) const {
  return kind_ == "stallsave" && rank_ == rank && step_ == step;
}

void FaultInjection::at_step_start(int64_t rank, int64_t step) const {
  if (kind_.empty() || kind_ == "killsave" || kind_ == "stallsave" ||
      kind_ == "badblas" || rank_ != rank || step_ != step) {
    return;
  }
  LOG(WARNING) << "injecting fault '" << kind_ << "' at step " << step;
  google::FlushLogFiles(google::GLOG_INFO);
  if (kind_ == "throw") {
    throw std::runtime_error(
        "injected fault (BATON_INJECT_FAULT) at step " + std::to_string(step));
  }
  if (kind_ == "kill") {
    ::kill(::getpid(), SIGKILL);
  }
  while (true) {
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

}  // namespace baton
