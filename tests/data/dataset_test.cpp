#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/paths.h"
#include "data/dataset.h"
#include "data/text_dataset.h"
#include "data/token_shards.h"
#include "tests/data/data_test_util.h"

namespace baton {
namespace {

using testing_util::DataFilesTest;
using testing_util::thrown_message;
namespace fs = std::filesystem;

std::vector<std::string> all_texts(const TextDataset& dataset) {
  std::vector<std::string> docs;
  for (int64_t i = 0; i < dataset.size(); ++i) {
    docs.push_back(dataset.text(i));
  }
  return docs;
}

DatasetOptions at(const std::string& path, const std::string& field = "text") {
  DatasetOptions options;
  options.path = path;
  options.text_field = field;
  return options;
}

// --- JSON Lines --------------------------------------------------------------

TEST(JsonlDatasetTest, ReadsTheBundledCorpus) {
  const std::string path = resolve_asset_path("assets/kjv.jsonl.gz");
  const JsonlDataset text(at(path));
  const std::vector<std::string> docs = all_texts(text);
  ASSERT_EQ(docs.size(), 1189u);
  EXPECT_EQ(docs.front().rfind("In the beginning God created", 0), 0u);
  for (const auto& doc : docs) {
    ASSERT_FALSE(doc.empty());
  }
  const JsonlDataset titles(at(path, "title"));
  EXPECT_EQ(titles.text(0), "Genesis 1");
  EXPECT_EQ(titles.text(1188), "Revelation 22");
}

TEST_F(DataFilesTest, PlainAndGzipGiveTheSameDocuments) {
  // Blank lines, CRLF endings, escapes, other fields and a last line without
  // '\n' are all part of ordinary JSONL files.
  const std::string content =
      "{\"text\": \"first\", \"id\": 1}\n"
      "\n"
      "   \r\n"
      "{\"id\": 2, \"text\": \"sec\\u00e9ond\\nline\"}\r\n"
      "{\"text\": \"\"}\n"
      "{\"text\": \"last\"}";
  const std::vector<std::string> expected = {
      "first", "sec\xC3\xA9ond\nline", "", "last"};
  EXPECT_EQ(
      all_texts(JsonlDataset(at(write_plain("a.jsonl", content)))), expected);
  EXPECT_EQ(
      all_texts(JsonlDataset(at(write_gz("a.jsonl.gz", content)))), expected);
}

TEST_F(DataFilesTest, ReadsLinesLongerThanAnyBuffer) {
  // 3 MiB in one line, more than zlib's buffers.
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4099) {
    big[i] = static_cast<char>('a' + (i / 4099) % 26);
  }
  const std::string content = "{\"text\":\"short\"}\n{\"text\":\"" + big +
                              "\"}\n{\"text\":\"after\"}\n";
  const std::vector<std::string> expected = {"short", big, "after"};
  EXPECT_EQ(
      all_texts(JsonlDataset(at(write_plain("big.jsonl", content)))), expected);
  EXPECT_EQ(
      all_texts(JsonlDataset(at(write_gz("big.jsonl.gz", content)))), expected);
}

TEST_F(DataFilesTest, FoldersAndGlobsReadFilesInSortedOrder) {
  write_plain("corpus/b.jsonl", "{\"text\":\"b1\"}\n{\"text\":\"b2\"}\n");
  write_gz("corpus/a.jsonl.gz", "{\"text\":\"a1\"}\n");
  write_plain("corpus/sub/c.jsonl", "{\"text\":\"c1\"}\n");
  write_plain("corpus/notes.txt", "not JSON, skipped in a folder");
  const std::string folder = (dir_ / "corpus").string();
  EXPECT_EQ(
      all_texts(JsonlDataset(at(folder))),
      (std::vector<std::string>{"a1", "b1", "b2", "c1"}));
  EXPECT_EQ(
      all_texts(JsonlDataset(at(folder + "/*.jsonl"))),
      (std::vector<std::string>{"b1", "b2"}));
  const std::string message = thrown_message<std::runtime_error>(
      [&] { JsonlDataset dataset(at(folder + "/*.parquet")); });
  EXPECT_NE(message.find("names no input"), std::string::npos) << message;
}

TEST_F(DataFilesTest, CustomTextField) {
  const std::string path = write_plain(
      "c.jsonl", "{\"body\":\"one\",\"text\":3}\n{\"body\":\"two\"}\n");
  EXPECT_EQ(
      all_texts(JsonlDataset(at(path, "body"))),
      (std::vector<std::string>{"one", "two"}));
  const JsonlDataset by_text(at(path));
  const std::string message =
      thrown_message<std::runtime_error>([&] { by_text.text(0); });
  EXPECT_NE(
      message.find(path + ":1: field 'text' must be a string, got number"),
      std::string::npos)
      << message;
}

TEST_F(DataFilesTest, BadLinesNameFileAndLine) {
  const std::string path = write_gz(
      "bad.jsonl.gz",
      "{\"text\":\"ok\"}\n\n{\"text\": oops}\n[\"text\", \"no\"]\n"
      "\n\n{\"title\":\"Genesis 1\",\"txt\":\"typo\"}\n{\"text\":null}\n");
  const JsonlDataset dataset(at(path));
  ASSERT_EQ(dataset.size(), 5);
  EXPECT_EQ(dataset.text(0), "ok");
  const auto message = [&](int64_t i) {
    return thrown_message<std::runtime_error>([&] { dataset.text(i); });
  };
  EXPECT_NE(message(1).find(path + ":3: invalid JSON"), std::string::npos)
      << message(1);
  EXPECT_NE(
      message(2).find(
          path + ":4: expected a JSON object with a string field "
                 "'text', got array"),
      std::string::npos)
      << message(2);
  // The key that names the field, the line's fields and the closest.
  EXPECT_NE(
      message(3).find(
          path +
          ":7: missing field 'text' (the text field: "
          "training.dataset_text_field, validation.dataset_text_field or "
          "--text-field); the line has the fields title, txt; did you mean "
          "'txt'?"),
      std::string::npos)
      << message(3);
  EXPECT_NE(
      message(4).find(path + ":8: field 'text' must be a string, got null"),
      std::string::npos)
      << message(4);
}

TEST_F(DataFilesTest, MissingAndEmptyInputsNameTheFile) {
  const std::string missing = (dir_ / "nope.jsonl").string();
  std::string message = thrown_message<std::runtime_error>(
      [&] { JsonlDataset dataset(at(missing)); });
  EXPECT_NE(
      message.find("cannot open '" + missing + "': No such file or directory"),
      std::string::npos)
      << message;
  for (const std::string& path :
       {write_plain("empty.jsonl", ""),
        write_gz("blank.jsonl.gz", "\n \n\n")}) {
    message = thrown_message<std::runtime_error>(
        [&] { JsonlDataset dataset(at(path)); });
    EXPECT_NE(message.find(path + ": holds no documents"), std::string::npos)
        << message;
  }
  // A damaged gzip file names the file and how far it got.
  std::string gz = testing_util::gzip_bytes("{\"text\":\"a\"}\n");
  gz.resize(gz.size() - 6);  // cut inside the deflate stream and trailer
  const std::string cut = write_plain("cut.jsonl.gz", gz);
  message = thrown_message<std::runtime_error>(
      [&] { JsonlDataset dataset(at(cut)); });
  EXPECT_NE(message.find("cannot read '" + cut + "' after "), std::string::npos)
      << message;
  // A folder is not a file to read.
  message = thrown_message<std::runtime_error>(
      [&] { FileBytes::open(dir_.string()); });
  EXPECT_NE(
      message.find("cannot read '" + dir_.string() + "': not a regular file"),
      std::string::npos)
      << message;
  // An unreadable file says why.
  const std::string locked = write_plain("locked.jsonl", "{\"text\":\"a\"}\n");
  fs::permissions(locked, fs::perms::none);
  if (::access(locked.c_str(), R_OK) != 0) {  // root reads anything
    message = thrown_message<std::runtime_error>(
        [&] { JsonlDataset dataset(at(locked)); });
    EXPECT_NE(message.find("cannot open '" + locked + "'"), std::string::npos)
        << message;
  }
}

// --- plain text
// ----------------------------------------------------------------

TEST_F(DataFilesTest, TextFilesAreOneDocumentEach) {
  write_plain("txt/2.txt", "second\nfile\n");
  write_gz("txt/1.txt.gz", "first");
  const TextFilesDataset dataset(at((dir_ / "txt").string()));
  EXPECT_EQ(
      all_texts(dataset),
      (std::vector<std::string>{"first", "second\nfile\n"}));
  const std::string empty = write_plain("txt/3.txt", "");
  const std::string message = thrown_message<std::runtime_error>(
      [&] { TextFilesDataset again(at((dir_ / "txt").string())); });
  EXPECT_NE(message.find(empty + ": empty file"), std::string::npos) << message;
}

// --- paths and the registry
// ------------------------------------------------------

TEST_F(DataFilesTest, ResolveAssetPath) {
  // An existing path comes back unchanged.
  const std::string local = write_plain("here.jsonl", "{\"text\":\"a\"}\n");
  EXPECT_EQ(resolve_asset_path(local), local);
  // Relative asset paths are found from any working directory.
  struct CwdGuard {
    fs::path saved = fs::current_path();
    ~CwdGuard() {
      fs::current_path(saved);
    }
  };
  std::string from_root, from_assets, message;
  {
    const CwdGuard guard;
    fs::current_path(dir_);
    from_root = resolve_asset_path("assets/kjv.jsonl.gz");
    from_assets = resolve_asset_path("kjv.jsonl.gz");
    message = thrown_message<std::runtime_error>(
        [] { resolve_asset_path("assets/missing.jsonl"); });
  }
  const fs::path expected = fs::path(kSourceAssetsDir) / "kjv.jsonl.gz";
  EXPECT_TRUE(fs::equivalent(from_root, expected)) << from_root;
  EXPECT_TRUE(fs::equivalent(from_assets, expected)) << from_assets;
  EXPECT_NE(
      message.find("asset 'assets/missing.jsonl' not found"), std::string::npos)
      << message;
}

TEST_F(DataFilesTest, DatasetForPathGoesByTheName) {
  for (const char* text : {"corpus.txt", "a/b.txt.gz", "shards/*.txt"}) {
    EXPECT_EQ(dataset_for_path(text, "--input"), "text") << text;
  }
  for (const char* jsonl : {"corpus.jsonl", "c.jsonl.gz", "d/*.jsonl.gz"}) {
    EXPECT_EQ(dataset_for_path(jsonl, "--input"), "jsonl") << jsonl;
  }
  // A folder is read as before: its *.jsonl and *.jsonl.gz files.
  EXPECT_EQ(dataset_for_path(dir_.string(), "--input"), "jsonl");
  for (const std::string other :
       {"corpus.md", "corpus.json", "corpus.txt.bak", "missing/", "d/*"}) {
    const std::string message = thrown_message<ConfigError>(
        [&] { dataset_for_path(other, "--input"); });
    EXPECT_EQ(
        message,
        "--input: '" + other +
            "': cannot tell its format from its name; allowed: a folder, "
            "*.txt (text), *.txt.gz (text), *.jsonl (jsonl), *.jsonl.gz "
            "(jsonl); or name the dataset (--dataset jsonl|text, "
            "training.dataset)");
  }
}

TEST_F(DataFilesTest, KjvGivenAPathReadsItByItsName) {
  // configs/debug_model.yaml names `kjv`; pointed at a user's own corpus it
  // reads a .txt as text (one document per file), not as JSON Lines.
  register_builtin_datasets();
  const auto& kjv = dataset_registry().get("kjv");
  const std::string txt = write_plain("mine.txt", "{not json\nline two\n");
  auto dataset = kjv(at(txt));
  ASSERT_NE(dynamic_cast<const TextFilesDataset*>(dataset.get()), nullptr);
  EXPECT_EQ(
      all_texts(dynamic_cast<const TextDataset&>(*dataset)),
      (std::vector<std::string>{"{not json\nline two\n"}));
  const std::string jsonl = write_jsonl("mine.jsonl", {"a", "b"});
  EXPECT_EQ(kjv(at(jsonl))->size(), 2);
  const std::string md = write_plain("mine.md", "text\n");
  EXPECT_EQ(
      thrown_message<ConfigError>([&] {
        kjv(at(md));
      }).rfind("training.dataset_path: '" + md + "': cannot tell", 0),
      0u);
  // A named dataset reads what it is told.
  EXPECT_EQ(dataset_registry().get("text")(at(md))->size(), 1);
}

TEST_F(DataFilesTest, DatasetRegistry) {
  register_builtin_datasets();
  register_builtin_datasets();  // idempotent
  auto& registry = dataset_registry();
  EXPECT_EQ(
      registry.names(),
      (std::vector<std::string>{"jsonl", "kjv", "text", "tokens"}));
  EXPECT_EQ(registry.get("kjv")(DatasetOptions())->size(), 1189);
  const std::string mine = write_plain("mine.jsonl", "{\"body\":\"mine\"}\n");
  auto dataset = registry.get("JSONL")(at(mine, "body"));
  EXPECT_EQ(dynamic_cast<const TextDataset&>(*dataset).text(0), "mine");
  for (const char* name : {"jsonl", "text", "tokens"}) {
    const std::string message = thrown_message<ConfigError>(
        [&] { registry.get(name)(DatasetOptions()); });
    EXPECT_EQ(message.rfind("training.dataset_path: empty; allowed: ", 0), 0u)
        << message;
    EXPECT_NE(
        message.find("(required by dataset '" + std::string(name) + "')"),
        std::string::npos)
        << message;
  }
  const std::string message = thrown_message<ConfigError>(
      [&] { registry.get("wikitext", "training.dataset"); });
  EXPECT_NE(
      message.find("training.dataset: unknown dataset 'wikitext'; "
                   "known: jsonl, kjv, text, tokens"),
      std::string::npos)
      << message;
}

// --- token shards ------------------------------------------------------------

// A tokenizer of any vocabulary size, for shard widths.
class WideTokenizer final : public Tokenizer {
 public:
  explicit WideTokenizer(int64_t vocab) : vocab_(vocab) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    return {};
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    return "";
  }
  int64_t vocab_size() const override {
    return vocab_;
  }
  int32_t bos_id() const override {
    return static_cast<int32_t>(vocab_ - 2);
  }
  int32_t eos_id() const override {
    return static_cast<int32_t>(vocab_ - 1);
  }

 private:
  int64_t vocab_;
};

class TokenShardTest : public DataFilesTest {
 protected:
  // Writes `docs` with `tokenizer`, `per_shard` tokens a shard.
  std::vector<std::string> write_shards(
      const std::string& name,
      const Tokenizer& tokenizer,
      const std::vector<std::vector<int32_t>>& docs,
      int64_t per_shard) {
    TokenShardWriter writer((dir_ / name).string(), tokenizer, per_shard);
    for (const auto& doc : docs) {
      writer.add(doc);
    }
    return writer.finish();
  }
  std::vector<std::vector<int32_t>> read_all(
      const std::string& name, const Tokenizer& tokenizer) {
    const TokenShardDataset dataset(at((dir_ / name).string()));
    std::vector<std::vector<int32_t>> docs;
    for (int64_t i = 0; i < dataset.size(); ++i) {
      docs.push_back(dataset.tokens(i, tokenizer));
    }
    return docs;
  }
};

TEST_F(TokenShardTest, Uint16AndUint32ShardsGiveBackTheDocuments) {
  const std::vector<std::vector<int32_t>> narrow_docs = {
      {1, 2, 3}, {}, {65533, 0}, {7}, {8, 9, 10, 11, 12}};
  const WideTokenizer narrow(65536);
  // A shard closes once it holds 4 tokens: [1 2 3][][65533 0] | [7][8..12]
  const auto paths = write_shards("u16", narrow, narrow_docs, 4);
  EXPECT_EQ(paths.size(), 2u);
  EXPECT_EQ(fs::path(paths[0]).filename(), "shard_000000.bin");
  EXPECT_EQ(read_all("u16", narrow), narrow_docs);
  // 48-byte header, 5 uint16 tokens, 4 uint64 offsets.
  EXPECT_EQ(fs::file_size(paths[0]), 48u + 5u * 2u + 4u * 8u);

  const std::vector<std::vector<int32_t>> wide_docs = {{70000, 1}, {128255}};
  const WideTokenizer wide(128256);
  write_shards("u32", wide, wide_docs, 1 << 20);
  EXPECT_EQ(read_all("u32", wide), wide_docs);
}

TEST_F(TokenShardTest, WriterRefusesAFolderWithShards) {
  const WideTokenizer tok(300);
  write_shards("once", tok, {{1}}, 10);
  const std::string message = thrown_message<ConfigError>(
      [&] { write_shards("once", tok, {{1}}, 10); });
  EXPECT_NE(
      message.find("already holds shards (shard_000000.bin)"),
      std::string::npos)
      << message;
}

TEST_F(TokenShardTest, DamagedShardsNameShardAndOffset) {
  const WideTokenizer tok(300);
  const auto paths = write_shards("ok", tok, {{1, 2, 3}, {4, 5}}, 100);
  const std::string good = paths[0];
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto error_of = [&](const std::string& name, const std::string& data) {
    const std::string path = write_plain("bad/" + name + "/s.bin", data);
    return std::make_pair(
        path, thrown_message<std::runtime_error>([&] {
          TokenShardDataset d(at(fs::path(path).parent_path()));
        }));
  };
  auto [path, message] = error_of("short", bytes.substr(0, 20));
  EXPECT_NE(
      message.find(path + " at byte 0: too short for a shard header"),
      std::string::npos)
      << message;
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  std::tie(path, message) = error_of("magic", bad_magic);
  EXPECT_NE(message.find(path + " at byte 0: not a shard"), std::string::npos)
      << message;
  std::tie(path, message) =
      error_of("truncated", bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(
      message.find(
          path + " at byte " + std::to_string(bytes.size() - 3) +
          ": file size"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("truncated or damaged"), std::string::npos) << message;

  // Token 4 (second document's first, at token offset 3) out of range.
  std::string bad_id = bytes;
  const uint16_t big = 999;
  std::memcpy(&bad_id[48 + 3 * 2], &big, 2);
  path = write_plain("bad/ids/s.bin", bad_id);
  // Opening checks the layout only; reading finds the id.
  const TokenShardDataset dataset(at(fs::path(path).parent_path()));
  EXPECT_EQ(dataset.tokens(0, tok), (std::vector<int32_t>{1, 2, 3}));
  message = thrown_message<std::runtime_error>([&] { dataset.tokens(1, tok); });
  EXPECT_NE(
      message.find(
          path + " at token offset 3 (byte 54): token id 999 is out "
                 "of the vocabulary range [0, 300)"),
      std::string::npos)
      << message;

  // Read with another tokenizer than the one that wrote them.
  const WideTokenizer other(1000);
  message = thrown_message<std::runtime_error>(
      [&] { TokenShardDataset(at(dir_ / "ok")).tokens(0, other); });
  EXPECT_NE(
      message.find("was made with a tokenizer of vocab 300 (BOS 298, EOS 299), "
                   "but model.tokenizer has vocab 1000"),
      std::string::npos)
      << message;
}

}  // namespace
}  // namespace baton
