#include "data/tokenizer.h"

#include <stdexcept>

namespace baton {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (const char c : text) {
    ids.push_back(static_cast<unsigned char>(c));
  }
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id == bos_id() || id == eos_id()) {
      continue;
    }
    if (id < 0 || id >= vocab_size()) {
      throw std::runtime_error(
          "[ByteTokenizer] cannot decode id " + std::to_string(id) +
          "; allowed: 0.." + std::to_string(vocab_size() - 1));
    }
    text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return text;
}

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
      });
}

}  // namespace baton
