// The Chrome trace of executed actions: one process per rank, each action
// with its real start and duration, a compute action's wait for a receive
// in its args (so a trace tells waiting from computing).

#include "parallel/pipeline/trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace baton::pipeline {
namespace {

using nlohmann::json;

TEST(Trace, ExecutedActionsCarryTheirRankTimesAndWaits) {
  std::vector<std::vector<ExecutedAction>> ranks(2);
  ranks[0].push_back({"0F0", 0.0, 10.0, true, 0.0});
  ranks[0].push_back({"0SEND_F0", 10.0, 10.5, false, 0.0});
  ranks[1].push_back({"1RECV_F0", 0.0, 0.25, false, 0.0});
  ranks[1].push_back({"1F0", 0.25, 21.0, true, 10.75});
  const json trace = json::parse(executed_trace_json(ranks));
  const auto& events = trace.at("traceEvents");
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].at("name"), "0F0");
  EXPECT_EQ(events[0].at("pid"), 0);
  EXPECT_EQ(events[0].at("cat"), "compute");
  EXPECT_DOUBLE_EQ(events[0].at("args").at("wait_us").get<double>(), 0.0);
  EXPECT_EQ(events[1].at("cat"), "comm");
  EXPECT_FALSE(events[1].contains("args"));
  const auto& waited = events[3];
  EXPECT_EQ(waited.at("name"), "1F0");
  EXPECT_EQ(waited.at("pid"), 1);
  EXPECT_DOUBLE_EQ(waited.at("ts").get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(waited.at("dur").get<double>(), 20.75);
  EXPECT_DOUBLE_EQ(waited.at("args").at("wait_us").get<double>(), 10.75);
}

}  // namespace
}  // namespace baton::pipeline
