#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/job_config.h"
#include "trainer/moe_balance.h"
#include "trainer/tensorboard.h"

namespace baton {

/// What the trainer reports for one step: the keys of metrics.jsonl.
struct StepMetrics {
  int64_t step = 0;
  double loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;
  double tokens_per_sec = 0.0;
  double tflops = 0.0;
  double mfu_pct = 0.0;
  double step_time_s = 0.0;
  double data_time_s = 0.0;
  double peak_rss_mib = 0.0;
  /// The most CPU tensor memory held at once during the step, and that
  /// peak less what was held when the step began: the step's activations
  /// and other transient tensors (gradients included). CPU tensors only
  /// (common/allocator.h); 0 when not tracked.
  double tensor_peak_mib = 0.0;
  double activation_peak_mib = 0.0;
  /// Pipelined runs: each pipeline rank's bubble (idle %) in the step, in
  /// pipeline-rank order (Trainer::train_step alone gives this rank's;
  /// train() gathers the others' for the steps it logs); empty otherwise.
  std::vector<double> pipeline_bubble_pct;
  /// A step with a validation (`validation:` every freq steps): the
  /// held-out loss, the tokens it was computed on and its time; the step is
  /// logged whatever log_freq says.
  std::optional<double> validation_loss;
  int64_t validation_tokens = 0;
  double validation_time_s = 0.0;
  /// A mixture-of-experts model's routing in the step (over every pipeline
  /// rank for the steps it logs); layers 0 otherwise.
  MoeStepSummary moe;
};

/// Writes one console line (glog), one metrics.jsonl object and, with
/// metrics.tensorboard, one TensorBoard Event of the same scalars per logged
/// step. Only the logging rank (global rank 0) writes anything.
class MetricsLogger {
 public:
  /// `dump_folder` is created when a file is enabled; the event file, in
  /// tensorboard_folder(dump_folder), is created now, so that a folder that
  /// cannot be written fails before training.
  /// `total_steps` (training.steps; 0: not known) puts "step N/M" and the
  /// time left ("eta", from the pace since the first logged step) on each
  /// logged line.
  MetricsLogger(
      const MetricsConfig& config,
      const std::string& dump_folder,
      bool is_logging_rank = true,
      int64_t total_steps = 0);
  /// True when `step` is one to log (every log_freq steps, and step 1).
  bool should_log(int64_t step) const;
  /// Logs `m` (on the logging rank).
  void log(const StepMetrics& m);
  /// Shows `m` as the status line a terminal redraws in place (on the
  /// logging rank, once a step has been logged); nothing elsewhere.
  void status(const StepMetrics& m);

  /// (Re)starts metrics.jsonl for a run that begins after `resumed_step`:
  /// empty for a new run (0); for a resumed one, the lines of the earlier
  /// run up to that step (steps it logged later are trained again), then
  /// the new lines after them. Trainer::train calls it; log() before it
  /// starts a new file. The event file gets a SessionLog START at
  /// `resumed_step` + 1 for a resumed run: TensorBoard drops the steps the
  /// earlier run's files logged from there on.
  void start(int64_t resumed_step);

 private:
  /// The console line of `m`: step N/M, loss, ..., eta.
  std::string step_line(const StepMetrics& m);

  MetricsConfig config_;
  bool is_logging_rank_;
  int64_t total_steps_;
  /// The first logged step and when it was logged: the pace's start.
  std::optional<std::pair<int64_t, std::chrono::steady_clock::time_point>>
      pace_start_;
  std::string path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

/// "45s", "12m05s", "3h04m": a time left, rounded to the second (the
/// step line's eta, the data jobs' progress).
std::string format_duration(double seconds);

/// The folder of the TensorBoard event files: `<dump_folder>/tensorboard`.
std::string tensorboard_folder(const std::string& dump_folder);

/// The JSON object of `m`, one line, as written to metrics.jsonl.
std::string metrics_to_json(const StepMetrics& m);

/// The scalars of `m` as the event file holds them: each number of
/// metrics.jsonl under its key (step aside: it is the Event's step), in
/// the same order, then pipeline_bubble_pct's entries as
/// `pipeline_bubble_pct/<pipeline rank>`.
std::vector<TensorBoardScalar> metrics_to_scalars(const StepMetrics& m);

/// The published dense peak TFLOP/s of the GPU named `device_name` (as
/// CUDA names it: "NVIDIA H100 80GB HBM3") for matmuls in `dtype`: bf16
/// and fp16 on the tensor cores, float32 without them (TF32 is off);
/// nullopt for a GPU or dtype not in Baton's table (trainer/metrics.cpp),
/// whose MFU is then against the probe.
std::optional<double> published_peak_tflops(
    const std::string& device_name, c10::ScalarType dtype);

/// The name CUDA gives device `index` ("NVIDIA H100 80GB HBM3"); empty in a
/// build without CUDA.
std::string cuda_device_name(int index);

/// A matmul (m, k) x (k, n).
struct GemmShape {
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
};

/// The matmuls a step of a model of hidden size `dim`, feed-forward size
/// `hidden` and vocabulary `vocab` runs on `tokens` rows (capped at 4096,
/// where a CPU's rate no longer grows), and the 1024 square: what the peak
/// probe times. On a GPU (`device` CUDA) the 8192 square too: its matrix
/// units reach their rate only on products that large, and a peak from
/// a small model's shapes alone would make its MFU look high.
std::vector<GemmShape> peak_probe_shapes(
    int64_t tokens,
    int64_t dim,
    int64_t hidden,
    int64_t vocab,
    c10::Device device = c10::Device(c10::kCPU));

/// Peak TFLOP/s in `dtype` (the compute dtype: MFU is against the peak of
/// what the step computes in) on `device`, the one the step runs on: on
/// the CPU with this process's threads, on a GPU timed over a few products
/// between synchronisations. Each of `shapes` is warmed up, then timed for
/// about `seconds` / shapes, the best repetition of the best shape
/// counting, so that no matmul the step runs is faster than the peak (the
/// shape is in `best`, when given).
double measure_peak_tflops(
    const std::vector<GemmShape>& shapes,
    double seconds = 0.3,
    at::ScalarType dtype = at::kFloat,
    GemmShape* best = nullptr,
    c10::Device device = c10::Device(c10::kCPU));

/// Peak resident set size of this process so far, in MiB.
double peak_rss_mib();

}  // namespace baton
