#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/regex_split.h"

#include <pcre2.h>

#include <new>
#include <stdexcept>

namespace baton {

// Compiled once; pcre2_code is read-only after JIT compilation, so threads
// share it and only their match data differs.
struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  std::string tag;

  [[noreturn]] void fail(int rc, const std::string& what) const {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    throw std::runtime_error(
        "[" + tag + "] " + what + ": " + reinterpret_cast<char*>(message));
  }
};

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& tag)
    : impl_(std::make_unique<Impl>()) {
  impl_->tag = tag;
  int error = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: bytes that are not UTF-8 never match (instead of
  // making the match undefined), so they show up as gaps between matches.
  impl_->code = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(pattern.data()),
      pattern.size(),
      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
      &error,
      &offset,
      nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw std::invalid_argument(
        "[" + tag + "] cannot compile the split pattern at offset " +
        std::to_string(offset) + ": " + reinterpret_cast<char*>(message));
  }
  // Without JIT (some platforms) the interpreter gives the same matches.
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() {
  pcre2_code_free(impl_->code);
}

std::vector<std::string_view> RegexSplitter::split(
    std::string_view text) const {
  std::vector<std::string_view> pieces;
  pcre2_match_data* match =
      pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (match == nullptr) {
    throw std::bad_alloc();
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  int rc = 0;
  while (pos < text.size()) {
    rc = pcre2_match(impl_->code, subject, text.size(), pos, 0, match, nullptr);
    if (rc < 0) {
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0];
    size_t end = ovector[1];
    if (begin > pos) {
      pieces.push_back(text.substr(pos, begin - pos));
    }
    if (end == begin) {
      // An empty match: its character is a gap of its own.
      end = begin + 1;
      while (end < text.size() && (text[end] & 0xC0) == 0x80) {
        ++end;
      }
    }
    pieces.push_back(text.substr(begin, end - begin));
    pos = end;
  }
  pcre2_match_data_free(match);
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
    impl_->fail(rc, "splitting text failed");
  }
  if (pos < text.size()) {
    pieces.push_back(text.substr(pos));
  }
  return pieces;
}

}  // namespace baton
