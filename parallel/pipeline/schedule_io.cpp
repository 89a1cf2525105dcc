#include "parallel/pipeline/schedule_io.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/text.h"
#include "parallel/pipeline/lowering.h"
#include "parallel/pipeline/placement.h"
#include "parallel/pipeline/validation.h"

namespace baton::pipeline {

namespace {

std::string slot_text(const std::optional<Action>& slot) {
  return slot ? slot->str() : "";
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) {
    return "";
  }
  const size_t end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

std::string fixed(double value, int digits) {
  char buf[64];
  const auto end = std::to_chars(
      buf, buf + sizeof(buf), value, std::chars_format::fixed, digits);
  return std::string(buf, end.ptr);
}

// Numbers as short as they can be written: 3, 2.5.
std::string number(double value) {
  char buf[64];
  const auto end = std::to_chars(
      buf, buf + sizeof(buf), value, std::chars_format::general, 6);
  return std::string(buf, end.ptr);
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

struct Rgb {
  int r, g, b;
};

Rgb kind_colour(ActionKind kind) {
  switch (kind) {
    case ActionKind::kF:
      return {68, 114, 196};  // blue
    case ActionKind::kB:
      return {84, 160, 72};  // green
    case ActionKind::kI:
      return {38, 166, 154};  // teal
    case ActionKind::kW:
      return {237, 125, 49};  // orange
    default:
      return {120, 120, 120};
  }
}

// Mixes `c` with white by `amount` in [0, 1].
std::string css(Rgb c, double amount) {
  const auto mix = [&](int x) {
    return static_cast<int>(std::lround(x + (255 - x) * amount));
  };
  std::string out = "#";
  for (const int channel : {mix(c.r), mix(c.g), mix(c.b)}) {
    char hex[2];
    std::to_chars(hex, hex + 2, channel / 16, 16);
    std::to_chars(hex + 1, hex + 2, channel % 16, 16);
    out.append(hex, 2);
  }
  return out;
}

// Local chunk index of each stage (0 for the rank's first stage).
std::vector<int64_t> chunk_of_stage(const Schedule& schedule) {
  std::vector<int64_t> out(schedule.num_stages, 0);
  for (int64_t r = 0; r < schedule.pp; ++r) {
    const auto stages = stages_of_rank(schedule.stage_to_rank, r);
    for (size_t k = 0; k < stages.size(); ++k) {
      out[stages[k]] = static_cast<int64_t>(k);
    }
  }
  return out;
}

// A round tick spacing (1, 2 or 5 times a power of ten) giving about a dozen
// ticks over `span`.
double tick_step(double span) {
  const double raw = span / 12.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double factor : {1.0, 2.0, 5.0}) {
    if (factor * magnitude >= raw) {
      return factor * magnitude;
    }
  }
  return 10.0 * magnitude;
}

}  // namespace

std::string schedule_to_text(
    const Schedule& schedule, const SimulationResult* simulation) {
  // Each column as wide as its widest cell, so slots line up across ranks.
  std::vector<size_t> width;
  for (const auto& rank : schedule.ranks) {
    width.resize(std::max(width.size(), rank.size()), 1);
    for (size_t i = 0; i < rank.size(); ++i) {
      width[i] = std::max(width[i], slot_text(rank[i]).size());
    }
  }
  const std::string label_width =
      std::to_string(std::max<int64_t>(schedule.pp - 1, 0));
  std::ostringstream out;
  out << schedule.name << ": pp=" << schedule.pp
      << " stages_per_rank=" << schedule.stages_per_rank
      << " stages=" << schedule.num_stages
      << " microbatches=" << schedule.microbatches
      << (schedule.has_comms() ? " (with comms)" : " (compute only)") << '\n';
  for (int64_t r = 0; r < schedule.pp; ++r) {
    std::string line = "rank " + std::to_string(r) + ":";
    line.append(label_width.size() - std::to_string(r).size(), ' ');
    for (size_t i = 0; i < schedule.ranks[r].size(); ++i) {
      const auto& slot = schedule.ranks[r][i];
      std::string cell = slot ? slot->str() : "_";
      cell.append(width[i] - cell.size(), ' ');
      line += " " + cell;
    }
    while (!line.empty() && line.back() == ' ') {
      line.pop_back();
    }
    out << line << '\n';
  }
  if (simulation != nullptr) {
    out << "makespan " << number(simulation->makespan) << ", "
        << simulation->steps << " lockstep steps\n";
    for (int64_t r = 0; r < schedule.pp; ++r) {
      out << "rank " << r << ": bubble "
          << fixed(simulation->bubble_fraction[r], 4) << ", peak activations "
          << simulation->peak_activations[r] << '\n';
    }
    if (simulation->deadlock) {
      out << simulation->deadlock->message() << '\n';
    }
  }
  return out.str();
}

std::string schedule_to_csv(const Schedule& schedule) {
  std::string out;
  for (const auto& rank : schedule.ranks) {
    for (size_t i = 0; i < rank.size(); ++i) {
      if (i > 0) {
        out += ',';
      }
      out += slot_text(rank[i]);
    }
    out += '\n';
  }
  return out;
}

namespace {

/// The CSV's rows, one per rank; trailing blank lines dropped (a file ends
/// with one newline, not an empty rank).
std::vector<std::string> csv_rows(
    const std::string& text, const std::string& origin) {
  std::vector<std::string> lines;
  {
    std::string line;
    std::istringstream in(text);
    while (std::getline(in, line)) {
      lines.push_back(line);
    }
  }
  while (!lines.empty() && trim(lines.back()).empty()) {
    lines.pop_back();
  }
  if (lines.empty()) {
    throw ConfigError(
        origin + ": no rows; expected one row of actions per rank");
  }
  return lines;
}

/// The actions of row `r` (rank r), an empty cell an empty slot; raises
/// `max_stage` and `max_mb` to the highest indices the row names.
ActionList csv_row_actions(
    const std::string& line,
    size_t r,
    const std::string& origin,
    int64_t& max_stage,
    int64_t& max_mb) {
  ActionList actions;
  std::istringstream row(line);
  std::string cell;
  size_t column = 0;
  while (std::getline(row, cell, ',')) {
    ++column;
    cell = trim(cell);
    if (cell.empty()) {
      actions.emplace_back();
      continue;
    }
    try {
      const Action a = parse_action(cell);
      actions.emplace_back(a);
      max_stage = std::max({max_stage, a.stage, a.backward_stage});
      max_mb = std::max({max_mb, a.microbatch, a.backward_microbatch});
    } catch (const ConfigError& e) {
      throw ConfigError(
          origin + ": row " + std::to_string(r + 1) + " (rank " +
          std::to_string(r) + "), column " + std::to_string(column) + ": " +
          e.what());
    }
  }
  return actions;
}

/// Every stage and microbatch has an action of its own, so an index beyond
/// the count of cells is a typo, refused before anything is sized by it.
void check_indices_fit_cells(
    const std::vector<ActionList>& ranks,
    int64_t max_stage,
    int64_t max_mb,
    const std::string& origin) {
  int64_t cells = 0;
  for (const auto& rank : ranks) {
    cells += static_cast<int64_t>(rank.size());
  }
  for (const auto& [what, max] :
       {std::pair{"stage", max_stage}, std::pair{"microbatch", max_mb}}) {
    if (max >= cells) {
      throw ConfigError(
          origin + ": " + what + " " + std::to_string(max) +
          " is out of range; allowed: " + what + " indices below the " +
          std::to_string(cells) +
          " cells of the file (each one needs actions of its own)");
    }
  }
}

/// The stages every rank of `schedule` holds, when each holds as many;
/// else 0.
int64_t uniform_stages_per_rank(const Schedule& schedule) {
  int64_t per_rank = schedule.num_stages % schedule.pp == 0
                         ? schedule.num_stages / schedule.pp
                         : 0;
  for (int64_t r = 0; r < schedule.pp && per_rank > 0; ++r) {
    if (static_cast<int64_t>(
            stages_of_rank(schedule.stage_to_rank, r).size()) != per_rank) {
      per_rank = 0;
    }
  }
  return per_rank;
}

}  // namespace

Schedule schedule_from_csv(const std::string& text, const std::string& origin) {
  const std::vector<std::string> lines = csv_rows(text, origin);
  Schedule out;
  out.name = "custom";
  out.pp = static_cast<int64_t>(lines.size());
  out.ranks.resize(lines.size());
  int64_t max_stage = -1;
  int64_t max_mb = -1;
  for (size_t r = 0; r < lines.size(); ++r) {
    out.ranks[r] = csv_row_actions(lines[r], r, origin, max_stage, max_mb);
  }
  if (max_stage < 0 || max_mb < 0) {
    throw ConfigError(origin + ": no compute actions");
  }
  check_indices_fit_cells(out.ranks, max_stage, max_mb, origin);
  out.num_stages = max_stage + 1;
  out.microbatches = max_mb + 1;
  try {
    out.stage_to_rank = placement_from_actions(out.ranks, out.num_stages);
  } catch (const ScheduleError& e) {
    throw ScheduleError(origin + ": " + e.what());
  }
  out.stages_per_rank = uniform_stages_per_rank(out);
  return out;
}

Schedule load_schedule_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(
        "[schedule] cannot read schedule CSV '" + path +
        "'; expected a file with one row of actions per rank");
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return schedule_from_csv(buffer.str(), path);
}

std::string schedule_to_json(
    const Schedule& schedule, const SimulationResult& simulation) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rank : schedule.ranks) {
    nlohmann::json row = nlohmann::json::array();
    for (const auto& slot : rank) {
      row.push_back(slot ? nlohmann::json(slot->str()) : nlohmann::json());
    }
    ranks.push_back(std::move(row));
  }
  nlohmann::json sim = {
      {"makespan", simulation.makespan},
      {"steps", simulation.steps},
      {"busy", simulation.busy},
      {"bubble_fraction", simulation.bubble_fraction},
      {"peak_activations", simulation.peak_activations},
      {"deadlock", nullptr},
  };
  if (simulation.deadlock) {
    nlohmann::json stuck = nlohmann::json::array();
    for (const auto& s : simulation.deadlock->stuck) {
      stuck.push_back(
          {{"rank", s.rank},
           {"index", s.index},
           {"action", s.action.str()},
           {"waiting_for", s.waiting_for}});
    }
    sim["deadlock"] = {
        {"step", simulation.deadlock->step},
        {"stuck", stuck},
        {"message", simulation.deadlock->message()}};
  }
  const nlohmann::json out = {
      {"schedule", schedule.name},
      {"pp", schedule.pp},
      {"stages_per_rank", schedule.stages_per_rank},
      {"num_stages", schedule.num_stages},
      {"microbatches", schedule.microbatches},
      {"stage_to_rank", schedule.stage_to_rank},
      {"with_comms", schedule.has_comms()},
      {"ranks", ranks},
      {"simulation", sim},
  };
  return out.dump(1) + "\n";
}

std::string schedule_to_chrome_trace(
    const Schedule& schedule, const SimulationResult& simulation) {
  constexpr double kMicrosPerUnit = 1000.0;
  nlohmann::json events = nlohmann::json::array();
  for (int64_t r = 0; r < schedule.pp; ++r) {
    events.push_back(
        {{"ph", "M"},
         {"name", "process_name"},
         {"pid", r},
         {"tid", r},
         {"args", {{"name", "rank " + std::to_string(r)}}}});
  }
  for (int64_t r = 0; r < schedule.pp; ++r) {
    for (const auto& t : simulation.timeline[r]) {
      events.push_back(
          {{"ph", "X"},
           {"name", t.action.str()},
           {"cat", std::string(action_kind_code(t.action.kind))},
           {"ts", t.start * kMicrosPerUnit},
           {"dur", (t.end - t.start) * kMicrosPerUnit},
           {"pid", r},
           {"tid", r},
           {"args",
            {{"stage", t.action.stage},
             {"microbatch", t.action.microbatch},
             {"step", t.step}}}});
    }
  }
  const nlohmann::json out = {
      {"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return out.dump() + "\n";
}

namespace {

/// Where things go in the SVG timeline: one row per rank under a title, a
/// time axis and a legend below.
struct SvgLayout {
  double makespan = 1.0;
  double left = 64.0;
  double top = 44.0;
  double row_height = 30.0;
  double row_gap = 6.0;
  /// Pixels per unit of simulated time.
  double unit = 1.0;
  double plot_width = 0.0;
  double rows_bottom = 0.0;
  double width = 0.0;
  double height = 0.0;
  /// Chunks on the busiest rank; later ones are drawn lighter.
  int64_t max_chunks = 1;
  std::vector<int64_t> chunk;

  SvgLayout(const Schedule& schedule, const SimulationResult& simulation)
      : makespan(std::max(simulation.makespan, 1e-9)),
        chunk(chunk_of_stage(schedule)) {
    unit = std::clamp(1400.0 / makespan, 1.0, 48.0);
    plot_width = makespan * unit;
    rows_bottom =
        top + static_cast<double>(schedule.pp) * (row_height + row_gap);
    width = left + plot_width + 24.0;
    height = rows_bottom + 70.0;
    for (int64_t r = 0; r < schedule.pp; ++r) {
      max_chunks = std::max<int64_t>(
          max_chunks, stages_of_rank(schedule.stage_to_rank, r).size());
    }
  }
  double shade(int64_t stage) const {
    return max_chunks > 1 ? 0.55 * static_cast<double>(chunk[stage]) /
                                static_cast<double>(max_chunks - 1)
                          : 0.0;
  }
};

void svg_title(
    std::ostream& svg,
    const SvgLayout& l,
    const Schedule& schedule,
    const SimulationResult& simulation) {
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << number(l.width)
      << "\" height=\"" << number(l.height) << "\" viewBox=\"0 0 "
      << number(l.width) << ' ' << number(l.height)
      << "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << number(l.left) << "\" y=\"24\" font-size=\"15\" "
      << "font-weight=\"bold\">"
      << xml_escape(
             schedule.name + "  p=" + std::to_string(schedule.pp) +
             " v=" + std::to_string(schedule.stages_per_rank) +
             " m=" + std::to_string(schedule.microbatches))
      << "</text>\n";
  svg << "<text x=\"" << number(l.width - 24.0)
      << "\" y=\"24\" font-size=\"12\" "
      << "text-anchor=\"end\">makespan " << number(simulation.makespan)
      << ", max bubble " << fixed(100.0 * simulation.max_bubble_fraction(), 1)
      << "%</text>\n";
}

/// One action's box (an overlap: its forward over its backward) with its
/// microbatch where it fits.
void svg_action(
    std::ostream& svg, const SvgLayout& l, const TimedAction& t, double y) {
  const double x = l.left + t.start * l.unit;
  const double w = (t.end - t.start) * l.unit;
  std::vector<std::pair<Action, std::pair<double, double>>> parts;
  if (t.action.kind == ActionKind::kOverlapFB) {
    parts.push_back({t.action.forward_part(), {y, l.row_height / 2.0}});
    parts.push_back(
        {t.action.backward_part(),
         {y + l.row_height / 2.0, l.row_height / 2.0}});
  } else {
    parts.push_back({t.action, {y, l.row_height}});
  }
  for (const auto& [part, band] : parts) {
    const double amount = l.shade(part.stage);
    svg << "<rect x=\"" << number(x) << "\" y=\"" << number(band.first)
        << "\" width=\"" << number(w) << "\" height=\"" << number(band.second)
        << "\" fill=\"" << css(kind_colour(part.kind), amount)
        << "\" stroke=\"white\" stroke-width=\"0.8\"><title>"
        << xml_escape(part.str()) << " [" << number(t.start) << ", "
        << number(t.end) << ")</title></rect>\n";
    const std::string label = std::to_string(part.microbatch);
    const double font = std::min(12.0, band.second * 0.6);
    if (w >= font * 0.62 * static_cast<double>(label.size()) + 2.0) {
      svg << "<text x=\"" << number(x + w / 2.0) << "\" y=\""
          << number(band.first + band.second / 2.0 + font * 0.36)
          << "\" font-size=\"" << number(font)
          << "\" text-anchor=\"middle\" fill=\""
          << (amount > 0.3 ? "#111111" : "white") << "\">" << label
          << "</text>\n";
    }
  }
}

/// The ranks' rows; returns the kinds of action drawn.
std::map<ActionKind, bool> svg_rows(
    std::ostream& svg,
    const SvgLayout& l,
    const Schedule& schedule,
    const SimulationResult& simulation) {
  std::map<ActionKind, bool> used;
  for (int64_t r = 0; r < schedule.pp; ++r) {
    const double y =
        l.top + static_cast<double>(r) * (l.row_height + l.row_gap);
    svg << "<text x=\"" << number(l.left - 8.0) << "\" y=\""
        << number(y + l.row_height / 2.0 + 4.0)
        << "\" font-size=\"12\" text-anchor=\"end\">rank " << r << "</text>\n";
    // The row background is what idle time looks like.
    svg << "<rect x=\"" << number(l.left) << "\" y=\"" << number(y)
        << "\" width=\"" << number(l.plot_width) << "\" height=\""
        << number(l.row_height) << "\" fill=\"#e6e6e6\"/>\n";
    for (const auto& t : simulation.timeline[r]) {
      if (is_compute(t.action.kind) && t.end > t.start) {
        used[t.action.kind] = true;
        svg_action(svg, l, t, y);
      }
    }
  }
  return used;
}

void svg_axis(std::ostream& svg, const SvgLayout& l) {
  const double axis_y = l.rows_bottom + 2.0;
  const double step = tick_step(l.makespan);
  svg << "<line x1=\"" << number(l.left) << "\" y1=\"" << number(axis_y)
      << "\" x2=\"" << number(l.left + l.plot_width) << "\" y2=\""
      << number(axis_y) << "\" stroke=\"#444\"/>\n";
  for (double t = 0.0; t <= l.makespan + 1e-9; t += step) {
    const double x = l.left + t * l.unit;
    svg << "<line x1=\"" << number(x) << "\" y1=\"" << number(axis_y)
        << "\" x2=\"" << number(x) << "\" y2=\"" << number(axis_y + 4.0)
        << "\" stroke=\"#444\"/><text x=\"" << number(x) << "\" y=\""
        << number(axis_y + 15.0)
        << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#444\">"
        << number(t) << "</text>\n";
  }
}

void svg_legend(
    std::ostream& svg,
    const SvgLayout& l,
    const std::map<ActionKind, bool>& used) {
  struct Entry {
    ActionKind kind;
    const char* label;
  };
  const Entry entries[] = {
      {ActionKind::kF, "F forward"},
      {ActionKind::kB, "B backward"},
      {ActionKind::kI, "I backward (input)"},
      {ActionKind::kW, "W backward (weight)"},
      {ActionKind::kOverlapFB, "F over B: overlapped"},
  };
  double lx = l.left;
  const double ly = l.rows_bottom + 2.0 + 32.0;
  for (const auto& e : entries) {
    if (!used.count(e.kind)) {
      continue;
    }
    if (e.kind == ActionKind::kOverlapFB) {
      svg << "<rect x=\"" << number(lx) << "\" y=\"" << number(ly)
          << "\" width=\"14\" height=\"7\" fill=\""
          << css(kind_colour(ActionKind::kF), 0.0) << "\"/><rect x=\""
          << number(lx) << "\" y=\"" << number(ly + 7.0)
          << "\" width=\"14\" height=\"7\" fill=\""
          << css(kind_colour(ActionKind::kB), 0.0) << "\"/>\n";
    } else {
      svg << "<rect x=\"" << number(lx) << "\" y=\"" << number(ly)
          << "\" width=\"14\" height=\"14\" fill=\""
          << css(kind_colour(e.kind), 0.0) << "\"/>\n";
    }
    svg << "<text x=\"" << number(lx + 19.0) << "\" y=\"" << number(ly + 11.0)
        << "\" font-size=\"12\">" << e.label << "</text>\n";
    lx += 30.0 + 7.0 * static_cast<double>(std::string(e.label).size());
  }
  svg << "<rect x=\"" << number(lx) << "\" y=\"" << number(ly)
      << "\" width=\"14\" height=\"14\" fill=\"#e6e6e6\"/><text x=\""
      << number(lx + 19.0) << "\" y=\"" << number(ly + 11.0)
      << "\" font-size=\"12\">idle</text>\n";
  lx += 60.0;
  svg << "<text x=\"" << number(lx) << "\" y=\"" << number(ly + 11.0)
      << "\" font-size=\"12\" fill=\"#444\">"
      << (l.max_chunks > 1 ? "lighter = later stage on the rank; number = "
                             "microbatch"
                           : "number = microbatch")
      << "</text>\n";
}

}  // namespace

std::string schedule_to_svg(
    const Schedule& schedule, const SimulationResult& simulation) {
  const SvgLayout layout(schedule, simulation);
  std::ostringstream svg;
  svg_title(svg, layout, schedule, simulation);
  const auto used = svg_rows(svg, layout, schedule, simulation);
  svg_axis(svg, layout);
  svg_legend(svg, layout, used);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace baton::pipeline

namespace baton::pipeline {

PlannedSchedule plan_schedule(
    const Schedule& schedule, const SimulationCosts& costs) {
  validate_schedule(schedule);
  PlannedSchedule plan{
      schedule, schedule.has_comms() ? schedule : lower_schedule(schedule), {}};
  validate_schedule(plan.lowered);
  plan.simulation = simulate(plan.lowered, costs);
  if (plan.simulation.deadlock) {
    throw ScheduleError(plan.simulation.deadlock->message());
  }
  return plan;
}

const std::vector<std::string>& schedule_formats() {
  static const std::vector<std::string> formats = {
      "text", "csv", "json", "chrome", "svg"};
  return formats;
}

std::string format_schedule(
    const Schedule& schedule,
    const SimulationResult& simulation,
    const std::string& format) {
  if (format == "text") {
    return schedule_to_text(schedule, &simulation);
  }
  if (format == "csv") {
    return schedule_to_csv(schedule);
  }
  if (format == "json") {
    return schedule_to_json(schedule, simulation);
  }
  if (format == "chrome") {
    return schedule_to_chrome_trace(schedule, simulation);
  }
  if (format == "svg") {
    return schedule_to_svg(schedule, simulation);
  }
  throw ConfigError(
      "[schedule] format '" + format +
      "' is not allowed; allowed: " + join(schedule_formats(), ", "));
}

}  // namespace baton::pipeline
