// Reading a config file: the file's YAML, or an error naming what keeps
// it from being read (the closest file of its folder, a tab in the
// indentation).

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/text.h"
#include "config/config_detail.h"

namespace baton {
namespace {

/// Why `path` cannot be read as a config file, with the closest file of
/// its folder (or the missing folder).
[[noreturn]] void throw_unreadable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path folder = p.has_parent_path() ? p.parent_path() : ".";
  if (fs::is_directory(p, ec)) {
    throw_config_error(
        path, "is a folder, not a config file; allowed: a readable YAML file");
  }
  if (fs::exists(p, ec)) {
    throw_config_error(
        path,
        "cannot read the config file (no permission to read it); allowed: a "
        "readable YAML file");
  }
  if (!fs::is_directory(folder, ec)) {
    throw_config_error(
        path,
        "cannot read the config file: the folder " + folder.string() +
            " does not exist; allowed: a readable YAML file");
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    if (entry.is_regular_file(ec)) {
      files.push_back(entry.path().filename().string());
    }
  }
  const std::string near = closest_match(p.filename().string(), files);
  throw_config_error(
      path,
      "cannot read the config file; allowed: a readable YAML file" +
          (near.empty()
               ? std::string()
               : "; did you mean '" + (folder / near).string() + "'?"));
}

}  // namespace

YAML::Node config_detail::parse_file(const std::string& path) {
  std::ifstream in(path);
  if (!in || std::filesystem::is_directory(path)) {
    throw_unreadable(path);
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    return YAML::Load(text.str());
  } catch (const YAML::ParserException& e) {
    // yaml-cpp reports a tab in the indentation as some other error on a
    // later line: name the tab where it is.
    std::istringstream lines(text.str());
    std::string line;
    for (int n = 0; std::getline(lines, line) && n <= e.mark.line + 1; ++n) {
      const size_t indent = line.find_first_not_of(" \t");
      if (line.substr(0, indent).find('\t') != std::string::npos) {
        throw_config_error(
            path + ":" + std::to_string(n + 1),
            "invalid YAML: a tab in the indentation (yaml-cpp: " + e.msg +
                "); allowed: spaces, YAML does not indent with tabs");
      }
    }
    throw_config_error(
        path + ":" + std::to_string(e.mark.line + 1), "invalid YAML: " + e.msg);
  }
}

}  // namespace baton
