// The flight recorder's ring (wraparound, finish, labels), its JSON dump,
// what the dist facade records, and the launcher's hang report read from
// dumps.

#include "parallel/dist/flight_recorder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "parallel/dist/process_group.h"
#include "tests/parallel/multi_rank.h"

namespace baton::dist {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

FlightEntry collective(const char* name, const char* group, int64_t seq) {
  FlightEntry e;
  e.kind = FlightKind::kCollective;
  e.name = name;
  std::snprintf(e.group, sizeof(e.group), "%s", group);
  e.group_seq = seq;
  return e;
}

TEST(FlightRecorder, KeepsTheLastEntriesOldestFirst) {
  FlightRecorder recorder(3);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(recorder.record(collective("all_reduce", "dp", i + 1)));
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(recorder.recorded(), 5u);
  const auto entries = recorder.entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].id, 3u);
  EXPECT_EQ(entries[2].id, 5u);
  EXPECT_EQ(entries[2].group_seq, 5);
  // Finishing one that left the ring changes nothing; one in it is stamped.
  recorder.finish(ids[0], FlightState::kFailed);
  recorder.finish(ids[3], FlightState::kCompleted);
  const auto after = recorder.entries();
  EXPECT_EQ(after[0].state, FlightState::kStarted);
  EXPECT_EQ(after[1].state, FlightState::kCompleted);
  EXPECT_GE(after[1].end_us, after[1].start_us);
  EXPECT_EQ(after[2].end_us, 0);
}

TEST(FlightRecorder, FewerEntriesThanCapacity) {
  FlightRecorder recorder(8);
  recorder.record(collective("barrier", "world", 1));
  recorder.record(collective("barrier", "world", 2));
  const auto entries = recorder.entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].id, 1u);
}

TEST(FlightRecorder, ZeroCapacityKeepsNothing) {
  FlightRecorder recorder(0);
  EXPECT_FALSE(recorder.enabled());
  EXPECT_EQ(recorder.record(collective("all_reduce", "dp", 1)), 0u);
  recorder.finish(0, FlightState::kCompleted);
  EXPECT_TRUE(recorder.entries().empty());
}

TEST(FlightRecorder, LabelsNestAndLongTextIsCut) {
  FlightRecorder recorder(4);
  const std::string outer = "tensor_parallel layers.0.attention enter";
  const std::string inner(200, 'x');
  {
    FlightLabel a(outer);
    recorder.record(collective("all_gather", "tp", 1));
    {
      FlightLabel b(inner);
      recorder.record(collective("all_gather", "tp", 2));
    }
    recorder.record(collective("all_gather", "tp", 3), "1SEND_F3");
  }
  EXPECT_EQ(FlightLabel::current(), nullptr);
  recorder.record(collective("all_gather", "tp", 4));
  const auto e = recorder.entries();
  EXPECT_EQ(std::string(e[0].label), outer);
  EXPECT_EQ(std::string(e[1].label), std::string(sizeof(e[1].label) - 1, 'x'));
  EXPECT_EQ(std::string(e[2].label), "1SEND_F3");
  EXPECT_EQ(std::string(e[3].label), "");
}

TEST(FlightRecorder, JsonHasEveryField) {
  FlightRecorder recorder(4);
  recorder.add_group("pp", {0, 1});
  FlightEntry send;
  send.kind = FlightKind::kP2P;
  send.name = "send";
  std::snprintf(send.group, sizeof(send.group), "pp");
  send.group_seq = 7;
  send.peer = 1;
  send.tag = 9;
  send.bytes = 4096;
  send.dtype = "Float";
  const auto id = recorder.record(send, "0SEND_F2");
  recorder.finish(id, FlightState::kCompleted);
  FlightEntry action;
  action.kind = FlightKind::kAction;
  action.name = "pipeline";
  recorder.record(action, "0B2");

  const json j = json::parse(recorder.to_json(0, 2, "timed out"));
  EXPECT_EQ(j["rank"], 0);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["reason"], "timed out");
  EXPECT_EQ(j["capacity"], 4);
  EXPECT_EQ(j["recorded"], 2);
  EXPECT_EQ(j["groups"]["pp"], json::array({0, 1}));
  ASSERT_EQ(j["entries"].size(), 2u);
  const json& s = j["entries"][0];
  EXPECT_EQ(s["id"], 1);
  EXPECT_EQ(s["kind"], "p2p");
  EXPECT_EQ(s["name"], "send");
  EXPECT_EQ(s["label"], "0SEND_F2");
  EXPECT_EQ(s["group"], "pp");
  EXPECT_EQ(s["group_seq"], 7);
  EXPECT_EQ(s["peer"], 1);
  EXPECT_EQ(s["tag"], 9);
  EXPECT_EQ(s["bytes"], 4096);
  EXPECT_EQ(s["dtype"], "Float");
  EXPECT_EQ(s["state"], "completed");
  EXPECT_TRUE(s["end_us"].is_number());
  EXPECT_GT(s["start_us"].get<int64_t>(), 0);
  const json& a = j["entries"][1];
  EXPECT_EQ(a["kind"], "action");
  EXPECT_EQ(a["label"], "0B2");
  EXPECT_EQ(a["state"], "started");
  EXPECT_TRUE(a["end_us"].is_null());
  EXPECT_TRUE(a["peer"].is_null());
  EXPECT_TRUE(a["tag"].is_null());
}

TEST(FlightRecorder, DumpWritesTheFileWhole) {
  const fs::path dir = fs::path(::testing::TempDir()) / "flight_dump";
  fs::remove_all(dir);
  FlightRecorder recorder(2);
  recorder.record(collective("barrier", "world", 1));
  const fs::path path = flight_recorder_file(dir, 3);
  EXPECT_EQ(path, dir / "rank3.json");
  recorder.dump(path, 3, 4, "asked by rank 0");
  std::ifstream in(path);
  const json j = json::parse(in);
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["entries"][0]["name"], "barrier");
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    (void)f;
    ++files;
  }
  EXPECT_EQ(files, 1u);  // no temporary left behind
}

TEST(FlightRecorder, TheFacadeRecordsCollectivesAndPeers) {
  auto& recorder = FlightRecorder::process();
  baton::testing::run_ranks(2, [&](int64_t rank, Runtime& rt) {
    auto& world = *rt.world();
    world.barrier();
    if (rank == 0) {
      recorder.set_capacity(16);
    }
    world.barrier();
    at::Tensor t = torch::ones({2, 3});
    world.all_reduce(t);
    if (rank == 0) {
      world.send(t, 1, 5);
    } else {
      world.recv(t, 0, 5);
    }
    world.barrier();
  });
  const auto entries = recorder.entries();
  recorder.set_capacity(0);
  int reduces = 0;
  bool send = false;
  bool recv = false;
  for (const auto& e : entries) {
    EXPECT_EQ(std::string(e.group), "world");
    const std::string name = e.name;
    if (name == "barrier") {
      continue;
    }
    EXPECT_EQ(e.state, FlightState::kCompleted) << name;
    EXPECT_EQ(e.bytes, 24) << name;
    EXPECT_EQ(std::string(e.dtype), "Float") << name;
    if (name == "all_reduce") {
      ++reduces;
      EXPECT_EQ(e.kind, FlightKind::kCollective);
      EXPECT_EQ(e.group_seq, 3);  // after two barriers
    } else if (name == "send") {
      send = true;
      EXPECT_EQ(e.group_seq, 1);  // the first P2P with that peer
      EXPECT_EQ(e.peer, 1);
      EXPECT_EQ(e.tag, 5);
    } else if (name == "recv") {
      recv = true;
      EXPECT_EQ(e.peer, 0);
      EXPECT_EQ(e.kind, FlightKind::kP2P);
    }
  }
  EXPECT_EQ(reduces, 2);
  EXPECT_TRUE(send);
  EXPECT_TRUE(recv);
}

// ------------------------------------------------------------ hang report

void write(const fs::path& dir, int64_t rank, const json& j) {
  fs::create_directories(dir);
  std::ofstream(flight_recorder_file(dir, rank)) << j.dump();
}

json entry(
    const std::string& kind,
    const std::string& name,
    const std::string& state,
    int64_t seq = 0,
    json peer = nullptr) {
  return {
      {"kind", kind},
      {"name", name},
      {"label", kind == "action" ? name : ""},
      {"group", "pp"},
      {"group_seq", seq},
      {"peer", peer},
      {"tag", nullptr},
      {"state", state},
      {"start_us", 1000000},
      {"end_us", state == "started" ? json() : json(2000000)}};
}

json file(int64_t rank, json entries) {
  return {
      {"rank", rank},
      {"dumped_at_us", 5000000},
      {"groups", {{"pp", {0, 1}}}},
      {"entries", std::move(entries)}};
}

TEST(HangReport, NamesThePeerOfAFailedReceiveAndItsLastAction) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hang_p2p";
  fs::remove_all(dir);
  const auto since = fs::file_time_type::clock::now() - std::chrono::hours(1);
  write(dir, 0, file(0, {entry("p2p", "recv", "failed", 4, 1)}));
  write(
      dir,
      1,
      file(
          1,
          {entry("p2p", "recv", "started", 3, 0),
           entry("action", "1REDUCE_GRAD", "started"),
           entry("action", "1B3", "completed")}));
  const std::string report = hang_report(dir, 2, since);
  EXPECT_NE(report.find("rank 1 stopped answering first"), std::string::npos)
      << report;
  EXPECT_NE(
      report.find("rank 0 waited on it in recv from rank 1"), std::string::npos)
      << report;
  EXPECT_NE(
      report.find("its last action: pipeline action 1REDUCE_GRAD, started "
                  "for 4.0 s when dumped"),
      std::string::npos)
      << report;
}

TEST(HangReport, BlamesTheMemberBehindInACollective) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hang_collective";
  fs::remove_all(dir);
  const auto since = fs::file_time_type::clock::now() - std::chrono::hours(1);
  write(dir, 0, file(0, {entry("collective", "all_reduce", "failed", 9)}));
  write(dir, 1, file(1, {entry("collective", "all_reduce", "completed", 8)}));
  EXPECT_NE(
      hang_report(dir, 2, since).find("rank 1 stopped answering first"),
      std::string::npos);
  // A rank without a file is behind too, and said to have written none.
  fs::remove(flight_recorder_file(dir, 1));
  EXPECT_NE(
      hang_report(dir, 2, since).find("it wrote no flight-recorder file"),
      std::string::npos);
}

TEST(HangReport, SaysWhenThePeerFailedOnItsOwn) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hang_failed";
  fs::remove_all(dir);
  const auto since = fs::file_time_type::clock::now() - std::chrono::hours(1);
  write(dir, 0, file(0, {entry("p2p", "recv", "failed", 4, 1)}));
  json thrower = file(1, {entry("action", "1F0", "completed")});
  thrower["reason"] = "injected fault";
  write(dir, 1, thrower);
  const std::string report = hang_report(dir, 2, since);
  EXPECT_NE(
      report.find("rank 1 failed first (injected fault)"), std::string::npos)
      << report;
}

TEST(HangReport, FollowsAChainOfWaitsToItsEnd) {
  // 0 and 1 wait on 2 in a collective of three; 1 also timed out waiting:
  // 2, which waits on nobody, is the one that stopped answering.
  const fs::path dir = fs::path(::testing::TempDir()) / "hang_chain";
  fs::remove_all(dir);
  const auto since = fs::file_time_type::clock::now() - std::chrono::hours(1);
  auto of_three = [](int64_t rank, json entries) {
    json f = file(rank, std::move(entries));
    f["groups"]["pp"] = {0, 1, 2};
    return f;
  };
  write(dir, 0, of_three(0, {entry("p2p", "recv", "failed", 2, 1)}));
  write(dir, 1, of_three(1, {entry("collective", "barrier", "failed", 5)}));
  write(
      dir,
      2,
      of_three(
          2,
          {entry("collective", "barrier", "completed", 4),
           entry("action", "2F1", "started")}));
  const std::string report = hang_report(dir, 3, since);
  EXPECT_NE(report.find("rank 2 stopped answering first"), std::string::npos)
      << report;
  EXPECT_NE(report.find("pipeline action 2F1"), std::string::npos) << report;
}

TEST(HangReport, IgnoresOldFilesAndFilesWithoutAFailure) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hang_old";
  fs::remove_all(dir);
  write(dir, 0, file(0, {entry("p2p", "recv", "failed", 4, 1)}));
  EXPECT_EQ(
      hang_report(
          dir, 2, fs::file_time_type::clock::now() + std::chrono::hours(1)),
      "");
  write(dir, 0, file(0, {entry("p2p", "recv", "completed", 4, 1)}));
  EXPECT_EQ(
      hang_report(
          dir, 2, fs::file_time_type::clock::now() - std::chrono::hours(1)),
      "");
}

}  // namespace
}  // namespace baton::dist
