#pragma once

// What config/'s files share and nothing else uses: finding a section and
// a key of a JobConfig by name (decoding, overrides, the key-path
// accessors), printing numbers in messages and the top-level keys' specs.

#include <string>
#include <string_view>

#include "config/job_config.h"

namespace YAML {
class Node;
}

namespace baton::config_detail {

/// `v` in the shortest form that reads back to the same double,
/// fixed-point in the everyday range (8e-4 shows as 0.0008).
std::string format_number(double v);

/// The top-level `builder` and `plugins` keys have no section, so their
/// specs live here.
const FieldSpec& builder_spec();
const FieldSpec& plugins_spec();

/// The YAML of the config file `path` (config/config_file.cpp); throws
/// ConfigError naming why it cannot be read: not a file, no permission, a
/// missing folder or a misspelt name (the closest file of its folder), a
/// YAML error at its line (a tab in the indentation named as such).
YAML::Node parse_file(const std::string& path);

/// Calls `f(field, spec)` on the field named `key`; false if there is none.
template <class Section, class F>
bool with_field(Section& section, std::string_view key, F&& f) {
  bool found = false;
  section.visit([&](const char* name, auto& field, const FieldSpec& spec) {
    if (!found && key == name) {
      found = true;
      f(field, spec);
    }
  });
  return found;
}

/// Calls `f(section)` on the section named `name`; false if there is none.
template <class F>
bool with_section(JobConfig& config, std::string_view name, F&& f) {
  bool found = false;
  config.visit_sections([&](const char* section_name, auto& section) {
    if (!found && name == section_name) {
      found = true;
      f(section);
    }
  });
  return found;
}

}  // namespace baton::config_detail
