#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/paths.h"
#include "data/dataloader.h"
#include "data/text_dataset.h"
#include "data/tokenizer.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kBos = 256;
constexpr int32_t kEos = 257;

// Runs `fn` and returns the message of the E it throws (fails when none).
template <class E, class Fn>
std::string thrown_message(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// Documents held in memory, for loader tests that need exact contents.
class VectorDataset final : public TextDataset {
 public:
  explicit VectorDataset(std::vector<std::string> docs)
      : docs_(std::move(docs)) {}
  std::optional<std::string> next() override {
    if (next_ == docs_.size()) {
      return std::nullopt;
    }
    return docs_[next_++];
  }
  void reset() override {
    next_ = 0;
    ++resets;
  }
  int resets = 0;

 private:
  std::vector<std::string> docs_;
  size_t next_ = 0;
};

std::vector<std::string> read_all(TextDataset& dataset) {
  std::vector<std::string> docs;
  while (auto doc = dataset.next()) {
    docs.push_back(std::move(*doc));
  }
  return docs;
}

std::vector<int64_t> row(const at::Tensor& t, int64_t b) {
  const at::Tensor r = t[b].contiguous();
  return std::vector<int64_t>(
      r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

std::shared_ptr<const Tokenizer> bytes() {
  return std::make_shared<ByteTokenizer>();
}

// A scratch folder per test, removed afterwards.
class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() /
        ("baton_data_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
  }

  std::string write_plain(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out << text;
    EXPECT_TRUE(out.good()) << path;
    return path;
  }

  std::string write_gz(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    gzFile file = gzopen(path.c_str(), "wb");
    EXPECT_NE(file, nullptr) << path;
    EXPECT_EQ(
        gzwrite(file, text.data(), static_cast<unsigned>(text.size())),
        static_cast<int>(text.size()));
    EXPECT_EQ(gzclose(file), Z_OK);
    return path;
  }

  fs::path dir_;
};

// --- tokenizer --------------------------------------------------------------

TEST(ByteTokenizerTest, EncodesUtf8Bytes) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 258);
  EXPECT_EQ(tok.bos_id(), kBos);
  EXPECT_EQ(tok.eos_id(), kEos);
  // "é" is C3 A9 in UTF-8; bytes >= 0x80 must not come out negative.
  EXPECT_EQ(
      tok.encode("h\xC3\xA9!"), (std::vector<int32_t>{104, 0xC3, 0xA9, 33}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(ByteTokenizerTest, RoundTripsTextAndSkipsSpecials) {
  const ByteTokenizer tok;
  const std::string text = std::string("caf\xC3\xA9 \xF0\x9F\x98\x80 ") +
                           std::string(1, '\0') + "\xFF end";
  std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(tok.decode(ids), text);
  ids.insert(ids.begin(), kBos);
  ids.insert(ids.begin() + 5, kEos);
  ids.push_back(kEos);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.decode({kBos, kEos}), "");
}

TEST(ByteTokenizerTest, DecodeRejectsIdsOutOfRange) {
  const ByteTokenizer tok;
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        tok.decode({65, 258});
      }).find("cannot decode id 258; allowed: 0..257"),
      std::string::npos);
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        tok.decode({-1});
      }).find("id -1"),
      std::string::npos);
}

TEST(TokenizerRegistryTest, BytesIsRegisteredOnceAndFoundByName) {
  register_builtin_tokenizers();
  register_builtin_tokenizers();  // idempotent
  auto& registry = tokenizer_registry();
  EXPECT_TRUE(registry.contains("bytes"));
  EXPECT_FALSE(registry.help("bytes").empty());
  const std::unique_ptr<Tokenizer> tok = registry.get("BYTES")("ignored");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 258);
  EXPECT_EQ(tok->encode("A"), std::vector<int32_t>{65});
  const std::string message = thrown_message<ConfigError>(
      [&] { registry.get("byts", "model.tokenizer"); });
  EXPECT_NE(
      message.find("model.tokenizer: unknown tokenizer 'byts'"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("bytes"), std::string::npos) << message;
}

// --- JSON Lines datasets -----------------------------------------------------

TEST(JsonlDatasetTest, ReadsTheBundledCorpus) {
  const std::string path = resolve_asset_path("assets/kjv.jsonl.gz");
  JsonlDataset text(path);
  const std::vector<std::string> docs = read_all(text);
  ASSERT_EQ(docs.size(), 1189u);
  EXPECT_EQ(docs.front().rfind("In the beginning God created", 0), 0u);
  for (const auto& doc : docs) {
    ASSERT_FALSE(doc.empty());
  }
  JsonlDataset titles(path, "title");
  EXPECT_EQ(titles.next(), "Genesis 1");
  const std::vector<std::string> rest = read_all(titles);
  ASSERT_EQ(rest.size(), 1188u);
  EXPECT_EQ(rest.back(), "Revelation 22");
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
  JsonlDataset plain(write_plain("a.jsonl", content));
  EXPECT_EQ(read_all(plain), expected);
  JsonlDataset gz(write_gz("a.jsonl.gz", content));
  EXPECT_EQ(read_all(gz), expected);
  // End of file stays the end until reset.
  EXPECT_EQ(gz.next(), std::nullopt);
}

TEST_F(DataFilesTest, ResetStartsAgainFromTheFirstDocument) {
  JsonlDataset dataset(
      write_gz("r.jsonl.gz", "{\"text\":\"a\"}\n{\"text\":\"b\"}\n"));
  EXPECT_EQ(dataset.next(), "a");
  dataset.reset();
  EXPECT_EQ(read_all(dataset), (std::vector<std::string>{"a", "b"}));
  dataset.reset();
  EXPECT_EQ(read_all(dataset), (std::vector<std::string>{"a", "b"}));
}

TEST_F(DataFilesTest, ReadsLinesLongerThanAnyBuffer) {
  // 3 MiB in one line, more than the reader's chunk and zlib's buffers.
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4099) {
    big[i] = static_cast<char>('a' + (i / 4099) % 26);
  }
  const std::string content = "{\"text\":\"short\"}\n{\"text\":\"" + big +
                              "\"}\n{\"text\":\"after\"}\n";
  const std::vector<std::string> expected = {"short", big, "after"};
  JsonlDataset plain(write_plain("big.jsonl", content));
  EXPECT_EQ(read_all(plain), expected);
  JsonlDataset gz(write_gz("big.jsonl.gz", content));
  EXPECT_EQ(read_all(gz), expected);
}

TEST_F(DataFilesTest, CustomTextField) {
  const std::string path = write_plain(
      "c.jsonl", "{\"body\":\"one\",\"text\":3}\n{\"body\":\"two\"}\n");
  JsonlDataset by_body(path, "body");
  EXPECT_EQ(read_all(by_body), (std::vector<std::string>{"one", "two"}));
  JsonlDataset by_text(path);
  const std::string message =
      thrown_message<std::runtime_error>([&] { by_text.next(); });
  EXPECT_NE(
      message.find(path + ":1: field 'text' must be a string, got number"),
      std::string::npos)
      << message;
}

TEST_F(DataFilesTest, InvalidJsonNamesFileAndLine) {
  const std::string path = write_gz(
      "bad.jsonl.gz",
      "{\"text\":\"ok\"}\n\n{\"text\": oops}\n{\"text\":\"x\"}\n");
  JsonlDataset dataset(path);
  EXPECT_EQ(dataset.next(), "ok");
  const std::string message =
      thrown_message<std::runtime_error>([&] { dataset.next(); });
  EXPECT_NE(message.find(path + ":3: invalid JSON"), std::string::npos)
      << message;
}

TEST_F(DataFilesTest, NonObjectLineNamesFileAndLine) {
  const std::string path =
      write_plain("arr.jsonl", "{\"text\":\"ok\"}\n[\"text\", \"no\"]\n");
  JsonlDataset dataset(path);
  EXPECT_EQ(dataset.next(), "ok");
  const std::string message =
      thrown_message<std::runtime_error>([&] { dataset.next(); });
  EXPECT_NE(
      message.find(path + ":2: expected a JSON object"), std::string::npos)
      << message;
  EXPECT_NE(message.find("got array"), std::string::npos) << message;
}

TEST_F(DataFilesTest, MissingFieldNamesFieldFileAndLine) {
  const std::string path = write_plain(
      "missing.jsonl", "\n\n\n{\"title\":\"Genesis 1\",\"txt\":\"typo\"}\n");
  JsonlDataset dataset(path);
  const std::string message =
      thrown_message<std::runtime_error>([&] { dataset.next(); });
  EXPECT_NE(message.find(path + ":4: missing field 'text'"), std::string::npos)
      << message;
}

TEST_F(DataFilesTest, NonStringFieldNamesFieldFileAndLine) {
  const std::string path =
      write_gz("num.jsonl.gz", "{\"text\":\"a\"}\n{\"text\":null}\n");
  JsonlDataset dataset(path);
  EXPECT_EQ(dataset.next(), "a");
  const std::string message =
      thrown_message<std::runtime_error>([&] { dataset.next(); });
  EXPECT_NE(
      message.find(path + ":2: field 'text' must be a string, got null"),
      std::string::npos)
      << message;
}

TEST_F(DataFilesTest, MissingFileNamesFileAndReason) {
  const std::string path = (dir_ / "nope.jsonl").string();
  const std::string message =
      thrown_message<std::runtime_error>([&] { JsonlDataset dataset(path); });
  EXPECT_NE(message.find("cannot open '" + path + "'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("No such file or directory"), std::string::npos)
      << message;
}

TEST_F(DataFilesTest, FileWithoutDocumentsThrows) {
  for (const std::string& path :
       {write_plain("empty.jsonl", ""),
        write_gz("blank.jsonl.gz", "\n \n\n")}) {
    JsonlDataset dataset(path);
    const std::string message =
        thrown_message<std::runtime_error>([&] { dataset.next(); });
    EXPECT_NE(message.find(path + ": holds no documents"), std::string::npos)
        << message;
  }
}

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

TEST_F(DataFilesTest, DatasetRegistry) {
  register_builtin_datasets();
  register_builtin_datasets();  // idempotent
  auto& registry = dataset_registry();
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"jsonl", "kjv"}));

  // kjv: the bundled corpus by default, an explicit path overrides it.
  std::unique_ptr<TextDataset> kjv = registry.get("kjv")("");
  EXPECT_EQ(kjv->next()->rfind("In the beginning", 0), 0u);
  const std::string mine = write_plain("mine.jsonl", "{\"text\":\"mine\"}\n");
  EXPECT_EQ(
      read_all(*registry.get("KJV")(mine)), std::vector<std::string>{"mine"});

  // jsonl: the path is required.
  EXPECT_EQ(
      read_all(*registry.get("jsonl")(mine)), std::vector<std::string>{"mine"});
  EXPECT_EQ(
      thrown_message<ConfigError>([&] { registry.get("jsonl")(""); }),
      "training.dataset_path: empty; allowed: a JSON Lines file (required by "
      "dataset 'jsonl')");

  const std::string message = thrown_message<ConfigError>(
      [&] { registry.get("wikitext", "training.dataset"); });
  EXPECT_NE(
      message.find("training.dataset: unknown dataset 'wikitext'; "
                   "known: jsonl, kjv"),
      std::string::npos)
      << message;
}

// --- DataLoader --------------------------------------------------------------

TEST(DataLoaderTest, PacksDocumentsIntoShiftedWindows) {
  // Stream: [B a b E] [B c d e E] [B E] [B f E]  (14 tokens, one epoch).
  auto dataset = std::make_unique<VectorDataset>(
      std::vector<std::string>{"ab", "cde", "", "f"});
  VectorDataset* raw = dataset.get();
  DataLoader loader(std::move(dataset), bytes(), DataLoaderOptions(2, 3));
  const int64_t a = 'a', b = 'b', c = 'c', d = 'd', e = 'e', f = 'f';

  Batch first = loader.next();
  EXPECT_EQ(first.inputs.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(first.labels.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(first.inputs.scalar_type(), at::kLong);
  EXPECT_EQ(first.labels.scalar_type(), at::kLong);
  EXPECT_TRUE(first.inputs.device().is_cpu());
  // Windows of 4 tokens: [B a b E], [B c d e].
  EXPECT_EQ(row(first.inputs, 0), (std::vector<int64_t>{kBos, a, b}));
  EXPECT_EQ(row(first.labels, 0), (std::vector<int64_t>{a, b, kEos}));
  EXPECT_EQ(row(first.inputs, 1), (std::vector<int64_t>{kBos, c, d}));
  EXPECT_EQ(row(first.labels, 1), (std::vector<int64_t>{c, d, e}));
  EXPECT_EQ(loader.epoch(), 0);

  // Windows [E B E B] and [f E | B a]: the second crosses into epoch 1.
  Batch second = loader.next();
  EXPECT_EQ(row(second.inputs, 0), (std::vector<int64_t>{kEos, kBos, kEos}));
  EXPECT_EQ(row(second.labels, 0), (std::vector<int64_t>{kBos, kEos, kBos}));
  EXPECT_EQ(row(second.inputs, 1), (std::vector<int64_t>{f, kEos, kBos}));
  EXPECT_EQ(row(second.labels, 1), (std::vector<int64_t>{kEos, kBos, a}));
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(raw->resets, 1);

  // Windows [b E B c] and [d e E B].
  Batch third = loader.next();
  EXPECT_EQ(row(third.inputs, 0), (std::vector<int64_t>{b, kEos, kBos}));
  EXPECT_EQ(row(third.labels, 0), (std::vector<int64_t>{kEos, kBos, c}));
  EXPECT_EQ(row(third.inputs, 1), (std::vector<int64_t>{d, e, kEos}));
  EXPECT_EQ(row(third.labels, 1), (std::vector<int64_t>{e, kEos, kBos}));
}

TEST(DataLoaderTest, WrapsAroundEpochsForever) {
  // One 6-token epoch ([B x y E][B E]) and rows of 21 tokens: each row spans
  // several epochs, and the stream stays periodic.
  const std::vector<int64_t> epoch_tokens = {kBos, 'x', 'y', kEos, kBos, kEos};
  auto dataset =
      std::make_unique<VectorDataset>(std::vector<std::string>{"xy", ""});
  DataLoader loader(std::move(dataset), bytes(), DataLoaderOptions(1, 20));
  int64_t position = 0;
  for (int step = 0; step < 5; ++step) {
    Batch batch = loader.next();
    const std::vector<int64_t> inputs = row(batch.inputs, 0);
    const std::vector<int64_t> labels = row(batch.labels, 0);
    for (int64_t t = 0; t < 20; ++t) {
      ASSERT_EQ(inputs[t], epoch_tokens[(position + t) % 6])
          << "step " << step << " t " << t;
      ASSERT_EQ(labels[t], epoch_tokens[(position + t + 1) % 6])
          << "step " << step << " t " << t;
    }
    position += 21;
    // The buffer is filled one whole document at a time.
    EXPECT_EQ(loader.epoch(), (position - 1) / 6) << "step " << step;
  }
}

TEST(DataLoaderTest, ReadsTheBundledCorpus) {
  DataLoader loader(
      std::make_unique<JsonlDataset>(resolve_asset_path("assets/kjv.jsonl.gz")),
      bytes(),
      DataLoaderOptions(2, 16));
  const Batch batch = loader.next();
  std::vector<int32_t> ids;
  for (const int64_t id : row(batch.inputs, 0)) {
    ids.push_back(static_cast<int32_t>(id));
  }
  EXPECT_EQ(ids.front(), kBos);
  EXPECT_EQ(ByteTokenizer().decode(ids), "In the beginnin");
  EXPECT_EQ(batch.labels[0][15].item<int64_t>(), 'g');
  // Row 1 continues right after row 0's 17 tokens.
  EXPECT_EQ(batch.inputs[1][0].item<int64_t>(), ' ');
  EXPECT_EQ(batch.inputs[1][1].item<int64_t>(), 'G');
}

// The documents a rank's loader yields in its first `batches` batches of 3
// rows of 5 tokens, decoded back from the token stream.
std::vector<std::string> documents_of_rank(
    const std::string& path,
    int64_t dp_rank,
    int64_t dp_size,
    int batches,
    int64_t* epoch) {
  DataLoaderOptions options(3, 5);
  options.dp_rank = dp_rank;
  options.dp_size = dp_size;
  DataLoader loader(std::make_unique<JsonlDataset>(path), bytes(), options);
  // Windows do not overlap, so each row's inputs plus its last label is the
  // next stretch of the stream.
  std::vector<int32_t> stream;
  for (int i = 0; i < batches; ++i) {
    const Batch batch = loader.next();
    for (int64_t b = 0; b < 3; ++b) {
      for (const int64_t id : row(batch.inputs, b)) {
        stream.push_back(static_cast<int32_t>(id));
      }
      stream.push_back(
          static_cast<int32_t>(batch.labels[b][4].item<int64_t>()));
    }
  }
  *epoch = loader.epoch();
  std::vector<std::string> docs;
  std::vector<int32_t> current;
  bool open = false;
  for (const int32_t id : stream) {
    if (id == kBos) {
      EXPECT_FALSE(open) << "BOS inside a document";
      open = true;
      current.clear();
    } else if (id == kEos) {
      EXPECT_TRUE(open) << "EOS outside a document";
      open = false;
      docs.push_back(ByteTokenizer().decode(current));
    } else {
      current.push_back(id);
    }
  }
  EXPECT_FALSE(open) << "stream cut inside a document";
  return docs;
}

TEST_F(DataFilesTest, DataParallelRanksSplitTheDocuments) {
  // Seven documents of 12 tokens each (BOS, "document N", EOS).
  std::string content;
  std::vector<std::string> all;
  for (int i = 0; i < 7; ++i) {
    all.push_back("document " + std::to_string(i));
    content += "{\"text\":\"" + all.back() + "\"}\n";
  }
  const std::string path = write_gz("dp.jsonl.gz", content);
  // 6 batches of 18 tokens = 108 tokens = 9 whole documents per rank: 2.25
  // epochs of rank 0's four documents, 3 epochs of rank 1's three.
  int64_t epoch0 = -1;
  int64_t epoch1 = -1;
  const std::vector<std::string> rank0 =
      documents_of_rank(path, 0, 2, 6, &epoch0);
  const std::vector<std::string> rank1 =
      documents_of_rank(path, 1, 2, 6, &epoch1);
  const std::vector<std::string> even = {
      "document 0", "document 2", "document 4", "document 6"};
  const std::vector<std::string> odd = {
      "document 1", "document 3", "document 5"};
  ASSERT_EQ(rank0.size(), 9u);
  ASSERT_EQ(rank1.size(), 9u);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(rank0[i], even[i % even.size()]) << i;
    EXPECT_EQ(rank1[i], odd[i % odd.size()]) << i;
  }
  EXPECT_EQ(epoch0, 2);
  // Rank 1 ended exactly at an epoch's end; the wrap happens on demand.
  EXPECT_EQ(epoch1, 2);
  std::set<std::string> seen(rank0.begin(), rank0.end());
  for (const auto& doc : std::set<std::string>(rank1.begin(), rank1.end())) {
    EXPECT_TRUE(seen.insert(doc).second) << doc << " on both ranks";
  }
  EXPECT_EQ(seen, std::set<std::string>(all.begin(), all.end()));
}

TEST(DataLoaderTest, RankWithoutDocumentsThrowsInsteadOfLooping) {
  DataLoaderOptions options(1, 4);
  options.dp_rank = 3;
  options.dp_size = 4;
  DataLoader loader(
      std::make_unique<VectorDataset>(
          std::vector<std::string>{"one", "two", "three"}),
      bytes(),
      options);
  const std::string message =
      thrown_message<std::runtime_error>([&] { loader.next(); });
  EXPECT_NE(
      message.find("[DataLoader] a full pass over the dataset "
                   "(3 documents) gave dp_rank 3 of dp_size 4 no "
                   "document"),
      std::string::npos)
      << message;

  DataLoader empty(
      std::make_unique<VectorDataset>(std::vector<std::string>{}),
      bytes(),
      DataLoaderOptions(1, 4));
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        empty.next();
      }).find("(0 documents)"),
      std::string::npos);
}

TEST(DataLoaderTest, ValidatesOptions) {
  const auto make = [](DataLoaderOptions options) {
    DataLoader loader(
        std::make_unique<VectorDataset>(std::vector<std::string>{"a"}),
        bytes(),
        options);
  };
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [&] { make(DataLoaderOptions(1, 0)); }),
      "[DataLoader] seq_len must be >= 1, got 0");
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [&] { make(DataLoaderOptions(-2, 8)); }),
      "[DataLoader] batch_size must be >= 1, got -2");
  DataLoaderOptions no_ranks(1, 8);
  no_ranks.dp_size = 0;
  EXPECT_EQ(
      thrown_message<std::invalid_argument>([&] { make(no_ranks); }),
      "[DataLoader] dp_size must be >= 1, got 0");
  DataLoaderOptions bad_rank(1, 8);
  bad_rank.dp_size = 2;
  bad_rank.dp_rank = 2;
  EXPECT_EQ(
      thrown_message<std::invalid_argument>([&] { make(bad_rank); }),
      "[DataLoader] dp_rank must be in [0, dp_size=2), got 2");
  bad_rank.dp_rank = -1;
  EXPECT_EQ(
      thrown_message<std::invalid_argument>([&] { make(bad_rank); }),
      "[DataLoader] dp_rank must be in [0, dp_size=2), got -1");
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [] { DataLoader loader(nullptr, bytes(), DataLoaderOptions(1, 1)); }),
      "[DataLoader] dataset must not be null");
}

}  // namespace
}  // namespace baton
