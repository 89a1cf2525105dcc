#include "data/tiktoken_tokenizer.h"

#include <fstream>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "common/text.h"
#include "data/hf_tokenizer.h"
#include "data/regex_split.h"

namespace baton {

namespace {

// Llama 3's split (tokenizer.py in Meta's release), as PCRE2 reads it.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const RegexSplitter& llama3_regex() {
  static const RegexSplitter regex(kLlama3Pattern, "tiktoken");
  return regex;
}

// The 6-bit value of a base64 character, or -1.
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') {
    return c - 'A';
  }
  if (c >= 'a' && c <= 'z') {
    return c - 'a' + 26;
  }
  if (c >= '0' && c <= '9') {
    return c - '0' + 52;
  }
  if (c == '+') {
    return 62;
  }
  if (c == '/') {
    return 63;
  }
  return -1;
}

// Standard base64 with '=' padding; false when `text` is not base64.
bool base64_decode(std::string_view text, std::string& out) {
  out.clear();
  if (text.empty() || text.size() % 4 != 0) {
    return false;
  }
  size_t padding = 0;
  while (padding < 2 && text[text.size() - 1 - padding] == '=') {
    ++padding;
  }
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < text.size() - padding; ++i) {
    const int v = base64_value(text[i]);
    if (v < 0) {
      return false;
    }
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return true;
}

// Meta's names for the 256 special ids (Llama 3's tokenizer.py).
std::vector<std::string> llama3_special_tokens() {
  std::vector<std::string> names = {
      "<|begin_of_text|>",
      "<|end_of_text|>",
      "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>",
      "<|reserved_special_token_2|>",
      "<|reserved_special_token_3|>",
      "<|start_header_id|>",
      "<|end_header_id|>",
      "<|reserved_special_token_4|>",
      "<|eot_id|>"};
  for (int i = 5; names.size() < TiktokenTokenizer::kNumSpecialTokens; ++i) {
    names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  }
  return names;
}

/// The rank on a '<base64 token> <rank>' line, with the token's bytes put
/// in `bytes`; throws naming `where` when the line is not of that form.
int64_t parse_rank_line(
    const std::string& line, const std::string& where, std::string& bytes) {
  const size_t space = line.find(' ');
  int64_t rank = -1;
  try {
    size_t used = 0;
    if (space != std::string::npos) {
      rank = std::stoll(line.substr(space + 1), &used);
      if (used != line.size() - space - 1) {
        rank = -1;
      }
    }
  } catch (const std::exception&) {
    rank = -1;
  }
  if (space == std::string::npos || rank < 0 ||
      !base64_decode(std::string_view(line).substr(0, space), bytes)) {
    throw std::runtime_error(
        where + ": expected '<base64 token> <rank>', got '" +
        line.substr(0, 80) + "'");
  }
  return rank;
}

}  // namespace

std::vector<std::string_view> llama3_pretokenize(std::string_view text) {
  return llama3_regex().split(text);
}

struct TiktokenTokenizer::Impl {
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ranks;
  // Bytes of each id: the file's tokens, then the special names.
  std::vector<std::string> pieces;
  int32_t num_ranks = 0;

  /// Reads the file's "<base64 token> <rank>" lines into `ranks`; returns
  /// the tokens by rank, every rank 0..n-1 given once.
  std::vector<std::string> read_ranks(const std::string& path);
  /// Fails unless each of the 256 single bytes has a rank.
  void check_single_bytes(const std::string& path) const;

  int32_t rank_of(std::string_view bytes) const {
    const auto it = ranks.find(bytes);
    return it == ranks.end() ? std::numeric_limits<int32_t>::max() : it->second;
  }

  // tiktoken's byte-pair merge of one piece: repeatedly joins the adjacent
  // pair whose joined bytes have the lowest rank.
  void merge(std::string_view piece, std::vector<int32_t>& out) const {
    if (const auto it = ranks.find(piece); it != ranks.end()) {
      out.push_back(it->second);
      return;
    }
    constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
    // parts[i] starts a part; the last entry is the end of the piece.
    std::vector<size_t> parts(piece.size() + 1);
    for (size_t i = 0; i <= piece.size(); ++i) {
      parts[i] = i;
    }
    const auto pair_rank = [&](size_t i) {
      return i + 2 < parts.size()
                 ? rank_of(piece.substr(parts[i], parts[i + 2] - parts[i]))
                 : kNone;
    };
    std::vector<int32_t> pair_ranks(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      pair_ranks[i] = pair_rank(i);
    }
    while (parts.size() > 2) {
      size_t best = 0;
      for (size_t i = 1; i + 2 < parts.size(); ++i) {
        if (pair_ranks[i] < pair_ranks[best]) {
          best = i;
        }
      }
      if (pair_ranks[best] == kNone) {
        break;
      }
      parts.erase(parts.begin() + static_cast<ptrdiff_t>(best) + 1);
      pair_ranks.erase(pair_ranks.begin() + static_cast<ptrdiff_t>(best) + 1);
      pair_ranks[best] = pair_rank(best);
      if (best > 0) {
        pair_ranks[best - 1] = pair_rank(best - 1);
      }
    }
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const int32_t id =
          rank_of(piece.substr(parts[i], parts[i + 1] - parts[i]));
      // Single bytes are checked at load, so every part has a rank.
      out.push_back(id);
    }
  }
};

namespace {

/// Refuses a rank the file cannot hold: ranks are 0..n-1, one line each,
/// so none reaches the file's size in bytes; refused before a damaged rank
/// sizes the table.
void check_rank_range(
    const std::string& where, int64_t rank, int64_t file_bytes) {
  if (rank > std::numeric_limits<int32_t>::max() -
                 TiktokenTokenizer::kNumSpecialTokens) {
    throw std::runtime_error(
        where + ": rank " + std::to_string(rank) + " is too large");
  }
  if (rank >= file_bytes) {
    throw std::runtime_error(
        where + ": rank " + std::to_string(rank) +
        " is out of range; allowed: ranks 0..n-1 for the n lines of the "
        "file (" +
        std::to_string(file_bytes) + " bytes)");
  }
}

/// Fails unless the file gave every rank 0..n-1 (`line_of_rank`: the line
/// of each, 0 for none).
void check_every_rank(
    const std::string& path, const std::vector<int64_t>& line_of_rank) {
  if (line_of_rank.empty()) {
    throw std::runtime_error(
        "[TiktokenTokenizer] " + path + ": holds no tokens");
  }
  for (size_t rank = 0; rank < line_of_rank.size(); ++rank) {
    if (line_of_rank[rank] == 0) {
      throw std::runtime_error(
          "[TiktokenTokenizer] " + path + ": rank " + std::to_string(rank) +
          " is missing; allowed: ranks 0.." +
          std::to_string(line_of_rank.size() - 1) + " each once");
    }
  }
}

}  // namespace

std::vector<std::string> TiktokenTokenizer::Impl::read_ranks(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("[TiktokenTokenizer] cannot open '" + path + "'");
  }
  in.seekg(0, std::ios::end);
  const int64_t file_bytes = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  std::vector<std::string> by_rank;
  std::vector<int64_t> line_of_rank;
  std::string line;
  std::string bytes;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (line.empty()) {
      continue;
    }
    const std::string where =
        "[TiktokenTokenizer] " + path + ":" + std::to_string(line_number);
    const int64_t rank = parse_rank_line(line, where, bytes);
    check_rank_range(where, rank, file_bytes);
    if (static_cast<size_t>(rank) >= by_rank.size()) {
      by_rank.resize(rank + 1);
      line_of_rank.resize(rank + 1, 0);
    }
    if (line_of_rank[rank] != 0) {
      throw std::runtime_error(
          where + ": rank " + std::to_string(rank) + " already given at line " +
          std::to_string(line_of_rank[rank]));
    }
    const auto [it, fresh] = ranks.emplace(bytes, static_cast<int32_t>(rank));
    if (!fresh) {
      throw std::runtime_error(
          where + ": token already listed with rank " +
          std::to_string(it->second));
    }
    by_rank[rank] = bytes;
    line_of_rank[rank] = line_number;
  }
  check_every_rank(path, line_of_rank);
  return by_rank;
}

void TiktokenTokenizer::Impl::check_single_bytes(
    const std::string& path) const {
  for (int b = 0; b < 256; ++b) {
    if (ranks.count(std::string(1, static_cast<char>(b))) == 0) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", b);
      throw std::runtime_error(
          "[TiktokenTokenizer] " + path + ": the single byte " + hex +
          " has no rank; a byte-level BPE file ranks all 256 bytes");
    }
  }
}

TiktokenTokenizer::TiktokenTokenizer(const std::string& path)
    : impl_(std::make_unique<Impl>()) {
  std::vector<std::string> by_rank = impl_->read_ranks(path);
  impl_->check_single_bytes(path);
  impl_->num_ranks = static_cast<int32_t>(by_rank.size());
  impl_->pieces = std::move(by_rank);
  for (std::string& name : llama3_special_tokens()) {
    impl_->pieces.push_back(std::move(name));
  }
}

TiktokenTokenizer::~TiktokenTokenizer() = default;

std::vector<int32_t> TiktokenTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  for (const std::string_view piece : llama3_pretokenize(text)) {
    impl_->merge(piece, ids);
  }
  return ids;
}

std::string TiktokenTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (const int32_t id : ids) {
    if (id == bos_id() || id == eos_id()) {
      continue;
    }
    check_decodable("TiktokenTokenizer", id, vocab_size());
    text += impl_->pieces[id];
  }
  return text;
}

int64_t TiktokenTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->pieces.size());
}

std::string TiktokenTokenizer::hf_tokenizer_json() const {
  const Impl& m = *impl_;
  ByteLevelBpe bpe;
  bpe.tokens.assign(m.pieces.begin(), m.pieces.begin() + m.num_ranks);
  bpe.split = kLlama3Pattern;
  bpe.ignore_merges = true;
  bpe.bos = m.pieces[bos_id()];
  for (int32_t id = m.num_ranks; id < static_cast<int32_t>(m.pieces.size());
       ++id) {
    bpe.specials.emplace_back(m.pieces[id], id);
  }
  // Each token's merge: its bytes merged, lowest rank first, with the
  // tokens ranked below it, until two parts are left.
  for (int32_t rank = 0; rank < m.num_ranks; ++rank) {
    const std::string& token = m.pieces[rank];
    if (token.size() < 2) {
      continue;
    }
    std::vector<std::string> parts;
    for (const char c : token) {
      parts.emplace_back(1, c);
    }
    while (parts.size() > 2) {
      int32_t best = rank;
      size_t at = 0;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const int32_t r = m.rank_of(parts[i] + parts[i + 1]);
        if (r < best) {
          best = r;
          at = i;
        }
      }
      if (best == rank) {
        break;
      }
      parts[at] += parts[at + 1];
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    if (parts.size() == 2) {
      bpe.merges.emplace_back(parts[0], parts[1]);
    }
  }
  return tokenizer_json(bpe);
}

int32_t TiktokenTokenizer::bos_id() const {
  return impl_->num_ranks;
}

int32_t TiktokenTokenizer::eos_id() const {
  return impl_->num_ranks + 1;
}

}  // namespace baton
