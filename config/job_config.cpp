// JobConfig from YAML: the files and --SECTION.KEY=VALUE overrides decoded
// field by field through each FieldSpec, then checked as a whole (the checks
// that need more than one key, names against their registries). Printing it
// back is in job_config_print.cpp.

#include "config/job_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <utility>

#include "common/error.h"
#include "common/registry.h"
#include "common/text.h"
#include "config/config_detail.h"
#include "config/parallel_dims.h"

namespace baton {

std::string JobConfig::origin(const std::string& key_path) const {
  const auto it = origins.find(key_path);
  return it == origins.end() ? "" : it->second;
}

std::string JobConfig::first_origin(
    std::initializer_list<const char*> keys) const {
  for (const char* key : keys) {
    if (const std::string o = origin(key); !o.empty()) {
      return o;
    }
  }
  return "";
}

using config_detail::builder_spec;
using config_detail::format_number;
using config_detail::plugins_spec;
using config_detail::with_field;
using config_detail::with_section;

std::string config_detail::format_number(double v) {
  char buf[64];
  const double a = std::fabs(v);
  const auto format = (a == 0 || (a >= 1e-4 && a < 1e15))
                          ? std::chars_format::fixed
                          : std::chars_format::scientific;
  const auto result = std::to_chars(buf, buf + sizeof(buf), v, format);
  return std::string(buf, result.ptr);
}

const FieldSpec& config_detail::builder_spec() {
  static const FieldSpec spec(
      "registered trainer builder (auto: picked from the parallelism)");
  return spec;
}

const FieldSpec& config_detail::plugins_spec() {
  static const FieldSpec spec(
      "shared libraries loaded before the config is checked (a file's "
      "paths relative to its folder)");
  return spec;
}

namespace {

using Integers = std::vector<int64_t>;
using Strings = std::vector<std::string>;
using StringLists = std::vector<std::vector<std::string>>;

/// One value to decode: the YAML node, where it came from, and its key path.
struct Input {
  YAML::Node node;
  /// Override text; string fields take it verbatim rather than as YAML, so
  /// `--job.description=a: b` works.
  std::optional<std::string> raw;
  /// "file.yaml:12" or "--section.key=value".
  std::string where;
  /// "training.steps", or "optimizer.betas[1]" for a list element.
  std::string key;

  Input element(const YAML::Node& child, size_t index) const {
    return {
        child, std::nullopt, where, key + "[" + std::to_string(index) + "]"};
  }
};

[[noreturn]] void fail(
    const Input& in, const std::string& problem, const std::string& allowed) {
  throw_config_error(
      in.where, in.key + ": " + problem + "; allowed: " + allowed);
}

/// `file:line` with the 1-based line of `mark` (yaml-cpp counts from 0).
std::string file_line(const std::string& file, const YAML::Mark& mark) {
  return file + ":" + std::to_string(mark.line + 1);
}

/// How a value appears in "X is not ..." messages.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "null";
  }
}

/// The range in words: ">= 1", "> 0", "in [0, 1]", ">= 0 and < 1"; "" if none.
std::string range_words(const FieldSpec& spec) {
  const std::string lo =
      spec.min ? (spec.min_exclusive ? "> " : ">= ") + format_number(*spec.min)
               : "";
  const std::string hi =
      spec.max ? (spec.max_exclusive ? "< " : "<= ") + format_number(*spec.max)
               : "";
  if (spec.min && spec.max && !spec.min_exclusive && !spec.max_exclusive) {
    return "in [" + format_number(*spec.min) + ", " + format_number(*spec.max) +
           "]";
  }
  if (!lo.empty() && !hi.empty()) {
    return lo + " and " + hi;
  }
  return lo + hi;
}

std::string with_range(std::string noun, const FieldSpec& spec) {
  const std::string range = range_words(spec);
  return range.empty() ? noun : noun + " " + range;
}

// What a field accepts, in words; overloaded on the field type like decode.
std::string allowed_words(const int64_t&, const FieldSpec& spec) {
  return with_range("an integer", spec);
}
std::string allowed_words(const double&, const FieldSpec& spec) {
  return with_range("a number", spec);
}
std::string allowed_words(const bool&, const FieldSpec&) {
  return "true or false";
}
std::string allowed_words(const std::string&, const FieldSpec& spec) {
  return spec.choices.empty() ? "a string"
                              : "one of " + join(spec.choices, ", ");
}
std::string allowed_words(const std::optional<double>&, const FieldSpec& spec) {
  return with_range("a number", spec) + ", or null";
}
std::string allowed_words(const std::vector<double>&, const FieldSpec& spec) {
  const std::string count =
      spec.exact_length ? std::to_string(*spec.exact_length) + " numbers"
                        : "numbers";
  const std::string range = range_words(spec);
  return "a list of " + count + (range.empty() ? "" : " each " + range);
}
std::string allowed_words(const Integers&, const FieldSpec& spec) {
  const std::string range = range_words(spec);
  return "a list of integers" + (range.empty() ? "" : " each " + range);
}
std::string allowed_words(const Strings&, const FieldSpec&) {
  return "a list of strings";
}
std::string allowed_words(const StringLists&, const FieldSpec&) {
  return "a list of lists of strings";
}

/// Fails unless `v` lies in the spec's range; `allowed` describes the field.
void check_range(
    const Input& in,
    double v,
    const FieldSpec& spec,
    const std::string& allowed) {
  const bool low =
      spec.min && (spec.min_exclusive ? v <= *spec.min : v < *spec.min);
  const bool high =
      spec.max && (spec.max_exclusive ? v >= *spec.max : v > *spec.max);
  if (low || high) {
    fail(in, in.node.Scalar() + " is out of range", allowed);
  }
}

/// Parses a decimal integer (optional sign) or a plain number, requiring the
/// whole text to be consumed. Throws the field's error on failure.
template <class T>
T parse_number(const Input& in, const char* noun, const std::string& allowed) {
  if (!in.node.IsScalar()) {
    fail(in, describe(in.node) + " is not " + noun, allowed);
  }
  const std::string& text = in.node.Scalar();
  // from_chars takes no '+' sign; YAML allows one.
  const char* first = text.data() + (text.rfind('+', 0) == 0 ? 1 : 0);
  const char* last = text.data() + text.size();
  T value{};
  const auto result = std::from_chars(first, last, value);
  if (result.ec == std::errc::result_out_of_range) {
    fail(in, text + " is out of range", allowed);
  }
  if (result.ec != std::errc() || result.ptr != last || first == last) {
    fail(in, describe(in.node) + " is not " + noun, allowed);
  }
  if constexpr (std::is_floating_point_v<T>) {
    // nan and inf parse, but compare false against every bound.
    if (!std::isfinite(value)) {
      fail(in, describe(in.node) + " is not a finite number", allowed);
    }
  }
  return value;
}

void decode(const Input& in, int64_t& out, const FieldSpec& spec) {
  const std::string allowed = allowed_words(out, spec);
  const int64_t v = parse_number<int64_t>(in, "an integer", allowed);
  check_range(in, static_cast<double>(v), spec, allowed);
  out = v;
}

void decode(const Input& in, double& out, const FieldSpec& spec) {
  const std::string allowed = allowed_words(out, spec);
  const double v = parse_number<double>(in, "a number", allowed);
  check_range(in, v, spec, allowed);
  out = v;
}

void decode(const Input& in, bool& out, const FieldSpec& spec) {
  const std::string text = in.node.IsScalar() ? to_lower(in.node.Scalar()) : "";
  if (text != "true" && text != "false") {
    fail(in, describe(in.node) + " is not a boolean", allowed_words(out, spec));
  }
  out = text == "true";
}

void decode(const Input& in, std::string& out, const FieldSpec& spec) {
  std::string text;
  if (in.raw) {
    text = *in.raw;
  } else if (in.node.IsScalar()) {
    text = in.node.Scalar();
  } else if (!in.node.IsNull()) {  // `key:` with nothing reads as ""
    fail(in, describe(in.node) + " is not a string", allowed_words(out, spec));
  }
  if (spec.choices.empty()) {
    out = text;
    return;
  }
  for (const auto& choice : spec.choices) {
    if (to_lower(choice) == to_lower(text)) {
      out = choice;
      return;
    }
  }
  const std::string near = closest_match(text, spec.choices);
  throw_config_error(
      in.where,
      in.key + ": '" + text +
          "' is not allowed; allowed: " + allowed_words(out, spec) +
          (near.empty() ? "" : "; did you mean '" + near + "'?"));
}

void decode(
    const Input& in, std::optional<double>& out, const FieldSpec& spec) {
  if (in.node.IsNull()) {
    out.reset();
    return;
  }
  const std::string allowed = allowed_words(out, spec);
  const double v = parse_number<double>(in, "a number", allowed);
  check_range(in, v, spec, allowed);
  out = v;
}

void decode(const Input& in, std::vector<double>& out, const FieldSpec& spec) {
  const std::string allowed = allowed_words(out, spec);
  if (!in.node.IsSequence()) {
    fail(in, describe(in.node) + " is not a list", allowed);
  }
  if (spec.exact_length && in.node.size() != *spec.exact_length) {
    fail(
        in,
        "a list of " + std::to_string(in.node.size()) +
            " elements has the wrong length",
        allowed);
  }
  std::vector<double> values;
  for (size_t i = 0; i < in.node.size(); ++i) {
    const Input item = in.element(in.node[i], i);
    values.push_back(parse_number<double>(item, "a number", allowed));
    check_range(item, values.back(), spec, allowed);
  }
  out = std::move(values);
}

void decode(const Input& in, Integers& out, const FieldSpec& spec) {
  const std::string allowed = allowed_words(out, spec);
  if (!in.node.IsSequence()) {
    fail(in, describe(in.node) + " is not a list", allowed);
  }
  Integers values;
  for (size_t i = 0; i < in.node.size(); ++i) {
    const Input item = in.element(in.node[i], i);
    values.push_back(parse_number<int64_t>(item, "an integer", allowed));
    check_range(item, static_cast<double>(values.back()), spec, allowed);
  }
  out = std::move(values);
}

/// The strings of the list `in`; `allowed` words the field's errors.
Strings decode_strings(const Input& in, const std::string& allowed) {
  if (!in.node.IsSequence()) {
    fail(in, describe(in.node) + " is not a list", allowed);
  }
  Strings values;
  for (size_t i = 0; i < in.node.size(); ++i) {
    const Input item = in.element(in.node[i], i);
    if (!item.node.IsScalar()) {
      fail(item, describe(item.node) + " is not a string", allowed);
    }
    values.push_back(item.node.Scalar());
  }
  return values;
}

void decode(const Input& in, Strings& out, const FieldSpec& spec) {
  out = decode_strings(in, allowed_words(out, spec));
}

void decode(const Input& in, StringLists& out, const FieldSpec& spec) {
  const std::string allowed = allowed_words(out, spec);
  if (!in.node.IsSequence()) {
    fail(in, describe(in.node) + " is not a list", allowed);
  }
  StringLists lists;
  for (size_t i = 0; i < in.node.size(); ++i) {
    lists.push_back(decode_strings(in.element(in.node[i], i), allowed));
  }
  out = std::move(lists);
}

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  JobConfig defaults;
  defaults.visit_sections(
      [&](const char* name, auto&) { names.emplace_back(name); });
  return names;
}

/// Every key as (section, key), in visit order.
std::vector<std::pair<std::string, std::string>> all_keys() {
  std::vector<std::pair<std::string, std::string>> keys;
  JobConfig defaults;
  defaults.visit_sections([&](const char* section_name, auto& section) {
    section.visit([&](const char* name, auto&, const FieldSpec&) {
      keys.emplace_back(section_name, name);
    });
  });
  return keys;
}

/// The key path `key` most likely meant: a near miss in `section` first,
/// then the same or a close name in any section (a key put under the wrong
/// section). "" when nothing is close.
std::string suggest_key(const std::string& section, const std::string& key) {
  const auto keys = all_keys();
  std::vector<std::string> same_section;
  std::vector<std::string> leaves;
  for (const auto& [s, k] : keys) {
    if (s == section) {
      same_section.push_back(k);
    }
    leaves.push_back(k);
  }
  if (const auto near = closest_match(key, same_section); !near.empty()) {
    return section + "." + near;
  }
  const auto near = closest_match(key, leaves);
  for (const auto& [s, k] : keys) {
    if (!near.empty() && k == near) {
      return s + "." + k;
    }
  }
  return "";
}

[[noreturn]] void throw_unknown_key(
    const std::string& where,
    const std::string& section,
    const std::string& key) {
  const std::string path = section + "." + key;
  const std::string near = suggest_key(section, key);
  if (!near.empty()) {
    throw_config_error(
        where, "unknown key '" + path + "'; did you mean '" + near + "'?");
  }
  std::vector<std::string> names;
  for (const auto& [s, k] : all_keys()) {
    if (s == section) {
      names.push_back(k);
    }
  }
  throw_config_error(
      where,
      "unknown key '" + path + "'; allowed: one of " + join(names, ", "));
}

/// An unknown top-level name: a misspelt section, or a key missing its
/// section (`steps:` at the top level means `training.steps`).
[[noreturn]] void throw_unknown_top_level(
    const std::string& where, const std::string& name) {
  auto names = section_names();
  names.insert(names.begin(), {"builder", "plugins"});
  std::string near = closest_match(name, names);
  if (near.empty()) {
    near = suggest_key("", name);
  }
  throw_config_error(
      where,
      "unknown section '" + name + "'" +
          (near.empty() ? "; allowed: one of " + join(names, ", ")
                        : "; did you mean '" + near + "'?"));
}

/// Decodes one `section:` map of the file into `section`.
template <class Section>
void decode_section(
    const std::string& file,
    const std::string& section_name,
    const YAML::Node& node,
    const YAML::Mark& section_mark,
    Section& section,
    std::map<std::string, std::string>& origins) {
  if (node.IsNull()) {
    return;
  }
  if (!node.IsMap()) {
    throw_config_error(
        file_line(file, section_mark),
        section_name + ": " + describe(node) +
            " is not a map; allowed: a map of " + section_name + " keys");
  }
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const std::string path = section_name + "." + key;
    const std::string where = file_line(file, entry.first.Mark());
    // yaml-cpp keeps duplicate keys; the YAML spec forbids them, and the
    // last one silently winning hides edits. A later --config file setting
    // a key again is an overlay, not a duplicate.
    if (const auto first = origins.find(path);
        first != origins.end() && first->second.rfind(file + ":", 0) == 0) {
      throw_config_error(
          where,
          "duplicate key '" + path + "' (first set at " + first->second +
              "); allowed: each key once");
    }
    const bool found =
        with_field(section, key, [&](auto& field, const FieldSpec& spec) {
          decode(Input{entry.second, std::nullopt, where, path}, field, spec);
        });
    if (!found) {
      throw_unknown_key(where, section_name, key);
    }
    origins[path] = where;
  }
}

/// The `plugins:` list `paths`, each made absolute against `base` (the
/// config file's folder, or the working folder for an override).
Strings absolute_plugins(
    Strings paths,
    const std::filesystem::path& base,
    const std::string& where) {
  for (auto& p : paths) {
    if (p.empty()) {
      throw_config_error(
          where, "plugins: an empty path; allowed: paths of shared libraries");
    }
    p = (base / p).lexically_normal().string();
  }
  return paths;
}

/// The `plugins:` entry (`key`: `value`) of the file `path`.
void decode_plugins(
    const std::string& path,
    const YAML::Node& key,
    const YAML::Node& value,
    JobConfig& config) {
  const std::string where = file_line(path, key.Mark());
  Strings paths;
  decode(Input{value, std::nullopt, where, "plugins"}, paths, plugins_spec());
  config.plugins = absolute_plugins(
      std::move(paths), std::filesystem::absolute(path).parent_path(), where);
  config.origins["plugins"] = where;
}

void decode_file(const std::string& path, JobConfig& config) {
  const YAML::Node root = config_detail::parse_file(path);
  if (root.IsNull()) {
    return;
  }
  if (!root.IsMap()) {
    auto names = section_names();
    names.insert(names.begin(), {"builder", "plugins"});
    throw_config_error(
        file_line(path, root.Mark()),
        "the top level is " + describe(root) +
            ", not a map; allowed: a map with keys " + join(names, ", "));
  }
  std::map<std::string, std::string> sections_seen;
  for (const auto& entry : root) {
    const std::string name = entry.first.Scalar();
    const std::string where = file_line(path, entry.first.Mark());
    const auto [seen, fresh] = sections_seen.emplace(name, where);
    if (!fresh) {
      throw_config_error(
          where,
          "duplicate key '" + name + "' (first set at " + seen->second +
              "); allowed: each key once");
    }
    if (name == "builder") {
      decode(
          Input{entry.second, std::nullopt, where, name},
          config.builder,
          builder_spec());
      config.origins[name] = where;
      continue;
    }
    if (name == "plugins") {
      decode_plugins(path, entry.first, entry.second, config);
      continue;
    }
    const bool found = with_section(config, name, [&](auto& section) {
      decode_section(
          path,
          name,
          entry.second,
          entry.first.Mark(),
          section,
          config.origins);
    });
    if (!found) {
      throw_unknown_top_level(where, name);
    }
  }
}

/// Decodes an override value into `field`: verbatim for strings, as YAML
/// for everything else (so `[0.9,0.95]` and `null` work).
template <class T>
void decode_override(
    const std::string& where,
    const std::string& path,
    const std::string& value,
    T& field,
    const FieldSpec& spec) {
  if constexpr (std::is_same_v<T, std::string>) {
    decode(Input{YAML::Node(value), value, where, path}, field, spec);
  } else {
    YAML::Node node;
    try {
      node = YAML::Load(value);
    } catch (const YAML::ParserException& e) {
      throw_config_error(
          where,
          path + ": '" + value + "' is not valid YAML (" + e.msg +
              "); allowed: " + allowed_words(field, spec));
    }
    decode(Input{node, std::nullopt, where, path}, field, spec);
  }
}

void apply_override(const std::string& text, JobConfig& config) {
  // The CLI strips the leading "--"; tolerate callers that do not.
  const std::string body = text.rfind("--", 0) == 0 ? text.substr(2) : text;
  const std::string where = "--" + body;
  const size_t eq = body.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw_config_error(
        where,
        std::string("malformed override (") + (eq == 0 ? "no key" : "no '='") +
            "); allowed: --SECTION.KEY=VALUE");
  }
  const std::string path = body.substr(0, eq);
  const std::string value = body.substr(eq + 1);
  if (path == "builder") {
    decode_override(where, path, value, config.builder, builder_spec());
    config.origins[path] = where;
    return;
  }
  if (path == "plugins") {
    Strings paths;
    decode_override(where, path, value, paths, plugins_spec());
    config.plugins = absolute_plugins(
        std::move(paths), std::filesystem::current_path(), where);
    config.origins[path] = where;
    return;
  }
  const size_t dot = path.find('.');
  if (dot == std::string::npos) {
    const auto names = section_names();
    if (std::find(names.begin(), names.end(), path) != names.end()) {
      throw_config_error(
          where,
          "malformed override ('" + path + "' is a section); allowed: --" +
              path + ".KEY=VALUE");
    }
    throw_unknown_top_level(where, path);
  }
  const std::string section_name = path.substr(0, dot);
  const std::string key = path.substr(dot + 1);
  bool key_found = false;
  const bool section_found =
      with_section(config, section_name, [&](auto& section) {
        key_found =
            with_field(section, key, [&](auto& field, const FieldSpec& spec) {
              decode_override(where, path, value, field, spec);
            });
      });
  if (!section_found) {
    throw_unknown_top_level(where, section_name);
  }
  if (!key_found) {
    throw_unknown_key(where, section_name, key);
  }
  config.origins[path] = where;
}

/// Checks that need more than one key.
void check_consistency(const JobConfig& config) {
  if (const auto problem =
          config.lr_scheduler.phases_problem(config.training.steps)) {
    throw_config_error(
        config.first_origin(
            {problem->key.c_str(),
             "lr_scheduler.warmup_steps",
             "training.steps"}),
        problem->message);
  }
  if (const auto problem = degrees_problem(config.mesh_degrees())) {
    throw_config_error(config.origin(problem->key), problem->message);
  }
  if (const auto problem = config.validation.data_problem(config.training)) {
    throw_config_error(
        config.first_origin(
            {"validation.dataset_path",
             "validation.enable",
             "training.dataset_path"}),
        problem->message);
  }
  const ParallelismConfig& p = config.parallelism;
  // The stages are known here without pipelining (one) and for a
  // generator's schedule of a set degree; the builders check the rest
  // against the schedule.
  int64_t num_stages = 0;
  if (p.pipeline_parallel_degree == 1) {
    num_stages = 1;
  } else if (
      p.pipeline_parallel_degree > 1 &&
      p.pipeline_parallel_schedule_csv.empty()) {
    num_stages =
        p.pipeline_parallel_degree * p.pipeline_parallel_stages_per_rank;
  }
  if (const auto problem =
          config.activation_checkpoint.stages_problem(num_stages)) {
    throw_config_error(config.origin(problem->key), problem->message);
  }
}

/// Each value of a field whose spec names a registry must be registered
/// there (when that registry exists in this process); the value takes the
/// registered spelling.
void check_registered(JobConfig& config) {
  config.visit_sections([&](const char* section_name, auto& section) {
    section.visit([&](const char* name, auto& field, const FieldSpec& spec) {
      using T = std::decay_t<decltype(field)>;
      if constexpr (
          std::is_same_v<T, std::string> || std::is_same_v<T, Strings>) {
        if (spec.registry == nullptr) {
          return;
        }
        const auto known = RegistryIndex::names(spec.registry);
        if (!known) {
          return;
        }
        const std::string key = std::string(section_name) + "." + name;
        const auto check = [&](std::string& value) {
          for (const auto& k : *known) {
            if (to_lower(k) == to_lower(value)) {
              value = k;
              return;
            }
          }
          const std::string near = closest_match(value, *known);
          throw_config_error(
              config.origin(key),
              key + ": '" + value + "' is not a registered " + spec.registry +
                  "; allowed: one of " + join(*known, ", ") +
                  (near.empty() ? "" : "; did you mean '" + near + "'?"));
        };
        if constexpr (std::is_same_v<T, std::string>) {
          check(field);
        } else {
          for (auto& value : field) {
            check(value);
          }
        }
      }
    });
  });
}

}  // namespace

JobConfig load_job_config(
    const std::string& path, const std::vector<std::string>& overrides) {
  return load_job_config(
      path.empty() ? std::vector<std::string>{}
                   : std::vector<std::string>{path},
      overrides);
}

std::vector<std::string> plugin_paths(
    const std::vector<std::string>& paths,
    const std::vector<std::string>& overrides) {
  // Only the plugins key of each file and override: the rest may name what
  // the plugins register.
  JobConfig config;
  for (const auto& path : paths) {
    const YAML::Node root = config_detail::parse_file(path);
    if (root.IsMap()) {
      for (const auto& entry : root) {
        if (entry.first.Scalar() == "plugins") {
          decode_plugins(path, entry.first, entry.second, config);
        }
      }
    }
  }
  for (const auto& text : overrides) {
    const std::string body = text.rfind("--", 0) == 0 ? text.substr(2) : text;
    if (body.rfind("plugins=", 0) == 0) {
      apply_override(text, config);
    }
  }
  return config.plugins;
}

JobConfig load_job_config(
    const std::vector<std::string>& paths,
    const std::vector<std::string>& overrides) {
  JobConfig config;
  for (const auto& path : paths) {
    decode_file(path, config);
  }
  for (const auto& text : overrides) {
    apply_override(text, config);
  }
  check_consistency(config);
  check_registered(config);
  return config;
}

}  // namespace baton
