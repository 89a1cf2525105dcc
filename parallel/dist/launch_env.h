#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace baton::dist {

/// Where this process sits in the job, as its launcher told it.
struct LaunchEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  /// Host and port of the rendezvous store (TCPStore).
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  /// True when a launcher (baton --nproc, torchrun's agent) already hosts
  /// the store: every rank, rank 0 included, connects as a client.
  bool store_hosted = false;
  /// The file of a c10d FileStore that `baton --nproc` made in a private
  /// (0700) folder: its ranks meet there, and no store listens on a port.
  /// Empty: the TCPStore at master_addr:master_port.
  std::string store_file;
  /// Key prefix inside a hosted store (torchrun: /worker/attempt_<n>).
  std::string store_prefix;
  /// "baton", "torchrun", "openmpi", "pmi", "slurm" or "single".
  std::string source = "single";

  bool distributed() const {
    return world_size > 1;
  }
  /// "rank 1 of 2 (local 1 of 2), from torchrun".
  std::string to_string() const;
};

/// Environment look-up; tests pass their own.
using GetEnv = std::function<std::optional<std::string>(const char*)>;

/// Reads, in order: the torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Open MPI
/// (OMPI_COMM_WORLD_*), PMI (PMI_RANK, PMI_SIZE), SLURM (SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE); with none of them a
/// single rank. SLURM comes last because mpirun inside sbatch inherits
/// SLURM_PROCID=0. Throws ConfigError for malformed values (a rank outside
/// the world, a non-number, a multi-rank job without MASTER_ADDR).
LaunchEnv detect_launch_env(const GetEnv& getenv);
/// detect_launch_env over the process environment.
LaunchEnv detect_launch_env();

/// The variable `baton --nproc` gives its children (beside RANK,
/// WORLD_SIZE and the other torchrun ones): the path of the FileStore they
/// meet in ("1": a TCPStore hosted at MASTER_ADDR:MASTER_PORT).
inline constexpr const char* kBatonAgentStoreEnv = "BATON_AGENT_STORE";
/// Which attempt of a `baton --nproc --max-restarts` job this is: 0, then
/// 1 after the first restart, ...
inline constexpr const char* kBatonRestartCountEnv = "BATON_RESTART_COUNT";

}  // namespace baton::dist
