#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"

namespace baton::dist {
namespace {

using baton::testing::run_ranks;

at::Tensor filled(double value, at::ScalarType dtype = at::kFloat) {
  return torch::full({2, 3}, value, torch::TensorOptions().dtype(dtype));
}

TEST(ProcessGroup, AllReduceEveryOpAndDtype) {
  run_ranks(3, [](int64_t rank, Runtime& rt) {
    auto& world = *rt.world();
    EXPECT_EQ(world.size(), 3);
    EXPECT_EQ(world.rank(), rank);
    EXPECT_EQ(world.backend(), "gloo");
    const double mine = static_cast<double>(rank + 1);  // 1, 2, 3
    const std::pair<ReduceOp, double> cases[] = {
        {ReduceOp::kSum, 6.0},
        {ReduceOp::kAvg, 2.0},
        {ReduceOp::kMax, 3.0},
        {ReduceOp::kMin, 1.0}};
    for (const auto& [op, expected] : cases) {
      auto t = filled(mine);
      world.all_reduce(t, op);
      EXPECT_TRUE(torch::equal(t, filled(expected)));
      // bf16 goes through a float32 copy on Gloo.
      auto b = filled(mine, at::kBFloat16);
      world.all_reduce(b, op);
      EXPECT_EQ(b.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(torch::equal(b, filled(expected, at::kBFloat16)));
    }
    auto i = filled(mine, at::kLong);
    world.all_reduce(i, ReduceOp::kSum);
    EXPECT_TRUE(torch::equal(i, filled(6, at::kLong)));
    EXPECT_THROW(world.all_reduce(i, ReduceOp::kAvg), std::invalid_argument);
    // Async: several in flight, waited in order.
    std::vector<at::Tensor> ts;
    std::vector<Work> works;
    for (int k = 0; k < 4; ++k) {
      ts.push_back(filled(mine * (k + 1)));
      works.push_back(world.all_reduce_async(ts.back(), ReduceOp::kAvg));
    }
    for (int k = 0; k < 4; ++k) {
      works[k].wait();
      EXPECT_TRUE(works[k].completed());
      EXPECT_TRUE(torch::equal(ts[k], filled(2.0 * (k + 1))));
    }
  });
}

TEST(ProcessGroup, BroadcastGatherScatterBarrier) {
  run_ranks(3, [](int64_t rank, Runtime& rt) {
    auto& world = *rt.world();
    auto t = filled(static_cast<double>(rank * 10));
    world.broadcast(t, /*root=*/2);
    EXPECT_TRUE(torch::equal(t, filled(20)));

    const auto mine = torch::tensor({rank, rank * 10}, torch::kLong);
    const auto all = world.all_gather(mine);
    EXPECT_TRUE(torch::equal(
        all, torch::tensor({0, 0, 1, 10, 2, 20}, torch::kLong).view({3, 2})));
    // Gloo moves no bf16: it travels bit for bit as fp16.
    const auto bf16 = world.all_gather(
        (torch::tensor({rank, rank * 10}, torch::kFloat) + 0.125)
            .to(torch::kBFloat16));
    EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(
        bf16,
        (torch::tensor({0, 0, 1, 10, 2, 20}, torch::kFloat).view({3, 2}) +
         0.125)
            .to(torch::kBFloat16)));

    // Everyone contributes arange(6) + rank; rank r keeps chunk r, summed.
    const auto input = torch::arange(6, torch::kFloat) + rank;
    auto out = torch::empty({2}, torch::kFloat);
    world.reduce_scatter(out, input);
    const auto expected =
        (torch::arange(6, torch::kFloat) * 3 + 3).chunk(3)[rank];
    EXPECT_TRUE(torch::equal(out, expected));
    auto bad = torch::empty({3}, torch::kFloat);
    EXPECT_THROW(world.reduce_scatter(bad, input), std::invalid_argument);

    world.barrier();
  });
}

TEST(ProcessGroup, ReduceScatterEqualsSumThenChunkForEveryDtypeAndSize) {
  // Against the reference: every rank's input summed (or reduced), then
  // rank r's chunk; chunk sizes that divide nothing, several dtypes, the
  // async form, and the flat all-gather that is its inverse.
  run_ranks(3, [](int64_t rank, Runtime& rt) {
    auto& world = *rt.world();
    for (const int64_t n : {1, 7, 1000}) {
      for (const auto dtype :
           {at::kFloat, at::kDouble, at::kLong, at::kBFloat16}) {
        SCOPED_TRACE(
            "n " + std::to_string(n) + " " + std::string(c10::toString(dtype)));
        const auto input_of = [&](int64_t r) {
          return (torch::arange(3 * n, torch::kLong) % 13 + r * 5)
              .to(dtype);  // exact in bf16 too
        };
        const auto reference = input_of(0) + input_of(1) + input_of(2);
        auto out = torch::empty({n}, dtype);
        world.reduce_scatter(out, input_of(rank));
        EXPECT_TRUE(torch::equal(out, reference.chunk(3)[rank]));
        auto max = torch::empty({n}, dtype);
        auto work = world.reduce_scatter_async(
            max, input_of(rank), dist::ReduceOp::kMax);
        work.wait();
        EXPECT_TRUE(torch::equal(max, input_of(2).chunk(3)[rank]));
        // The flat all-gather puts each rank's piece at its offset.
        auto gathered = torch::empty({3 * n}, dtype);
        world.all_gather_into_async(gathered, out).wait();
        EXPECT_TRUE(torch::equal(gathered, reference));
      }
    }
    auto avg = torch::empty({2}, torch::kFloat);
    world.reduce_scatter(
        avg, torch::full({6}, 3.0 * (rank + 1)), dist::ReduceOp::kAvg);
    EXPECT_TRUE(torch::equal(avg, torch::full({2}, 6.0)));
    auto wrong = torch::empty({5}, torch::kFloat);
    EXPECT_THROW(
        world.all_gather_into_async(wrong, torch::ones({2})),
        std::invalid_argument);
  });
}

TEST(ProcessGroup, SendRecvMatchByTag) {
  run_ranks(2, [](int64_t rank, Runtime& rt) {
    auto& world = *rt.world();
    if (rank == 0) {
      world.send(filled(1), 1, /*tag=*/7);
      auto w = world.isend(filled(2), 1, /*tag=*/9);
      w.wait();
      auto back = filled(0);
      world.recv(back, 1, /*tag=*/3);
      EXPECT_TRUE(torch::equal(back, filled(42)));
    } else {
      // Posted in the other order: the tags pick the messages.
      auto nine = filled(0);
      auto seven = filled(0);
      auto w9 = world.irecv(nine, 0, 9);
      auto w7 = world.irecv(seven, 0, 7);
      w7.wait();
      w9.wait();
      EXPECT_TRUE(torch::equal(seven, filled(1)));
      EXPECT_TRUE(torch::equal(nine, filled(2)));
      world.send(filled(42), 0, 3);
    }
    auto t = filled(0);
    EXPECT_THROW(world.send(t, rank, 0), std::invalid_argument);
    EXPECT_THROW(world.recv(t, 5, 0), std::invalid_argument);
  });
}

TEST(ProcessGroup, SubGroupsAndMesh) {
  run_ranks(4, [](int64_t rank, Runtime& rt) {
    // pp 2 x dp 2: dp groups {0, 1} and {2, 3}; pp groups {0, 2}, {1, 3}.
    const auto dims = baton::testing::builtin_dims(2, 1, 1, 2, 4);
    ParallelMesh mesh(dims, rank, rt.shared_from_this());
    auto t = filled(static_cast<double>(rank));
    mesh.dp()->all_reduce(t);
    EXPECT_TRUE(torch::equal(t, filled(rank < 2 ? 1 : 5)));
    auto u = filled(static_cast<double>(rank));
    mesh.group("pp")->all_reduce(u);
    EXPECT_TRUE(torch::equal(u, filled(rank % 2 == 0 ? 2 : 4)));
    EXPECT_EQ(
        mesh.group("pp")->global_ranks(),
        (std::vector<int64_t>{rank % 2, rank % 2 + 2}));
    // P2P inside a sub-group uses group ranks.
    auto& pp = *mesh.group("pp");
    if (pp.rank() == 0) {
      pp.send(filled(100 + rank), 1, 0);
    } else {
      auto got = filled(0);
      pp.recv(got, 0, 0);
      EXPECT_TRUE(torch::equal(got, filled(100 + rank - 2)));
    }
    EXPECT_THROW(rt.new_group({0, 1, 2, 3}, "world"), std::invalid_argument);
  });
}

TEST(ProcessGroup, SingleRankGroupIsLocal) {
  auto g = ProcessGroup::single("solo", 3);
  EXPECT_EQ(g->size(), 1);
  EXPECT_EQ(g->global_ranks(), std::vector<int64_t>{3});
  auto t = filled(5);
  g->all_reduce(t, ReduceOp::kAvg);
  g->broadcast(t, 0);
  g->barrier();
  EXPECT_TRUE(torch::equal(t, filled(5)));
  EXPECT_TRUE(torch::equal(g->all_gather(t), filled(5).unsqueeze(0)));
  EXPECT_THROW(g->send(t, 0, 0), std::invalid_argument);
}

TEST(ProcessGroup, TimedOutReceiveNamesTheOperation) {
  std::atomic<bool> done{false};
  run_ranks(2, [&](int64_t rank, Runtime& rt) {
    if (rank == 1) {
      rt.set_timeout(std::chrono::milliseconds(300));
      auto t = filled(0);
      try {
        rt.world()->recv(t, 0, 5);
        ADD_FAILURE() << "recv returned without a sender";
      } catch (const CommError& e) {
        const std::string m = e.what();
        EXPECT_NE(
            m.find("recv from rank 0 (tag 5) on group 'world'"),
            std::string::npos)
            << m;
        EXPECT_NE(m.find("timeout 0.3 s"), std::string::npos) << m;
        EXPECT_NE(
            m.find("every rank still sends heartbeats"), std::string::npos)
            << m;
      }
      done = true;
    } else {
      while (!done) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  });
}

TEST(ProcessGroup, AGroupsOwnTimeoutReplacesTheRuntimes) {
  run_ranks(2, [&](int64_t rank, Runtime& rt) {
    GroupOptions patient;
    patient.backend = "gloo";
    patient.timeout = std::chrono::seconds(20);
    auto slow = rt.new_group({0, 1}, "patient", patient);
    GroupOptions hasty;
    hasty.timeout = std::chrono::milliseconds(300);
    auto quick = rt.new_group({0, 1}, "hasty", hasty);
    rt.set_timeout(std::chrono::milliseconds(300));
    // Rank 0 arrives a second late: more than the runtime's timeout, well
    // within the patient group's.
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    auto t = filled(static_cast<double>(rank + 1));
    slow->all_reduce(t);
    EXPECT_TRUE(torch::equal(t, filled(3)));
    rt.set_timeout(std::chrono::seconds(20));
    if (rank == 1) {
      try {
        quick->recv(t, 0, 9);
        ADD_FAILURE() << "recv returned without a sender";
      } catch (const CommError& e) {
        EXPECT_NE(
            std::string(e.what()).find("timeout 0.3 s"), std::string::npos)
            << e.what();
      }
    }
    slow->barrier();
    GroupOptions bad;
    bad.backend = "mpi";
    EXPECT_THROW(rt.new_group({0, 1}, "bad", bad), std::invalid_argument);
  });
}

TEST(ProcessGroup, FailedRankIsNamedByTheOthers) {
  run_ranks(
      3,
      [](int64_t rank, Runtime& rt) {
        // Every rank past start-up first: a rank that left during another's
        // connecting would fail that one's start-up instead (named too, but
        // not what this test is about).
        rt.world()->barrier();
        if (rank == 2) {
          // What main() does when a rank throws: report, then leave (its
          // groups close their connections when the runtime goes).
          rt.report_failure("boom: cannot read shard 7");
          return;
        }
        auto t = filled(1);
        try {
          for (int i = 0; i < 1000; ++i) {
            rt.world()->all_reduce(t);
          }
          ADD_FAILURE() << "all_reduce kept working without rank 2";
        } catch (const CommError& e) {
          EXPECT_NE(
              std::string(e.what()).find(
                  "rank 2 failed: boom: cannot read shard 7"),
              std::string::npos)
              << e.what();
        }
      },
      std::chrono::seconds(20));
}

TEST(ProcessGroup, StartingARuntimeIgnoresSigpipe) {
  // Else a write to a peer that is gone ends the process (status 141)
  // before the failed rank can be named (FailedRankIsNamedByTheOthers).
  run_ranks(1, [](int64_t, Runtime&) {
    struct sigaction current {};
    ASSERT_EQ(sigaction(SIGPIPE, nullptr, &current), 0);
    EXPECT_EQ(current.sa_handler, SIG_IGN);
  });
}

/// A port that was free a moment ago.
int64_t free_port() {
  StoreServer probe(0, 1, std::chrono::seconds(5));
  return probe.port();
}

/// The local addresses (as /proc/net writes them) of the sockets listening
/// on `port` in this network namespace, from `table` (tcp or tcp6).
std::vector<std::string> listening_on(const std::string& table, int64_t port) {
  std::ifstream in("/proc/net/" + table);
  std::string line;
  std::getline(in, line);  // the header
  std::vector<std::string> out;
  char hex_port[8];
  std::snprintf(hex_port, sizeof(hex_port), "%04lX", static_cast<long>(port));
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state == "0A" && local.substr(local.find(':') + 1) == hex_port) {
      out.push_back(local.substr(0, local.find(':')));
    }
  }
  return out;
}

TEST(ProcessGroup, AStoreHostedByRankZeroListensOnMasterAddrAlone) {
  // As under torchrun without an agent store: c10d's own server would
  // listen on every interface; Baton's listens on MASTER_ADDR's.
  const int64_t port = free_port();
  auto env = baton::testing::rank_env(0, 1, port);
  env.store_hosted = false;
  auto rt = Runtime::init(env, RuntimeOptions());
  EXPECT_EQ(listening_on("tcp", port), std::vector<std::string>{"0100007F"});
  EXPECT_TRUE(listening_on("tcp6", port).empty());
}

TEST(ProcessGroup, LosingTheStoreHostIsNamed) {
  // As under torchrun without an agent store: rank 0 hosts the store. When
  // it goes, the others say so.
  const int64_t port = free_port();
  std::atomic<bool> rank1_ready{false};
  std::string message;
  std::thread rank0([&] {
    auto env = baton::testing::rank_env(0, 2, port);
    env.store_hosted = false;
    auto rt = Runtime::init(env, RuntimeOptions());
    while (!rank1_ready) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Leaves: its groups and the store it hosts go with the runtime.
  });
  std::thread rank1([&] {
    auto env = baton::testing::rank_env(1, 2, port);
    env.store_hosted = false;
    auto rt = Runtime::init(env, RuntimeOptions());
    rank1_ready = true;
    auto t = filled(1);
    try {
      rt->world()->all_reduce(t);
    } catch (const CommError& e) {
      message = e.what();
    }
  });
  rank0.join();
  rank1.join();
  EXPECT_NE(message.find("does not answer"), std::string::npos) << message;
  EXPECT_NE(message.find("its host (rank 0) is gone"), std::string::npos)
      << message;
}

TEST(ProcessGroup, RendezvousTimesOutWithoutTheOtherRanks) {
  StoreServer store(0, 2, std::chrono::seconds(5));
  RuntimeOptions options;
  options.init_timeout = std::chrono::milliseconds(1500);
  try {
    Runtime::init(baton::testing::rank_env(0, 2, store.port()), options);
    FAIL() << "a world of 2 formed with one rank";
  } catch (const CommError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("creating group 'world' of 2 ranks"), std::string::npos)
        << m;
    EXPECT_NE(m.find("within 1.5 s"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 never joined"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace baton::dist
