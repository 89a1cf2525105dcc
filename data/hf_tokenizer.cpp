#include "data/hf_tokenizer.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "common/text.h"
#include "data/hf_tokenizer_detail.h"
#include "data/regex_split.h"

namespace baton {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

/// GPT-2's split, which ByteLevel applies when its use_regex is on.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// The UTF-8 of code point `c`.
std::string utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

/// GPT-2's bytes_to_unicode: the printable Latin-1 bytes stand for
/// themselves, the others for 256, 257, ... in byte order.
std::array<uint32_t, 256> byte_chars() {
  std::array<uint32_t, 256> chars{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                           (b >= 0xAE && b <= 0xFF);
    chars[b] = printable ? b : next++;
  }
  return chars;
}

/// The tokenizers error for `path`: "[huggingface] PATH: what".
[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error("[huggingface] " + path + ": " + what);
}

/// `object[key]` as a string, or "" where absent or null.
std::string text_field(const json& object, const char* key) {
  return object.contains(key) && object[key].is_string()
             ? object[key].get<std::string>()
             : std::string();
}

/// A token's content from tokenizer_config.json's `eos_token`: a string or
/// {"content": ...}.
std::string token_content(const json& v) {
  if (v.is_string()) {
    return v.get<std::string>();
  }
  if (v.is_object()) {
    return text_field(v, "content");
  }
  return "";
}

/// The byte-level string of `bytes` (each byte as its GPT-2 character).
std::string byte_level(std::string_view bytes) {
  static const auto chars = byte_chars();
  std::string out;
  for (const char c : bytes) {
    out += utf8(chars[static_cast<unsigned char>(c)]);
  }
  return out;
}

}  // namespace

namespace hf_json {

json special_token(const std::string& content, int32_t id) {
  return {
      {"id", id},
      {"content", content},
      {"single_word", false},
      {"lstrip", false},
      {"rstrip", false},
      {"normalized", false},
      {"special", true}};
}

json bos_first(const std::string& bos, int32_t bos_id) {
  const auto special = [&](int type_id) {
    return json{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}};
  };
  const auto sequence = [](const char* id, int type_id) {
    return json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  return {
      {"type", "TemplateProcessing"},
      {"single", json::array({special(0), sequence("A", 0)})},
      {"pair",
       json::array(
           {special(0), sequence("A", 0), special(1), sequence("B", 1)})},
      {"special_tokens",
       {{bos,
         {{"id", bos},
          {"ids", json::array({bos_id})},
          {"tokens", json::array({bos})}}}}}};
}

}  // namespace hf_json

std::string tokenizer_json(const ByteLevelBpe& bpe) {
  json vocab = json::object();
  for (size_t id = 0; id < bpe.tokens.size(); ++id) {
    vocab[byte_level(bpe.tokens[id])] = id;
  }
  json merges = json::array();
  for (const auto& [left, right] : bpe.merges) {
    merges.push_back({byte_level(left), byte_level(right)});
  }
  json added = json::array();
  for (const auto& [content, id] : bpe.specials) {
    added.push_back(hf_json::special_token(content, id));
  }
  json byte_level_step = {
      {"type", "ByteLevel"},
      {"add_prefix_space", false},
      {"trim_offsets", true},
      {"use_regex", false}};
  json pre = byte_level_step;
  if (!bpe.split.empty()) {
    const json split = {
        {"type", "Split"},
        {"pattern", {{"Regex", bpe.split}}},
        {"behavior", "Isolated"},
        {"invert", false}};
    pre = {
        {"type", "Sequence"},
        {"pretokenizers", json::array({split, byte_level_step})}};
  }
  json post = nullptr;
  if (!bpe.bos.empty()) {
    int32_t bos_id = -1;
    for (const auto& [content, id] : bpe.specials) {
      if (content == bpe.bos) {
        bos_id = id;
      }
    }
    post = hf_json::bos_first(bpe.bos, bos_id);
  }
  const json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre},
      {"post_processor", post},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", bpe.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}}};
  return j.dump();
}

struct HfTokenizer::Impl {
  std::string path;
  std::string text;  // the file as read
  /// Token bytes -> id, and back; each single byte's id.
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids;
  std::array<int32_t, 256> byte_ids{};
  std::vector<std::string> bytes_of;
  /// (left id, right id) -> (merge rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  bool ignore_merges = false;
  struct Added {
    std::string content;
    int32_t id = 0;
    bool special = false;
  };
  std::vector<Added> added;
  /// First byte -> the added tokens starting with it, longest first.
  std::array<std::vector<const Added*>, 256> added_by_byte;
  std::unordered_map<int32_t, const Added*> added_of_id;
  bool nfc = false;
  std::vector<std::unique_ptr<RegexSplitter>> splits;
  std::array<uint32_t, 256> chars = byte_chars();
  int64_t vocab = 0;
  int32_t bos = -1;
  int32_t eos = -1;

  void read_model(const json& model);
  void read_added(const json& list);
  void read_normalizer(const json& normalizer);
  void read_pre_tokenizer(const json& pre);
  void read_special_ids(const json& post);
  /// The bytes a byte-level token string stands for; nullopt where a
  /// character is not one of the 256.
  std::optional<std::string> token_bytes(const std::string& token) const;
  std::string nfc_of(std::string_view text) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
};

std::optional<std::string> HfTokenizer::Impl::token_bytes(
    const std::string& token) const {
  static const auto byte_of = [] {
    std::unordered_map<uint32_t, char> m;
    const auto chars = byte_chars();
    for (uint32_t b = 0; b < 256; ++b) {
      m[chars[b]] = static_cast<char>(b);
    }
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    uint32_t cp = 0;
    size_t n = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((c & 0x1F) << 6) | (token[i + 1] & 0x3F);
      n = 2;
    } else {
      return std::nullopt;  // byte-level characters are below U+0800
    }
    const auto it = byte_of.find(cp);
    if (it == byte_of.end()) {
      return std::nullopt;
    }
    out += it->second;
    i += n;
  }
  return out;
}

void HfTokenizer::Impl::read_model(const json& model) {
  if (text_field(model, "type") != "BPE") {
    bad(path,
        "model.type is " + model.value("type", json()).dump() +
            "; supported: \"BPE\" (byte-level, as Llama 3 and Qwen3 ship "
            "it)");
  }
  if (model.value("byte_fallback", false)) {
    bad(path, "model.byte_fallback is true; supported: false (byte-level)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!text_field(model, key).empty()) {
      bad(path, std::string("model.") + key + " is set; supported: none");
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    bad(path, "model.dropout is set; supported: none");
  }
  ignore_merges = model.value("ignore_merges", false);
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    bad(path, "model.vocab is missing; a BPE tokenizer.json has it");
  }
  for (const auto& [token, id] : model["vocab"].items()) {
    const auto bytes = token_bytes(token);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      bad(path,
          "model.vocab['" + token + "'] is " + id.dump() +
              "; allowed: an id >= 0");
    }
    if (!bytes) {
      bad(path,
          "model.vocab token '" + token +
              "' is not byte-level (a character outside GPT-2's 256); "
              "supported: byte-level BPE");
    }
    const auto i = id.get<int32_t>();
    ids[*bytes] = i;
    if (static_cast<size_t>(i) >= bytes_of.size()) {
      bytes_of.resize(i + 1);
    }
    bytes_of[i] = *bytes;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(std::string(1, static_cast<char>(b)));
    if (it == ids.end()) {
      bad(path,
          "model.vocab has no token for the byte " + std::to_string(b) + " ('" +
              utf8(chars[b]) + "'); a byte-level vocabulary has all 256");
    }
    byte_ids[b] = it->second;
  }
  const json& list = model.value("merges", json::array());
  for (size_t rank = 0; rank < list.size(); ++rank) {
    const json& m = list[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) {
        bad(path,
            "model.merges[" + std::to_string(rank) + "] is " + m.dump() +
                "; allowed: \"a b\" or [\"a\", \"b\"]");
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (
        m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      bad(path,
          "model.merges[" + std::to_string(rank) + "] is " + m.dump() +
              "; allowed: \"a b\" or [\"a\", \"b\"]");
    }
    const auto l = token_bytes(left), r = token_bytes(right);
    const auto li = l ? ids.find(*l) : ids.end();
    const auto ri = r ? ids.find(*r) : ids.end();
    const auto merged = (l && r) ? ids.find(*l + *r) : ids.end();
    if (li == ids.end() || ri == ids.end() || merged == ids.end()) {
      bad(path,
          "model.merges[" + std::to_string(rank) + "] (" + m.dump() +
              ") names a token, or makes one, not in model.vocab");
    }
    const uint64_t key = (static_cast<uint64_t>(li->second) << 32) |
                         static_cast<uint32_t>(ri->second);
    merges.emplace(key, std::pair{static_cast<int32_t>(rank), merged->second});
  }
}

void HfTokenizer::Impl::read_added(const json& list) {
  for (const json& t : list) {
    const std::string content = text_field(t, "content");
    if (content.empty() || !t.contains("id") || !t["id"].is_number_integer()) {
      bad(path, "added_tokens entry " + t.dump() + " has no content or id");
    }
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (t.value(flag, false)) {
        bad(path,
            "added token '" + content + "' has " + flag +
                " set; supported: false (as Llama 3's and Qwen3's)");
      }
    }
    added.push_back(
        {content, t["id"].get<int32_t>(), t.value("special", false)});
  }
  for (const Added& a : added) {
    added_by_byte[static_cast<unsigned char>(a.content[0])].push_back(&a);
    added_of_id[a.id] = &a;
  }
  for (auto& list : added_by_byte) {
    std::stable_sort(
        list.begin(), list.end(), [](const Added* x, const Added* y) {
          return x->content.size() > y->content.size();
        });
  }
}

void HfTokenizer::Impl::read_normalizer(const json& normalizer) {
  if (normalizer.is_null()) {
    return;
  }
  if (text_field(normalizer, "type") != "NFC") {
    bad(path,
        "normalizer is " + normalizer.dump() +
            "; supported: null or {\"type\": \"NFC\"} (Qwen's)");
  }
  nfc = true;
}

void HfTokenizer::Impl::read_pre_tokenizer(const json& pre) {
  const std::string supported =
      "; supported: ByteLevel, or a Sequence of Split (a Regex pattern, "
      "behavior Isolated) and ByteLevel with use_regex false, without a "
      "prefix space";
  std::vector<json> steps;
  if (text_field(pre, "type") == "Sequence") {
    for (const json& p : pre.value("pretokenizers", json::array())) {
      steps.push_back(p);
    }
  } else {
    steps.push_back(pre);
  }
  if (steps.empty() || text_field(steps.back(), "type") != "ByteLevel") {
    bad(path, "pre_tokenizer is " + pre.dump() + supported);
  }
  const json byte_level = steps.back();  // a copy: popped below
  if (byte_level.value("add_prefix_space", false)) {
    bad(path, "pre_tokenizer ByteLevel adds a prefix space" + supported);
  }
  steps.pop_back();
  for (const json& step : steps) {
    const json& pattern = step.value("pattern", json::object());
    if (text_field(step, "type") != "Split" || !pattern.contains("Regex") ||
        text_field(step, "behavior") != "Isolated" ||
        step.value("invert", false)) {
      bad(path, "pre_tokenizer step " + step.dump() + supported);
    }
    splits.push_back(std::make_unique<RegexSplitter>(
        pattern["Regex"].get<std::string>(), "huggingface"));
  }
  if (byte_level.value("use_regex", true)) {
    splits.push_back(
        std::make_unique<RegexSplitter>(kGpt2Pattern, "huggingface"));
  }
}

void HfTokenizer::Impl::read_special_ids(const json& post) {
  // BOS: the special token a TemplateProcessing puts before the sequence.
  std::vector<json> processors = {post};
  if (text_field(post, "type") == "Sequence") {
    processors =
        post.value("processors", json::array()).get<std::vector<json>>();
  }
  for (const json& p : processors) {
    if (text_field(p, "type") != "TemplateProcessing") {
      continue;
    }
    const json& single = p.value("single", json::array());
    if (!single.empty() && single[0].contains("SpecialToken")) {
      const std::string name = text_field(single[0]["SpecialToken"], "id");
      for (const Added& a : added) {
        if (a.content == name) {
          bos = a.id;
        }
      }
    }
  }
  // EOS: tokenizer_config.json's, else by the usual names.
  std::string eos_name;
  const fs::path config =
      fs::path(path).parent_path() / "tokenizer_config.json";
  if (std::ifstream in(config); in) {
    try {
      eos_name = token_content(json::parse(in).value("eos_token", json()));
    } catch (const std::exception& e) {
      bad(config.string(), std::string("not valid JSON: ") + e.what());
    }
  }
  for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>"}) {
    if (eos_name.empty()) {
      for (const Added& a : added) {
        if (a.special && a.content == name) {
          eos_name = name;
        }
      }
    }
  }
  for (const Added& a : added) {
    if (a.content == eos_name) {
      eos = a.id;
    }
  }
  if (eos < 0) {
    bad(path,
        "no EOS token: neither a tokenizer_config.json eos_token nor a "
        "special token named <|end_of_text|>, <|endoftext|> or </s>");
  }
}

std::string HfTokenizer::Impl::nfc_of(std::string_view text) const {
  if (std::all_of(text.begin(), text.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x80;
      })) {
    return std::string(text);  // ASCII is NFC
  }
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* norm = unorm2_getNFCInstance(&status);
  int32_t length = 0;
  u_strFromUTF8(nullptr, 0, &length, text.data(), text.size(), &status);
  if (status != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(status)) {
    return std::string(text);  // not UTF-8: left as it is
  }
  status = U_ZERO_ERROR;
  std::vector<UChar> in(length + 1);
  u_strFromUTF8(
      in.data(), in.size(), &length, text.data(), text.size(), &status);
  std::vector<UChar> out(2 * length + 16);
  int32_t n = unorm2_normalize(
      norm, in.data(), length, out.data(), out.size(), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    status = U_ZERO_ERROR;
    out.resize(n + 1);
    n = unorm2_normalize(
        norm, in.data(), length, out.data(), out.size(), &status);
  }
  if (U_FAILURE(status)) {
    return std::string(text);
  }
  std::string result(4 * n + 4, '\0');
  int32_t bytes = 0;
  u_strToUTF8(result.data(), result.size(), &bytes, out.data(), n, &status);
  result.resize(bytes);
  return U_FAILURE(status) ? std::string(text) : result;
}

void HfTokenizer::Impl::bpe(
    std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    if (const auto it = ids.find(piece); it != ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  for (const char c : piece) {
    symbols.push_back(byte_ids[static_cast<unsigned char>(c)]);
  }
  // The pair of lowest merge rank, leftmost among equals, until none is
  // left (tokenizers' order).
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    size_t best = 0;
    int32_t merged = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t key = (static_cast<uint64_t>(symbols[i]) << 32) |
                           static_cast<uint32_t>(symbols[i + 1]);
      const auto it = merges.find(key);
      if (it != merges.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best = i;
        merged = it->second.second;
      }
    }
    if (merged < 0) {
      break;
    }
    symbols[best] = merged;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void HfTokenizer::Impl::encode_text(
    std::string_view text, std::vector<int32_t>& out) const {
  const std::string normal = nfc ? nfc_of(text) : std::string(text);
  std::vector<std::string_view> pieces = {normal};
  for (const auto& split : splits) {
    std::vector<std::string_view> next;
    for (const auto& p : pieces) {
      const auto parts = split->split(p);
      next.insert(next.end(), parts.begin(), parts.end());
    }
    pieces = std::move(next);
  }
  for (const auto& p : pieces) {
    bpe(p, out);
  }
}

HfTokenizer::HfTokenizer(const std::string& path)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    bad(path, "cannot be read");
  }
  m.text.assign(std::istreambuf_iterator<char>(in), {});
  json j;
  try {
    j = json::parse(m.text);
  } catch (const std::exception& e) {
    bad(path, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("model")) {
    bad(path, "has no \"model\"; a tokenizer.json has one");
  }
  try {
    m.read_model(j["model"]);
    m.read_added(j.value("added_tokens", json::array()));
    m.read_normalizer(j.value("normalizer", json()));
    m.read_pre_tokenizer(j.value("pre_tokenizer", json()));
    const json decoder = j.value("decoder", json());
    if (!decoder.is_null() && text_field(decoder, "type") != "ByteLevel") {
      bad(path, "decoder is " + decoder.dump() + "; supported: ByteLevel");
    }
    m.read_special_ids(j.value("post_processor", json()));
  } catch (const json::exception& e) {
    bad(path, std::string("malformed: ") + e.what());
  } catch (const std::invalid_argument& e) {
    bad(path, e.what());
  }
  m.vocab = static_cast<int64_t>(m.bytes_of.size());
  for (const auto& a : m.added) {
    m.vocab = std::max<int64_t>(m.vocab, a.id + 1);
  }
}

HfTokenizer::~HfTokenizer() = default;

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  // Added tokens first, the longest at the leftmost place; the text
  // between them is normalized, split and merged.
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const Impl::Added* found = nullptr;
    for (const Impl::Added* a :
         m.added_by_byte[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, a->content.size(), a->content) == 0) {
        found = a;
        break;
      }
    }
    if (found == nullptr) {
      ++i;
      continue;
    }
    m.encode_text(text.substr(start, i - start), out);
    out.push_back(found->id);
    i += found->content.size();
    start = i;
  }
  m.encode_text(text.substr(start), out);
  return out;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  const Impl& m = *impl_;
  std::string out;
  for (const int32_t id : ids) {
    check_decodable("huggingface", id, m.vocab);
    if (const auto it = m.added_of_id.find(id); it != m.added_of_id.end()) {
      if (!it->second->special) {
        out += it->second->content;
      }
      continue;
    }
    if (static_cast<size_t>(id) < m.bytes_of.size()) {
      out += m.bytes_of[id];
    }
  }
  return out;
}

int64_t HfTokenizer::vocab_size() const {
  return impl_->vocab;
}

std::string HfTokenizer::hf_tokenizer_json() const {
  return impl_->text;
}

int32_t HfTokenizer::bos_id() const {
  return impl_->bos;
}

int32_t HfTokenizer::eos_id() const {
  return impl_->eos;
}

}  // namespace baton
