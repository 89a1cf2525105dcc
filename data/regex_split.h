#pragma once

// Unicode-aware splitting of text by a regular expression (PCRE2 with
// Unicode properties), as byte-level BPE tokenizers pre-tokenize: Llama 3's
// split, and the patterns a tokenizer.json names.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

class RegexSplitter {
 public:
  /// Compiles `pattern` (PCRE2 syntax, which reads the patterns of Llama 3's
  /// and Qwen's tokenizers as written). Throws std::invalid_argument with
  /// `tag`, the offset and PCRE2's message where it does not compile.
  RegexSplitter(const std::string& pattern, const std::string& tag);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  /// The matches of the pattern in `text` and the gaps between them, in
  /// order (tokenizers' "Isolated" behaviour): they concatenate back to
  /// `text`. Bytes that are not UTF-8 never match and are gaps; a match
  /// that would be empty is a one-character gap.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
