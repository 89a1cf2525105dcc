// The bad-input sweep of the schedule CSV reader (`baton schedule --csv`,
// parallelism.pipeline_parallel_schedule_csv): the CSVs of every built-in
// schedule, compute-only and lowered, and the corpus in
// tests/corpus/bad_inputs/schedule/, truncated, with seeded bit flips, bad
// cells and damaged rows. Each one plans or throws ConfigError /
// ScheduleError naming the file; nothing crashes or runs away.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "parallel/pipeline/schedule_io.h"
#include "parallel/pipeline/schedules.h"
#include "tests/baton_binary.h"
#include "tests/common/bad_input_sweep.h"

namespace baton::pipeline {
namespace {

namespace fs = std::filesystem;
using testing::Mutation;
using testing::Sweep;

const std::string kOrigin = "sweep.csv";

/// "" when `text` plans, or is refused as a bad schedule: the reader's
/// errors name kOrigin (the file; `baton schedule --csv` adds it to the
/// planner's, tested through the binary).
std::string check_csv(const std::string& text) {
  Schedule schedule;
  try {
    schedule = schedule_from_csv(text, kOrigin);
  } catch (const ConfigError& e) {
    return testing::missing_from(e.what(), {kOrigin});
  } catch (const ScheduleError& e) {
    return testing::missing_from(e.what(), {kOrigin});
  } catch (const std::exception& e) {
    return std::string("neither ConfigError nor ScheduleError: ") + e.what();
  }
  try {
    plan_schedule(schedule, SimulationCosts());
    return "";
  } catch (const ScheduleError&) {
    return "";
  } catch (const std::exception& e) {
    return std::string("the planner threw another error: ") + e.what();
  }
}

std::vector<std::vector<std::string>> cells_of(const std::string& csv) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) {
    rows.emplace_back();
    std::istringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) {
      rows.back().push_back(cell);
    }
  }
  return rows;
}

std::string csv_of(const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += (i > 0 ? "," : "") + row[i];
    }
    out += '\n';
  }
  return out;
}

const std::vector<std::string> kBadCells = {
    "999999999F0",
    "0F999999999",
    "999999999REDUCE_GRAD",
    "99999999999F0",
    "(0F0;0B0)OVERLAP_F_B",
    "(0F0)OVERLAP_F_B",
    "(0B0;0F0)OVERLAP_F_B",
    "0X0",
    "-1F0",
    "00F0",
    "0F",
    "F0",
    "0F0;",
    "\"0F0\"",
    "0 F 0",
    "0SEND_F",
    "0REDUCE_GRAD0",
    "\xff\xfe",
};

/// Cells replaced by bad ones, and rows removed, repeated or swapped, at
/// positions spread over the grid.
std::vector<Mutation> cell_mutations(const std::string& good) {
  const auto rows = cells_of(good);
  std::vector<Mutation> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string row = "row " + std::to_string(r + 1);
    for (size_t c = 0; c < rows[r].size(); c += 1 + rows[r].size() / 6) {
      for (const auto& cell : kBadCells) {
        auto changed = rows;
        changed[r][c] = cell;
        out.push_back(
            {row + " column " + std::to_string(c + 1) + " = '" + cell + "'",
             csv_of(changed)});
      }
      auto erased = rows;
      erased[r].erase(erased[r].begin() + static_cast<std::ptrdiff_t>(c));
      out.push_back(
          {row + " column " + std::to_string(c + 1) + " removed",
           csv_of(erased)});
    }
    auto removed = rows;
    removed.erase(removed.begin() + static_cast<std::ptrdiff_t>(r));
    out.push_back({row + " removed", csv_of(removed)});
    auto repeated = rows;
    repeated.insert(repeated.begin() + static_cast<std::ptrdiff_t>(r), rows[r]);
    out.push_back({row + " repeated", csv_of(repeated)});
    if (r + 1 < rows.size()) {
      auto swapped = rows;
      std::swap(swapped[r], swapped[r + 1]);
      out.push_back({row + " swapped with the next", csv_of(swapped)});
    }
  }
  return out;
}

TEST(ScheduleCsvSweep, EveryMutationPlansOrIsAnErrorNamingTheFile) {
  register_builtin_schedules();
  Sweep sweep("schedule_csv");
  struct Layout {
    const char* name;
    int64_t pp, stages_per_rank, microbatches;
  };
  const std::vector<Layout> layouts = {
      {"GPipe", 2, 1, 4},
      {"1F1B", 3, 1, 4},
      {"Interleaved1F1B", 2, 2, 4},
      {"LoopedBFS", 2, 2, 4},
      {"InterleavedZeroBubble", 2, 2, 4},
      {"ZBVZeroBubble", 2, 2, 4},
      {"DualPipeV", 2, 2, 4},
  };
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const auto& l : layouts) {
    const Schedule s =
        make_schedule(l.name, l.pp, l.stages_per_rank, l.microbatches);
    const PlannedSchedule plan = plan_schedule(s, SimulationCosts());
    inputs.emplace_back(l.name, schedule_to_csv(plan.compute));
    inputs.emplace_back(
        std::string(l.name) + " lowered", schedule_to_csv(plan.lowered));
  }
  for (const auto& entry : fs::directory_iterator(
           testing::source_path("tests/corpus/bad_inputs/schedule"))) {
    inputs.emplace_back(
        entry.path().filename().string(), testing::read_bytes(entry.path()));
  }
  uint64_t seed = 100;
  for (const auto& [name, good] : inputs) {
    std::vector<Mutation> cases;
    for (const size_t n : testing::truncation_lengths(good.size(), 300)) {
      cases.push_back(
          {"truncated to " + std::to_string(n) + " bytes", good.substr(0, n)});
    }
    for (auto& m : testing::bit_flips(good, ++seed, 100)) {
      cases.push_back(std::move(m));
    }
    for (auto& m : cell_mutations(good)) {
      cases.push_back(std::move(m));
    }
    for (const auto& c : cases) {
      sweep.run(name + ": " + c.what, [&] { return check_csv(c.bytes); });
    }
  }
  EXPECT_GT(sweep.cases(), 3000);
}

TEST(ScheduleCsvSweep, AFileThatCannotBeReadNamesIt) {
  Sweep sweep("schedule_csv_file");
  const auto dir = testing::fresh_dir("schedule_csv_sweep");
  fs::create_directories(dir);
  for (const auto& path : {dir / "missing.csv", dir}) {
    sweep.run(path.string(), [&]() -> std::string {
      try {
        load_schedule_csv(path.string());
        return "loaded";
      } catch (const ConfigError& e) {
        return testing::missing_from(e.what(), {path.string()});
      }
    });
  }
}

}  // namespace
}  // namespace baton::pipeline
