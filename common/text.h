#pragma once

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

}  // namespace baton
