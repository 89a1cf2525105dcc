#include "trainer/trainer.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "common/allocator.h"
#include "common/logging.h"
#include "parallel/axes.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/grad_norm.h"
#include "trainer/fault_injection.h"
#include "trainer/preemption.h"

namespace baton {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
}  // namespace

Trainer::Trainer(const JobConfig& config, TrainerComponents components)
    : config_(config), c_(std::move(components)) {
  if (!c_.mesh) {
    throw std::logic_error("[Trainer] components.mesh: null");
  }
}

Trainer::~Trainer() = default;

void Trainer::log_memory() const {
  int64_t params = 0;
  int64_t grads = 0;
  for (const auto& p : c_.model_parts.parameters()) {
    params += p.numel() * static_cast<int64_t>(p.element_size());
    if (p.grad().defined()) {
      grads += p.grad().numel() * static_cast<int64_t>(p.grad().element_size());
    }
  }
  const auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  // Once per pipeline stage: the stage's ranks hold as much.
  LOG_IF(INFO, c_.mesh->leads({kPipelineAxis}))
      << "memory: this rank holds " << mib(params) << " MiB of parameters, "
      << mib(grads) << " MiB of gradients and "
      << mib(c_.optimizers->state_bytes())
      << " MiB of optimizer state after the first step";
}

StepMetrics Trainer::optimizer_step() {
  ++step_;
  FaultInjection::get().at_step_start(c_.rank, step_);
  const auto start = Clock::now();
  std::vector<Batch> batches;
  if (c_.dataloader) {
    for (int64_t i = 0; i < config_.training.gradient_accumulation_steps; ++i) {
      batches.push_back(c_.dataloader->next());
    }
  }
  const double data_time = seconds_since(start);

  StepMetrics m;
  m.step = step_;
  m.lr = c_.lr_schedulers->lr();
  c_.optimizers->zero_grad();
  const int64_t held_at_start = cpu_tensor_bytes();
  reset_cpu_tensor_peak();
  const StepOutput out = c_.train_step->run(c_.model_parts, batches);
  m.loss = out.loss;
  tokens_seen_ += out.tokens;
  m.grad_norm =
      clip_grad_norm(c_.model_parts, *c_.mesh, config_.training.max_norm);
  if (c_.moe) {
    // Before the step, as torchtitan's hook: the routing biases move on
    // the step's counts, summed over the ranks that saw other tokens.
    m.moe = balance_experts(
        c_.model_parts, c_.mesh->loss(), config_.moe.bias_update_rate);
  }
  if (std::isfinite(m.loss) && std::isfinite(m.grad_norm)) {
    c_.optimizers->step();
  } else {
    LOG(WARNING) << "step " << step_ << ": non-finite loss " << m.loss
                 << " or grad norm " << m.grad_norm
                 << "; skipping the optimizer step";
  }
  c_.model_parts.for_each(
      [&](ModelPart& part) { part.grad_sync().after_step(step_); });
  c_.lr_schedulers->step();
  if (!first_step_done_) {
    log_memory();
  }
  if (c_.runtime && !first_step_done_) {
    // The first step may compile, allocate and warm up; later ones get the
    // (shorter) training timeout.
    c_.runtime->set_timeout(
        std::chrono::seconds(config_.comm.train_timeout_seconds));
  }
  first_step_done_ = true;

  m.step_time_s = seconds_since(start);
  m.data_time_s = data_time;
  // Tokens of the global step; FLOPs and MFU per rank.
  m.tokens_per_sec = static_cast<double>(out.tokens) / m.step_time_s;
  m.tflops = c_.flops_per_token * m.tokens_per_sec /
             static_cast<double>(c_.world_size) / 1e12;
  m.mfu_pct = c_.peak_tflops > 0.0 ? 100.0 * m.tflops / c_.peak_tflops : 0.0;
  if (m.mfu_pct > 100.0 && !mfu_warned_) {
    mfu_warned_ = true;
    LOG(WARNING) << "MFU " << m.mfu_pct << "% at step " << step_
                 << " is above 100%: the step ran faster than the peak of "
                 << c_.peak_tflops
                 << " TFLOP/s (the start-up line mfu: says where it came "
                    "from) allows; the peak is too low, set "
                    "metrics.peak_tflops to this device's";
  }
  m.peak_rss_mib = peak_rss_mib();
  constexpr double kMiB = 1 << 20;
  m.tensor_peak_mib = static_cast<double>(cpu_tensor_peak_bytes()) / kMiB;
  m.activation_peak_mib =
      static_cast<double>(cpu_tensor_peak_bytes() - held_at_start) / kMiB;
  if (out.bubble >= 0.0) {
    // This rank's; train() gathers every pipeline rank's for logged steps.
    m.pipeline_bubble_pct = {100.0 * out.bubble};
  }
  return m;
}

bool Trainer::stop_agreed() const {
  const int64_t mine = Preemption::requested() != 0 ? 1 : 0;
  if (!c_.runtime) {
    return mine != 0;
  }
  at::Tensor flag = at::full({1}, mine, at::kLong);
  c_.runtime->world()->all_reduce(flag, dist::ReduceOp::kMax);
  return flag.item<int64_t>() != 0;
}

void Trainer::validate(StepMetrics& m) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Batch> batches;
  if (c_.validation_dataloader) {
    DataLoader& loader = *c_.validation_dataloader;
    if (!validation_start_) {
      validation_start_ = loader.state();
    }
    loader.load_state(*validation_start_);
    for (int64_t i = 0; i < config_.validation.steps; ++i) {
      batches.push_back(loader.next());
    }
  }
  const EvalOutput out = c_.train_step->evaluate(c_.model_parts, batches);
  m.validation_loss = out.loss;
  m.validation_tokens = out.tokens;
  m.validation_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
}

std::vector<StepMetrics> Trainer::train() {
  if (c_.checkpointer) {
    const TrainState resumed = c_.checkpointer->load();
    step_ = resumed.step;
    tokens_seen_ = resumed.tokens_seen;
  }
  if (c_.metrics) {
    c_.metrics->start(step_);
  }
  const int64_t steps = config_.training.steps;
  LOG_IF(INFO, log_facts()) << "training " << c_.model_parts.num_params()
                            << " parameters for " << steps - step_ << " steps";
  std::vector<StepMetrics> history;
  while (step_ < steps) {
    history.push_back(optimizer_step());
    StepMetrics& m = history.back();
    if (config_.validation.enable && step_ % config_.validation.freq == 0) {
      validate(m);
    }
    if (c_.metrics && (c_.metrics->should_log(m.step) || m.step == steps ||
                       m.validation_loss)) {
      if (c_.moe) {
        // Every rank logs the same steps, so this collective matches.
        m.moe = combine_moe_summary(m.moe, c_.mesh->group(kPipelineAxis));
      }
      if (m.pipeline_bubble_pct.size() == 1) {
        // Every rank logs the same steps, so this collective matches.
        const auto all = c_.mesh->group(kPipelineAxis)
                             ->all_gather(at::full(
                                 {1}, m.pipeline_bubble_pct[0], at::kDouble));
        m.pipeline_bubble_pct.assign(
            all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
      }
      c_.metrics->log(m);
    } else if (c_.metrics) {
      c_.metrics->status(m);
    }
    if (c_.checkpointer) {
      c_.checkpointer->maybe_save(state(), step_ == steps);
    }
    if (step_ < steps && stop_agreed()) {
      // Every rank stops after this same step, and saves it.
      preempted_ = true;
      // Every rank stops alike: said once.
      LOG_IF(WARNING, log_facts())
          << "preemption: stopping after step " << step_ << " of " << steps;
      if (c_.checkpointer) {
        c_.checkpointer->save_now(state());
      }
      break;
    }
  }
  if (c_.checkpointer && !preempted_) {
    c_.checkpointer->finish(state());
  }
  if (c_.runtime) {
    // Nobody leaves (taking the store it may host) while others still work.
    c_.runtime->world()->barrier();
  }
  return history;
}

}  // namespace baton
