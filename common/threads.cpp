#include "common/threads.h"

#include "common/text.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

namespace baton {

int64_t resolve_intra_op_threads(int64_t configured, int64_t local_ranks) {
  if (configured > 0) {
    return configured;
  }
  const int64_t cores =
      std::max<int64_t>(1, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, cores / std::max<int64_t>(1, local_ranks));
}

bool openmp_wait_policy_unset() {
  const char* value = std::getenv(kOmpWaitPolicyVar);
  return value == nullptr || *value == '\0';
}

LoadTimeSettings load_time_settings(int64_t intra_op_threads) {
  LoadTimeSettings settings;
  settings.passive_openmp = intra_op_threads > 1 && openmp_wait_policy_unset();
  return settings;
}

namespace {

/// Sets `var` to `value` for the restarted process, which finds it set and
/// goes on: one restart. False (and a warning naming `without`) if it
/// could not.
bool set_for_restart(const char* var, const char* value, const char* without) {
  if (::setenv(var, value, 1) != 0) {
    LOG(WARNING) << "could not set " << var << "; " << without;
    return false;
  }
  return true;
}

void restart_process(char** argv, const std::string& what) {
  // What is buffered would be lost with this process image.
  std::cout.flush();
  google::FlushLogFiles(google::GLOG_INFO);
  ::execv("/proc/self/exe", argv);
  const int error = errno;
  LOG(WARNING) << "could not restart for " << what << " ("
               << std::strerror(error) << "); going on as started. Set the "
               << "variables in the environment to avoid this.";
}

}  // namespace

void restart_for_load_time_settings(
    char** argv, const LoadTimeSettings& settings) {
  std::vector<std::string> what;
  if (settings.passive_openmp && set_for_restart(
                                     kOmpWaitPolicyVar,
                                     kBatonOmpWaitPolicy,
                                     "OpenMP's idle threads will spin")) {
    what.push_back(join({kOmpWaitPolicyVar, kBatonOmpWaitPolicy}, "="));
  }
  if (what.empty()) {
    return;
  }
  restart_process(argv, join(what, ", "));
}

}  // namespace baton
