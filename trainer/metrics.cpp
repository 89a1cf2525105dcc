#include "trainer/metrics.h"

#include <glog/logging.h>
#include <sys/resource.h>
#include <torch/torch.h>

#ifdef BATON_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "common/logging.h"
#include "common/text.h"

namespace baton {
namespace {

// The numbers of a metrics.jsonl line after `step`, under their keys, in
// the file's order: one list for the JSON line and the TensorBoard event.
std::vector<TensorBoardScalar> step_scalars(const StepMetrics& m) {
  std::vector<TensorBoardScalar> scalars{
      {"loss", m.loss},
      {"grad_norm", m.grad_norm},
      {"lr", m.lr},
      {"tokens_per_sec", m.tokens_per_sec},
      {"tflops", m.tflops},
      {"mfu_pct", m.mfu_pct},
      {"step_time_s", m.step_time_s},
      {"data_time_s", m.data_time_s},
      {"peak_rss_mib", m.peak_rss_mib},
      {"tensor_peak_mib", m.tensor_peak_mib},
      {"activation_peak_mib", m.activation_peak_mib},
  };
  if (m.validation_loss) {
    scalars.emplace_back("validation_loss", *m.validation_loss);
    scalars.emplace_back(
        "validation_tokens", static_cast<double>(m.validation_tokens));
    scalars.emplace_back("validation_time_s", m.validation_time_s);
  }
  if (m.moe.layers > 0) {
    scalars.emplace_back("moe_aux_loss", m.moe.aux_loss());
    scalars.emplace_back("moe_load_min", m.moe.load_min);
    scalars.emplace_back("moe_load_max", m.moe.load_max);
    scalars.emplace_back("moe_load_cv", m.moe.load_cv());
    scalars.emplace_back("moe_load_cv_max", m.moe.load_cv_max);
    scalars.emplace_back(
        "moe_dropped_tokens", static_cast<double>(m.moe.dropped));
  }
  return scalars;
}

}  // namespace

std::string tensorboard_folder(const std::string& dump_folder) {
  return (std::filesystem::path(dump_folder) / "tensorboard").string();
}

MetricsLogger::MetricsLogger(
    const MetricsConfig& config,
    const std::string& dump_folder,
    bool is_logging_rank,
    int64_t total_steps)
    : config_(config),
      is_logging_rank_(is_logging_rank),
      total_steps_(total_steps) {
  if (!is_logging_rank_) {
    return;
  }
  if (config_.tensorboard) {
    tensorboard_ =
        std::make_unique<TensorBoardWriter>(tensorboard_folder(dump_folder));
  }
  if (!config_.jsonl) {
    return;
  }
  std::filesystem::create_directories(dump_folder);
  path_ = (std::filesystem::path(dump_folder) / "metrics.jsonl").string();
  // Checked now, so that a folder that cannot be written fails before
  // training; emptied (or trimmed, on resume) by start().
  std::ofstream probe(path_, std::ios::app);
  if (!probe) {
    throw std::runtime_error(
        "[metrics] cannot write " + path_ + ": " + std::strerror(errno));
  }
}

void MetricsLogger::start(int64_t resumed_step) {
  if (tensorboard_ && resumed_step > 0) {
    tensorboard_->add_session_start(resumed_step + 1);
  }
  if (!is_logging_rank_ || path_.empty()) {
    return;
  }
  if (jsonl_.is_open()) {
    jsonl_.close();
  }
  if (resumed_step > 0) {
    // Lines up to the resumed step, through a temporary file and a rename,
    // so that a crash now loses nothing.
    const std::string tmp = path_ + ".tmp";
    {
      std::ifstream in(path_);
      std::ofstream out(tmp, std::ios::out | std::ios::trunc);
      for (std::string line; std::getline(in, line);) {
        try {
          if (nlohmann::json::parse(line).at("step").get<int64_t>() <=
              resumed_step) {
            out << line << '\n';
          }
        } catch (const nlohmann::json::exception&) {
          // A line cut short by a crash: dropped.
        }
      }
      if (!out.flush()) {
        throw std::runtime_error(
            "[metrics] cannot write " + tmp + ": " + std::strerror(errno));
      }
    }
    std::filesystem::rename(tmp, path_);
    jsonl_.open(path_, std::ios::out | std::ios::app);
  } else {
    jsonl_.open(path_, std::ios::out | std::ios::trunc);
  }
  if (!jsonl_) {
    throw std::runtime_error(
        "[metrics] cannot write " + path_ + ": " + std::strerror(errno));
  }
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(
        buf,
        sizeof(buf),
        "%lldm%02llds",
        static_cast<long long>(s / 60),
        static_cast<long long>(s % 60));
  } else {
    std::snprintf(
        buf,
        sizeof(buf),
        "%lldh%02lldm",
        static_cast<long long>(s / 3600),
        static_cast<long long>(s / 60 % 60));
  }
  return buf;
}

bool MetricsLogger::should_log(int64_t step) const {
  return step == 1 || step % config_.log_freq == 0;
}

std::string metrics_to_json(const StepMetrics& m) {
  nlohmann::ordered_json j = {{"step", m.step}};
  for (const auto& [key, value] : step_scalars(m)) {
    j[key] = value;
  }
  if (m.validation_loss) {
    j["validation_tokens"] = m.validation_tokens;  // an integer
  }
  if (!m.pipeline_bubble_pct.empty()) {
    j["pipeline_bubble_pct"] = m.pipeline_bubble_pct;
  }
  return j.dump();
}

std::vector<TensorBoardScalar> metrics_to_scalars(const StepMetrics& m) {
  std::vector<TensorBoardScalar> scalars = step_scalars(m);
  for (size_t r = 0; r < m.pipeline_bubble_pct.size(); ++r) {
    scalars.emplace_back(
        "pipeline_bubble_pct/" + std::to_string(r), m.pipeline_bubble_pct[r]);
  }
  return scalars;
}

std::string MetricsLogger::step_line(const StepMetrics& m) {
  // Within the console's 120 columns: TFLOP/s and the other figures are
  // in metrics.jsonl.
  std::ostringstream line;
  line << std::fixed << "step ";
  if (total_steps_ > 0) {
    // As wide as the last step's number, so the lines align.
    line << std::setw(static_cast<int>(std::to_string(total_steps_).size()))
         << m.step << "/" << total_steps_;
  } else {
    line << m.step;
  }
  line << "  loss " << std::setprecision(4) << m.loss << "  grad_norm "
       << std::setprecision(3) << m.grad_norm << "  lr " << std::scientific
       << std::setprecision(1) << m.lr << std::fixed << "  tok/s "
       << std::setprecision(0) << m.tokens_per_sec << "  mfu "
       << std::setprecision(1) << m.mfu_pct << "%  mem " << std::setprecision(0)
       << m.peak_rss_mib << " MiB";
  if (!m.pipeline_bubble_pct.empty()) {
    line << "  bubble";
    for (size_t r = 0; r < m.pipeline_bubble_pct.size(); ++r) {
      line << (r == 0 ? " " : "/") << m.pipeline_bubble_pct[r];
    }
    line << "%";
  }
  if (m.validation_loss) {
    line << "  validation_loss " << std::setprecision(4) << *m.validation_loss;
  }
  // The time left at the pace since the first logged step (which the first
  // step's warm-up does not slow).
  const auto now = std::chrono::steady_clock::now();
  if (!pace_start_) {
    pace_start_.emplace(m.step, now);
  } else if (total_steps_ > m.step && m.step > pace_start_->first) {
    const double per_step =
        std::chrono::duration<double>(now - pace_start_->second).count() /
        static_cast<double>(m.step - pace_start_->first);
    line << "  eta "
         << format_duration(
                per_step * static_cast<double>(total_steps_ - m.step));
  }
  return line.str();
}

void MetricsLogger::status(const StepMetrics& m) {
  if (is_logging_rank_ && pace_start_) {
    log_status(step_line(m));
  }
}

void MetricsLogger::log(const StepMetrics& m) {
  if (!is_logging_rank_) {
    return;
  }
  BATON_LOG_PROGRESS(step_line(m));
  if (!jsonl_.is_open()) {
    start(0);
  }
  if (jsonl_.is_open()) {
    jsonl_ << metrics_to_json(m) << '\n';
    jsonl_.flush();
  }
  if (tensorboard_) {
    tensorboard_->add_scalars(m.step, metrics_to_scalars(m));
  }
}

namespace {

/// One row of the table: every pattern in the lower-cased device name;
/// dense TFLOP/s in bf16 (and fp16) and in float32 (0: not published).
struct GpuPeak {
  std::vector<const char*> patterns;
  double bf16;
  double fp32;
};

/// NVIDIA's data sheets (dense, without sparsity; SXM unless named), the
/// more specific names first: "h100 nvl" before "h100", "l40s" before
/// "l4". Extend it by adding a row; metrics.peak_tflops overrides it.
const std::vector<GpuPeak>& gpu_peaks() {
  static const std::vector<GpuPeak> table = {
      {{"gb200"}, 2500.0, 0.0},
      {{"b200"}, 2250.0, 0.0},
      {{"b100"}, 1750.0, 0.0},
      {{"h200", "nvl"}, 835.0, 60.0},
      {{"h200"}, 989.4, 66.9},
      {{"h100", "nvl"}, 835.0, 60.0},
      {{"h100", "pcie"}, 756.0, 51.2},
      {{"h100"}, 989.4, 66.9},
      {{"h800", "pcie"}, 756.0, 51.2},
      {{"h800"}, 989.4, 66.9},
      {{"h20"}, 148.0, 44.0},
      {{"a100"}, 312.0, 19.5},
      {{"a800"}, 312.0, 19.5},
      {{"a40"}, 149.7, 37.4},
      {{"a30"}, 165.0, 10.3},
      {{"a10g"}, 0.0, 0.0},  // No data sheet: the probe.
      {{"a10"}, 125.0, 31.2},
      {{"l40s"}, 362.1, 91.6},
      {{"l40"}, 181.0, 90.5},
      {{"l4"}, 121.0, 30.3},
  };
  return table;
}

}  // namespace

std::optional<double> published_peak_tflops(
    const std::string& device_name, c10::ScalarType dtype) {
  const std::string name = to_lower(device_name);
  for (const GpuPeak& row : gpu_peaks()) {
    const bool match = std::all_of(
        row.patterns.begin(), row.patterns.end(), [&](const char* p) {
          return name.find(p) != std::string::npos;
        });
    if (!match) {
      continue;
    }
    const double peak = dtype == c10::kBFloat16 || dtype == c10::kHalf
                            ? row.bf16
                        : dtype == c10::kFloat ? row.fp32
                                               : 0.0;
    if (peak > 0.0) {
      return peak;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::string cuda_device_name(int index) {
#ifdef BATON_WITH_CUDA
  return at::cuda::getDeviceProperties(index)->name;
#else
  (void)index;
  return "";
#endif
}

std::vector<GemmShape> peak_probe_shapes(
    int64_t tokens,
    int64_t dim,
    int64_t hidden,
    int64_t vocab,
    c10::Device device) {
  const int64_t m = std::clamp<int64_t>(tokens, 1, 4096);
  std::vector<GemmShape> shapes{
      {1024, 1024, 1024},
      {m, dim, dim},     // attention's projections
      {m, dim, hidden},  // the feed-forward's w1, w3
      {m, hidden, dim},  // w2
      {m, dim, vocab}};  // the output
  if (device.is_cuda()) {
    shapes.push_back({8192, 8192, 8192});
  }
  return shapes;
}

double measure_peak_tflops(
    const std::vector<GemmShape>& shapes,
    double seconds,
    at::ScalarType dtype,
    GemmShape* best_shape,
    c10::Device device) {
  torch::NoGradGuard no_grad;
  using clock = std::chrono::steady_clock;
  // A GPU runs products asynchronously: a repetition is `products` of them
  // between synchronisations, so that a launch's latency does not count.
  const bool gpu = device.is_cuda();
  const int products = gpu ? 10 : 1;
  const auto sync = [gpu] {
    if (gpu) {
      torch::cuda::synchronize();
    }
  };
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  double best = 0.0;
  for (const auto& shape : shapes) {
    const auto a = torch::randn({shape.m, shape.k}).to(options);
    const auto b = torch::randn({shape.k, shape.n}).to(options);
    auto c = torch::empty({shape.m, shape.n}, options);
    // Warm up threads, BLAS buffers (cuBLAS's handle) and the pages of `c`.
    at::mm_out(c, a, b);
    at::mm_out(c, a, b);
    sync();
    const double flops = 2.0 * shape.m * shape.k * shape.n * products;
    const auto deadline =
        clock::now() + std::chrono::duration<double>(
                           seconds / static_cast<double>(shapes.size()));
    int reps = 0;
    do {
      const auto start = clock::now();
      for (int i = 0; i < products; ++i) {
        at::mm_out(c, a, b);
      }
      sync();
      const double s =
          std::chrono::duration<double>(clock::now() - start).count();
      const double rate = flops / s / 1e12;
      if (rate > best) {
        best = rate;
        if (best_shape != nullptr) {
          *best_shape = shape;
        }
      }
    } while (++reps < 3 || clock::now() < deadline);
  }
  return best;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

}  // namespace baton
