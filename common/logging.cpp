#include "common/logging.h"

#include <glog/logging.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string_view>

namespace baton {

namespace {

constexpr int64_t kConsoleColumns = 120;
// "[rank12]: ": what the --nproc launcher puts before each line.
constexpr int64_t kLauncherPrefix = 10;

const char* const kLevelNames[kLogLevelCount] = {
    "debug", "info", "progress", "warning"};

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<int64_t> g_rank{0};
std::atomic<int64_t> g_world{1};
// Set while log_progress's message is being sent, on its thread: glog calls
// the sink from the logging thread, inside the LogMessage's destructor.
thread_local bool t_progress = false;

/// Where the console is: "tty" / "pipe" under the launcher, else this
/// process's own stderr.
struct Console {
  bool launched = false;
  bool terminal = false;
};

const Console& console() {
  static const Console c = [] {
    Console out;
    if (const char* env = std::getenv(kLauncherConsoleEnv)) {
      out.launched = true;
      out.terminal = std::string_view(env) == "tty";
    } else {
      out.terminal = ::isatty(STDERR_FILENO) == 1;
    }
    return out;
  }();
  return c;
}

/// Serialises the console's writes; remembers a status line on screen.
std::mutex g_console_mutex;
bool g_status_shown = false;

void write_stderr(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n =
        ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) {
      return;
    }
    done += static_cast<size_t>(n);
  }
}

/// Before a line: takes a status line off the screen (caller holds the
/// mutex). Under the launcher the launcher does it.
void clear_status_locked() {
  if (g_status_shown && !console().launched) {
    write_stderr("\r\033[K");
  }
  g_status_shown = false;
}

std::string two_digits(int n) {
  char buffer[4];
  std::snprintf(buffer, sizeof(buffer), "%02d", n);
  return buffer;
}

std::string rank_tag() {
  const int64_t world = g_world.load();
  if (world <= 1 || console().launched) {
    return "";
  }
  return "r" + std::to_string(g_rank.load());
}

class ConsoleSink : public google::LogSink {
 public:
  void send(
      google::LogSeverity severity,
      const char* full_filename,
      const char* /*base_filename*/,
      int /*line*/,
      const google::LogMessageTime& time,
      const char* message,
      size_t message_len) override {
    const LogLevel level = g_level.load();
    const bool shown =
        severity >= google::GLOG_WARNING ||
        (t_progress ? level <= LogLevel::kProgress : level <= LogLevel::kInfo);
    if (!shown) {
      return;
    }
    std::string text(message, message_len);
    if (severity == google::GLOG_WARNING) {
      text = "warning: " + text;
    } else if (severity >= google::GLOG_ERROR) {
      text = "error: " + text;
    }
    const std::string clock = two_digits(time.hour()) + ":" +
                              two_digits(time.min()) + ":" +
                              two_digits(time.sec());
    const std::string line = format_console_line(
        clock, rank_tag(), log_tag(full_filename), text, console_width());
    std::lock_guard<std::mutex> lock(g_console_mutex);
    clear_status_locked();
    write_stderr(line);
  }
};

}  // namespace

const char* const* log_level_names() {
  return kLevelNames;
}

LogLevel parse_log_level(const std::string& name) {
  for (int i = 0; i < kLogLevelCount; ++i) {
    if (name == kLevelNames[i]) {
      return static_cast<LogLevel>(i);
    }
  }
  throw std::invalid_argument(
      "'" + name + "' is not allowed; allowed: debug, info, progress, warning");
}

void init_logging(const char* program) {
  static std::once_flag once;
  std::call_once(once, [program] {
    FLAGS_logtostderr = false;
    FLAGS_alsologtostderr = false;
    // glog writes no stderr of its own: the sink is the console.
    FLAGS_stderrthreshold = google::NUM_SEVERITIES;
    if (!google::IsGoogleLoggingInitialized()) {
      google::InitGoogleLogging(program);
    }
    if (FLAGS_log_dir.empty()) {
      // No GLOG_log_dir: no files (glog's default would be /tmp).
      for (int s = 0; s < google::NUM_SEVERITIES; ++s) {
        google::SetLogDestination(s, "");
      }
    }
    static ConsoleSink sink;
    google::AddLogSink(&sink);
  });
}

void set_log_level(LogLevel level) {
  g_level = level;
  FLAGS_v = level == LogLevel::kDebug ? 1 : 0;
}

LogLevel log_level() {
  return g_level.load();
}

void set_log_rank(int64_t rank, int64_t world_size) {
  g_rank = rank;
  g_world = world_size;
}

bool log_facts() {
  return g_rank.load() == 0;
}

void log_progress(const char* file, int line, const std::string& text) {
  t_progress = true;
  google::LogMessage(file, line, google::GLOG_INFO).stream() << text;
  t_progress = false;
}

void log_status(const std::string& text) {
  if (!console().terminal || g_level.load() > LogLevel::kProgress) {
    return;
  }
  std::string line = text.substr(
      0, static_cast<size_t>(std::max<int64_t>(0, console_width() - 2)));
  std::lock_guard<std::mutex> lock(g_console_mutex);
  if (console().launched) {
    // The launcher redraws a line that starts with '\r' in place.
    write_stderr("\r" + line + "\n");
  } else {
    write_stderr("\r\033[K" + line);
  }
  g_status_shown = true;
}

void clear_status() {
  std::lock_guard<std::mutex> lock(g_console_mutex);
  clear_status_locked();
}

int64_t console_width() {
  return console().launched ? kConsoleColumns - kLauncherPrefix
                            : kConsoleColumns;
}

std::string format_console_line(
    const std::string& time,
    const std::string& rank,
    const std::string& tag,
    const std::string& message,
    int64_t width) {
  std::string prefix = time + " ";
  if (!rank.empty()) {
    prefix += rank + " ";
  }
  // Tags up to 8 characters keep the messages in one column.
  // Continuation lines start at the message column (a longer tag's first
  // line starts later), so that a reader of the log can join them back.
  const size_t indent = prefix.size() + 9;
  prefix += tag + std::string(tag.size() < 8 ? 9 - tag.size() : 1, ' ');
  const size_t room =
      std::max<size_t>(20, static_cast<size_t>(width) - prefix.size());
  std::string out;
  std::string_view rest(message);
  bool first = true;
  while (true) {
    // The message's own line breaks stay; each piece wraps at `room`.
    const size_t newline = rest.find('\n');
    std::string_view piece = rest.substr(0, newline);
    do {
      size_t cut = piece.size();
      if (cut > room) {
        cut = piece.rfind(' ', room);
        if (cut == std::string_view::npos || cut == 0) {
          cut = room;  // One word longer than the line: cut it.
        }
      }
      out += (first ? prefix : std::string(indent, ' '));
      out += std::string(piece.substr(0, cut));
      out += '\n';
      first = false;
      piece.remove_prefix(cut);
      while (!piece.empty() && piece.front() == ' ') {
        piece.remove_prefix(1);
      }
    } while (!piece.empty());
    if (newline == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(newline + 1);
  }
  return out;
}

std::string log_tag(const char* path) {
  std::string_view p(path == nullptr ? "" : path);
  const size_t slash = p.rfind('/');
  if (slash == std::string_view::npos) {
    return "baton";
  }
  const std::string_view folder = p.substr(0, slash);
  const size_t before = folder.rfind('/');
  return std::string(
      before == std::string_view::npos ? folder : folder.substr(before + 1));
}

}  // namespace baton
