// The bad-input sweep of the YAML job config: every shipped config, and the
// corpus of bad configs in tests/corpus/bad_inputs/config/, truncated at
// every length, with seeded bit flips, wrong types put in each value and
// lines damaged. Each load succeeds or throws ConfigError naming the file
// (docs/ARCHITECTURE.md section 4: exit 2, `file.yaml:LINE`); nothing else.

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "common/error.h"
#include "config/job_config.h"
#include "tests/baton_binary.h"
#include "tests/common/bad_input_sweep.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::join_lines;
using testing::Mutation;
using testing::split_lines;
using testing::Sweep;

/// "" when loading `path` succeeds or fails as a bad config naming it.
std::string check_load(const std::string& path) {
  try {
    load_job_config(path);
    return "";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    return message.rfind(path, 0) == 0
               ? ""
               : "the message does not start with the file: " + message;
  } catch (const std::exception& e) {
    return std::string("not a ConfigError: ") + e.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

/// Values of the wrong type, or no value a key takes.
const std::vector<std::string> kWrongValues = {
    "[1, 2]",
    "{a: 1}",
    "\"abc\"",
    "-1",
    "0",
    "99999999999999999999999",
    "-9223372036854775809",
    "1e400",
    ".nan",
    ".inf",
    "",
    "~",
    "[[a], [b, [c]]]",
    "*nowhere",
    "&a [*a]",
    "!!binary aGVsbG8=",
    "'unterminated",
    "[",
    "yes",
    "0x10",
};

/// Lines of `good` with wrong values (five of kWrongValues each), and lines
/// removed, repeated, de-indented or indented with a tab.
std::vector<Mutation> structure_mutations(const std::string& good) {
  static const std::regex value_line(R"(^(\s*[A-Za-z_]+:)\s*(\S.*)?$)");
  const auto lines = split_lines(good);
  std::vector<Mutation> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string at = "line " + std::to_string(i + 1);
    std::smatch m;
    if (std::regex_match(lines[i], m, value_line)) {
      // Five wrong values a line, rotating, so that each meets many keys.
      for (size_t k = 0; k < 5; ++k) {
        const std::string& value =
            kWrongValues[(i * 5 + k) % kWrongValues.size()];
        auto changed = lines;
        changed[i] = m[1].str() + " " + value;
        out.push_back({at + " set to '" + value + "'", join_lines(changed)});
      }
    }
    testing::remove_and_repeat_line(lines, i, at, out);
    auto dedented = lines;
    dedented[i].erase(0, dedented[i].find_first_not_of(' '));
    out.push_back({at + " de-indented", join_lines(dedented)});
    auto tabbed = lines;
    tabbed[i] = "\t" + tabbed[i];
    out.push_back({at + " tab-indented", join_lines(tabbed)});
  }
  return out;
}

std::vector<fs::path> yaml_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".yaml") {
      out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ConfigSweep, EveryMutationIsLoadedOrAConfigErrorNamingTheFile) {
  Sweep sweep("config");
  const auto scratch = testing::fresh_dir("config_sweep");
  fs::create_directories(scratch);
  const std::string path = (scratch / "mutated.yaml").string();
  auto inputs = yaml_files(testing::source_path("configs"));
  const auto corpus =
      yaml_files(testing::source_path("tests/corpus/bad_inputs/config"));
  inputs.insert(inputs.end(), corpus.begin(), corpus.end());
  uint64_t seed = 0;
  for (const auto& input : inputs) {
    const std::string good = testing::read_bytes(input);
    const std::string name = input.filename().string();
    std::vector<Mutation> cases;
    for (const size_t n : testing::truncation_lengths(good.size(), 400)) {
      cases.push_back(
          {"truncated to " + std::to_string(n) + " bytes", good.substr(0, n)});
    }
    for (auto& m : testing::bit_flips(good, ++seed, 100)) {
      cases.push_back(std::move(m));
    }
    for (auto& m : structure_mutations(good)) {
      cases.push_back(std::move(m));
    }
    cases.push_back({"as it is", good});
    for (const auto& c : cases) {
      sweep.run(name + ": " + c.what, [&] {
        testing::write_bytes(path, c.bytes);
        return check_load(path);
      });
    }
  }
  EXPECT_GT(sweep.cases(), 5000);
}

TEST(ConfigSweep, EveryCorpusConfigIsAConfigErrorNamingTheLine) {
  Sweep sweep("config_corpus");
  const auto corpus =
      yaml_files(testing::source_path("tests/corpus/bad_inputs/config"));
  ASSERT_FALSE(corpus.empty());
  for (const auto& input : corpus) {
    sweep.run(input.filename().string(), [&]() -> std::string {
      try {
        load_job_config(input.string());
        return "loaded";
      } catch (const ConfigError& e) {
        return testing::missing_from(e.what(), {input.string() + ":"});
      }
    });
  }
}

}  // namespace
}  // namespace baton
