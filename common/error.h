#pragma once

#include <stdexcept>
#include <string>

namespace baton {

/// Bad usage or bad configuration: the command line, a config file or an
/// override. The CLI maps it to exit code 2. The message names the key, the
/// bad value and what is allowed (and, for YAML, the file and line).
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message)
      : std::runtime_error(message) {}
};

/// A problem with a config value, found by a check that both the config
/// load (which adds the key's origin) and the class using the value run.
struct ConfigProblem {
  /// The key path at fault ("lr_scheduler.warmup_steps").
  std::string key;
  /// "lr_scheduler.warmup_steps: 200 exceeds training.steps 100; allowed:
  /// at most training.steps".
  std::string message;
};

/// Throws ConfigError with `where: message` (or just `message` when `where`
/// is empty). `where` is a "file:line" or "--override" origin.
[[noreturn]] void throw_config_error(
    const std::string& where, const std::string& message);

}  // namespace baton
