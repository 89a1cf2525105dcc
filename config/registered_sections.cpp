#include <mutex>
#include <stdexcept>

#include "config/config_detail.h"
#include "config/job_config.h"

namespace baton {

using config_detail::with_field;
using config_detail::with_section;

namespace {

/// The built-in section that registered keys may join (parallelisms put
/// their degrees there).
constexpr const char* kExtensible = "parallelism";

std::mutex& sections_mutex() {
  static std::mutex mutex;
  return mutex;
}

/// Node-based, so a section handed out by reference stays where it is.
std::map<std::string, RegisteredSection>& sections() {
  static std::map<std::string, RegisteredSection> registered;
  return registered;
}

[[noreturn]] void refuse(const std::string& what) {
  throw std::logic_error("[config] register_config_section: " + what);
}

}  // namespace

const ConfigValue& RegisteredSection::value(const std::string& key) const {
  for (const auto& field : fields) {
    if (field.name == key) {
      return field.value;
    }
  }
  throw std::logic_error(
      "[RegisteredSection] " + key + ": no such key in the section");
}

bool RegisteredSection::has(const std::string& key) const {
  for (const auto& field : fields) {
    if (field.name == key) {
      return true;
    }
  }
  return false;
}

void register_config_section(
    const std::string& name, std::vector<SectionField> fields) {
  if (name.empty() || name == "builder") {
    refuse("'" + name + "' cannot name a section");
  }
  // The built-in sections and their keys, as JobConfig declares them.
  std::vector<std::string> built_in_keys;
  bool built_in = false;
  JobConfig defaults;
  defaults.visit_sections([&](const char* section, auto& s) {
    using S = std::decay_t<decltype(s)>;
    if (!std::is_same_v<S, RegisteredSection> && name == section) {
      built_in = true;
      s.visit([&](const char* key, auto&, const FieldSpec&) {
        built_in_keys.emplace_back(key);
      });
    }
  });
  if (built_in && name != kExtensible) {
    refuse(
        "'" + name + "' is a built-in section; allowed: a new section, or " +
        kExtensible);
  }
  std::lock_guard lock(sections_mutex());
  RegisteredSection& section = sections()[name];
  for (auto& field : fields) {
    for (const auto& key : built_in_keys) {
      if (key == field.name) {
        refuse(name + "." + field.name + " is a built-in key");
      }
    }
    bool known = false;
    for (const auto& existing : section.fields) {
      if (existing.name == field.name) {
        if (existing.value != field.value ||
            existing.spec.help != field.spec.help) {
          refuse(name + "." + field.name + " is registered already, otherwise");
        }
        known = true;
      }
    }
    if (!known) {
      section.fields.push_back(std::move(field));
    }
  }
}

JobConfig::JobConfig() {
  add_registered_keys();
}

void JobConfig::add_registered_keys() {
  std::lock_guard lock(sections_mutex());
  for (const auto& [name, section] : baton::sections()) {
    RegisteredSection& mine =
        name == kExtensible ? parallelism.registered : sections[name];
    for (const auto& field : section.fields) {
      if (!mine.has(field.name)) {
        mine.fields.push_back(field);
      }
    }
  }
}

const RegisteredSection& JobConfig::section(const std::string& name) const {
  const RegisteredSection* loaded = nullptr;
  if (name == kExtensible) {
    loaded = &parallelism.registered;
  } else if (const auto it = sections.find(name); it != sections.end()) {
    loaded = &it->second;
  }
  if (loaded != nullptr && !loaded->fields.empty()) {
    return *loaded;
  }
  std::lock_guard lock(sections_mutex());
  const auto& registered = baton::sections();
  if (const auto it = registered.find(name); it != registered.end()) {
    // Registered after this config was made: its defaults.
    return it->second;
  }
  throw std::logic_error(
      "[JobConfig] section: '" + name + "' is not a registered section");
}

std::optional<int64_t> JobConfig::integer(const std::string& key_path) const {
  const auto dot = key_path.find('.');
  if (dot == std::string::npos) {
    return std::nullopt;
  }
  std::optional<int64_t> out;
  // visit is non-const (it also decodes); nothing here writes.
  auto& config = const_cast<JobConfig&>(*this);
  const std::string section_name = key_path.substr(0, dot);
  const std::string key = key_path.substr(dot + 1);
  bool found = false;
  with_section(config, section_name, [&](auto& section) {
    found = with_field(section, key, [&](auto& field, auto&) {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, int64_t>) {
        out = field;
      }
    });
  });
  if (!found) {
    // A key registered after this config was made: its default.
    std::lock_guard lock(sections_mutex());
    const auto& registered = baton::sections();
    if (const auto it = registered.find(section_name);
        it != registered.end() && it->second.has(key)) {
      if (const auto* v = std::get_if<int64_t>(&it->second.value(key))) {
        out = *v;
      }
    }
  }
  return out;
}

std::vector<std::pair<std::string, int64_t>> JobConfig::mesh_degrees() const {
  std::vector<std::pair<std::string, int64_t>> out;
  auto& config = const_cast<JobConfig&>(*this);
  config.visit_sections([&](const char* section_name, auto& section) {
    section.visit([&](const char* name, auto& field, const FieldSpec& spec) {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, int64_t>) {
        if (spec.is_mesh_degree) {
          out.emplace_back(std::string(section_name) + "." + name, field);
        }
      }
    });
  });
  return out;
}

void JobConfig::set_integer(const std::string& key_path, int64_t value) {
  const auto dot = key_path.find('.');
  const std::string section_name =
      dot == std::string::npos ? key_path : key_path.substr(0, dot);
  const std::string key =
      dot == std::string::npos ? std::string() : key_path.substr(dot + 1);
  bool done = false;
  const auto set = [&] {
    with_section(*this, section_name, [&](auto& section) {
      with_field(section, key, [&](auto& field, auto&) {
        if constexpr (std::is_same_v<std::decay_t<decltype(field)>, int64_t>) {
          field = value;
          done = true;
        }
      });
    });
  };
  set();
  if (!done) {
    // A key registered after this config was made.
    add_registered_keys();
    set();
  }
  if (!done) {
    throw std::logic_error(
        "[JobConfig] set_integer: '" + key_path +
        "' is not an integer key of the config");
  }
}

}  // namespace baton
