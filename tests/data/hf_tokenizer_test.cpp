// A Hugging Face tokenizer.json against the `tokenizers` package itself:
// tests/data/hf_tokenizer_reference.py trains two byte-level BPE tokenizers
// on the bundled corpus with the pre-tokenizers and special tokens Llama 3
// and Qwen3 ship (Llama 3's split with ignore_merges and a BOS; NFC with
// Qwen's split and no BOS) and encodes corpus documents and adversarial text
// (every byte's character, long runs, mixed scripts, combining marks,
// special-token strings, near misses of them). Baton's ids equal
// tokenizers' for every text, its decode gives the (NFC of the) text back,
// and its vocabulary, BOS and EOS are the file's. Unsupported kinds are
// refused naming the field. Where the project's Python has no tokenizers,
// the comparisons skip, saying why.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "data/hf_tokenizer.h"
#include "tests/baton_binary.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class HfTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder per process (ctest runs tests side by side).
    root_ = fs::path(::testing::TempDir()) /
            ("hf_tokenizers_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    const auto r = testing::run_command(
        std::string("'") + BATON_PYTHON + "' '" + BATON_SOURCE_DIR +
        "/tests/data/hf_tokenizer_reference.py' '" + root_.string() + "'");
    made_ = r.code;
    output_ = r.output;
    if (made_ == 0) {
      cases_ = json::parse(std::ifstream(root_ / "cases.json"));
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(root_);
  }

  void SetUp() override {
    if (made_ == 3) {
      GTEST_SKIP() << "the project's Python has no tokenizers: " << output_;
    }
    ASSERT_EQ(made_, 0) << output_;
  }

  /// Every text of the cases through `name`'s tokenizer.json, whose
  /// special tokens are `specials`.
  static void expect_tokenizers_ids(
      const std::string& name,
      bool nfc,
      const std::vector<std::string>& specials) {
    const HfTokenizer tok((root_ / name / "tokenizer.json").string());
    const json& c = cases_[name];
    EXPECT_EQ(tok.vocab_size(), c["vocab_size"].get<int64_t>());
    const auto& texts = cases_["texts"];
    size_t same = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i].get<std::string>();
      const auto ids = tok.encode(text);
      const auto want = c["ids"][i].get<std::vector<int32_t>>();
      EXPECT_EQ(ids, want) << "text " << i << ": " << text.substr(0, 80);
      same += ids == want;
      // Special tokens decode to nothing; the rest is the text (NFC'd).
      std::string back = (nfc ? cases_["nfc"][i] : texts[i]).get<std::string>();
      for (const std::string& special : specials) {
        for (size_t at; (at = back.find(special)) != std::string::npos;) {
          back.erase(at, special.size());
        }
      }
      EXPECT_EQ(tok.decode(ids), back) << "text " << i;
    }
    EXPECT_EQ(same, texts.size());
  }

  static fs::path root_;
  static int made_;
  static std::string output_;
  static json cases_;
};

fs::path HfTokenizerTest::root_;
int HfTokenizerTest::made_ = -1;
std::string HfTokenizerTest::output_;
json HfTokenizerTest::cases_;

TEST_F(HfTokenizerTest, Llama3StyleEncodesAsTokenizersDoes) {
  expect_tokenizers_ids(
      "llama3", /*nfc=*/false, {"<|begin_of_text|>", "<|end_of_text|>"});
  const HfTokenizer tok((root_ / "llama3" / "tokenizer.json").string());
  // BOS is what the post-processor puts first; EOS <|end_of_text|>.
  const auto with_special =
      cases_["llama3"]["with_special"].get<std::vector<int32_t>>();
  EXPECT_EQ(tok.bos_id(), with_special.front());
  EXPECT_EQ(tok.eos_id(), 1);
}

TEST_F(HfTokenizerTest, QwenStyleNormalizesAndHasNoBos) {
  expect_tokenizers_ids(
      "qwen", /*nfc=*/true, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  const HfTokenizer tok((root_ / "qwen" / "tokenizer.json").string());
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.eos_id(), 0);  // <|endoftext|>
  // tokenizer_config.json's eos_token wins over the name.
  const fs::path dir = root_ / "qwen_chat";
  fs::create_directories(dir);
  fs::copy_file(
      root_ / "qwen" / "tokenizer.json",
      dir / "tokenizer.json",
      fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"eos_token": {"content": "<|im_end|>"}})";
  EXPECT_EQ(HfTokenizer((dir / "tokenizer.json").string()).eos_id(), 2);
}

TEST_F(HfTokenizerTest, UnsupportedKindsAreRefusedNamingTheField) {
  const json good =
      json::parse(std::ifstream(root_ / "llama3" / "tokenizer.json"));
  const std::pair<std::function<void(json&)>, std::string> cases[] = {
      {[](json& j) { j["model"]["type"] = "WordPiece"; },
       "model.type is \"WordPiece\"; supported: \"BPE\""},
      {[](json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "supported: null or {\"type\": \"NFC\"}"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "pre_tokenizer is {\"type\":\"Whitespace\"}; supported: ByteLevel"},
      {[](json& j) { j["model"]["byte_fallback"] = true; },
       "model.byte_fallback is true"},
      {[](json& j) { j["model"]["merges"][0] = "nospace"; },
       "model.merges[0] is \"nospace\""},
      {[](json& j) { j["added_tokens"][0]["lstrip"] = true; },
       "has lstrip set"},
      {[](json& j) { j["model"]["vocab"].erase("A"); },
       "model.vocab has no token for the byte 65"},
  };
  const fs::path file = root_ / "bad.json";
  for (const auto& [damage, message] : cases) {
    json j = good;
    damage(j);
    std::ofstream(file) << j.dump();
    try {
      HfTokenizer tok(file.string());
      ADD_FAILURE() << "accepted: " << message;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace baton
