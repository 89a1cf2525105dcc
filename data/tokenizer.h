#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/registry.h"

namespace baton {

/// Text <-> token ids. The model's vocabulary size follows `vocab_size()`.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Token ids of `text`, without BOS or EOS.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  /// Text of `ids`; BOS and EOS decode to nothing.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// Number of distinct ids, special tokens included.
  virtual int64_t vocab_size() const = 0;
  /// Id that starts each document; -1: none (a tokenizer whose documents
  /// only end, as Qwen's).
  virtual int32_t bos_id() const = 0;
  /// Id that ends each document.
  virtual int32_t eos_id() const = 0;
  /// This tokenizer as a Hugging Face tokenizer.json (what an HF export
  /// ships, for AutoTokenizer). Throws std::runtime_error saying why where
  /// it cannot say itself so (the default: a tokenizer that has no such
  /// form).
  virtual std::string hf_tokenizer_json() const;
};

/// Byte-level tokenizer: ids 0-255 are the bytes of the UTF-8 text, 256 is
/// BOS and 257 EOS. Needs no model file.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override {
    return 258;
  }
  int32_t bos_id() const override {
    return 256;
  }
  int32_t eos_id() const override {
    return 257;
  }
  /// Byte-level BPE without merges: <|bos|> 256 (put first), <|eos|> 257.
  std::string hf_tokenizer_json() const override;
};

/// Throws std::runtime_error "[tokenizer] cannot decode id ..." unless `id`
/// is in [0, vocab_size).
void check_decodable(const char* tokenizer, int32_t id, int64_t vocab_size);

/// Makes a tokenizer from its model file path (ignored by `bytes`).
using TokenizerCreator =
    std::function<std::unique_ptr<Tokenizer>(const std::string& path)>;

/// The tokenizer registry (`model.tokenizer`).
Registry<TokenizerCreator>& tokenizer_registry();

/// Registers the built-in tokenizers (bytes, sentencepiece, tiktoken,
/// huggingface); safe
/// to call more than once. The file-based ones find a relative path under
/// the source tree's assets/ too (resolve_asset_path).
void register_builtin_tokenizers();

}  // namespace baton
