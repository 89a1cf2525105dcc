#include <mutex>
#include <stdexcept>

#include "config/job_config.h"

namespace baton {

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

}  // namespace baton
