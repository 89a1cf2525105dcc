#include "parallel/dist/launch_env.h"

#include <cstdlib>

#include "common/error.h"

namespace baton::dist {

namespace {

/// The integer in variable `name`, or nullopt when it is unset.
std::optional<int64_t> get_int(const GetEnv& getenv, const char* name) {
  const auto v = getenv(name);
  if (!v) {
    return std::nullopt;
  }
  try {
    size_t used = 0;
    const long long n = std::stoll(*v, &used);
    if (used == v->size()) {
      return n;
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(
      std::string("environment: ") + name + "=" + *v + " is not an integer");
}

int64_t require_int(const GetEnv& getenv, const char* name, const char* why) {
  const auto v = get_int(getenv, name);
  if (!v) {
    throw ConfigError(
        std::string("environment: ") + name + " is not set, but " + why);
  }
  return *v;
}

void check(const LaunchEnv& e) {
  auto fail = [&](const std::string& what) {
    throw ConfigError(
        "environment (" + e.source + "): " + what +
        "; allowed: 0 <= RANK < WORLD_SIZE, 0 <= LOCAL_RANK < "
        "LOCAL_WORLD_SIZE <= WORLD_SIZE");
  };
  if (e.world_size < 1) {
    fail("world size " + std::to_string(e.world_size));
  }
  if (e.rank < 0 || e.rank >= e.world_size) {
    fail(
        "rank " + std::to_string(e.rank) + " outside world size " +
        std::to_string(e.world_size));
  }
  if (e.local_world_size < 1 || e.local_world_size > e.world_size) {
    fail("local world size " + std::to_string(e.local_world_size));
  }
  if (e.local_rank < 0 || e.local_rank >= e.local_world_size) {
    fail(
        "local rank " + std::to_string(e.local_rank) +
        " outside local world size " + std::to_string(e.local_world_size));
  }
  if (e.master_port < 1 || e.master_port > 65535) {
    fail("MASTER_PORT " + std::to_string(e.master_port));
  }
}

/// MASTER_ADDR / MASTER_PORT; a multi-rank job needs the address.
void read_master(const GetEnv& getenv, LaunchEnv& e) {
  if (const auto addr = getenv("MASTER_ADDR")) {
    e.master_addr = *addr;
  } else if (e.world_size > 1 && e.world_size != e.local_world_size) {
    throw ConfigError(
        "environment (" + e.source +
        "): MASTER_ADDR is not set; a job over several machines needs the "
        "address of rank 0's machine (see docs/launching.md)");
  }
  if (const auto port = get_int(getenv, "MASTER_PORT")) {
    e.master_port = *port;
  }
}

}  // namespace

std::string LaunchEnv::to_string() const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
         " (local " + std::to_string(local_rank) + " of " +
         std::to_string(local_world_size) + "), from " + source;
}

LaunchEnv detect_launch_env(const GetEnv& getenv) {
  LaunchEnv e;
  if (getenv("RANK") && getenv("WORLD_SIZE")) {
    e.source = getenv(kBatonAgentStoreEnv) ? "baton" : "torchrun";
    e.rank = *get_int(getenv, "RANK");
    e.world_size = *get_int(getenv, "WORLD_SIZE");
    e.local_rank = get_int(getenv, "LOCAL_RANK").value_or(e.rank);
    e.local_world_size =
        get_int(getenv, "LOCAL_WORLD_SIZE").value_or(e.world_size);
    const auto agent_store = getenv(kBatonAgentStoreEnv);
    if (agent_store && *agent_store != "1") {
      e.store_file = *agent_store;
    }
    if (e.world_size > 1 && !getenv("MASTER_PORT") && e.store_file.empty()) {
      throw ConfigError(
          "environment (" + e.source +
          "): RANK and WORLD_SIZE are set but MASTER_PORT is not");
    }
    read_master(getenv, e);
    if (getenv(kBatonAgentStoreEnv)) {
      e.store_hosted = true;
    } else if (const auto agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
               agent &&
               (*agent == "True" || *agent == "true" || *agent == "1")) {
      e.store_hosted = true;
      e.store_prefix =
          "/worker/attempt_" +
          std::to_string(
              get_int(getenv, "TORCHELASTIC_RESTART_COUNT").value_or(0));
    }
  } else if (getenv("OMPI_COMM_WORLD_RANK")) {
    e.source = "openmpi";
    e.rank = *get_int(getenv, "OMPI_COMM_WORLD_RANK");
    e.world_size =
        require_int(getenv, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK is");
    e.local_rank = get_int(getenv, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    e.local_world_size =
        get_int(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
    read_master(getenv, e);
  } else if (getenv("PMI_RANK")) {
    e.source = "pmi";
    e.rank = *get_int(getenv, "PMI_RANK");
    e.world_size = require_int(getenv, "PMI_SIZE", "PMI_RANK is");
    e.local_rank = get_int(getenv, "MPI_LOCALRANKID").value_or(0);
    e.local_world_size = get_int(getenv, "MPI_LOCALNRANKS").value_or(1);
    read_master(getenv, e);
  } else if (getenv("SLURM_PROCID")) {
    e.source = "slurm";
    e.rank = *get_int(getenv, "SLURM_PROCID");
    e.world_size = require_int(getenv, "SLURM_NTASKS", "SLURM_PROCID is");
    e.local_rank = get_int(getenv, "SLURM_LOCALID").value_or(0);
    // SLURM_NTASKS_PER_NODE may read "4(x2)"; its leading number is enough.
    if (const auto per_node = getenv("SLURM_NTASKS_PER_NODE")) {
      e.local_world_size = std::max(1LL, std::atoll(per_node->c_str()));
    } else {
      e.local_world_size = 1;
    }
    read_master(getenv, e);
  }
  check(e);
  return e;
}

LaunchEnv detect_launch_env() {
  return detect_launch_env([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) {
      return std::nullopt;
    }
    return std::string(v);
  });
}

}  // namespace baton::dist
