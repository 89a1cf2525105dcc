#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace baton {

/// The environment variable that names the SentencePiece plugin
/// (libbaton_sentencepiece.so) to load instead of looking for it: beside
/// the executable as `cmake --install` lays it out (PREFIX/lib/baton/ for
/// PREFIX/bin/baton), in the executable's folder, then in the build tree.
inline constexpr const char* kSentencePiecePluginVar =
    "BATON_SENTENCEPIECE_PLUGIN";

/// A SentencePiece model file (BPE or unigram). The vocabulary, BOS and EOS
/// are the model's; a model without BOS or EOS pieces is rejected.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  /// Loads `path`; throws std::runtime_error naming the file when it cannot
  /// be read or is not a SentencePiece model.
  explicit SentencePieceTokenizer(const std::string& path);
  ~SentencePieceTokenizer() override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  /// The model as transformers' converter says a SentencePiece model
  /// (data/sentencepiece_tokenizer_json.h): BPE or unigram, with its
  /// normalizer, byte fallback and dummy prefix. Throws std::runtime_error
  /// naming the file and what a tokenizer.json cannot say.
  std::string hf_tokenizer_json() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// How `baton tokenizer train` trains a SentencePiece model.
struct SentencePieceTrainOptions {
  explicit SentencePieceTrainOptions(int64_t vocab_size)
      : vocab_size(vocab_size) {}
  /// Pieces in the model, specials and byte fallbacks included.
  int64_t vocab_size;
  /// "bpe" or "unigram".
  std::string model_type = "bpe";
  /// Training threads.
  int64_t num_threads = 1;
  /// More of SentencePiece's trainer flags by name, each overriding Baton's
  /// (normalization_rule_name "nmt_nfkc", remove_extra_whitespaces "true",
  /// add_dummy_prefix "false", user_defined_symbols "a,b"); minloglevel
  /// stays Baton's.
  std::map<std::string, std::string> flags;
};

/// Trains a SentencePiece model on the texts `next_text` returns (nullopt
/// ends them) and writes it to `out_path`. Pieces: unk 0, BOS 1, EOS 2, the
/// 256 byte fallbacks (so every text encodes without unknowns), then the
/// learnt ones. No normalisation but SentencePiece's dummy prefix (a space
/// put before the text, which decode drops) unless `options.flags` asks for
/// one, so decode(encode(text)) == text, U+2581 aside (SentencePiece's
/// space).
/// Documents are fed line by line. Throws std::runtime_error when training
/// fails (too small a corpus for the vocabulary, say) or the file cannot be
/// written.
void train_sentencepiece(
    const std::function<std::optional<std::string>()>& next_text,
    const SentencePieceTrainOptions& options,
    const std::string& out_path);

}  // namespace baton
