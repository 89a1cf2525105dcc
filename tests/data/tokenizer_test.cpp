#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/text_dataset.h"
#include "data/tiktoken_tokenizer.h"
#include "data/tokenizer.h"
#include "tests/data/data_test_util.h"

namespace baton {
namespace {

using testing_util::DataFilesTest;
using testing_util::thrown_message;

constexpr int32_t kBos = 256;
constexpr int32_t kEos = 257;

// --- bytes ------------------------------------------------------------------

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
      }).find("[ByteTokenizer] cannot decode id 258; allowed: 0..257"),
      std::string::npos);
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        tok.decode({-1});
      }).find("id -1"),
      std::string::npos);
}

// --- Llama 3 pre-tokenisation ------------------------------------------------

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> pieces;
  for (const auto piece : llama3_pretokenize(text)) {
    pieces.emplace_back(piece);
  }
  return pieces;
}

// Expected pieces come from Python's `regex` module running Meta's pattern
// (regex.findall), an implementation independent of PCRE2.
TEST(Llama3SplitTest, MatchesTheReferenceOnTrickyText) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"I'm here, don't you? HE'S WE'LL they've",
       {"I",
        "'m",
        " here",
        ",",
        " don",
        "'t",
        " you",
        "?",
        " HE",
        "'S",
        " WE",
        "'LL",
        " they",
        "'ve"}},
      {"12345 and 1,000,000 x2024y",
       {"123",
        "45",
        " and",
        " ",
        "1",
        ",",
        "000",
        ",",
        "000",
        " x",
        "202",
        "4",
        "y"}},
      {"hello\xE4\xB8\x96\xE7\x95\x8C \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5"
       "\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80 \xCE\xB1\xCE\xB2\xCE\xB3!",
       {"hello\xE4\xB8\x96\xE7\x95\x8C",
        " \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
        " \xD0\xBC\xD0\xB8\xD1\x80",
        " \xCE\xB1\xCE\xB2\xCE\xB3",
        "!"}},
      {"a  b\n\n\nc   \n d", {"a", " ", " b", "\n\n\n", "c", "   \n", " d"}},
      {"Hello!!! ...\n\nWorld", {"Hello", "!!!", " ...\n\n", "World"}},
      {"end   ", {"end", "   "}},
      {"\t tab\r\n\r\nx", {"\t", " tab", "\r\n\r\n", "x"}},
      // Arabic-Indic digits are \p{N} too; "½" is a number, "ﾟ" a letter.
      {"\xEF\xBE\x9F"
       "7 \xC2\xBD \xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6 na\xC3\xAFve",
       {"\xEF\xBE\x9F",
        "7",
        " ",
        "\xC2\xBD",
        " ",
        "\xD9\xA3\xD9\xA4\xD9\xA5",
        "\xD9\xA6",
        " na\xC3\xAFve"}},
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(split(text), expected) << text;
  }
  EXPECT_TRUE(split("").empty());
}

TEST(Llama3SplitTest, InvalidUtf8BecomesItsOwnPieces) {
  const std::string text = "ab\xFF\xFE cd";
  const std::vector<std::string> pieces = split(text);
  std::string joined;
  for (const auto& p : pieces) {
    joined += p;
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(pieces.front(), "ab");
  EXPECT_EQ(pieces.back(), " cd");
}

// --- tiktoken ---------------------------------------------------------------

std::string base64(const std::string& bytes) {
  static const char* kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) |
                       (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) {
      out += kAlphabet[(v >> s) & 63];
    }
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += std::string{kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63]} + "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out +=
        std::string{
            kAlphabet[v >> 18],
            kAlphabet[(v >> 12) & 63],
            kAlphabet[(v >> 6) & 63]} +
        "=";
  }
  return out;
}

// The 256 bytes as ranks 0-255, then `merges` as ranks 256, 257, ...
std::string tiktoken_file(const std::vector<std::string>& merges) {
  std::string text;
  for (int b = 0; b < 256; ++b) {
    text += base64(std::string(1, static_cast<char>(b))) + " " +
            std::to_string(b) + "\n";
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    text += base64(merges[i]) + " " + std::to_string(256 + i) + "\n";
  }
  return text;
}

class TiktokenTest : public DataFilesTest {
 protected:
  // th 256, the 257, " t" 258, " the" 259, he 260, ll 261, "'s" 262.
  TiktokenTokenizer tiny() {
    return TiktokenTokenizer(write_plain(
        "tiny.tiktoken",
        tiktoken_file({"th", "the", " t", " the", "he", "ll", "'s"})));
  }
};

TEST_F(TiktokenTest, MergesLowestRankFirstWithinEachPiece) {
  const TiktokenTokenizer tok = tiny();
  EXPECT_EQ(tok.vocab_size(), 263 + 256);
  EXPECT_EQ(tok.bos_id(), 263);
  EXPECT_EQ(tok.eos_id(), 264);
  EXPECT_EQ(tok.encode("the"), std::vector<int32_t>{257});
  EXPECT_EQ(tok.encode(" the"), std::vector<int32_t>{259});
  // "xthe": t+h (256) first, then th+e (257); "xt" is never a token.
  EXPECT_EQ(tok.encode("xthe"), (std::vector<int32_t>{'x', 257}));
  // "hell": h+e (260) merges first, then l+l (261).
  EXPECT_EQ(tok.encode("hell"), (std::vector<int32_t>{260, 261}));
  // Pieces never merge across the split: "the's" is "the" + "'s".
  EXPECT_EQ(tok.encode("the's"), (std::vector<int32_t>{257, 262}));
  // Special tokens written in text are plain text.
  const std::vector<int32_t> special = tok.encode("<|begin_of_text|>");
  EXPECT_EQ(special.size(), 17u);  // no merge applies to it
  EXPECT_EQ(std::count(special.begin(), special.end(), tok.bos_id()), 0);
  EXPECT_EQ(tok.decode({263, 257, 264}), "the");
  EXPECT_EQ(tok.decode({265}), "<|reserved_special_token_0|>");
}

TEST_F(TiktokenTest, RoundTripsTrickyText) {
  const TiktokenTokenizer tok = tiny();
  for (const std::string& text :
       {std::string("the cat's the thing, isn't it? 1234567"),
        std::string("a  b\n\n\nc   \n d\t\r\n"),
        std::string("hello\xE4\xB8\x96\xE7\x95\x8C \xD0\xBC\xD0\xB8\xD1\x80"),
        std::string("bad \xFF\xFE utf8 \xC3"),
        std::string("")}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;
  }
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        tok.decode({519});
      }).find("[TiktokenTokenizer] cannot decode id 519; allowed: 0..518"),
      std::string::npos);
}

TEST_F(TiktokenTest, BundledFileLoadsAndCompresses) {
  const TiktokenTokenizer tok(resolve_asset_path("assets/kjv_tiktoken.txt"));
  EXPECT_EQ(tok.vocab_size(), 1024 + 256);
  const std::string text =
      "In the beginning God created the heaven and the earth.";
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_LT(ids.size(), text.size() / 2);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST_F(TiktokenTest, BadFilesNameTheFileAndLine) {
  std::string text = tiktoken_file({"th"});
  const auto error_of = [&](const std::string& name,
                            const std::string& content) {
    const std::string path = write_plain(name, content);
    return std::make_pair(path, thrown_message<std::runtime_error>([&] {
                            TiktokenTokenizer tok(path);
                          }));
  };
  auto [path, message] = error_of("bad64.tiktoken", "aGk= 0\n!!notbase64 1\n");
  EXPECT_NE(
      message.find(
          path + ":2: expected '<base64 token> <rank>', got "
                 "'!!notbase64 1'"),
      std::string::npos)
      << message;
  std::tie(path, message) = error_of("norank.tiktoken", "aGk=\n");
  EXPECT_NE(message.find(path + ":1: expected"), std::string::npos) << message;
  std::tie(path, message) = error_of("dup.tiktoken", text + "aGk= 256\n");
  EXPECT_NE(
      message.find(path + ":258: rank 256 already given at line 257"),
      std::string::npos)
      << message;
  std::tie(path, message) = error_of("gap.tiktoken", text + "aGk= 300\n");
  EXPECT_NE(
      message.find(path + ": rank 257 is missing; allowed: ranks 0..300"),
      std::string::npos)
      << message;
  // Without byte 0x41 ('A', rank 65) "A" could not be encoded.
  std::string no_a;
  for (int b = 0; b < 256; ++b) {
    if (b != 'A') {
      no_a += base64(std::string(1, static_cast<char>(b))) + " " +
              std::to_string(b < 'A' ? b : b - 1) + "\n";
    }
  }
  std::tie(path, message) = error_of("noA.tiktoken", no_a);
  EXPECT_NE(
      message.find(path + ": the single byte 0x41 has no rank"),
      std::string::npos)
      << message;
  std::tie(path, message) = error_of("empty.tiktoken", "");
  EXPECT_NE(message.find(path + ": holds no tokens"), std::string::npos)
      << message;
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        TiktokenTokenizer tok((dir_ / "missing").string());
      }).find("cannot open"),
      std::string::npos);
}

// --- SentencePiece -----------------------------------------------------------

class SentencePieceTest : public DataFilesTest {
 protected:
  // Trains a model on `docs` into the scratch folder.
  std::string train(const std::vector<std::string>& docs, int64_t vocab_size) {
    size_t next = 0;
    const std::string path = (dir_ / "sp.model").string();
    train_sentencepiece(
        [&]() -> std::optional<std::string> {
          return next < docs.size() ? std::optional(docs[next++])
                                    : std::nullopt;
        },
        SentencePieceTrainOptions(vocab_size),
        path);
    return path;
  }
  // The first 40 chapters of the bundled corpus.
  static std::vector<std::string> kjv_chapters() {
    DatasetOptions options;
    options.path = resolve_asset_path("assets/kjv.jsonl.gz");
    const JsonlDataset kjv(options);
    std::vector<std::string> docs;
    for (int64_t i = 0; i < 40; ++i) {
      docs.push_back(kjv.text(i));
    }
    return docs;
  }
};

TEST_F(SentencePieceTest, TrainsAModelThatRoundTripsText) {
  const SentencePieceTokenizer tok(train(kjv_chapters(), 400));
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  const std::string seen = "And the earth was without form, and void";
  const std::vector<int32_t> ids = tok.encode(seen);
  EXPECT_LT(ids.size(), seen.size() / 2);  // merges were learnt
  EXPECT_EQ(tok.decode(ids), seen);
  // Unseen characters fall back to bytes; spaces are kept as they are.
  for (const std::string& text :
       {std::string("  two  spaces\n\nZ\xC3\xA9\xE4\xB8\x96 ~{}"),
        std::string("")}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;
  }
  std::vector<int32_t> with_specials = ids;
  with_specials.insert(with_specials.begin(), tok.bos_id());
  with_specials.push_back(tok.eos_id());
  EXPECT_EQ(tok.decode(with_specials), seen);
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        tok.decode({400});
      }).find("cannot decode id 400; allowed: 0..399"),
      std::string::npos);
}

TEST_F(SentencePieceTest, BundledModelLoads) {
  const SentencePieceTokenizer tok(resolve_asset_path("assets/kjv_sp.model"));
  EXPECT_EQ(tok.vocab_size(), 2000);
  const std::string text =
      "And God said, Let there be light: and there was light.";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST_F(SentencePieceTest, BadModelAndFailedTrainingThrow) {
  const std::string junk = write_plain("junk.model", "not a model");
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        SentencePieceTokenizer tok(junk);
      }).find("[SentencePieceTokenizer] cannot load '" + junk + "'"),
      std::string::npos);
  // A corpus this small cannot fill 1000 pieces.
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        train({"a tiny corpus"}, 1000);
      }).find("[train_sentencepiece] training failed"),
      std::string::npos);
}

// --- registry ---------------------------------------------------------------

TEST_F(TiktokenTest, RegistryFindsEveryTokenizerByName) {
  register_builtin_tokenizers();
  register_builtin_tokenizers();  // idempotent
  auto& registry = tokenizer_registry();
  EXPECT_EQ(
      registry.names(),
      (std::vector<std::string>{
          "bytes", "huggingface", "sentencepiece", "tiktoken"}));
  EXPECT_EQ(registry.get("BYTES")("ignored")->vocab_size(), 258);
  // The bundled tokenizer.json (Qwen's kind: no BOS, <|endoftext|> EOS).
  const auto hf = registry.get("huggingface")("assets/kjv_tokenizer.json");
  EXPECT_EQ(hf->vocab_size(), 2000);
  EXPECT_EQ(hf->bos_id(), -1);
  EXPECT_EQ(hf->eos_id(), 0);
  const std::string path =
      write_plain("r.tiktoken", tiktoken_file({"th", "the"}));
  EXPECT_EQ(registry.get("TikToken")(path)->vocab_size(), 258 + 256);
  EXPECT_EQ(
      registry.get("sentencepiece")("assets/kjv_sp.model")->vocab_size(), 2000);
  EXPECT_EQ(
      thrown_message<ConfigError>([&] { registry.get("tiktoken")(""); }),
      "model.tokenizer_path: empty; allowed: a tiktoken-format file (Llama "
      "3's tokenizer.model) (required by tokenizer 'tiktoken')");
  const std::string message = thrown_message<ConfigError>(
      [&] { registry.get("byts", "model.tokenizer"); });
  EXPECT_NE(
      message.find("model.tokenizer: unknown tokenizer 'byts'"),
      std::string::npos)
      << message;
}

}  // namespace
}  // namespace baton
