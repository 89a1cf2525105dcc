// Pipeline schedules as data: the IR and its parser, the generators against
// the reference's golden vector and PyTorch's published tables, lowering,
// validation, simulation (bubbles, peaks, deadlock) and the output formats.

#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "parallel/pipeline/action.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/placement.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/validation.h"

namespace baton::pipeline {
namespace {

// PyTorch test/distributed/pipelining/artifacts/dualpipev_4rank_10mb.csv.
const char* const kDualPipeV4Rank10Mb =
    "0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,7I0,7W0,7F1,7I1,7W1,7F2,7I2,7W2,7F3,"
    "(0F7;7B3)OVERLAP_F_B,(7F4;0B0)OVERLAP_F_B,(0F8;7B4)OVERLAP_F_B,"
    "(7F5;0B1)OVERLAP_F_B,(0F9;7B5)OVERLAP_F_B,(7F6;0B2)OVERLAP_F_B,7B6,"
    "(7F7;0B3)OVERLAP_F_B,7B7,(7F8;0B4)OVERLAP_F_B,7B8,(7F9;0B5)OVERLAP_F_B,"
    "7B9,0I6,0W6,0I7,0W7,0I8,0W8,0I9,0W9\n"
    "1F0,1F1,1F2,1F3,1F4,6F0,1F5,6F1,6I0,6W0,6F2,6I1,6W1,6F3,"
    "(1F6;6B2)OVERLAP_F_B,(6F4;1B0)OVERLAP_F_B,(1F7;6B3)OVERLAP_F_B,"
    "(6F5;1B1)OVERLAP_F_B,(1F8;6B4)OVERLAP_F_B,(6F6;1B2)OVERLAP_F_B,"
    "(1F9;6B5)OVERLAP_F_B,(6F7;1B3)OVERLAP_F_B,6B6,(6F8;1B4)OVERLAP_F_B,6B7,"
    "(6F9;1B5)OVERLAP_F_B,6B8,1B6,6I9,1I7,6W9,1I8,1W7,1I9,1W8,1W9\n"
    "2F0,2F1,2F2,5F0,2F3,5F1,2F4,5F2,5I0,5W0,5F3,(2F5;5B1)OVERLAP_F_B,"
    "(5F4;2B0)OVERLAP_F_B,(2F6;5B2)OVERLAP_F_B,(5F5;2B1)OVERLAP_F_B,"
    "(2F7;5B3)OVERLAP_F_B,(5F6;2B2)OVERLAP_F_B,(2F8;5B4)OVERLAP_F_B,"
    "(5F7;2B3)OVERLAP_F_B,(2F9;5B5)OVERLAP_F_B,(5F8;2B4)OVERLAP_F_B,5B6,"
    "(5F9;2B5)OVERLAP_F_B,5B7,2B6,5B8,2I7,5I9,2I8,2W7,2I9,5W9,2W8,2W9\n"
    "3F0,4F0,3F1,4F1,3F2,4F2,3F3,4F3,3F4,4B0,(4F4;3B0)OVERLAP_F_B,"
    "(3F5;4B1)OVERLAP_F_B,(4F5;3B1)OVERLAP_F_B,(3F6;4B2)OVERLAP_F_B,"
    "(4F6;3B2)OVERLAP_F_B,(3F7;4B3)OVERLAP_F_B,(4F7;3B3)OVERLAP_F_B,"
    "(3F8;4B4)OVERLAP_F_B,(4F8;3B4)OVERLAP_F_B,(3F9;4B5)OVERLAP_F_B,"
    "(4F9;3B5)OVERLAP_F_B,4B6,3B6,4B7,3B7,4I8,3I8,4I9,3I9,4W8,3W8,4W9,3W9\n";

// PyTorch test/distributed/pipelining/artifacts/zb1p_2rank_2stagep_compute.csv.
const char* const kZb1p2Rank8Mb =
    "0F0,0F1,2F0,,2F1,2I0,2W0,0F2,2I1,2W1,0F3,0I0,0W0,2F2,0I1,0W1,2F3,2I2,2W2,"
    "0F4,2I3,2W3,0F5,0I2,0W2,2F4,0I3,0W3,2F5,2I4,2W4,0F6,2I5,2W5,0F7,0I4,0W4,"
    "2F6,0I5,0W5,2F7,2I6,2W6,2I7,2W7,0I6,0W6,0I7,0W7\n"
    ",1F0,1F1,3F0,3I0,3F1,3I1,3W0,1F2,1I0,3W1,1F3,1I1,1W0,3F2,3I2,1W1,3F3,3I3,"
    "3W2,1F4,1I2,3W3,1F5,1I3,1W2,3F4,3I4,1W3,3F5,3I5,3W4,1F6,1I4,3W5,1F7,1I5,"
    "1W4,3F6,3I6,1W5,3F7,3I7,3W6,1I6,3W7,1I7,1W6,1W7\n";

const std::vector<std::string> kAllSchedules = {
    "GPipe",
    "1F1B",
    "Interleaved1F1B",
    "LoopedBFS",
    "InterleavedZeroBubble",
    "ZBVZeroBubble",
    "DualPipeV"};

// Each rank's actions as strings, `_` for idle slots.
std::vector<std::vector<std::string>> strings(
    const Schedule& s, bool keep_idle) {
  std::vector<std::vector<std::string>> out;
  for (const auto& rank : s.ranks) {
    out.emplace_back();
    for (const auto& slot : rank) {
      if (slot) {
        out.back().push_back(slot->str());
      } else if (keep_idle) {
        out.back().push_back("_");
      }
    }
  }
  return out;
}

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> out;
  std::string word;
  for (const char c : line + " ") {
    if (c == ' ') {
      if (!word.empty()) {
        out.push_back(word);
      }
      word.clear();
    } else {
      word += c;
    }
  }
  return out;
}

// EXPECT_THROW plus a check that the message contains each of `parts`.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing " << parts.front();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "'" << part << "' not in: " << message;
    }
  }
}

SimulationCosts unit_costs() {
  return SimulationCosts();
}

// Generate, lower, validate both, simulate; fails the test on a deadlock.
SimulationResult run_all(const Schedule& compute) {
  validate_schedule(compute);
  const Schedule lowered = lower_schedule(compute);
  validate_schedule(lowered);
  SimulationResult sim = simulate(lowered, unit_costs());
  EXPECT_FALSE(sim.deadlock.has_value())
      << compute.name << ": " << sim.deadlock->message();
  return sim;
}

TEST(ActionTest, StringFormRoundTrips) {
  for (const std::string text :
       {"0F1",
        "2I1",
        "0W3",
        "3SEND_F1",
        "1RECV_B0",
        "0REDUCE_GRAD",
        "(0F7;7B3)OVERLAP_F_B",
        "12B345",
        "1SEND_B2",
        "4RECV_F0"}) {
    EXPECT_EQ(parse_action(text).str(), text);
  }
  const Action send = parse_action("3SEND_F1");
  EXPECT_EQ(send.kind, ActionKind::kSendF);
  EXPECT_EQ(send.stage, 3);
  EXPECT_EQ(send.microbatch, 1);
  const Action reduce = parse_action("0REDUCE_GRAD");
  EXPECT_EQ(reduce.kind, ActionKind::kReduceGrad);
  EXPECT_EQ(reduce.microbatch, -1);
  const Action overlap = parse_action("(0F7;7B3)OVERLAP_F_B");
  EXPECT_EQ(overlap.kind, ActionKind::kOverlapFB);
  EXPECT_EQ(overlap.forward_part(), Action::make(ActionKind::kF, 0, 7));
  EXPECT_EQ(overlap.backward_part(), Action::make(ActionKind::kB, 7, 3));
}

TEST(ActionTest, ParserRejectsMalformedStrings) {
  for (const std::string bad :
       {"",
        "F1",
        "0F",
        "0X1",
        "0f1",
        " 0F1",
        "0F1 ",
        "00F1",
        "0F01",
        "-1F1",
        "+1F1",
        "0REDUCE_GRAD1",
        "0REDUCE_GRAD ",
        "0SEND_F",
        "0SEND_X1",
        "0F1F",
        "0F1;",
        "1234567890F1",
        "(0F7;7B3)",
        "(0F7,7B3)OVERLAP_F_B",
        "(0B7;7F3)OVERLAP_F_B",
        "(0F7;7B3)OVERLAP_F_Bx",
        "(0F7;7B3;1F1)"
        "OVERLAP_F_B",
        "(0F7)OVERLAP_F_B",
        "0OVERLAP_F_B1"}) {
    expect_error<ConfigError>(
        [&] { parse_action(bad); },
        {"[schedule] cannot parse action '" + bad + "'"});
  }
}

TEST(PlacementTest, LoopAndV) {
  const auto loop = loop_placement(4, 2);
  EXPECT_EQ(stages_of_rank(loop, 0), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(stages_of_rank(loop, 3), (std::vector<int64_t>{3, 7}));
  const auto v = v_placement(4);
  EXPECT_EQ(stages_of_rank(v, 0), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(stages_of_rank(v, 3), (std::vector<int64_t>{3, 4}));
  EXPECT_THROW(make_placement(PlacementStyle::kV, 4, 3), ConfigError);
  EXPECT_EQ(make_schedule("DualPipeV", 4, 2, 8).stage_to_rank, v);
  EXPECT_EQ(make_schedule("Interleaved1F1B", 4, 2, 8).stage_to_rank, loop);
}

TEST(GeneratorTest, GoldenVectorInterleaved1F1B) {
  const auto s = make_schedule("Interleaved1F1B", 2, 2, 4);
  const auto got = strings(s, /*keep_idle=*/true);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(
      got[0],
      split_words("0F0 0F1 2F0 2F1 _ _ 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 _ 2B2 "
                  "_ 2B3 _ 0B2 _ 0B3"));
  EXPECT_EQ(
      got[1],
      split_words("_ 1F0 1F1 _ 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 "
                  "3B3 _ 1B2 _ 1B3"));
}

TEST(GeneratorTest, ReproducesPyTorchDualPipeVTable) {
  const auto expected = schedule_from_csv(kDualPipeV4Rank10Mb);
  const auto got = make_schedule("DualPipeV", 4, 2, 10);
  EXPECT_EQ(strings(got, false), strings(expected, false));
  EXPECT_EQ(got.stage_to_rank, expected.stage_to_rank);
  run_all(got);
}

TEST(GeneratorTest, ReproducesPyTorchZeroBubbleTable) {
  const auto expected = schedule_from_csv(kZb1p2Rank8Mb);
  const auto got = make_schedule("InterleavedZeroBubble", 2, 2, 8);
  EXPECT_EQ(strings(got, false), strings(expected, false));
  EXPECT_EQ(got.stage_to_rank, expected.stage_to_rank);
  run_all(got);
}

TEST(GeneratorTest, SmallSchedulesFollowTheRules) {
  EXPECT_EQ(
      strings(make_schedule("GPipe", 2, 1, 3), true)[0],
      split_words("0F0 0F1 0F2 0B0 0B1 0B2"));
  const auto one_f_one_b = strings(make_schedule("1F1B", 3, 1, 4), true);
  EXPECT_EQ(one_f_one_b[0], split_words("0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3"));
  EXPECT_EQ(one_f_one_b[2], split_words("2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3"));
  EXPECT_EQ(
      strings(make_schedule("LoopedBFS", 2, 2, 2), false)[0],
      split_words("0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0"));
  // ZBV drops the microbatches it generated beyond m.
  const auto zbv = make_schedule("ZBVZeroBubble", 2, 2, 1);
  EXPECT_EQ(strings(zbv, false)[0], split_words("0F0 3F0 3I0 3W0 0I0 0W0"));
  run_all(zbv);
}

TEST(GeneratorTest, NamesMatchCaseInsensitively) {
  EXPECT_EQ(make_schedule("interleaved1f1b", 2, 2, 4).name, "Interleaved1F1B");
  EXPECT_EQ(make_schedule("GPIPE", 2, 1, 4).name, "GPipe");
  register_builtin_schedules();  // idempotent
  EXPECT_EQ(schedule_registry().names().size(), kAllSchedules.size());
}

TEST(GeneratorTest, RejectsWhatItCannotRun) {
  expect_error<ConfigError>(
      [] { make_schedule("Pipedream", 4, 1, 8); },
      {"unknown schedule 'Pipedream'",
       "known:",
       "1F1B",
       "DualPipeV",
       "GPipe",
       "Interleaved1F1B",
       "InterleavedZeroBubble",
       "LoopedBFS",
       "ZBVZeroBubble"});
  expect_error<ConfigError>(
      [] { make_schedule("1F1B", 4, 1, 3); },
      {"[schedule] 1F1B", "--microbatches 3", "--pp 4"});
  expect_error<ConfigError>(
      [] { make_schedule("ZBVZeroBubble", 4, 3, 8); },
      {"[schedule] ZBVZeroBubble", "exactly 2 stages per rank"});
  expect_error<ConfigError>(
      [] { make_schedule("ZBVZeroBubble", 4, 1, 8); },
      {"exactly 2 stages per rank"});
  expect_error<ConfigError>(
      [] { make_schedule("DualPipeV", 4, 1, 8); },
      {"[schedule] DualPipeV", "exactly 2 stages per rank"});
  expect_error<ConfigError>(
      [] { make_schedule("DualPipeV", 4, 2, 7); },
      {"[schedule] DualPipeV", "at least 2 * pp", "--microbatches 7"});
  // rounds = max(1, 9 // 4) = 2 does not divide 9.
  expect_error<ConfigError>(
      [] { make_schedule("Interleaved1F1B", 4, 2, 9); },
      {"[schedule] Interleaved1F1B", "multiple of the rounds", "= 2"});
  expect_error<ConfigError>(
      [] { make_schedule("InterleavedZeroBubble", 4, 2, 9); },
      {"[schedule] InterleavedZeroBubble", "multiple of the rounds"});
  expect_error<ConfigError>(
      [] { make_schedule("GPipe", 4, 2, 8); }, {"runs 1 stage per rank"});
  expect_error<ConfigError>(
      [] { make_schedule("GPipe", 0, 1, 8); }, {"must be >= 1"});
  // Just inside the rules.
  EXPECT_NO_THROW(make_schedule("1F1B", 4, 1, 4));
  EXPECT_NO_THROW(make_schedule("DualPipeV", 4, 2, 8));
  EXPECT_NO_THROW(make_schedule("Interleaved1F1B", 4, 2, 10));
}

TEST(ScheduleGridTest, EveryScheduleLowersValidatesAndSimulates) {
  int64_t runs = 0;
  for (const auto& name : kAllSchedules) {
    int64_t accepted = 0;
    for (const int64_t p : {1, 2, 3, 4, 5, 8}) {
      for (const int64_t v : {1, 2, 3, 4}) {
        for (const int64_t m : {1, 2, 3, 4, 6, 8, 12, 16, 17}) {
          Schedule s;
          try {
            s = make_schedule(name, p, v, m);
          } catch (const ConfigError&) {
            continue;
          }
          ++accepted;
          SCOPED_TRACE(
              name + " p=" + std::to_string(p) + " v=" + std::to_string(v) +
              " m=" + std::to_string(m));
          const auto sim = run_all(s);
          EXPECT_GT(sim.makespan, 0.0);
        }
      }
    }
    EXPECT_GT(accepted, 20) << name;
    runs += accepted;
  }
  EXPECT_GT(runs, 500);
}

TEST(ScheduleGridTest, LargeSchedules) {
  for (const auto& name : kAllSchedules) {
    const bool one_stage = name == "GPipe" || name == "1F1B";
    const bool v_shape = name == "ZBVZeroBubble" || name == "DualPipeV";
    const int64_t v = one_stage ? 1 : (v_shape ? 2 : 4);
    SCOPED_TRACE(name);
    const auto s = make_schedule(name, 64, v, 128);
    const auto sim = run_all(s);
    EXPECT_EQ(sim.timeline.size(), 64u);
  }
}

TEST(SimulatorTest, UnitCostBubblesMatchTheFormulas) {
  for (const int64_t p : {2, 3, 4, 8}) {
    for (const int64_t m : {p, 2 * p, 3 * p, 4 * p}) {
      const double one_stage =
          static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
      for (const std::string name : {"GPipe", "1F1B"}) {
        const auto sim = run_all(make_schedule(name, p, 1, m));
        for (int64_t r = 0; r < p; ++r) {
          EXPECT_NEAR(sim.bubble_fraction[r], one_stage, 1e-9)
              << name << " p=" << p << " m=" << m << " rank " << r;
        }
      }
      for (const int64_t v : {2, 3, 4}) {
        const auto sim = run_all(make_schedule("Interleaved1F1B", p, v, m));
        const double expected =
            static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
        for (int64_t r = 0; r < p; ++r) {
          EXPECT_NEAR(sim.bubble_fraction[r], expected, 1e-9)
              << "Interleaved1F1B p=" << p << " v=" << v << " m=" << m
              << " rank " << r;
        }
      }
    }
  }
}

TEST(SimulatorTest, CostsAndLatencyShapeTheMakespan) {
  const int64_t p = 4, m = 8;
  const auto gpipe = lower_schedule(make_schedule("GPipe", p, 1, m));
  const auto base = simulate(gpipe, SimulationCosts().backward(2.0));
  EXPECT_DOUBLE_EQ(base.makespan, 3.0 * (m + p - 1));
  const auto slow =
      simulate(gpipe, SimulationCosts().backward(2.0).p2p_latency(0.5));
  // The data moves once both its SEND and its RECV are posted (the
  // transports' rendezvous), a latency after the later: the lowering posts
  // each RECV just before the compute that needs it, so every rank after
  // the first pays the latency once per microbatch (each forward and each
  // backward: p + m - 2 of each on the longest path), not once per hop.
  EXPECT_DOUBLE_EQ(slow.makespan - base.makespan, 2.0 * (p + m - 2) * 0.5);
  // The compute-only schedule communicates implicitly: the data usable a
  // latency after its producer ends, paid on the pipeline's fill and drain.
  const auto implicit = simulate(
      make_schedule("GPipe", p, 1, m),
      SimulationCosts().backward(2.0).p2p_latency(0.5));
  EXPECT_DOUBLE_EQ(implicit.makespan - base.makespan, 2.0 * (p - 1) * 0.5);
  // A RECV posted after its SEND: its forward waits the latency from the
  // RECV, not from the SEND.
  const auto two = lower_schedule(make_schedule("GPipe", 2, 1, 2));
  const auto two_sim = simulate(
      two, SimulationCosts().backward(2.0).p2p_latency(0.5).recv_post(0.25));
  for (const auto& t : two_sim.timeline[1]) {
    if (t.action.kind == ActionKind::kF && t.action.microbatch == 1) {
      // 1RECV_F1 is posted when 1F0 ends, after 0F1 was sent at 2: its
      // forward starts after the post (0.25) and the latency (0.5).
      double f0_end = 0.0;
      for (const auto& u : two_sim.timeline[1]) {
        if (u.action.kind == ActionKind::kF && u.action.microbatch == 0) {
          f0_end = u.end;
        }
      }
      EXPECT_GT(f0_end, 2.0);
      EXPECT_DOUBLE_EQ(t.start, f0_end + 0.25 + 0.5);
    }
  }
  // Overlapping F and B pays off for DualPipeV.
  const auto dual = lower_schedule(make_schedule("DualPipeV", p, 2, 16));
  EXPECT_LT(
      simulate(dual, SimulationCosts().overlap_f_b(1.5)).makespan,
      simulate(dual).makespan);
  // Zero bubble schedules beat 1F1B when F = I = W (B = I + W).
  const auto costs =
      SimulationCosts().backward(2.0).backward_input(1.0).backward_weight(1.0);
  const double f1b =
      simulate(lower_schedule(make_schedule("1F1B", p, 1, 16)), costs)
          .max_bubble_fraction();
  const double zb1p =
      simulate(
          lower_schedule(make_schedule("InterleavedZeroBubble", p, 1, 16)),
          costs)
          .max_bubble_fraction();
  const double zbv =
      simulate(lower_schedule(make_schedule("ZBVZeroBubble", p, 2, 16)), costs)
          .max_bubble_fraction();
  EXPECT_LT(zb1p, f1b);
  EXPECT_LT(zbv, zb1p);
}

TEST(SimulatorTest, PerStageCostsReplaceThePerKindOnes) {
  // GPipe over 2 ranks whose second stage costs twice the first: stage 1
  // is the bottleneck, so the makespan is f0 + m (f1 + b1) + b0 and the
  // first rank idles for the difference.
  const int64_t m = 4;
  const auto gpipe = lower_schedule(make_schedule("GPipe", 2, 1, m));
  const auto costs = SimulationCosts().backward(2.0).per_stage(
      {{{1, ActionKind::kF}, 2.0}, {{1, ActionKind::kB}, 4.0}});
  const auto sim = simulate(gpipe, costs);
  const double makespan = 1.0 + m * (2.0 + 4.0) + 2.0;
  EXPECT_DOUBLE_EQ(sim.makespan, makespan);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction[0], 1.0 - m * 3.0 / makespan);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction[1], 1.0 - m * 6.0 / makespan);
  // Entries equal to the per-kind costs change nothing.
  const auto same = simulate(
      gpipe,
      SimulationCosts().backward(2.0).per_stage(
          {{{0, ActionKind::kF}, 1.0}, {{1, ActionKind::kB}, 2.0}}));
  EXPECT_DOUBLE_EQ(
      same.makespan, simulate(gpipe, SimulationCosts().backward(2.0)).makespan);
}

TEST(SimulatorTest, AnOverlapCostsItsPartsPerStageCosts) {
  // DualPipeV's OVERLAP_F_B without a cost of its own (overlap_f_b -1)
  // takes its forward's and its backward's per-stage costs: with every
  // stage's F = 2 and B = 3, each overlap lasts 5, and the busy time of a
  // rank is its m forwards and m backwards of 2 stages (5 x 2m), whatever
  // the per-kind defaults say.
  const int64_t p = 2, m = 4;
  const auto dualpipe = lower_schedule(make_schedule("DualPipeV", p, 2, m));
  StageCosts per_stage;
  for (int64_t s = 0; s < 2 * p; ++s) {
    per_stage[{s, ActionKind::kF}] = 2.0;
    per_stage[{s, ActionKind::kB}] = 3.0;
    per_stage[{s, ActionKind::kI}] = 1.5;
    per_stage[{s, ActionKind::kW}] = 1.5;
  }
  const auto sim = simulate(dualpipe, SimulationCosts().per_stage(per_stage));
  bool saw_overlap = false;
  for (const auto& rank : sim.timeline) {
    for (const auto& a : rank) {
      if (a.action.kind == ActionKind::kOverlapFB) {
        saw_overlap = true;
        EXPECT_DOUBLE_EQ(a.end - a.start, 5.0) << a.action.str();
      }
    }
  }
  EXPECT_TRUE(saw_overlap);
  for (const double busy : sim.busy) {
    EXPECT_DOUBLE_EQ(busy, 5.0 * 2 * m);
  }
}

TEST(SimulatorTest, PerActionCostsReplaceOneActionsCost) {
  // GPipe over 2 ranks, m = 2: 0F0 costs 3 by its own entry, the other
  // forwards of stage 0 (0F1) 5 by the per-stage one, all else 1. Rank 1
  // starts at 3, runs 1F0, waits for 0F1 (ends at 8), then 1F1 and its two
  // backwards (to 11); rank 0's last backward ends at 12.
  const auto gpipe = lower_schedule(make_schedule("GPipe", 2, 1, 2));
  const auto sim = simulate(
      gpipe,
      SimulationCosts()
          .per_stage({{{0, ActionKind::kF}, 5.0}})
          .per_action({{"0F0", 3.0}}));
  EXPECT_DOUBLE_EQ(sim.makespan, 12.0);
  std::map<std::string, double> took;
  for (const auto& rank : sim.timeline) {
    for (const auto& a : rank) {
      took[a.action.str()] = a.end - a.start;
    }
  }
  EXPECT_DOUBLE_EQ(took.at("0F0"), 3.0);
  EXPECT_DOUBLE_EQ(took.at("0F1"), 5.0);
  EXPECT_DOUBLE_EQ(took.at("1F0"), 1.0);
  EXPECT_DOUBLE_EQ(took.at("1B1"), 1.0);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction[0], 1.0 - 10.0 / 12.0);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction[1], 1.0 - 4.0 / 12.0);

  // Posting a send takes its entry's time on the sender, not counted busy;
  // the receiver's compute waits until it is posted.
  const auto base = simulate(gpipe);
  const auto slow_send =
      simulate(gpipe, SimulationCosts().per_action({{"0SEND_F0", 0.5}}));
  EXPECT_DOUBLE_EQ(slow_send.makespan, base.makespan + 0.5);
  EXPECT_EQ(slow_send.busy, base.busy);
  for (const auto& a : slow_send.timeline[1]) {
    if (a.action.str() == "1F0") {
      EXPECT_DOUBLE_EQ(a.start, 1.5);
    }
  }
}

TEST(SimulatorTest, AVariationAddsToEachComputeActionOnly) {
  // GPipe over 4 ranks, m = 8, B = 2: 3 x (m + p - 1) = 33. One more on
  // every forward is a forward of 2: 4 x 11 = 44, called once per compute
  // action; sends, receives and REDUCE_GRAD are not varied (their posting
  // costs stay 0 here).
  const int64_t p = 4, m = 8;
  const auto gpipe = lower_schedule(make_schedule("GPipe", p, 1, m));
  int64_t calls = 0;
  const auto varied = simulate(
      gpipe,
      SimulationCosts().backward(2.0).variation([&calls](const Action& a) {
        ++calls;
        EXPECT_FALSE(is_comm(a.kind)) << a.str();
        EXPECT_NE(a.kind, ActionKind::kReduceGrad);
        return a.kind == ActionKind::kF ? 1.0 : 0.0;
      }));
  EXPECT_DOUBLE_EQ(varied.makespan, 4.0 * (m + p - 1));
  EXPECT_EQ(calls, 2 * p * m);
  EXPECT_DOUBLE_EQ(
      varied.makespan,
      simulate(gpipe, SimulationCosts().forward(2.0).backward(2.0)).makespan);
  // A cost never falls below 0.
  const auto floored = simulate(
      gpipe, SimulationCosts().variation([](const Action&) { return -5.0; }));
  EXPECT_DOUBLE_EQ(floored.makespan, 0.0);
}

TEST(SimulatorTest, PostingCostsPerKindActAsAnEntryOnEverySendAndRecv) {
  // The per-kind posting costs give the same timeline as an own entry on
  // every SEND and RECV of the lowered schedule; an own entry still wins.
  const auto lowered =
      lower_schedule(make_schedule("Interleaved1F1B", 2, 2, 4));
  ActionCosts each;
  for (const auto& rank : lowered.ranks) {
    for (const auto& slot : rank) {
      if (slot && is_comm(slot->kind)) {
        const bool send = slot->kind == ActionKind::kSendF ||
                          slot->kind == ActionKind::kSendB;
        each[slot->str()] = send ? 0.25 : 0.125;
      }
    }
  }
  ASSERT_FALSE(each.empty());
  const auto base = SimulationCosts().forward(1.0).backward(2.0);
  const auto by_kind =
      simulate(lowered, SimulationCosts(base).send_post(0.25).recv_post(0.125));
  const auto by_entry =
      simulate(lowered, SimulationCosts(base).per_action(each));
  EXPECT_DOUBLE_EQ(by_kind.makespan, by_entry.makespan);
  EXPECT_GT(by_kind.makespan, simulate(lowered, base).makespan);
  EXPECT_EQ(by_kind.busy, by_entry.busy);
  ActionCosts one = each;
  const std::string first = each.begin()->first;
  one[first] = 2.0;
  const auto with_entry = simulate(
      lowered,
      SimulationCosts(base).send_post(0.25).recv_post(0.125).per_action(
          {{first, 2.0}}));
  EXPECT_DOUBLE_EQ(
      with_entry.makespan,
      simulate(lowered, SimulationCosts(base).per_action(one)).makespan);
}

TEST(SimulatorTest, PeakActivationsMatchTheFormulas) {
  for (const int64_t p : {2, 4, 8}) {
    for (const int64_t m : {2 * p, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const auto gpipe = run_all(make_schedule("GPipe", p, 1, m));
      const auto f1b = run_all(make_schedule("1F1B", p, 1, m));
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(gpipe.peak_activations[r], m);
        EXPECT_EQ(f1b.peak_activations[r], std::min(m, p - r));
      }
      for (const int64_t v : {2, 3}) {
        const auto bfs = run_all(make_schedule("LoopedBFS", p, v, m));
        const auto inter = run_all(make_schedule("Interleaved1F1B", p, v, m));
        const int64_t per_round = m / std::max<int64_t>(1, m / p);
        for (int64_t r = 0; r < p; ++r) {
          EXPECT_EQ(bfs.peak_activations[r], m * v);
          const int64_t warmup = (v - 1) * per_round + 2 * (p - 1 - r);
          EXPECT_EQ(inter.peak_activations[r], std::min(warmup + 1, m * v));
        }
        EXPECT_EQ(inter.peak_activations[0], v * p + p - 1);
      }
      const auto zbv = run_all(make_schedule("ZBVZeroBubble", p, 2, m));
      const auto dual = run_all(make_schedule("DualPipeV", p, 2, m));
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(zbv.peak_activations[r], 2 * p);
        // The last rank runs the turn of the V as a plain F(s0) before its
        // first B(s1), so it holds one more than the reference's 2p.
        EXPECT_EQ(dual.peak_activations[r], r == p - 1 ? 2 * p + 1 : 2 * p);
      }
    }
  }
}

// One rank, by hand: F0 I0 F1 W0 I1 W1 holds 2 activations, F0's until
// W0 (after F1): W still reads them, so I does not free them.
TEST(SimulatorTest, ActivationsAreHeldUntilTheirW) {
  const auto peak = [](const char* csv) {
    return plan_schedule(schedule_from_csv(csv), unit_costs())
        .simulation.peak_activations;
  };
  EXPECT_EQ(peak("0F0,0I0,0F1,0W0,0I1,0W1\n"), std::vector<int64_t>{2});
  EXPECT_EQ(peak("0F0,0I0,0W0,0F1,0I1,0W1\n"), std::vector<int64_t>{1});
  EXPECT_EQ(peak("0F0,0F1,0B0,0B1\n"), std::vector<int64_t>{2});
}

TEST(LoweringTest, SendsReceivesAndReduceGrad) {
  const auto lowered = lower_schedule(make_schedule("ZBVZeroBubble", 4, 2, 8));
  validate_schedule(lowered);
  int64_t sends = 0, recvs = 0, reduces = 0;
  for (int64_t r = 0; r < 4; ++r) {
    const auto& list = lowered.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      ASSERT_TRUE(list[i].has_value()) << "lowering drops idle slots";
      const Action& a = *list[i];
      sends += a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB;
      recvs += a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB;
      // The turn of the V (stages 3 and 4 on rank 3) exchanges nothing.
      EXPECT_FALSE(a.kind == ActionKind::kSendF && a.stage == 3) << a.str();
      EXPECT_FALSE(a.kind == ActionKind::kSendB && a.stage == 4) << a.str();
      if (a.kind != ActionKind::kReduceGrad) {
        continue;
      }
      ++reduces;
      // Right after the stage's last W (ZBV splits every backward).
      size_t j = i - 1;
      while (is_comm(list[j]->kind)) {
        --j;
      }
      EXPECT_EQ(list[j]->kind, ActionKind::kW) << a.str();
      EXPECT_EQ(list[j]->stage, a.stage);
    }
  }
  // 6 of the 7 stage boundaries cross ranks, each with 8 F and 8 B
  // transfers.
  EXPECT_EQ(sends, 6 * 8 * 2);
  EXPECT_EQ(recvs, sends);
  EXPECT_EQ(reduces, 8);
}

TEST(LoweringTest, ReceiverOrderComesFromTheSender) {
  // Rank 0 sends microbatch 1 in the same pass as rank 1 runs 1B0, and
  // rank 0 comes first, so rank 1's receive of it lands before 1B0.
  const auto lowered = lower_schedule(make_schedule("1F1B", 2, 1, 2));
  EXPECT_EQ(
      strings(lowered, false)[0],
      split_words("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 "
                  "0REDUCE_GRAD"));
  EXPECT_EQ(
      strings(lowered, false)[1],
      split_words("1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 "
                  "1REDUCE_GRAD"));
}

TEST(LoweringTest, PostingReceivesEarlyMovesEachAboveTheComputeBeforeIt) {
  const auto lowered = lower_schedule(make_schedule("1F1B", 2, 1, 3));
  const auto early = post_receives_early(lowered);
  // As lowered (baton schedule --comms):
  //   0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0F2 0SEND_F2 0RECV_B1 0B1
  //   0RECV_B2 0B2 0REDUCE_GRAD
  //   1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1RECV_F2 1B1 1SEND_B1 1F2 1B2
  //   1SEND_B2 1REDUCE_GRAD
  // Each RECV just before the compute before it; 1RECV_F0 has none.
  const std::vector<std::vector<std::string>> want = {
      split_words("0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0B0 0RECV_B1 0F2 "
                  "0SEND_F2 0RECV_B2 0B1 0B2 0REDUCE_GRAD"),
      split_words("1RECV_F0 1RECV_F1 1F0 1B0 1SEND_B0 1RECV_F2 1F1 1B1 "
                  "1SEND_B1 1F2 1B2 1SEND_B2 1REDUCE_GRAD")};
  EXPECT_EQ(strings(early, false), want);
  validate_schedule(early);
  // The order the executor posts in: early on CPU tensors (Gloo), as
  // lowered on CUDA ones (NCCL).
  EXPECT_EQ(strings(posting_order(lowered, false), false), want);
  EXPECT_EQ(
      strings(posting_order(lowered, true), false), strings(lowered, false));
}

TEST(LoweringTest, OnCudaEachPairPostsItsMessagesInOneOrder) {
  // Every built-in schedule's lowering posts each pair's messages in one
  // order on both sides; posted early (Gloo) they need not be.
  for (const auto& name : kAllSchedules) {
    const bool one_stage = name == "GPipe" || name == "1F1B";
    const auto lowered =
        lower_schedule(make_schedule(name, 4, one_stage ? 1 : 2, 8));
    EXPECT_NO_THROW(check_pair_order(lowered)) << name;
    EXPECT_NO_THROW(posting_order(lowered, /*cuda=*/true)) << name;
  }
  // Rank 1 receives microbatch 1 before it sends microbatch 0's gradient,
  // rank 0 sends microbatch 1 only after receiving that gradient: fine for
  // Gloo, a hang on NCCL's in-order pair.
  const auto crossed = schedule_from_csv(
      "0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\n"
      "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
  EXPECT_NO_THROW(posting_order(crossed, /*cuda=*/false));
  expect_error<ScheduleError>(
      [&] { posting_order(crossed, /*cuda=*/true); },
      {"ranks 0 and 1 post their messages in different orders",
       "rank 0 step 2 (0RECV_B0) against rank 1 step 1 (1RECV_F1)",
       "would hang on CUDA"});
}

TEST(LoweringTest, ReceivesPostedEarlyMeetTheComputeOnlyTiming) {
  // Posted as lowered, a RECV mostly goes just before its compute, and the
  // data moves only from then (the transports' rendezvous): each hop pays
  // its latency on the receiver's critical path. Posted one compute
  // earlier, with every pass at least as long as the latency, the data is
  // usable a latency after its send, as a compute-only schedule's implicit
  // hop: the same makespan, for every schedule.
  for (const auto& name : kAllSchedules) {
    const bool one_stage = name == "GPipe" || name == "1F1B";
    const auto compute = make_schedule(name, 4, one_stage ? 1 : 2, 8);
    const auto costs = SimulationCosts()
                           .forward(1.0)
                           .backward(2.0)
                           .backward_input(1.0)
                           .backward_weight(1.0)
                           .p2p_latency(0.25);
    const auto lowered = lower_schedule(compute);
    const auto early = post_receives_early(lowered);
    validate_schedule(early);
    const auto implicit = simulate(compute, costs);
    const auto as_lowered = simulate(lowered, costs);
    const auto posted_early = simulate(early, costs);
    ASSERT_FALSE(posted_early.deadlock.has_value()) << name;
    EXPECT_DOUBLE_EQ(posted_early.makespan, implicit.makespan) << name;
    EXPECT_LE(posted_early.makespan, as_lowered.makespan) << name;
  }
}

TEST(LoweringTest, MalformedComputeScheduleIsReported) {
  // Rank 0 holds stages 0 and 2 and wants 2F0 before 0F0: a cycle.
  const auto s = schedule_from_csv("2F0,0F0,0B0,2B0\n1F0,1B0\n");
  validate_schedule(s);  // every rule holds locally
  expect_error<ScheduleError>(
      [&] { lower_schedule(s); },
      {"malformed compute schedule",
       "rank 0 step 0 (2F0)",
       "rank 1 step 0 (1F0)"});
  const auto sim = simulate(s);
  ASSERT_TRUE(sim.deadlock.has_value());
  EXPECT_EQ(sim.deadlock->step, 0);
}

TEST(ValidationTest, ReportsRankStepAndAction) {
  expect_error<ScheduleError>(
      [] { validate_schedule(schedule_from_csv("0F0,0B0\n1B0,1F0\n")); },
      {"rank 1 step 0 (1B0)", "before the forward"});
  expect_error<ScheduleError>(
      [] { validate_schedule(schedule_from_csv("0F0,0W0,0B0\n")); },
      {"rank 0 step 1 (0W0)", "needs an earlier I"});
  expect_error<ScheduleError>(
      [] { validate_schedule(schedule_from_csv("0F0,,0F0,0B0\n")); },
      {"rank 0 step 2 (0F0)", "a second F"});
  expect_error<ScheduleError>(
      [] { validate_schedule(schedule_from_csv("0F0,0F1,0B0\n")); },
      {"stage 0 (rank 0)", "B=1 I=0 W=0"});
  expect_error<ScheduleError>(
      [] { validate_schedule(schedule_from_csv("0F0,0I0,0B1,0F1\n")); },
      {"rank 0 step 2 (0B1)"});
  expect_error<ScheduleError>(
      [] { schedule_from_csv("0F0,0B0\n0F1,0B1\n"); },
      {"rank 1 step 0 (0F1)", "already lives on rank 0"});
  // Lowered: a forward whose input never arrives.
  expect_error<ScheduleError>(
      [] {
        validate_schedule(
            schedule_from_csv("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n"));
      },
      {"rank 1 step 0 (1F0)", "no earlier RECV_F"});
  expect_error<ScheduleError>(
      [] { validate_schedule(schedule_from_csv("0F0,0REDUCE_GRAD,0B0\n")); },
      {"rank 0 step 1 (0REDUCE_GRAD)", "before the stage's last backward"});
}

TEST(SimulatorTest, BrokenScheduleIsADeadlockWithItsStep) {
  // Rank 1 runs microbatch 1 first; rank 0 sends it only after microbatch
  // 0's backward, which waits for rank 1's gradient of microbatch 0.
  const auto s = schedule_from_csv(
      "0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\n"
      "1RECV_F0,1RECV_F1,1F1,1B1,1SEND_B1,1F0,1B0,1SEND_B0\n");
  validate_schedule(s);  // pairs and local order are fine
  const auto sim = simulate(s);
  ASSERT_TRUE(sim.deadlock.has_value());
  // Steps 0-2: rank 0 runs F0, SEND_F0, RECV_B0; rank 1 posts both
  // receives; then neither can compute.
  EXPECT_EQ(sim.deadlock->step, 3);
  ASSERT_EQ(sim.deadlock->stuck.size(), 2u);
  EXPECT_EQ(sim.deadlock->stuck[0].rank, 0);
  EXPECT_EQ(sim.deadlock->stuck[0].index, 3);
  EXPECT_EQ(sim.deadlock->stuck[0].action.str(), "0B0");
  EXPECT_EQ(sim.deadlock->stuck[1].action.str(), "1F1");
  const std::string message = sim.deadlock->message();
  EXPECT_NE(message.find("deadlock at step 3"), std::string::npos);
  EXPECT_NE(
      message.find("rank 0 step 3 (0B0) waits for 1SEND_B0 on rank 1"),
      std::string::npos)
      << message;
  EXPECT_NE(
      message.find("rank 1 step 2 (1F1) waits for 0SEND_F1 on rank 0"),
      std::string::npos)
      << message;
}

TEST(SimulatorTest, AReceivePostedBeforeItsSendNeitherBlocksNorDeadlocks) {
  // Rank 1 posts microbatch 1's receive first (as post_receives_early may
  // place it), yet rank 0 sends microbatch 1 only after microbatch 0's
  // backward, which needs rank 1's later SEND_B0. A receive that waited
  // for its send would deadlock here; posted, it waits for nothing, and
  // the data is usable a latency after the send. F = 1, B = 2, latency
  // 0.5: 0F0 0-1, 1F0 1.5-2.5, 1B0 2.5-4.5, 0B0 5-7, 0F1 7-8, 1F1 8.5-9.5,
  // 1B1 9.5-11.5, 0B1 12-14.
  const auto s = schedule_from_csv(
      "0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\n"
      "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
  validate_schedule(s);
  const auto sim = simulate(
      s, SimulationCosts().forward(1.0).backward(2.0).p2p_latency(0.5));
  ASSERT_FALSE(sim.deadlock.has_value()) << sim.deadlock->message();
  const auto start_of = [&](int64_t rank, const std::string& name) {
    for (const auto& t : sim.timeline[rank]) {
      if (t.action.str() == name) {
        return t.start;
      }
    }
    ADD_FAILURE() << name << " not on rank " << rank;
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(start_of(1, "1RECV_F1"), 0.0);
  EXPECT_DOUBLE_EQ(start_of(1, "1F0"), 1.5);
  EXPECT_DOUBLE_EQ(start_of(0, "0B0"), 5.0);
  EXPECT_DOUBLE_EQ(start_of(1, "1F1"), 8.5);
  EXPECT_DOUBLE_EQ(sim.makespan, 14.0);
}

TEST(ScheduleIoTest, CsvRoundTrips) {
  for (const auto& name : kAllSchedules) {
    const bool one_stage = name == "GPipe" || name == "1F1B";
    const auto compute = make_schedule(name, 4, one_stage ? 1 : 2, 8);
    const auto back = schedule_from_csv(schedule_to_csv(compute));
    EXPECT_EQ(strings(back, true), strings(compute, true)) << name;
    EXPECT_EQ(back.stage_to_rank, compute.stage_to_rank) << name;
    EXPECT_EQ(back.num_stages, compute.num_stages);
    EXPECT_EQ(back.microbatches, compute.microbatches);
    EXPECT_EQ(back.stages_per_rank, compute.stages_per_rank);
    EXPECT_FALSE(back.has_comms());

    const auto lowered = lower_schedule(compute);
    const auto lowered_back = schedule_from_csv(schedule_to_csv(lowered));
    EXPECT_EQ(strings(lowered_back, true), strings(lowered, true)) << name;
    EXPECT_TRUE(lowered_back.has_comms());
    validate_schedule(lowered_back);
    EXPECT_DOUBLE_EQ(
        simulate(lowered_back).makespan, simulate(lowered).makespan);
  }
  expect_error<ConfigError>(
      [] { schedule_from_csv("0F0,0B0\n1F0,1X0\n", "my.csv"); },
      {"my.csv: row 2 (rank 1), column 2", "'1X0'"});
}

TEST(ScheduleIoTest, TextJsonChromeAndSvg) {
  const auto compute = make_schedule("Interleaved1F1B", 2, 2, 4);
  const auto lowered = lower_schedule(compute);
  const auto sim = simulate(lowered);

  const std::string text = schedule_to_text(compute, &sim);
  EXPECT_NE(text.find("rank 0: 0F0 0F1 2F0 2F1 _   _   0F2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("makespan"), std::string::npos);

  const auto json = nlohmann::json::parse(schedule_to_json(compute, sim));
  EXPECT_EQ(json["schedule"], "Interleaved1F1B");
  EXPECT_EQ(json["pp"], 2);
  EXPECT_EQ(json["ranks"][0][0], "0F0");
  EXPECT_TRUE(json["ranks"][0][4].is_null());
  EXPECT_EQ(json["simulation"]["peak_activations"].size(), 2u);
  EXPECT_TRUE(json["simulation"]["deadlock"].is_null());

  const auto trace =
      nlohmann::json::parse(schedule_to_chrome_trace(lowered, sim));
  size_t complete = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_EQ(e["pid"], e["tid"]);
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(complete, lowered.ranks[0].size() + lowered.ranks[1].size());

  const std::string svg = schedule_to_svg(compute, sim);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("rank 1</text>"), std::string::npos);
  EXPECT_NE(svg.find("F forward"), std::string::npos);
  EXPECT_NE(svg.find("idle"), std::string::npos);
  // One box per compute action: 2 ranks x 2 stages x 4 mb x (F + B).
  size_t boxes = 0;
  for (size_t at = svg.find("<title>"); at != std::string::npos;
       at = svg.find("<title>", at + 1)) {
    ++boxes;
  }
  EXPECT_EQ(boxes, 32u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

}  // namespace
}  // namespace baton::pipeline
