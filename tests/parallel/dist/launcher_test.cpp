// The local launcher on its own (with /bin/sh children) and `baton train
// --nproc` end to end, including the failure modes: a rank that throws, one
// killed with SIGKILL, one that hangs.

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "parallel/dist/launcher.h"
#include "tests/baton_binary.h"

namespace baton::dist {
namespace {

namespace fs = std::filesystem;

LocalLaunchOptions shell(int64_t nproc, const std::string& script) {
  LocalLaunchOptions o;
  o.nproc = nproc;
  o.program = "/bin/sh";
  o.args = {"-c", script};
  o.grace = std::chrono::milliseconds(300);
  return o;
}

TEST(Launcher, ChildrenGetTheTorchrunEnvironmentAndPrefixedOutput) {
  ::testing::internal::CaptureStdout();
  const int code = launch_local(shell(
      3,
      "echo \"r=$RANK lr=$LOCAL_RANK w=$WORLD_SIZE lw=$LOCAL_WORLD_SIZE "
      "a=${MASTER_ADDR:-unset} p=${MASTER_PORT:-unset} "
      "s=$(stat -c %a \"$(dirname \"$BATON_AGENT_STORE\")\")\"; "
      "printf 'no newline'"));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0);
  EXPECT_GE(threads_per_rank(3), 1);
  for (int r = 0; r < 3; ++r) {
    const std::string rank = std::to_string(r);
    EXPECT_NE(
        out.find(
            "[rank" + rank + "]: r=" + rank + " lr=" + rank +
            " w=3 lw=3 a=unset p=unset s=700\n"),
        std::string::npos)
        << out;
    EXPECT_NE(out.find("[rank" + rank + "]: no newline\n"), std::string::npos)
        << out;
  }
}

TEST(Launcher, ThreadsAreSharedOutUnlessSet) {
  ::unsetenv("OMP_NUM_THREADS");
  ::testing::internal::CaptureStdout();
  launch_local(shell(2, "echo \"omp=$OMP_NUM_THREADS\""));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(
      out.find("[rank1]: omp=" + std::to_string(threads_per_rank(2)) + "\n"),
      std::string::npos)
      << out;
  ::setenv("OMP_NUM_THREADS", "7", 1);
  ::testing::internal::CaptureStdout();
  launch_local(shell(2, "echo \"omp=$OMP_NUM_THREADS\""));
  out = ::testing::internal::GetCapturedStdout();
  ::unsetenv("OMP_NUM_THREADS");
  EXPECT_NE(out.find("[rank1]: omp=7\n"), std::string::npos) << out;
}

TEST(Launcher, RanksGetThePassiveWaitsUnlessSet) {
  // OMP_WAIT_POLICY (common/threads.h).
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* var : {"OMP_WAIT_POLICY"}) {
    const char* before = std::getenv(var);
    saved[var] =
        before == nullptr ? std::nullopt : std::optional<std::string>(before);
  }
  const auto seen = [] {
    ::testing::internal::CaptureStdout();
    launch_local(shell(2, "echo \"policy=${OMP_WAIT_POLICY:-unset}\""));
    return ::testing::internal::GetCapturedStdout();
  };
  ::unsetenv("OMP_WAIT_POLICY");
  std::string out = seen();
  EXPECT_NE(out.find("[rank0]: policy=PASSIVE\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank1]: policy=PASSIVE\n"), std::string::npos) << out;
  ::setenv("OMP_WAIT_POLICY", "ACTIVE", 1);
  out = seen();
  EXPECT_NE(out.find("[rank1]: policy=ACTIVE\n"), std::string::npos) << out;
  for (const auto& [var, value] : saved) {
    if (value) {
      ::setenv(var.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(var.c_str());
    }
  }
}

TEST(Launcher, CpuListsReadAndWriteAsLinuxWritesThem) {
  EXPECT_EQ(
      parse_cpu_list("0-3,8,10-11\n"),
      (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(format_cpu_list({11, 0, 2, 1, 3, 8, 10, 3}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({}), "");
  for (const char* bad : {"x", "3-1", "1,,2", "-2", "1-"}) {
    EXPECT_THROW(parse_cpu_list(bad), std::invalid_argument) << bad;
  }
  EXPECT_EQ(parse_cpu_bind("--cpu-bind", "cores"), CpuBind::kCores);
  EXPECT_EQ(parse_cpu_bind("--cpu-bind", "none"), CpuBind::kNone);
  EXPECT_THROW(parse_cpu_bind("--cpu-bind", "core"), std::invalid_argument);
}

TEST(Launcher, RanksBoundToCoresGetWholeCoresAndShareOnlyWhenShort) {
  // 4 cores of 2 hardware threads each, siblings numbered n and n + 4.
  const std::vector<std::vector<int>> smt = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  EXPECT_EQ(
      cores_per_rank(2, smt),
      (std::vector<std::vector<int>>{{0, 4, 1, 5}, {2, 6, 3, 7}}));
  // Uneven: the first ranks one core more.
  EXPECT_EQ(
      cores_per_rank(3, smt),
      (std::vector<std::vector<int>>{{0, 4, 1, 5}, {2, 6}, {3, 7}}));
  // More ranks than cores: round robin.
  EXPECT_EQ(
      cores_per_rank(3, {{0}, {1}}),
      (std::vector<std::vector<int>>{{0}, {1}, {0}}));
  EXPECT_THROW(cores_per_rank(2, {}), std::invalid_argument);
  // This process's cores hold exactly the CPUs it may run on.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mask), &mask), 0);
  size_t cpus = 0;
  for (const auto& core : allowed_cores()) {
    ASSERT_FALSE(core.empty());
    for (const int cpu : core) {
      EXPECT_TRUE(CPU_ISSET(cpu, &mask)) << cpu;
      ++cpus;
    }
  }
  EXPECT_EQ(cpus, static_cast<size_t>(CPU_COUNT(&mask)));
}

TEST(Launcher, BoundRanksRunOnlyOnTheirCoresWithAThreadPerCpu) {
  ::unsetenv("OMP_NUM_THREADS");
  const auto cores = allowed_cores();
  for (const int64_t nproc : {int64_t{2}, int64_t{3}}) {
    auto options = shell(
        nproc,
        "echo \"cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "
        "/proc/self/status) omp=$OMP_NUM_THREADS\"");
    options.cpu_bind = CpuBind::kCores;
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(launch_local(options), 0);
    const std::string out = ::testing::internal::GetCapturedStdout();
    const std::string err = ::testing::internal::GetCapturedStderr();
    const auto expected = cores_per_rank(nproc, cores);
    for (int64_t r = 0; r < nproc; ++r) {
      const std::string n = std::to_string(expected[r].size());
      const std::string line = "[rank" + std::to_string(r) +
                               "]: cpus=" + format_cpu_list(expected[r]) +
                               " omp=" + n + "\n";
      EXPECT_NE(out.find(line), std::string::npos) << line << out;
      EXPECT_NE(
          err.find(
              "rank " + std::to_string(r) + " on CPU(s) " +
              format_cpu_list(expected[r])),
          std::string::npos)
          << err;
    }
    if (nproc > static_cast<int64_t>(cores.size())) {
      EXPECT_NE(err.find("some share one"), std::string::npos) << err;
    }
  }
  // Unbound, a rank may run wherever the launcher may.
  ::testing::internal::CaptureStdout();
  launch_local(shell(
      1, "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status"));
  std::vector<int> all;
  for (const auto& core : cores) {
    all.insert(all.end(), core.begin(), core.end());
  }
  EXPECT_NE(
      ::testing::internal::GetCapturedStdout().find(
          "[rank0]: " + format_cpu_list(all) + "\n"),
      std::string::npos);
}

TEST(Launcher, FirstFailureDecidesTheExitCodeAndStopsTheRest) {
  // Rank 1 fails with 3; rank 0 would sleep for a minute but is stopped.
  EXPECT_EQ(
      launch_local(shell(2, "if [ $RANK = 1 ]; then exit 3; fi; sleep 60")), 3);
  // A rank killed by a signal: 128 + the signal.
  EXPECT_EQ(launch_local(shell(2, "[ $RANK = 0 ] && kill -9 $$; exit 0")), 137);
}

TEST(Launcher, ForwardsSigterm) {
  std::thread killer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::kill(::getpid(), SIGTERM);
  });
  const int code = launch_local(shell(2, "sleep 60"));
  killer.join();
  EXPECT_EQ(code, 128 + SIGTERM);
}

TEST(Launcher, ForwardsSigusr1AndReportsAPreemptedRun) {
  // Ranks that stop on the signal with 75 are not failures: the launcher
  // waits for all of them (no grace, no SIGTERM) and exits 75.
  std::thread signaller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::kill(::getpid(), SIGUSR1);
  });
  auto options = shell(
      2,
      "trap 'sleep $RANK; echo saved; exit 75' USR1; sleep 60 & wait; "
      "sleep 60 & wait");
  const auto start = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStdout();
  const int code = launch_local(options);
  const std::string out = ::testing::internal::GetCapturedStdout();
  signaller.join();
  EXPECT_EQ(code, 75);
  // Rank 1 took a second longer than rank 0 (and the 300 ms grace) to stop.
  EXPECT_NE(out.find("[rank1]: saved"), std::string::npos) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// ------------------------------------------------------- baton --nproc

using baton::testing::BinaryResult;

BinaryResult run(const std::string& command) {
  return baton::testing::run_command(command);
}

std::string baton_train(const fs::path& dump, const std::string& extra) {
  return baton::testing::baton_bin() + " train --nproc 2 --config " +
         baton::testing::source_path("configs/debug_model.yaml") +
         " --parallelism.data_parallel_replicate_degree=2"
         " --job.dump_folder=" +
         dump.string() +
         " --training.seq_len=32 --training.local_batch_size=2"
         " --training.num_threads=1 --lr_scheduler.warmup_steps=2"
         " --metrics.log_freq=1 --metrics.peak_tflops=1 " +
         extra;
}

fs::path fresh_dump(const std::string& name) {
  return baton::testing::fresh_dir(name);
}

TEST(BatonNproc, TrainsWithTwoDataParallelRanks) {
  const auto dump = fresh_dump("nproc_dp2");
  // At debug, each rank says its own groups, under its prefix.
  const auto r =
      run(baton_train(dump, "--training.steps=12 --log-level=debug"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]: "), std::string::npos);
  const size_t groups = r.output.find("rank 1 of 2 (local 1 of 2), from baton");
  ASSERT_NE(groups, std::string::npos) << r.output;
  EXPECT_EQ(
      r.output.compare(r.output.rfind('\n', groups) + 1, 9, "[rank1]: "), 0)
      << r.output;
  // A start-up fact the ranks share is logged once, by the launcher.
  const size_t blas = r.output.find("blas: ");
  ASSERT_NE(blas, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("blas: ", blas + 1), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find(
          "baton: the job finished: all 2 ranks exited 0; metrics "
          "in " +
          (dump / "metrics.jsonl").string()),
      std::string::npos)
      << r.output;
  // One metrics file, written by rank 0 alone: one line per step.
  const auto lines = baton::testing::read_metrics(dump);
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_LT(
      lines.back()["loss"].get<double>(),
      lines.front()["loss"].get<double>() - 0.5);
}

TEST(BatonNproc, AConfigSettingNoDegreeTrainsAsOneProcessWithItsBatch) {
  // No degree set: --nproc 2 is FSDP over both ranks (torchtitan's default),
  // and the losses are those of one process with the same global batch.
  const std::string run_flags =
      " --config " + baton::testing::source_path("configs/debug_model.yaml") +
      " --training.steps=3 --training.seq_len=32 --training.num_threads=1"
      " --training.mixed_precision_param=float32"
      " --lr_scheduler.warmup_steps=2 --metrics.log_freq=1"
      " --metrics.peak_tflops=1 --checkpoint.enable=false";
  const auto two_dump = fresh_dump("nproc_unset_two");
  const auto two = run(
      baton::testing::baton_bin() + " train --nproc 2" + run_flags +
      " --training.local_batch_size=2 --job.dump_folder=" + two_dump.string());
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_NE(
      two.output.find("dp_shard=2 cp=1 tp=1 (world 2), "
                      "parallelism.data_parallel_shard_degree unset: 2"),
      std::string::npos)
      << two.output;
  const auto one_dump = fresh_dump("nproc_unset_one");
  const auto one = run(
      baton::testing::baton_bin() + " train" + run_flags +
      " --training.local_batch_size=4 --job.dump_folder=" + one_dump.string());
  ASSERT_EQ(one.code, 0) << one.output;
  const auto want = baton::testing::read_losses(one_dump);
  const auto got = baton::testing::read_losses(two_dump);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(want.size(), 3u);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5) << "step " << i + 1;
  }
}

/// The socket inodes `pid` holds open.
std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> out;
  std::error_code ec;
  const fs::path fds = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& fd : fs::directory_iterator(fds, ec)) {
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) {
      out.insert(target.substr(8, target.size() - 9));
    }
  }
  return out;
}

/// The processes whose parent is `pid`.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) {
      continue;
    }
    // "pid (comm) state ppid ...": the name may hold spaces.
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid) {
      out.push_back(std::stoi(entry.path().filename().string()));
    }
  }
  return out;
}

/// The state ("0A": LISTEN) and local address ("0100007F:1F90") of every
/// socket of /proc/net/tcp and tcp6 whose inode is in `inodes`.
std::vector<std::pair<std::string, std::string>> tcp_sockets(
    const std::set<std::string>& inodes) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid,
          timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >>
          retransmits >> uid >> timeout >> inode;
      if (inodes.contains(inode)) {
        out.emplace_back(state, local);
      }
    }
  }
  return out;
}

/// 127.0.0.0/8, ::1 or ::ffff:127.x.y.z in /proc/net's hex (each 32-bit
/// word in host order, little-endian here).
bool loopback(const std::string& local) {
  const std::string addr = local.substr(0, local.find(':'));
  if (addr.size() == 8) {
    return addr.substr(6, 2) == "7F";
  }
  return addr == "00000000000000000000000001000000" ||
         (addr.substr(0, 16) == "0000000000000000" &&
          addr.substr(16, 8) == "FFFF0000" && addr.substr(30, 2) == "7F");
}

TEST(BatonNproc, NothingListensBeyondLoopback) {
  // Even with GLOO_SOCKET_IFNAME naming another interface: a --nproc job
  // never leaves the machine.
  const auto dump = fresh_dump("nproc_sockets");
  fs::create_directories(dump);
  baton::testing::BackgroundRun job(
      "env GLOO_SOCKET_IFNAME=eth0 " +
          baton_train(dump, "--training.steps=100000"),
      dump / "output.txt");
  // Sampled from the start until a few steps are logged: the rendezvous,
  // the connection of every group (Gloo's listeners) and training.
  std::set<std::string> seen;
  size_t tcp_seen = 0;
  const auto sample = [&] {
    std::set<std::string> inodes = socket_inodes(job.pid());
    for (const pid_t rank : children_of(job.pid())) {
      const auto more = socket_inodes(rank);
      inodes.insert(more.begin(), more.end());
    }
    for (const auto& [state, local] : tcp_sockets(inodes)) {
      ++tcp_seen;
      if (state == "0A") {
        seen.insert(local);
      }
    }
    return baton::testing::read_metrics(dump).size() >= 3;
  };
  ASSERT_TRUE(job.wait_until(sample, std::chrono::seconds(120)))
      << job.output();
  EXPECT_EQ(children_of(job.pid()).size(), 2u);
  // The ranks' sockets were found (Gloo's connections at least; its
  // listeners live only while the groups connect, and may be missed).
  EXPECT_GT(tcp_seen, 0u) << job.output();
  for (const auto& a : seen) {
    EXPECT_TRUE(loopback(a)) << "listening on " << a;
  }
  job.signal(SIGTERM);
  EXPECT_NE(job.wait(std::chrono::seconds(60)), -1);
}

TEST(BatonNproc, BadConfigIsReportedOnceBeforeAnyRankStarts) {
  const auto r =
      run(baton_train(fresh_dump("nproc_bad"), "--training.steps=0"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output.find("[rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("error: --training.steps=0"), std::string::npos);
}

TEST(BatonNproc, WrongWorldSizeIsAConfigError) {
  const auto r = run(baton_train(
      fresh_dump("nproc_world"),
      "--parallelism.data_parallel_replicate_degree=3 --training.steps=2"));
  EXPECT_EQ(r.code, 2) << r.output;
  // Once, before any rank starts, with a layout that would fit.
  EXPECT_EQ(r.output.find("[rank"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find(
          "multiply to 3, not the world size 2; allowed: degrees whose "
          "product is the world size (use -1 for one degree to take the "
          "rest) (--nproc 2); a layout that fits: --nproc 3 or a multiple "
          "of it (the rest data parallel), or "
          "--parallelism.data_parallel_replicate_degree=1 "
          "--parallelism.data_parallel_shard_degree=-1 (data parallel over "
          "the 2 ranks)"),
      std::string::npos)
      << r.output;
}

TEST(BatonNproc, ARankThatThrowsIsNamedByTheOther) {
  const auto r =
      run("BATON_INJECT_FAULT=throw:1:3 " +
          baton_train(fresh_dump("nproc_throw"), "--training.steps=20"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("[rank1]: error: injected fault"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 1 failed: injected fault"), std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("baton: rank 1 exited with code 1"), std::string::npos)
      << r.output;
  // The launcher's last line says how the job ended and where its files
  // are.
  EXPECT_NE(
      r.output.find("baton: the job failed: rank 1 exited with code 1 (exit "
                    "code 1); metrics in "),
      std::string::npos)
      << r.output;
}

TEST(BatonNproc, AKilledRankEndsTheRun) {
  const auto r =
      run("BATON_INJECT_FAULT=kill:1:3 " +
          baton_train(fresh_dump("nproc_kill"), "--training.steps=20"));
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.output;
  EXPECT_NE(
      r.output.find("baton: rank 1 was killed by signal 9"), std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("baton: the job failed: rank 1 was killed by signal 9 "
                    "(Killed) (exit code 137)"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank0]: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 stopped answering"), std::string::npos)
      << r.output;
}

TEST(BatonNproc, AHungRankTimesOutTheOthers) {
  const auto r =
      run("BATON_INJECT_FAULT=hang:1:3 " +
          baton_train(
              fresh_dump("nproc_hang"),
              "--training.steps=20 --comm.train_timeout_seconds=3"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("[rank0]: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("timeout 3 s"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("baton: rank 0 exited with code 1"), std::string::npos)
      << r.output;
}

TEST(BatonNproc, MaxRestartsSurvivesTwoKilledRanks) {
  // Rank 1 is killed at step 5 in the first two attempts; each restart
  // resumes from step 4 and the third attempt ends with the straight run's
  // losses.
  const std::string checkpoints =
      "--training.steps=8 --training.mixed_precision_param=float32 "
      "--checkpoint.enable=true --checkpoint.interval=2";
  const auto straight = fresh_dump("nproc_restart_straight");
  const auto r = run("timeout 300 " + baton_train(straight, checkpoints));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto dump = fresh_dump("nproc_restart");
  const auto restarted =
      run("BATON_INJECT_FAULT=kill:1:5:2 timeout 300 " +
          baton_train(dump, checkpoints + " --max-restarts 2"));
  ASSERT_EQ(restarted.code, 0) << restarted.output;
  for (const char* line :
       {"baton: restart 1 of 2: rank 1 was killed by signal 9",
        "baton: restart 2 of 2: rank 1 was killed by signal 9",
        "from the latest checkpoint, step 4"}) {
    EXPECT_NE(restarted.output.find(line), std::string::npos)
        << line << "\n"
        << restarted.output;
  }
  EXPECT_EQ(
      baton::testing::read_losses(dump), baton::testing::read_losses(straight));

  // One restart is not enough for two kills: the second one's code.
  const auto once = run(
      "BATON_INJECT_FAULT=kill:1:5:2 timeout 300 " +
      baton_train(
          fresh_dump("nproc_restart_once"), checkpoints + " --max-restarts 1"));
  EXPECT_EQ(once.code, 128 + SIGKILL) << once.output;
  EXPECT_NE(once.output.find("restart 1 of 1"), std::string::npos);
  EXPECT_EQ(once.output.find("restart 2"), std::string::npos);

  // Without checkpoints a restart starts over, and says so.
  const auto over =
      run("BATON_INJECT_FAULT=throw:1:3:1 timeout 300 " +
          baton_train(
              fresh_dump("nproc_restart_over"),
              "--training.steps=4 --max-restarts 1"));
  EXPECT_EQ(over.code, 0) << over.output;
  EXPECT_NE(
      over.output.find("from step 0 (checkpoint.enable is off: the run "
                       "starts over)"),
      std::string::npos)
      << over.output;
}

TEST(BatonNproc, MalformedFaultSpecIsAConfigError) {
  const auto r =
      run("BATON_INJECT_FAULT=explode " +
          baton_train(fresh_dump("nproc_fault"), "--training.steps=2"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("BATON_INJECT_FAULT=explode"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace baton::dist
