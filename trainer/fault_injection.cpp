#include "trainer/fault_injection.h"

#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
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
          "kill, hang, hangaction, killsave or stallsave and "
          "ATTEMPTS >= 1");
    }
    f.kind_ = kind;
    if (f.kind_ != "throw" && f.kind_ != "kill" && f.kind_ != "hang" &&
        f.kind_ != "hangaction" && f.kind_ != "killsave" &&
        f.kind_ != "stallsave") {
      throw_config_error(
          where,
          "KIND: '" + f.kind_ +
              "'; allowed: throw, kill, hang, hangaction, killsave or "
              "stallsave");
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

namespace {

/// The step at_step_start saw last (the train loop's thread sets it, a
/// pipeline action of the same step reads it).
std::atomic<int64_t> current_step{-1};

[[noreturn]] void hang_forever() {
  while (true) {
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

}  // namespace

void FaultInjection::in_pipeline_action(int64_t rank) const {
  if (kind_ != "hangaction" || rank_ != rank || current_step != step_) {
    return;
  }
  LOG(WARNING) << "injecting fault 'hangaction' at step " << step_;
  google::FlushLogFiles(google::GLOG_INFO);
  hang_forever();
}

void FaultInjection::at_step_start(int64_t rank, int64_t step) const {
  current_step = step;
  if (kind_.empty() || kind_ == "killsave" || kind_ == "stallsave" ||
      kind_ == "hangaction" || rank_ != rank || step_ != step) {
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
  hang_forever();
}

}  // namespace baton
