#pragma once

#include <cstdint>
#include <string>

#include "data/sentencepiece_plugin.h"

namespace baton {

/// `model` as a Hugging Face tokenizer.json whose encoding is
/// SentencePiece's, made as transformers' converter makes one
/// (convert_slow_tokenizer.py, `SpmConverter.build_tokenizer_from_spm_proto`):
/// - normalizer, in SentencePiece's order: the precompiled charsmap
///   (`Precompiled`, base64), extra spaces removed, spaces escaped as U+2581,
///   the dummy prefix prepended (where the text is not empty);
/// - pre-tokenizer: user-defined pieces isolated (a `Split`), else none: the
///   model sees the whole text, as SentencePiece's does;
/// - model: `BPE` with every normal piece's merges (each split into two
///   normal pieces, ranked by the piece's score), or `Unigram` with the
///   scores; the unknown piece and byte fallback as the model has them;
/// - decoder: U+2581 as a space, bytes fused, the dummy prefix stripped;
/// - control pieces as special added tokens, `bos_id`'s put first.
/// Throws std::invalid_argument saying what a tokenizer.json cannot say:
/// word and char models, unused pieces, whitespace as a suffix, decode-side
/// rules (a denormalizer), pieces with the same text, non-finite scores.
std::string sentencepiece_tokenizer_json(
    const sentencepiece_plugin::ModelDescription& model, int32_t bos_id);

}  // namespace baton
