// --print-config: the effective JobConfig written back as YAML, every key
// with its help as a comment, each value in the form that reads back the
// same (job_config_to_yaml).

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <vector>

#include "common/text.h"
#include "config/config_detail.h"
#include "config/job_config.h"

namespace baton {

using config_detail::builder_spec;
using config_detail::format_number;
using config_detail::plugins_spec;

namespace {

using Integers = std::vector<int64_t>;
using Strings = std::vector<std::string>;
using StringLists = std::vector<std::vector<std::string>>;

/// True when `s` written plain would read back as something other than a
/// string (null, a boolean or a number, in YAML 1.1 or 1.2), so it must be
/// quoted.
bool needs_quotes(const std::string& s) {
  static const std::vector<std::string> kSpecial = {
      "",
      "~",
      "null",
      "true",
      "false",
      "yes",
      "no",
      "on",
      "off",
      ".inf",
      "-.inf",
      "+.inf",
      ".nan"};
  const std::string lower = to_lower(s);
  if (std::find(kSpecial.begin(), kSpecial.end(), lower) != kSpecial.end()) {
    return true;
  }
  double ignored = 0;
  const char* first = s.data() + (s[0] == '+' ? 1 : 0);
  const char* last = s.data() + s.size();
  const auto result = std::from_chars(first, last, ignored);
  return result.ec != std::errc::invalid_argument && result.ptr == last;
}

// Emits one value; overloaded on the field type like decode.
void emit(YAML::Emitter& out, int64_t v) {
  out << v;
}
void emit(YAML::Emitter& out, double v) {
  out << format_number(v);
}
void emit(YAML::Emitter& out, bool v) {
  out << v;
}
void emit(YAML::Emitter& out, const std::string& v) {
  if (needs_quotes(v)) {
    out << YAML::DoubleQuoted;
  }
  out << v;
}
void emit(YAML::Emitter& out, const std::optional<double>& v) {
  if (v) {
    emit(out, *v);
  } else {
    out << YAML::Null;
  }
}
void emit(YAML::Emitter& out, const std::vector<double>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (double x : v) {
    emit(out, x);
  }
  out << YAML::EndSeq;
}
void emit(YAML::Emitter& out, const Integers& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const int64_t x : v) {
    emit(out, x);
  }
  out << YAML::EndSeq;
}
void emit(YAML::Emitter& out, const Strings& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& x : v) {
    emit(out, x);
  }
  out << YAML::EndSeq;
}
void emit(YAML::Emitter& out, const StringLists& v) {
  out << YAML::BeginSeq;
  for (const auto& list : v) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& s : list) {
      emit(out, s);
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndSeq;
}

}  // namespace

std::string job_config_to_yaml(const JobConfig& config) {
  // visit is non-const (it also decodes), so walk a copy.
  JobConfig copy = config;
  YAML::Emitter out;
  out.SetNullFormat(YAML::LowerNull);
  out << YAML::BeginMap;
  out << YAML::Key << "builder" << YAML::Value;
  emit(out, copy.builder);
  out << YAML::Comment(builder_spec().help);
  out << YAML::Key << "plugins" << YAML::Value;
  emit(out, copy.plugins);
  out << YAML::Comment(plugins_spec().help);
  copy.visit_sections([&](const char* section_name, auto& section) {
    out << YAML::Key << section_name << YAML::Value << YAML::BeginMap;
    section.visit([&](const char* name, auto& field, const FieldSpec& spec) {
      out << YAML::Key << name << YAML::Value;
      emit(out, field);
      out << YAML::Comment(spec.help);
    });
    out << YAML::EndMap;
  });
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace baton
