#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "parallel/dist/launch_env.h"

namespace baton::dist {
namespace {

LaunchEnv detect(const std::map<std::string, std::string>& vars) {
  return detect_launch_env([&](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) {
      return std::nullopt;
    }
    return it->second;
  });
}

std::string detect_error(const std::map<std::string, std::string>& vars) {
  try {
    detect(vars);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LaunchEnv, NothingSetIsOneRank) {
  const auto e = detect({});
  EXPECT_EQ(e.source, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
}

TEST(LaunchEnv, Torchrun) {
  const auto e = detect(
      {{"RANK", "5"},
       {"WORLD_SIZE", "8"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "4"},
       {"MASTER_ADDR", "node0"},
       {"MASTER_PORT", "29400"}});
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 29400);
  EXPECT_FALSE(e.store_hosted);
  EXPECT_EQ(e.to_string(), "rank 5 of 8 (local 1 of 4), from torchrun");
}

TEST(LaunchEnv, TorchrunAgentStoreIsUsedWithItsPrefix) {
  const auto e = detect(
      {{"RANK", "0"},
       {"WORLD_SIZE", "2"},
       {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", "29500"},
       {"TORCHELASTIC_USE_AGENT_STORE", "True"},
       {"TORCHELASTIC_RESTART_COUNT", "3"}});
  EXPECT_TRUE(e.store_hosted);
  EXPECT_EQ(e.store_prefix, "/worker/attempt_3");
}

TEST(LaunchEnv, BatonLauncher) {
  const auto e = detect(
      {{"RANK", "1"},
       {"WORLD_SIZE", "2"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", "4000"},
       {kBatonAgentStoreEnv, "1"}});
  EXPECT_EQ(e.source, "baton");
  EXPECT_TRUE(e.store_hosted);
  EXPECT_EQ(e.store_prefix, "");
}

TEST(LaunchEnv, BatonLauncherWithAStoreFileNeedsNoPort) {
  const auto e = detect(
      {{"RANK", "0"},
       {"WORLD_SIZE", "2"},
       {"LOCAL_RANK", "0"},
       {"LOCAL_WORLD_SIZE", "2"},
       {kBatonAgentStoreEnv, "/tmp/baton-rendezvous-x/store"}});
  EXPECT_EQ(e.source, "baton");
  EXPECT_TRUE(e.store_hosted);
  EXPECT_EQ(e.store_file, "/tmp/baton-rendezvous-x/store");
}

TEST(LaunchEnv, OpenMpiComesBeforeSlurm) {
  // mpirun inside sbatch: SLURM_PROCID=0 is inherited by every rank.
  const auto e = detect(
      {{"OMPI_COMM_WORLD_RANK", "3"},
       {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "1"},
       {"MASTER_ADDR", "n1"}});
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "n1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(LaunchEnv, Pmi) {
  const auto e = detect(
      {{"PMI_RANK", "1"},
       {"PMI_SIZE", "2"},
       {"MPI_LOCALRANKID", "1"},
       {"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(e.source, "pmi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");  // one machine: loopback
}

TEST(LaunchEnv, Slurm) {
  const auto e = detect(
      {{"SLURM_PROCID", "6"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_LOCALID", "2"},
       {"SLURM_NTASKS_PER_NODE", "4(x2)"},
       {"MASTER_ADDR", "gpu-01"},
       {"MASTER_PORT", "29501"}});
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "gpu-01");
}

TEST(LaunchEnv, BadValuesAreConfigErrors) {
  EXPECT_NE(
      detect_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}})
          .find("rank 2 outside world size 2"),
      std::string::npos);
  EXPECT_NE(
      detect_error({{"RANK", "x"}, {"WORLD_SIZE", "2"}})
          .find("RANK=x is not an integer"),
      std::string::npos);
  EXPECT_NE(
      detect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}})
          .find("MASTER_PORT is not"),
      std::string::npos);
  EXPECT_NE(
      detect_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}})
          .find("MASTER_ADDR is not set"),
      std::string::npos);
  EXPECT_NE(
      detect_error({{"OMPI_COMM_WORLD_RANK", "0"}})
          .find("OMPI_COMM_WORLD_SIZE is not set"),
      std::string::npos);
}

}  // namespace
}  // namespace baton::dist
