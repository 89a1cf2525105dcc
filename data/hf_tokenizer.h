#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer.h"

namespace baton {

/// A Hugging Face `tokenizer.json` of the kind Llama 3 and Qwen3 ship, read
/// as the `tokenizers` library reads it:
/// - model: byte-level BPE (`"type": "BPE"`, merges as "a b" strings or
///   [a, b] pairs, `ignore_merges` honoured; no byte fallback, no subword
///   prefix or suffix, no dropout);
/// - normalizer: none or NFC (Qwen's);
/// - pre-tokenizer: ByteLevel with its own GPT-2 split, or a Sequence of
///   Split (a regex, Isolated: Llama 3's or Qwen's pattern) and ByteLevel
///   without one; no prefix space;
/// - added tokens (`added_tokens`) are matched in the text first, the
///   longest at the leftmost place, as tokenizers does, and encode to their
///   ids; decode skips the special ones.
/// BOS: the special token the post-processor puts first (Llama 3's
/// <|begin_of_text|>), or none (-1: Qwen's documents only end); EOS: the
/// `eos_token` of a tokenizer_config.json beside the file, else the first
/// special token named <|end_of_text|>, <|endoftext|> or </s>. Other kinds
/// (WordPiece, Unigram, other normalizers or pre-tokenizers) are refused
/// naming the field and what is supported.
/// A byte-level BPE in a tokenizer.json's terms: what ByteTokenizer and
/// TiktokenTokenizer say of themselves for an HF export.
struct ByteLevelBpe {
  /// Token bytes by id, ids 0..n-1.
  std::vector<std::string> tokens;
  /// Merges in priority order, as (left bytes, right bytes).
  std::vector<std::pair<std::string, std::string>> merges;
  /// Special tokens: (content, id).
  std::vector<std::pair<std::string, int32_t>> specials;
  /// The split before byte-level merging (PCRE2 / tokenizers syntax).
  std::string split;
  /// A piece that is a token is that token (tiktoken's rule).
  bool ignore_merges = false;
  /// The special token the post-processor puts first; "": none.
  std::string bos;
};
/// Its tokenizer.json, laid out as the tokenizers library writes one.
std::string tokenizer_json(const ByteLevelBpe& bpe);

class HfTokenizer final : public Tokenizer {
 public:
  /// Loads `path`; throws std::runtime_error naming the file and the field
  /// of an unsupported or malformed tokenizer.json.
  explicit HfTokenizer(const std::string& path);
  ~HfTokenizer() override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  /// The file as it was read.
  std::string hf_tokenizer_json() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
