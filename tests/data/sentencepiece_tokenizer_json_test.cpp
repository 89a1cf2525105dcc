// A SentencePiece model said as a tokenizer.json, field by field, on small
// models written out here; the merges and normalizer follow transformers'
// converter (SpmConverter.build_tokenizer_from_spm_proto), worked out by
// hand. That AutoTokenizer then encodes as SentencePiece does is
// tests/checkpoint/hf_families_test.cpp's (TheExportsTokenizerEncodesTo-
// BatonsIds), against transformers itself.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/sentencepiece_tokenizer.h"
#include "data/sentencepiece_tokenizer_json.h"
#include "data/tokenizer.h"
#include "tests/data/data_test_util.h"

namespace baton {
namespace {

using nlohmann::json;
using testing_util::DataFilesTest;
using testing_util::thrown_message;
using Model = sentencepiece_plugin::ModelDescription;
using Type = Model::PieceType;

const std::string kSpace = "\xE2\x96\x81";

/// <unk> 0, <s> 1, </s> 2, then `pieces`; Baton's normalizer settings.
Model model(const char* type, const std::vector<Model::Piece>& pieces) {
  Model m;
  m.model_type = type;
  m.pieces = {
      {"<unk>", 0.0f, Type::kUnknown},
      {"<s>", 0.0f, Type::kControl},
      {"</s>", 0.0f, Type::kControl}};
  m.pieces.insert(m.pieces.end(), pieces.begin(), pieces.end());
  m.add_dummy_prefix = true;
  m.remove_extra_whitespaces = false;
  return m;
}

json said(const Model& m) {
  return json::parse(sentencepiece_tokenizer_json(m, 1));
}

TEST(SentencePieceTokenizerJson, MergesAreEverySplitIntoNormalPiecesByScore) {
  const Model m = model(
      "bpe",
      {{"a", -10.0f},
       {"b", -11.0f},
       {"c", -12.0f},
       {"ab", -1.0f},
       {"bc", -2.0f},
       {"abc", -3.0f},
       {"x<s>", -4.0f},  // "<s>" is a control piece: no merge makes this
       {"<0x41>", 0.0f, Type::kByte},
       {kSpace + "ab", -0.5f}});
  const json j = said(m);
  EXPECT_EQ(j["model"]["type"], "BPE");
  // By score: "▁ab" (-0.5) has no split into normal pieces ("▁" is none),
  // then "ab", "bc", and "abc" both ways, left "a" before left "ab".
  EXPECT_EQ(
      j["model"]["merges"],
      json::parse(R"([["a","b"],["b","c"],["a","bc"],["ab","c"]])"));
  EXPECT_EQ(j["model"]["vocab"]["<0x41>"], 10);
  EXPECT_EQ(j["model"]["vocab"]["abc"], 8);
  EXPECT_EQ(j["model"]["unk_token"], "<unk>");
  EXPECT_EQ(j["model"]["fuse_unk"], true);
  EXPECT_EQ(j["model"]["byte_fallback"], false);
  EXPECT_EQ(j["model"]["ignore_merges"], false);
  EXPECT_EQ(j["pre_tokenizer"], nullptr);
  // Control pieces are special added tokens; BOS goes first.
  ASSERT_EQ(j["added_tokens"].size(), 2u);
  EXPECT_EQ(j["added_tokens"][1]["content"], "</s>");
  EXPECT_EQ(j["added_tokens"][1]["special"], true);
  EXPECT_EQ(
      j["post_processor"]["special_tokens"]["<s>"]["ids"], json::array({1}));
}

TEST(SentencePieceTokenizerJson, UnigramKeepsScoresAndByteFallback) {
  Model m = model("unigram", {{"a", -1.5f}, {"<0x00>", 0.0f, Type::kByte}});
  m.byte_fallback = true;
  const json j = said(m);
  EXPECT_EQ(j["model"]["type"], "Unigram");
  EXPECT_EQ(j["model"]["unk_id"], 0);
  EXPECT_EQ(j["model"]["byte_fallback"], true);
  EXPECT_EQ(j["model"]["vocab"][3], json::parse(R"(["a", -1.5])"));
  EXPECT_EQ(j["model"]["vocab"].size(), 5u);
  // Bytes fused into UTF-8, then the dummy prefix's space stripped.
  EXPECT_EQ(
      j["decoder"]["decoders"],
      json::parse(
          R"([{"type":"Replace","pattern":{"String":")" + kSpace +
          R"("},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},)"
          R"({"type":"Strip","content":" ","start":1,"stop":0}])"));
}

TEST(SentencePieceTokenizerJson, NormalizerFollowsTheModelsSpec) {
  Model m = model("unigram", {{"a", -1.0f}});
  // Baton's models: spaces escaped, the dummy prefix.
  EXPECT_EQ(
      said(m)["normalizer"]["normalizers"],
      json::parse(
          R"([{"type":"Replace","pattern":{"String":" "},"content":")" +
          kSpace + R"("},{"type":"Prepend","prepend":")" + kSpace + R"("}])"));
  // A charsmap (base64), extra spaces removed: leading and runs before
  // escaping, trailing U+2581 after, the prefix last.
  m.precompiled_charsmap = "ab";
  m.remove_extra_whitespaces = true;
  const json steps = said(m)["normalizer"]["normalizers"];
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_EQ(steps[0]["type"], "Precompiled");
  EXPECT_EQ(steps[0]["precompiled_charsmap"], "YWI=");
  EXPECT_EQ(steps[1]["pattern"]["Regex"], "\\A +");
  EXPECT_EQ(steps[2]["pattern"]["Regex"], " {2,}");
  EXPECT_EQ(steps[4]["pattern"]["Regex"], "(?:" + kSpace + ")+\\z");
  EXPECT_EQ(steps[5]["type"], "Prepend");
  // Nothing at all: no normalizer, a decoder that only unescapes.
  m.precompiled_charsmap = "";
  m.remove_extra_whitespaces = false;
  m.add_dummy_prefix = false;
  m.escape_whitespaces = false;
  EXPECT_EQ(said(m)["normalizer"], nullptr);
  EXPECT_EQ(said(m)["decoder"]["decoders"].size(), 1u);
}

TEST(SentencePieceTokenizerJson, UserDefinedPiecesAreIsolatedWhole) {
  const json j = said(model(
      "bpe",
      {{"a", -1.0f},
       {"[x]", 0.0f, Type::kUserDefined},
       {"a.b+", 0.0f, Type::kUserDefined}}));
  EXPECT_EQ(j["pre_tokenizer"]["type"], "Split");
  EXPECT_EQ(j["pre_tokenizer"]["behavior"], "Isolated");
  // The longest first, regex characters escaped.
  EXPECT_EQ(j["pre_tokenizer"]["pattern"]["Regex"], "a\\.b\\+|\\[x\\]");
  EXPECT_EQ(j["model"]["ignore_merges"], true);
  EXPECT_EQ(j["added_tokens"].size(), 2u);
}

TEST(SentencePieceTokenizerJson, RefusesWhatATokenizerJsonCannotSay) {
  const auto refusal = [](const Model& m) {
    return thrown_message<std::invalid_argument>(
        [&] { sentencepiece_tokenizer_json(m, 1); });
  };
  EXPECT_EQ(
      refusal(model("word", {})),
      "model_type is word; supported: bpe, unigram");
  Model m = model("bpe", {{"a", -1.0f}});
  m.treat_whitespace_as_suffix = true;
  EXPECT_NE(
      refusal(m).find("treat_whitespace_as_suffix is set"), std::string::npos);
  m = model("bpe", {{"a", -1.0f}});
  m.denormalizer_charsmap = "x";
  EXPECT_NE(refusal(m).find("denormalizer"), std::string::npos);
  EXPECT_NE(
      refusal(model("bpe", {{"u", 0.0f, Type::kUnused}}))
          .find("piece 3 'u' is unused"),
      std::string::npos);
  EXPECT_NE(
      refusal(model("unigram", {{"a", -1.0f}, {"a", -2.0f}}))
          .find("piece 4 'a' has the text of piece 3"),
      std::string::npos);
  EXPECT_NE(
      refusal(
          model("unigram", {{"a", std::numeric_limits<float>::quiet_NaN()}}))
          .find("piece 3 'a' has score nan"),
      std::string::npos);
  EXPECT_NE(
      refusal(model("unigram", {{"<unk2>", 0.0f, Type::kUnknown}}))
          .find("2 unknown pieces"),
      std::string::npos);
  EXPECT_NE(
      refusal(model("unigram", {{"\xFF", -1.0f}})).find("not valid UTF-8"),
      std::string::npos);
}

TEST(SentencePieceTokenizerJson, ATokenizerWithoutTheFormSaysSo) {
  struct Bare final : Tokenizer {
    std::vector<int32_t> encode(std::string_view) const override {
      return {};
    }
    std::string decode(const std::vector<int32_t>&) const override {
      return "";
    }
    int64_t vocab_size() const override {
      return 1;
    }
    int32_t bos_id() const override {
      return 0;
    }
    int32_t eos_id() const override {
      return 0;
    }
  };
  EXPECT_NE(
      thrown_message<std::runtime_error>([] {
        Bare().hf_tokenizer_json();
      }).find("has no tokenizer.json form"),
      std::string::npos);
}

// Models SentencePiece trains: the description crosses the plugin, and a
// refusal names the file.
class SentencePieceModelJsonTest : public DataFilesTest {
 protected:
  std::string train(
      const std::string& name,
      const std::string& type,
      const std::map<std::string, std::string>& flags) {
    const std::vector<std::string> docs = {
        "In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void; and darkness was upon "
        "the face of the deep.",
        "And God said, Let there be light: and there was light."};
    size_t next = 0;
    SentencePieceTrainOptions options(300);
    options.model_type = type;
    options.flags = flags;
    options.flags.emplace("hard_vocab_limit", "false");
    const std::string path = (dir_ / name).string();
    train_sentencepiece(
        [&]() -> std::optional<std::string> {
          return next < docs.size() ? std::optional(docs[next++])
                                    : std::nullopt;
        },
        options,
        path);
    return path;
  }
};

TEST_F(SentencePieceModelJsonTest, TheBundledModelIsABpeWithByteFallback) {
  const SentencePieceTokenizer tok(resolve_asset_path("assets/kjv_sp.model"));
  const json j = json::parse(tok.hf_tokenizer_json());
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["vocab"].size(), 2000u);
  EXPECT_EQ(j["model"]["vocab"]["<0x0A>"], 3 + 0x0A);
  EXPECT_EQ(j["model"]["byte_fallback"], true);
  EXPECT_GT(j["model"]["merges"].size(), 1000u);
  EXPECT_EQ(j["normalizer"]["normalizers"].back()["type"], "Prepend");
  EXPECT_EQ(j["added_tokens"][0]["content"], "<s>");
}

TEST_F(
    SentencePieceModelJsonTest,
    TrainedModelsSayTheirKindOrRefuseNamingTheFile) {
  const std::string unigram = train("u.model", "unigram", {});
  EXPECT_EQ(
      json::parse(
          SentencePieceTokenizer(unigram).hf_tokenizer_json())["model"]["type"],
      "Unigram");
  const std::string suffix =
      train("s.model", "bpe", {{"treat_whitespace_as_suffix", "true"}});
  EXPECT_NE(
      thrown_message<std::runtime_error>(
          [&] { SentencePieceTokenizer(suffix).hf_tokenizer_json(); })
          .find(
              "[SentencePieceTokenizer] '" + suffix +
              "' has no tokenizer.json form: treat_whitespace_as_suffix"),
      std::string::npos);
  const std::string word = train("w.model", "word", {});
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        SentencePieceTokenizer(word).hf_tokenizer_json();
      }).find("model_type is word"),
      std::string::npos);
}

}  // namespace
}  // namespace baton
