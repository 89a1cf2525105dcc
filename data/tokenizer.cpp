#include "data/tokenizer.h"

#include <stdexcept>

#include "common/error.h"
#include "data/dataset.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tiktoken_tokenizer.h"

namespace baton {

void check_decodable(const char* tokenizer, int32_t id, int64_t vocab_size) {
  if (id < 0 || id >= vocab_size) {
    throw std::runtime_error(
        std::string("[") + tokenizer + "] cannot decode id " +
        std::to_string(id) + "; allowed: 0.." + std::to_string(vocab_size - 1));
  }
}

std::string Tokenizer::hf_tokenizer_json() const {
  throw std::runtime_error(
      "[tokenizer] this tokenizer has no tokenizer.json form "
      "(Tokenizer::hf_tokenizer_json is not overridden)");
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (const char c : text) {
    ids.push_back(static_cast<unsigned char>(c));
  }
  return ids;
}

std::string ByteTokenizer::hf_tokenizer_json() const {
  ByteLevelBpe bpe;
  for (int b = 0; b < 256; ++b) {
    bpe.tokens.emplace_back(1, static_cast<char>(b));
  }
  bpe.specials = {{"<|bos|>", bos_id()}, {"<|eos|>", eos_id()}};
  bpe.bos = "<|bos|>";
  return tokenizer_json(bpe);
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id == bos_id() || id == eos_id()) {
      continue;
    }
    check_decodable("ByteTokenizer", id, vocab_size());
    text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return text;
}

namespace {

// A creator for a tokenizer read from model.tokenizer_path.
template <class T>
TokenizerCreator from_file(const char* name, const char* allowed) {
  return [name, allowed](const std::string& path) {
    if (path.empty()) {
      throw_config_error(
          "model.tokenizer_path",
          std::string("empty; allowed: ") + allowed +
              " (required by tokenizer '" + name + "')");
    }
    return std::unique_ptr<Tokenizer>(
        std::make_unique<T>(resolve_asset_path(path)));
  };
}

}  // namespace

Registry<TokenizerCreator>& tokenizer_registry() {
  static Registry<TokenizerCreator> registry("tokenizer");
  return registry;
}

void register_builtin_tokenizers() {
  tokenizer_registry().add_builtins_once(
      [](Registry<TokenizerCreator>& registry) {
        registry.add(
            "bytes",
            [](const std::string& /*path*/) -> std::unique_ptr<Tokenizer> {
              return std::make_unique<ByteTokenizer>();
            },
            "UTF-8 bytes as ids 0-255, BOS 256, EOS 257 (vocab 258); no model "
            "file");
        registry.add(
            "sentencepiece",
            from_file<SentencePieceTokenizer>(
                "sentencepiece", "a SentencePiece .model file"),
            "a SentencePiece model at model.tokenizer_path (baton tokenizer "
            "train makes one); vocab, BOS and EOS from the model");
        registry.add(
            "tiktoken",
            from_file<TiktokenTokenizer>(
                "tiktoken",
                "a tiktoken-format file (Llama 3's tokenizer.model)"),
            "Llama 3's tokenizer: a tiktoken-format file at "
            "model.tokenizer_path, its pre-tokenisation split and 256 special "
            "ids (<|begin_of_text|>, <|end_of_text|>, ...) after the file's");
        registry.add(
            "huggingface",
            from_file<HfTokenizer>(
                "huggingface", "a Hugging Face tokenizer.json"),
            "a Hugging Face tokenizer.json at model.tokenizer_path (byte-level "
            "BPE, as Llama 3 and Qwen3 ship it): its split, merges, added "
            "tokens, NFC where it says");
      });
}

}  // namespace baton
