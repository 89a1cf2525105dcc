// The bad-input sweep of the data files: the tiktoken vocabulary and the
// SentencePiece model of assets/, token shards as `baton data tokenize`
// writes them, and the corpus in tests/corpus/bad_inputs/, truncated, with
// seeded bit flips, wrong values and damaged headers. Each one loads (and
// then encodes, decodes or reads every document without fault) or throws
// an error naming the file (docs/ARCHITECTURE.md section 4: exit 1).

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tiktoken_tokenizer.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"
#include "tests/baton_binary.h"
#include "tests/common/bad_input_sweep.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using testing::join_lines;
using testing::Mutation;
using testing::split_lines;
using testing::Sweep;

const std::string kText =
    "In the beginning God created the heaven and the earth. 1234 \xe2\x80\x94";

/// "" when `make` throws an error naming `path`, or succeeds and `use`
/// then runs without fault or fails naming `path`.
template <class Make, class Use>
std::string check_file(const std::string& path, Make&& make, Use&& use) {
  try {
    auto made = make();
    use(*made);
    return "";
  } catch (const std::exception& e) {
    return testing::missing_from(e.what(), {path});
  }
}

/// A tokenizer's round trip of kText, ids checked against its vocabulary.
void use_tokenizer(const Tokenizer& t) {
  const auto ids = t.encode(kText);
  for (const int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size()) {
      throw std::logic_error("id " + std::to_string(id) + " out of range");
    }
  }
  t.decode(ids);
}

/// Lines of a tiktoken file with bad ranks and tokens, removed or repeated.
std::vector<Mutation> tiktoken_line_mutations(const std::string& good) {
  const auto lines = split_lines(good);
  const std::vector<std::string> bad_ranks = {
      "-1",
      "2147483391",
      "2147483647",
      "9223372036854775807",
      "99999999999999999999",
      "1e3",
      "",
      "0x10",
      "12 13"};
  const std::vector<std::string> bad_tokens = {"", "!!!!", "QQ=", "=", "A"};
  std::vector<Mutation> out;
  for (size_t i = 0; i < lines.size(); i += 1 + lines.size() / 40) {
    const std::string at = "line " + std::to_string(i + 1);
    const size_t space = lines[i].find(' ');
    for (const auto& rank : bad_ranks) {
      auto changed = lines;
      changed[i] = lines[i].substr(0, space) + " " + rank;
      out.push_back({at + " rank '" + rank + "'", join_lines(changed)});
    }
    for (const auto& token : bad_tokens) {
      auto changed = lines;
      changed[i] = token + lines[i].substr(space);
      out.push_back({at + " token '" + token + "'", join_lines(changed)});
    }
    testing::remove_and_repeat_line(lines, i, at, out);
  }
  return out;
}

/// Truncations, bit flips and `extra` of `good`, each written to `path`
/// and checked by `check`.
void sweep_file(
    Sweep& sweep,
    const std::string& name,
    const std::string& good,
    const std::string& path,
    size_t max_truncations,
    uint64_t seed,
    size_t flips,
    std::vector<Mutation> extra,
    const std::function<std::string()>& check) {
  std::vector<Mutation> cases;
  for (const size_t n :
       testing::truncation_lengths(good.size(), max_truncations)) {
    cases.push_back(
        {"truncated to " + std::to_string(n) + " bytes", good.substr(0, n)});
  }
  for (auto& m : testing::bit_flips(good, seed, flips)) {
    cases.push_back(std::move(m));
  }
  for (auto& m : extra) {
    cases.push_back(std::move(m));
  }
  cases.push_back({"as it is", good});
  for (const auto& c : cases) {
    sweep.run(name + ": " + c.what, [&] {
      testing::write_bytes(path, c.bytes);
      return check();
    });
  }
}

std::vector<fs::path> corpus_files(const std::string& kind) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(
           testing::source_path("tests/corpus/bad_inputs/" + kind))) {
    out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path scratch(const std::string& name) {
  const auto dir = testing::fresh_dir(name);
  fs::create_directories(dir);
  return dir;
}

TEST(DataSweep, TiktokenFilesLoadOrNameTheFileAndLine) {
  Sweep sweep("tiktoken");
  const std::string path = (scratch("tiktoken_sweep") / "vocab.txt").string();
  const auto make = [&] { return std::make_unique<TiktokenTokenizer>(path); };
  const auto check = [&] { return check_file(path, make, use_tokenizer); };
  const std::string good =
      testing::read_bytes(testing::source_path("assets/kjv_tiktoken.txt"));
  sweep_file(
      sweep,
      "kjv_tiktoken.txt",
      good,
      path,
      1500,
      1,
      300,
      tiktoken_line_mutations(good),
      check);
  for (const auto& file : corpus_files("tokenizer")) {
    if (file.extension() == ".txt") {
      const std::string bad = testing::read_bytes(file);
      sweep_file(
          sweep, file.filename().string(), bad, path, 200, 2, 50, {}, check);
    }
  }
  EXPECT_GT(sweep.cases(), 2000);
}

TEST(DataSweep, SentencePieceModelsLoadOrNameTheFile) {
  Sweep sweep("sentencepiece");
  const std::string path = (scratch("sp_sweep") / "bad.model").string();
  const auto make = [&] {
    return std::make_unique<SentencePieceTokenizer>(path);
  };
  // A model that loads also says itself as a tokenizer.json (its
  // description read from the model's bytes) or names the file.
  const auto use = [](const Tokenizer& t) {
    use_tokenizer(t);
    t.hf_tokenizer_json();
  };
  const auto check = [&] { return check_file(path, make, use); };
  const std::string good =
      testing::read_bytes(testing::source_path("assets/kjv_sp.model"));
  sweep_file(sweep, "kjv_sp.model", good, path, 600, 3, 400, {}, check);
  for (const auto& file : corpus_files("tokenizer")) {
    if (file.extension() == ".model") {
      const std::string bad = testing::read_bytes(file);
      sweep_file(
          sweep, file.filename().string(), bad, path, 100, 4, 30, {}, check);
    }
  }
  EXPECT_GT(sweep.cases(), 1000);
}

TEST(DataSweep, TokenizerJsonFilesLoadOrNameTheFile) {
  Sweep sweep("huggingface");
  const std::string path = (scratch("hf_sweep") / "tokenizer.json").string();
  const auto make = [&] { return std::make_unique<HfTokenizer>(path); };
  const auto check = [&] { return check_file(path, make, use_tokenizer); };
  const std::string good =
      testing::read_bytes(testing::source_path("assets/kjv_tokenizer.json"));
  sweep_file(sweep, "kjv_tokenizer.json", good, path, 150, 5, 150, {}, check);
  for (const auto& file : corpus_files("tokenizer")) {
    if (file.extension() == ".json") {
      const std::string bad = testing::read_bytes(file);
      sweep_file(
          sweep, file.filename().string(), bad, path, 50, 6, 20, {}, check);
    }
  }
  EXPECT_GT(sweep.cases(), 300);
}

/// A header field of a shard (offsets of token_shards.h's header).
Mutation with_field(
    const std::string& good,
    size_t offset,
    size_t size,
    uint64_t value,
    const std::string& name) {
  Mutation m{name + " = " + std::to_string(value), good};
  std::memcpy(m.bytes.data() + offset, &value, size);
  return m;
}

/// Header fields set to wrong, negative and huge values (chosen so that
/// size arithmetic done carelessly wraps around to the file's size).
std::vector<Mutation> shard_header_mutations(const std::string& good) {
  struct Field {
    const char* name;
    size_t offset, size;
  };
  const Field fields[] = {
      {"version", 8, 4},
      {"bytes per token", 12, 4},
      {"vocab size", 16, 8},
      {"BOS", 24, 4},
      {"EOS", 28, 4},
      {"documents", 32, 8},
      {"tokens", 40, 8}};
  const uint64_t values[] = {
      0,
      1,
      3,
      0xFFFFFFFFull,
      0x7FFFFFFFFFFFFFFFull,
      0xFFFFFFFFFFFFFFFFull,
      0x8000000000000000ull,
      0x2000000000000000ull,
      0x1FFFFFFFFFFFFFFFull};
  std::vector<Mutation> out;
  for (const auto& f : fields) {
    for (const uint64_t v : values) {
      out.push_back(with_field(good, f.offset, f.size, v, f.name));
    }
  }
  // Documents and tokens that overflow into the file's real size: 2^61
  // documents (2^61 + 1 offsets of 8 bytes wrap to 8) and 2^63 + t tokens
  // of 2 bytes (wrapping to 2t).
  uint64_t documents = 0;
  uint64_t tokens = 0;
  std::memcpy(&documents, good.data() + 32, 8);
  std::memcpy(&tokens, good.data() + 40, 8);
  Mutation wrap_docs =
      with_field(good, 32, 8, (1ull << 61) + documents, "documents wrapping");
  out.push_back(std::move(wrap_docs));
  out.push_back(
      with_field(good, 40, 8, (1ull << 63) + tokens, "tokens wrapping"));
  return out;
}

TEST(DataSweep, TokenShardsOpenOrNameTheShardAndByte) {
  Sweep sweep("token_shards");
  const auto dir = scratch("shard_sweep");
  const ByteTokenizer tokenizer;
  {
    TokenShardWriter writer((dir / "good").string(), tokenizer, 1 << 20);
    for (const char* text : {"In the beginning", "", "God created", "x"}) {
      writer.add(tokenizer.encode(text));
    }
    writer.finish();
  }
  const std::string good =
      testing::read_bytes(dir / "good" / "shard_000000.bin");
  fs::create_directories(dir / "bad");
  const std::string path = (dir / "bad" / "shard_000000.bin").string();
  const auto make = [&] {
    DatasetOptions options;
    options.path = (dir / "bad").string();
    return std::make_unique<TokenShardDataset>(options);
  };
  const auto read_all = [&](const TokenShardDataset& d) {
    for (int64_t i = 0; i < d.size(); ++i) {
      d.tokens(i, tokenizer);
    }
  };
  // The place a message names lies inside the file: a damaged count must
  // not lead the check past the end (it read beyond the mapping once).
  const auto check = [&]() -> std::string {
    try {
      read_all(*make());
      return "";
    } catch (const std::exception& e) {
      const std::string message = e.what();
      static const std::regex at_byte("at byte ([0-9]+)");
      std::smatch m;
      if (std::regex_search(message, m, at_byte) &&
          std::stoull(m[1].str()) > fs::file_size(path)) {
        return "names a byte beyond the file's " +
               std::to_string(fs::file_size(path)) + ": " + message;
      }
      return testing::missing_from(message, {path});
    }
  };
  // The shard is small: every truncation, and many flips.
  sweep_file(
      sweep,
      "shard",
      good,
      path,
      good.size(),
      5,
      1500,
      shard_header_mutations(good),
      check);
  for (const auto& file : corpus_files("shards")) {
    sweep_file(
        sweep,
        file.filename().string(),
        testing::read_bytes(file),
        path,
        200,
        6,
        100,
        {},
        check);
  }
  EXPECT_GT(sweep.cases(), 1500);
}

}  // namespace
}  // namespace baton
