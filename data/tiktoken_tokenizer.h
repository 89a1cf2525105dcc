#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace baton {

/// Splits `text` as Llama 3's tokenizer does before byte-pair merging:
/// contractions ('s 't 're 've 'm 'll 'd, any case), letter runs with one
/// optional leading non-letter, groups of 1-3 digits, punctuation runs with
/// an optional leading space and trailing newlines, and whitespace (newline
/// runs, and spaces that leave one for the next word). Unicode-aware (PCRE2
/// with Unicode properties). Bytes that are not valid UTF-8 become pieces of
/// their own. The pieces concatenate back to `text`.
std::vector<std::string_view> llama3_pretokenize(std::string_view text);

/// Llama 3's tokenizer: a tiktoken-format file (one line per token: the
/// token's bytes in base64, a space, its rank), ranks 0..n-1 with every
/// single byte among them, then 256 special ids as in Meta's release:
/// `<|begin_of_text|>` (BOS) = n, `<|end_of_text|>` (EOS) = n + 1, and 254
/// reserved ones. Meta's file gives vocab 128256. Text is split with
/// llama3_pretokenize, then each piece is merged pair by pair, lowest rank
/// first. Special tokens written in the text are encoded as plain text.
class TiktokenTokenizer final : public Tokenizer {
 public:
  /// Loads `path`; throws std::runtime_error naming the file and line of a
  /// malformed entry, a duplicate or missing rank, or a missing single byte.
  explicit TiktokenTokenizer(const std::string& path);
  ~TiktokenTokenizer() override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  /// Its ranks as a byte-level BPE tokenizer.json: each token of two bytes
  /// or more merged from the two parts tiktoken's merge of its bytes with
  /// lower ranks leaves (as transformers converts tiktoken files), Llama 3's
  /// split, ignore_merges (tiktoken's whole-piece rule), the special tokens,
  /// <|begin_of_text|> put first.
  std::string hf_tokenizer_json() const override;

  /// Special ids after the ranks of the file, as in Llama 3.
  static constexpr int32_t kNumSpecialTokens = 256;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
