#include "data/sentencepiece_tokenizer_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/text.h"
#include "data/hf_tokenizer_detail.h"

namespace baton {

namespace {

using json = nlohmann::json;
using Model = sentencepiece_plugin::ModelDescription;
using PieceType = Model::PieceType;

/// U+2581, the character SentencePiece writes for a space.
constexpr const char* kSpace = "\xE2\x96\x81";

/// Standard base64 with '=' padding, as tokenizers' Precompiled reads it.
std::string base64(std::string_view bytes) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = 0;
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    for (size_t k = 0; k < 3; ++k) {
      group <<= 8;
      if (k < n) {
        group |= static_cast<unsigned char>(bytes[i + k]);
      }
    }
    for (size_t k = 0; k < 4; ++k) {
      out += k <= n ? kDigits[(group >> (18 - 6 * k)) & 63] : '=';
    }
  }
  return out;
}

/// `text` with the characters a regex gives a meaning escaped.
std::string regex_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}-#").find(c) != std::string::npos) {
      out += '\\';
    }
    out += c;
  }
  return out;
}

/// tokenizers' Replace of `from` (a string, or a regex) by `to`.
json replace(const std::string& from, const std::string& to, bool regex) {
  return {
      {"type", "Replace"},
      {"pattern", {{regex ? "Regex" : "String", from}}},
      {"content", to}};
}

/// What a tokenizer.json cannot say of `m`; "" when it can say all.
std::string unsupported(const Model& m) {
  if (m.model_type != "bpe" && m.model_type != "unigram") {
    return "model_type is " + m.model_type + "; supported: bpe, unigram";
  }
  if (m.treat_whitespace_as_suffix) {
    return "treat_whitespace_as_suffix is set (U+2581 ends words); "
           "supported: U+2581 starting them, the default";
  }
  if (!m.denormalizer_charsmap.empty()) {
    return "it has a denormalizer (rules decoding applies); supported: none";
  }
  std::unordered_map<std::string_view, size_t> ids;
  int unknown = 0;
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    const Model::Piece& p = m.pieces[id];
    const std::string quoted = "piece " + std::to_string(id) + " '" + p.piece;
    if (p.type == PieceType::kUnused) {
      return quoted +
             "' is unused, which SentencePiece merges into but never emits; "
             "supported: normal, unknown, control, user-defined and byte "
             "pieces";
    }
    if (!std::isfinite(p.score)) {
      return quoted + "' has score " + std::to_string(p.score) +
             "; supported: finite scores";
    }
    if (const auto [it, added] = ids.emplace(p.piece, id); !added) {
      return quoted + "' has the text of piece " + std::to_string(it->second) +
             "; a tokenizer.json's pieces differ";
    }
    unknown += p.type == PieceType::kUnknown ? 1 : 0;
  }
  if (unknown != 1) {
    return std::to_string(unknown) + " unknown pieces; supported: one";
  }
  return "";
}

/// SentencePiece's normalizer (normalizer.cc) step by step: the charsmap,
/// leading spaces dropped and runs made one, spaces escaped, trailing ones
/// dropped, the dummy prefix, which tokenizers' Prepend skips on empty text
/// as SentencePiece does.
json normalizer(const Model& m) {
  const std::string space = m.escape_whitespaces ? kSpace : " ";
  json steps = json::array();
  if (!m.precompiled_charsmap.empty()) {
    steps.push_back(
        {{"type", "Precompiled"},
         {"precompiled_charsmap", base64(m.precompiled_charsmap)}});
  }
  if (m.remove_extra_whitespaces) {
    steps.push_back(replace("\\A +", "", true));
    steps.push_back(replace(" {2,}", " ", true));
  }
  if (m.escape_whitespaces) {
    steps.push_back(replace(" ", kSpace, false));
  }
  // After escaping, as SentencePiece drops trailing U+2581 of the text too.
  if (m.remove_extra_whitespaces) {
    steps.push_back(replace("(?:" + space + ")+\\z", "", true));
  }
  if (m.add_dummy_prefix) {
    steps.push_back({{"type", "Prepend"}, {"prepend", space}});
  }
  return steps.empty() ? json(nullptr)
                       : json{{"type", "Sequence"}, {"normalizers", steps}};
}

/// User-defined pieces are whole symbols SentencePiece never splits or
/// merges: a Split isolates them, the longest first.
json pre_tokenizer(const Model& m) {
  std::vector<std::string> user;
  for (const Model::Piece& p : m.pieces) {
    if (p.type == PieceType::kUserDefined) {
      user.push_back(p.piece);
    }
  }
  if (user.empty()) {
    return nullptr;
  }
  std::stable_sort(user.begin(), user.end(), [](const auto& a, const auto& b) {
    return a.size() > b.size();
  });
  for (std::string& u : user) {
    u = regex_escape(u);
  }
  return {
      {"type", "Split"},
      {"pattern", {{"Regex", join(user, "|")}}},
      {"behavior", "Isolated"},
      {"invert", false}};
}

/// SentencePiece's BPE merges any two neighbouring symbols whose text is a
/// piece, the highest-scoring first: every split of a normal piece into two
/// normal pieces is a merge, ranked by the piece's score (then id, left).
json bpe_merges(const Model& m) {
  std::unordered_map<std::string_view, std::pair<float, size_t>> normal;
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    if (m.pieces[id].type == PieceType::kNormal) {
      normal.emplace(m.pieces[id].piece, std::pair{m.pieces[id].score, id});
    }
  }
  using Ranked = std::tuple<float, size_t, std::string_view, std::string_view>;
  std::vector<Ranked> ranked;
  for (const auto& [piece, rank] : normal) {
    for (size_t k = 1; k < piece.size(); ++k) {
      if ((static_cast<unsigned char>(piece[k]) & 0xC0) == 0x80) {
        continue;  // inside a UTF-8 character
      }
      const std::string_view left = piece.substr(0, k);
      const std::string_view right = piece.substr(k);
      if (normal.contains(left) && normal.contains(right)) {
        ranked.emplace_back(-rank.first, rank.second, left, right);
      }
    }
  }
  std::sort(ranked.begin(), ranked.end());
  json merges = json::array();
  for (const auto& [score, id, left, right] : ranked) {
    merges.push_back({left, right});
  }
  return merges;
}

json model_json(const Model& m) {
  std::string unk;
  int64_t unk_id = 0;
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    if (m.pieces[id].type == PieceType::kUnknown) {
      unk = m.pieces[id].piece;
      unk_id = static_cast<int64_t>(id);
    }
  }
  if (m.model_type == "unigram") {
    json vocab = json::array();
    for (const Model::Piece& p : m.pieces) {
      vocab.push_back({p.piece, p.score});
    }
    return {
        {"type", "Unigram"},
        {"unk_id", unk_id},
        {"vocab", vocab},
        {"byte_fallback", m.byte_fallback}};
  }
  json vocab = json::object();
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    vocab[m.pieces[id].piece] = id;
  }
  const bool user_defined =
      std::any_of(m.pieces.begin(), m.pieces.end(), [](const Model::Piece& p) {
        return p.type == PieceType::kUserDefined;
      });
  return {
      {"type", "BPE"},
      {"dropout", nullptr},
      {"unk_token", unk},
      {"continuing_subword_prefix", nullptr},
      {"end_of_word_suffix", nullptr},
      {"fuse_unk", true},
      {"byte_fallback", m.byte_fallback},
      // A user-defined piece, isolated, is a token whole (no merge makes
      // one).
      {"ignore_merges", user_defined},
      {"vocab", vocab},
      {"merges", bpe_merges(m)}};
}

/// SentencePiece's decode: U+2581 is a space, byte pieces make UTF-8
/// together, and the first piece's leading space goes where a dummy prefix
/// (or the removal of extra spaces) put it.
json decoder(const Model& m) {
  json steps = json::array({replace(kSpace, " ", false)});
  if (m.byte_fallback) {
    steps.push_back({{"type", "ByteFallback"}});
  }
  if (m.add_dummy_prefix || m.remove_extra_whitespaces) {
    steps.push_back({{"type", "Fuse"}});
    steps.push_back(
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  } else if (m.byte_fallback) {
    steps.push_back({{"type", "Fuse"}});
  }
  return {{"type", "Sequence"}, {"decoders", steps}};
}

}  // namespace

std::string sentencepiece_tokenizer_json(
    const sentencepiece_plugin::ModelDescription& model, int32_t bos_id) {
  if (const std::string why = unsupported(model); !why.empty()) {
    throw std::invalid_argument(why);
  }
  if (bos_id < 0 || static_cast<size_t>(bos_id) >= model.pieces.size()) {
    throw std::invalid_argument(
        "BOS id " + std::to_string(bos_id) + " is not a piece's");
  }
  json added = json::array();
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    if (model.pieces[id].type == PieceType::kControl) {
      added.push_back(hf_json::special_token(
          model.pieces[id].piece, static_cast<int32_t>(id)));
    }
  }
  const json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", normalizer(model)},
      {"pre_tokenizer", pre_tokenizer(model)},
      {"post_processor",
       hf_json::bos_first(model.pieces[bos_id].piece, bos_id)},
      {"decoder", decoder(model)},
      {"model", model_json(model)}};
  try {
    return j.dump();
  } catch (const json::type_error& e) {
    throw std::invalid_argument(
        std::string("a piece is not valid UTF-8: ") + e.what());
  }
}

}  // namespace baton
