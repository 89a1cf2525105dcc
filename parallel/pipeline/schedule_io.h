#pragma once

// Schedules in and out: a text grid, CSV (loadable back), JSON, a Chrome /
// Perfetto trace and an SVG timeline.

#include <string>
#include <vector>

#include "parallel/pipeline/action.h"
#include "parallel/pipeline/simulator.h"

namespace baton::pipeline {

/// A schedule made ready to show: validated, lowered and simulated.
struct PlannedSchedule {
  /// Compute-only actions, as generated or loaded.
  Schedule compute;
  /// With sends, receives and gradient reductions.
  Schedule lowered;
  SimulationResult simulation;
};

/// Validates `schedule` (compute-only, or already lowered as a CSV with
/// comms may be), lowers it when needed, validates the result and simulates
/// it with `costs`. Throws ScheduleError for an invalid schedule or a
/// deadlock (the message names the step and the stuck actions).
PlannedSchedule plan_schedule(
    const Schedule& schedule, const SimulationCosts& costs);

/// The formats format_schedule accepts: text, csv, json, chrome, svg.
const std::vector<std::string>& schedule_formats();

/// `schedule` in `format` (one of schedule_formats()); the text, JSON,
/// Chrome and SVG forms include `simulation`'s timing.
std::string format_schedule(
    const Schedule& schedule,
    const SimulationResult& simulation,
    const std::string& format);

/// One line per rank, one aligned column per slot (`_` for idle), followed by
/// the simulation summary when `simulation` is given.
std::string schedule_to_text(
    const Schedule& schedule, const SimulationResult* simulation = nullptr);

/// One row per rank, one action per cell, an empty cell per idle slot.
std::string schedule_to_csv(const Schedule& schedule);

/// Reads a CSV written by schedule_to_csv (or PyTorch): one row per rank,
/// cells in the string form, empty cells idle (spaces around a cell are
/// ignored). Stages, microbatches and placement are read off the actions;
/// the name is "custom". Throws ConfigError naming `origin`, the row and the
/// column of a malformed cell, or ScheduleError when a stage appears on two
/// ranks.
Schedule schedule_from_csv(
    const std::string& text, const std::string& origin = "schedule CSV");

/// schedule_from_csv of the file at `path`; throws ConfigError when it
/// cannot be read.
Schedule load_schedule_csv(const std::string& path);

/// The layout, every rank's actions (null for idle) and the simulation's
/// makespan, bubbles, peaks and deadlock.
std::string schedule_to_json(
    const Schedule& schedule, const SimulationResult& simulation);

/// Chrome / Perfetto trace: one `ph: X` event per executed action with
/// pid = tid = rank; one simulated time unit is one millisecond.
std::string schedule_to_chrome_trace(
    const Schedule& schedule, const SimulationResult& simulation);

/// An SVG timeline in the style of the Megatron-LM and Zero Bubble papers:
/// one row per rank, one box per compute action placed at its simulated
/// time, a colour per kind (lighter for later stages of a rank), the
/// microbatch number in each box, idle time as the grey row behind, and a
/// legend.
std::string schedule_to_svg(
    const Schedule& schedule, const SimulationResult& simulation);

}  // namespace baton::pipeline
