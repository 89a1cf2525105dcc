#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

/// ASCII lower-case copy of `s`.
std::string to_lower(std::string_view s);

/// `items` joined with `sep`.
std::string join(const std::vector<std::string>& items, std::string_view sep);

/// Edit distance between `a` and `b`: insertions, deletions, substitutions
/// and swaps of neighbouring characters each count one.
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word` when it is a plausible typo of it (edit
/// distance at most a third of the word's length, at least 1, case-
/// insensitive), else an empty string.
std::string closest_match(
    std::string_view word, const std::vector<std::string>& candidates);

/// A hash that lets an unordered map keyed by std::string be searched with
/// string_views, without a copy (with std::equal_to<>).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return std::hash<std::string_view>()(s);
  }
};

}  // namespace baton
