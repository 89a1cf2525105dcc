#include "common/threads.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

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

namespace {

bool set_passive_openmp_wait() {
  // The restarted process finds the variable set and goes on: one restart.
  if (::setenv(kOmpWaitPolicyVar, kBatonOmpWaitPolicy, 1) != 0) {
    LOG(WARNING) << "could not set " << kOmpWaitPolicyVar
                 << "; OpenMP's idle threads will spin";
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

void restart_for_load_time_settings(char** argv, bool kernels, bool passive) {
  const bool omp = passive && set_passive_openmp_wait();
  if (kernels || omp) {
    restart_process(
        argv,
        std::string(kernels ? "OpenBLAS's kernels" : "") +
            (kernels && omp ? " and " : "") +
            (omp ? std::string(kOmpWaitPolicyVar) + "=" + kBatonOmpWaitPolicy
                 : std::string()));
  }
}

}  // namespace baton
