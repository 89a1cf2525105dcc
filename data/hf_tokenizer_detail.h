#pragma once

// What the tokenizer.json writers share: hf_tokenizer.cpp's (a byte-level
// BPE) and sentencepiece_tokenizer_json.cpp's.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace baton::hf_json {

/// A special token of `added_tokens`, matched in text as it is (not
/// normalized), as the tokenizers library writes one.
nlohmann::json special_token(const std::string& content, int32_t id);

/// The post-processor that puts the special token `bos` (id `bos_id`) first
/// when AutoTokenizer adds special tokens (TemplateProcessing).
nlohmann::json bos_first(const std::string& bos, int32_t bos_id);

}  // namespace baton::hf_json
