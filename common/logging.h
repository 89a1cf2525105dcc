#pragma once

// The console: how Baton's log reads to a person. glog stays the logging
// API (LOG(INFO), LOG(WARNING), ...) and, with GLOG_log_dir set, writes its
// own files underneath; what reaches stderr goes through one sink that
// writes "HH:MM:SS r1 trainer  message": the time, the rank where the job
// has several (the --nproc launcher prefixes its own "[rankN]: " instead),
// the folder the line comes from as a short tag, and the message wrapped
// at 120 columns. metrics.log_level / --log-level choose how much.

#include <cstdint>
#include <string>

namespace baton {

/// How much of the log reaches the console.
enum class LogLevel {
  /// Everything, VLOG(1) included.
  kDebug,
  /// The default: start-up facts, progress, warnings.
  kInfo,
  /// Progress lines (steps, phases, how the job ended), warnings, errors.
  kProgress,
  /// Warnings and errors.
  kWarning,
};

/// The names metrics.log_level and --log-level take, in LogLevel's order.
const char* const* log_level_names();
inline constexpr int kLogLevelCount = 4;

/// `name` as a LogLevel; std::invalid_argument naming the allowed ones.
LogLevel parse_log_level(const std::string& name);

/// Installs the console sink on glog (idempotent): glog itself writes no
/// stderr, and log files only where GLOG_log_dir asks for them.
void init_logging(const char* program);

/// Sets the console's level (default kInfo).
void set_log_level(LogLevel level);
LogLevel log_level();

/// The rank this process logs as: shown where `world_size` > 1 and no
/// launcher prefixes the lines itself. Also what log_facts() reads.
void set_log_rank(int64_t rank, int64_t world_size);

/// True on the rank that states the job's start-up facts (rank 0): facts
/// every rank shares are logged once per job, not once per rank.
bool log_facts();

/// Logs `line` as progress: shown at LogLevel::kProgress and below.
void log_progress(const char* file, int line, const std::string& text);
#define BATON_LOG_PROGRESS(text) \
  ::baton::log_progress(__FILE__, __LINE__, (text))

/// Redraws a status line in place on a terminal (the step line between
/// logged steps); nothing where the console is not one. The next line
/// logged replaces it.
void log_status(const std::string& text);

/// Clears a status line log_status left on the terminal (before an error
/// is printed).
void clear_status();

/// The console's width for a message: 120 columns, less what a launcher's
/// prefix takes.
int64_t console_width();

/// Formats one console line: `tag` (a source path's folder) and the
/// message wrapped at `width`, continuation lines indented under it. For
/// tests.
std::string format_console_line(
    const std::string& time,
    const std::string& rank,
    const std::string& tag,
    const std::string& message,
    int64_t width);

/// The short tag of a source file: the folder it is in ("trainer" for
/// ".../trainer/metrics.cpp"), "parallel/dist" shortened to its last part.
std::string log_tag(const char* path);

/// Set by the --nproc launcher in its ranks' environment: it prefixes their
/// lines with "[rankN]: ". Its value is "tty" where the launcher's stderr
/// is a terminal (status lines are then sent to it starting with '\r').
inline constexpr const char* kLauncherConsoleEnv = "BATON_LAUNCHER_CONSOLE";

}  // namespace baton
