#include <mutex>
#include <stdexcept>

#include "config/job_config.h"

namespace baton {

namespace {

std::mutex& sections_mutex() {
  static std::mutex mutex;
  return mutex;
}

/// Node-based, so a section handed out by reference stays where it is.
std::map<std::string, RegisteredSection>& sections() {
  static std::map<std::string, RegisteredSection> registered;
  return registered;
}

bool same_fields(
    const std::vector<SectionField>& a, const std::vector<SectionField>& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].value != b[i].value) {
      return false;
    }
  }
  return true;
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

void register_config_section(
    const std::string& name, std::vector<SectionField> fields) {
  if (name.empty() || name == "builder") {
    throw std::logic_error(
        "[config] register_config_section: '" + name +
        "' cannot name a section");
  }
  bool built_in = false;
  JobConfig defaults;
  defaults.visit_sections([&](const char* section, auto& s) {
    using S = std::decay_t<decltype(s)>;
    built_in =
        built_in || (!std::is_same_v<S, RegisteredSection> && name == section);
  });
  if (built_in) {
    throw std::logic_error(
        "[config] register_config_section: '" + name +
        "' is a built-in section");
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (fields[i].name == fields[j].name) {
        throw std::logic_error(
            "[config] register_config_section: " + name + "." + fields[i].name +
            " twice");
      }
    }
  }
  std::lock_guard lock(sections_mutex());
  auto& registered = sections();
  if (const auto it = registered.find(name); it != registered.end()) {
    if (!same_fields(it->second.fields, fields)) {
      throw std::logic_error(
          "[config] register_config_section: '" + name +
          "' is registered already, with other keys");
    }
    return;
  }
  registered.emplace(name, RegisteredSection{std::move(fields)});
}

const std::map<std::string, RegisteredSection>& registered_config_sections() {
  return sections();
}

JobConfig::JobConfig() {
  std::lock_guard lock(sections_mutex());
  sections = baton::sections();
}

const RegisteredSection& JobConfig::section(const std::string& name) const {
  if (const auto it = sections.find(name); it != sections.end()) {
    return it->second;
  }
  std::lock_guard lock(sections_mutex());
  const auto& registered = baton::sections();
  if (const auto it = registered.find(name); it != registered.end()) {
    return it->second;
  }
  throw std::logic_error(
      "[JobConfig] section: '" + name + "' is not a registered section");
}

}  // namespace baton
