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

const ConfigValue& RegisteredSection::find(const std::string& key) const {
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

const std::map<std::string, RegisteredSection>& registered_config_sections() {
  return sections();
}

JobConfig::JobConfig() {
  std::lock_guard lock(sections_mutex());
  for (const auto& [name, section] : baton::sections()) {
    if (name == kExtensible) {
      parallelism.registered = section;
    } else {
      sections.emplace(name, section);
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
    const auto& registered = registered_config_sections();
    if (const auto it = registered.find(section_name); it != registered.end()) {
      for (const auto& field : it->second.fields) {
        if (field.name == key) {
          if (const auto* v = std::get_if<int64_t>(&field.value)) {
            out = *v;
          }
        }
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
    // A key registered after this config was made: take its section as
    // registered now, keeping the values already set, then set the key.
    JobConfig fresh;
    if (section_name == "parallelism") {
      for (const auto& f : fresh.parallelism.registered.fields) {
        if (!parallelism.registered.has(f.name)) {
          parallelism.registered.fields.push_back(f);
        }
      }
    } else if (fresh.sections.count(section_name) > 0) {
      auto& mine = sections[section_name];
      for (const auto& f : fresh.sections.at(section_name).fields) {
        if (!mine.has(f.name)) {
          mine.fields.push_back(f);
        }
      }
    }
    set();
  }
  if (!done) {
    throw std::logic_error(
        "[JobConfig] set_integer: '" + key_path +
        "' is not an integer key of the config");
  }
}

}  // namespace baton
