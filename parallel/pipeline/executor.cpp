#include "parallel/pipeline/executor.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>

#include "models/forward_state.h"
#include "models/linear.h"
#include "parallel/dist/flight_recorder.h"
#include "parallel/dist/process_group.h"
#include "parallel/pipeline/schedule_state.h"

namespace baton::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

/// Everything one (stage, microbatch) keeps between its actions.
struct Cell {
  at::Tensor input;        // leaf that requires grad (or token ids on stage 0)
  at::Tensor output;       // activations with their graph, or the scaled loss
  at::Tensor grad_output;  // from the next stage (local or received)
  at::Tensor input_grad;   // for the previous stage
  WeightGradSlot slot;
  dist::Work recv_input;
  dist::Work recv_grad;
  bool input_pending = false;
  bool grad_pending = false;
};

int tag_of(bool gradient, int64_t stage, int64_t microbatch, int64_t m) {
  return static_cast<int>((stage * m + microbatch) * 2 + (gradient ? 1 : 0));
}

constexpr int kLabelsTag = 1 << 30;

}  // namespace

struct PipelineExecutor::State {
  Schedule schedule;
  std::map<int64_t, std::shared_ptr<ModelChunk>> stages;
  std::shared_ptr<dist::ProcessGroup> group;
  LossFn loss;
  ExecutorShapes shapes;
  int64_t rank = 0;
  int64_t last_stage = 0;
  Clock::time_point epoch = Clock::now();

  // Per run.
  std::vector<Cell> cells;
  std::vector<dist::Work> sends;
  at::Tensor inputs;
  at::Tensor labels;
  /// Under document masking, every rank's (from the first stage's rank).
  at::Tensor documents;
  double loss_scale = 1.0;
  double loss_sum = 0.0;
  /// evaluate(): forwards alone, without gradients.
  bool forward_only = false;
  /// Seconds spent waiting for receives inside compute actions.
  double wait_s = 0.0;

  void wait(dist::Work& work) {
    const auto t0 = Clock::now();
    work.wait();
    wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Cell& cell(int64_t stage, int64_t mb) {
    return cells[static_cast<size_t>(stage * shapes.microbatches + mb)];
  }
  bool holds(int64_t stage) const {
    return stages.count(stage) != 0;
  }
  int64_t rank_of(int64_t stage) const {
    return schedule.stage_to_rank.at(stage);
  }
  at::Tensor activation_buffer() const {
    return at::empty(
        {shapes.microbatch_size, shapes.hidden_seq_len(), shapes.dim},
        at::TensorOptions().dtype(shapes.dtype).device(shapes.device));
  }
  at::Tensor rows(const at::Tensor& t, int64_t mb) const {
    return t.slice(
        0, mb * shapes.microbatch_size, (mb + 1) * shapes.microbatch_size);
  }
  void check_activation(const at::Tensor& t, const std::string& what) const {
    const std::vector<int64_t> want{
        shapes.microbatch_size, shapes.hidden_seq_len(), shapes.dim};
    if (t.sizes().vec() != want || t.scalar_type() != shapes.dtype) {
      throw std::runtime_error(
          "[pipeline] " + what + " has shape " + c10::str(t.sizes()) + " and " +
          "dtype " + std::string(c10::toString(t.scalar_type())) +
          ", but the stages agreed on " + c10::str(at::IntArrayRef(want)) +
          " and " + std::string(c10::toString(shapes.dtype)));
    }
  }

  void forward(int64_t s, int64_t mb) {
    Cell& c = cell(s, mb);
    if (s == 0) {
      c.input = rows(inputs, mb).to(shapes.device);
    } else if (holds(s - 1)) {
      c.input = cell(s - 1, mb).output.detach().requires_grad_(true);
    } else {
      if (!c.input_pending) {
        throw std::logic_error("forward before its RECV_F");
      }
      wait(c.recv_input);
      c.input_pending = false;
      c.input.requires_grad_(true);
    }
    // A term a module adds to the objective itself (MoE's auxiliary loss)
    // takes the loss's scale.
    ForwardState scaled = forward_state();
    scaled.loss_scale = forward_only ? 0.0 : loss_scale;
    scaled.evaluating = forward_only;
    scaled.documents = documents.defined() ? rows(documents, mb) : at::Tensor();
    const ForwardStateGuard scale(scaled);
    WeightGradSlotGuard guard(&c.slot);
    at::Tensor out = stages.at(s)->forward(c.input);
    if (s == last_stage) {
      const at::Tensor ce = loss(out, rows(labels, mb).to(shapes.device));
      loss_sum += ce.item<double>();
      out = ce * loss_scale;
    }
    c.output = out;
    if (forward_only) {
      c.input = at::Tensor();  // no backward needs it
      if (s > 0 && holds(s - 1)) {
        cell(s - 1, mb).output = at::Tensor();
      }
    }
  }

  /// Whether evaluate() runs `a` (and of OVERLAP_F_B, its forward half).
  static bool runs_forward_only(const Action& a) {
    return a.kind == ActionKind::kF || a.kind == ActionKind::kSendF ||
           a.kind == ActionKind::kRecvF || a.kind == ActionKind::kOverlapFB;
  }

  void backward(int64_t s, int64_t mb, bool input_only) {
    Cell& c = cell(s, mb);
    if (!c.output.defined()) {
      throw std::logic_error("backward before its forward");
    }
    at::Tensor grad;
    if (s != last_stage) {
      if (holds(s + 1)) {
        grad = cell(s + 1, mb).input_grad;
      } else {
        if (!c.grad_pending) {
          throw std::logic_error("backward before its RECV_B");
        }
        wait(c.recv_grad);
        c.grad_pending = false;
        grad = c.grad_output;
      }
    }
    c.slot.defer = input_only;
    if (grad.defined()) {
      torch::autograd::backward({c.output}, {grad});
    } else {
      torch::autograd::backward({c.output});
    }
    c.slot.defer = false;
    if (s > 0) {
      c.input_grad = c.input.grad();
    }
    c.output = at::Tensor();
    c.grad_output = at::Tensor();
    if (s + 1 <= last_stage && holds(s + 1)) {
      cell(s + 1, mb).input_grad = at::Tensor();
    }
  }

  void execute(const Action& a) {
    const int64_t s = a.stage;
    const int64_t mb = a.microbatch;
    switch (a.kind) {
      case ActionKind::kF:
        forward(s, mb);
        break;
      case ActionKind::kB:
        backward(s, mb, /*input_only=*/false);
        break;
      case ActionKind::kI:
        backward(s, mb, /*input_only=*/true);
        break;
      case ActionKind::kW:
        cell(s, mb).slot.run();
        break;
      case ActionKind::kOverlapFB:
        execute(a.forward_part());
        if (!forward_only) {
          execute(a.backward_part());
        }
        break;
      case ActionKind::kSendF: {
        at::Tensor out = cell(s, mb).output.detach().contiguous();
        check_activation(out, "stage " + std::to_string(s) + "'s output");
        if (forward_only) {
          cell(s, mb).output = at::Tensor();
        }
        sends.push_back(group->isend(
            out,
            rank_of(s + 1),
            tag_of(false, s + 1, mb, shapes.microbatches)));
        break;
      }
      case ActionKind::kSendB: {
        at::Tensor g = cell(s, mb).input_grad.contiguous();
        check_activation(g, "stage " + std::to_string(s) + "'s input gradient");
        sends.push_back(group->isend(
            g, rank_of(s - 1), tag_of(true, s - 1, mb, shapes.microbatches)));
        break;
      }
      case ActionKind::kRecvF: {
        Cell& c = cell(s, mb);
        c.input = activation_buffer();
        c.recv_input = group->irecv(
            c.input, rank_of(s - 1), tag_of(false, s, mb, shapes.microbatches));
        c.input_pending = true;
        break;
      }
      case ActionKind::kRecvB: {
        Cell& c = cell(s, mb);
        c.grad_output = activation_buffer();
        c.recv_grad = group->irecv(
            c.grad_output,
            rank_of(s + 1),
            tag_of(true, s, mb, shapes.microbatches));
        c.grad_pending = true;
        break;
      }
      case ActionKind::kReduceGrad:
        break;  // run_action calls the run's reduce_grad
    }
  }

  /// Runs action `i` of this rank's list, naming it in any error.
  void run_action(
      int64_t i,
      const Action& a,
      const std::function<void(int64_t stage)>& reduce_grad) {
    try {
      if (a.kind == ActionKind::kReduceGrad) {
        if (reduce_grad) {
          reduce_grad(a.stage);
        }
      } else {
        execute(a);
      }
    } catch (const dist::CommError& e) {
      throw dist::CommError(
          "[pipeline] " + where_in_schedule(rank, i, a) + ": " + e.what());
    } catch (const std::exception& e) {
      throw std::runtime_error(
          "[pipeline] " + where_in_schedule(rank, i, a) + ": " + e.what());
    }
  }

  /// Labels, from the rank with the data to the rank with the loss (once
  /// per run); checks the first stage's batch shapes.
  void exchange_labels() {
    const int64_t first_rank = rank_of(0);
    const int64_t last_rank = rank_of(last_stage);
    const std::vector<int64_t> batch_shape{
        shapes.microbatches * shapes.microbatch_size, shapes.seq_len};
    if (rank == first_rank) {
      if (!inputs.defined() || inputs.sizes().vec() != batch_shape ||
          labels.sizes().vec() != batch_shape) {
        throw std::invalid_argument(
            "[PipelineExecutor] the first stage needs inputs and labels of "
            "shape " +
            c10::str(at::IntArrayRef(batch_shape)) +
            " (microbatches x microbatch_size, seq_len)");
      }
      if (last_rank != first_rank) {
        sends.push_back(group->isend(
            labels.to(at::kLong).contiguous(), last_rank, kLabelsTag));
      }
    } else if (rank == last_rank) {
      labels = at::empty(batch_shape, at::kLong);
      group->recv(labels, first_rank, kLabelsTag);
    }
  }

  /// Documents, from the rank with the data to every rank (once per run):
  /// each stage's attention keeps them apart.
  void share_documents() {
    const int64_t first_rank = rank_of(0);
    const std::vector<int64_t> shape{
        shapes.microbatches * shapes.microbatch_size, shapes.documents_len};
    if (rank == first_rank) {
      if (!documents.defined() || documents.sizes().vec() != shape) {
        throw std::invalid_argument(
            "[PipelineExecutor] the first stage needs documents of shape " +
            c10::str(at::IntArrayRef(shape)) +
            " (microbatches x microbatch_size, the whole sequence)");
      }
      documents = documents.to(at::kLong).contiguous();
    } else {
      documents = at::empty(shape, at::kLong);
    }
    group->broadcast(documents, first_rank);
  }
};

PipelineExecutor::PipelineExecutor(
    Schedule lowered,
    std::vector<std::pair<int64_t, std::shared_ptr<ModelChunk>>> stages,
    std::shared_ptr<dist::ProcessGroup> group,
    LossFn loss,
    ExecutorShapes shapes)
    : state_(std::make_unique<State>()) {
  auto& st = *state_;
  st.schedule = std::move(lowered);
  st.group = std::move(group);
  st.loss = std::move(loss);
  st.shapes = shapes;
  st.rank = st.group->rank();
  st.last_stage = st.schedule.num_stages - 1;
  if (st.group->size() != st.schedule.pp) {
    throw std::invalid_argument(
        "[PipelineExecutor] the schedule is for " +
        std::to_string(st.schedule.pp) + " pipeline ranks, the group has " +
        std::to_string(st.group->size()));
  }
  if (st.schedule.microbatches != shapes.microbatches) {
    throw std::invalid_argument(
        "[PipelineExecutor] the schedule has " +
        std::to_string(st.schedule.microbatches) +
        " microbatches, the shapes " + std::to_string(shapes.microbatches));
  }
  for (auto& [stage, chunk] : stages) {
    if (st.rank_of(stage) != st.rank) {
      throw std::invalid_argument(
          "[PipelineExecutor] stage " + std::to_string(stage) +
          " belongs to pipeline rank " + std::to_string(st.rank_of(stage)) +
          ", not " + std::to_string(st.rank));
    }
    st.stages[stage] = chunk;
  }
  for (int64_t s = 0; s < st.schedule.num_stages; ++s) {
    if (st.rank_of(s) == st.rank && !st.holds(s)) {
      throw std::invalid_argument(
          "[PipelineExecutor] this rank runs stage " + std::to_string(s) +
          " but holds no chunk for it");
    }
  }
}

PipelineExecutor::~PipelineExecutor() = default;

int64_t PipelineExecutor::pp_rank() const {
  return state_->rank;
}

const Schedule& PipelineExecutor::schedule() const {
  return state_->schedule;
}

ExecutorRun PipelineExecutor::run(
    const at::Tensor& inputs,
    const at::Tensor& labels,
    const at::Tensor& documents,
    double loss_scale,
    const std::function<void(int64_t stage)>& reduce_grad) {
  state_->forward_only = false;
  return run_schedule(inputs, labels, documents, loss_scale, reduce_grad);
}

ExecutorRun PipelineExecutor::evaluate(
    const at::Tensor& inputs,
    const at::Tensor& labels,
    const at::Tensor& documents) {
  at::NoGradGuard no_grad;
  state_->forward_only = true;
  try {
    ExecutorRun out = run_schedule(inputs, labels, documents, 1.0, nullptr);
    state_->forward_only = false;
    return out;
  } catch (...) {
    state_->forward_only = false;
    throw;
  }
}

ExecutorRun PipelineExecutor::run_schedule(
    const at::Tensor& inputs,
    const at::Tensor& labels,
    const at::Tensor& documents,
    double loss_scale,
    const std::function<void(int64_t stage)>& reduce_grad) {
  auto& st = *state_;
  const auto& sh = st.shapes;
  st.cells.clear();
  st.cells.resize(
      static_cast<size_t>(st.schedule.num_stages * sh.microbatches));
  st.sends.clear();
  st.loss_sum = 0.0;
  st.wait_s = 0.0;
  st.loss_scale = loss_scale;
  st.inputs = inputs;
  st.labels = labels;
  st.documents = documents;
  ExecutorRun out;
  const auto start = Clock::now();
  auto us = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - st.epoch).count();
  };
  static const std::string kLabels = "labels";
  {
    dist::FlightLabel label(kLabels);
    st.exchange_labels();
  }
  if (sh.documents_len > 0) {
    static const std::string kDocuments = "documents";
    dist::FlightLabel label(kDocuments);
    st.share_documents();
  }
  auto& recorder = dist::FlightRecorder::process();

  const auto& actions = st.schedule.ranks.at(st.rank);
  for (size_t i = 0; i < actions.size(); ++i) {
    if (!actions[i]) {
      continue;
    }
    const Action& a = *actions[i];
    if (st.forward_only && !State::runs_forward_only(a)) {
      continue;
    }
    std::string name = a.str();
    // The action, and any P2P it posts under its name: a hang report shows
    // which action a rank was in and which one its peer waited on.
    uint64_t flight_id = 0;
    if (recorder.enabled()) {
      dist::FlightEntry e;
      e.kind = dist::FlightKind::kAction;
      e.name = "pipeline";
      std::strncpy(e.group, st.group->name().c_str(), sizeof(e.group) - 1);
      flight_id = recorder.record(e, name.c_str());
    }
    const auto t0 = Clock::now();
    const double waited_before = st.wait_s;
    try {
      dist::FlightLabel label(name);
      st.run_action(static_cast<int64_t>(i), a, reduce_grad);
    } catch (...) {
      recorder.finish(flight_id, dist::FlightState::kFailed);
      throw;
    }
    recorder.finish(flight_id, dist::FlightState::kCompleted);
    const auto t1 = Clock::now();
    const bool compute = is_compute(a.kind);
    const double waited = compute ? st.wait_s - waited_before : 0.0;
    if (compute) {
      // Less the time it waited for a receive it needed.
      out.compute_s += std::chrono::duration<double>(t1 - t0).count() - waited;
    }
    out.actions.push_back(
        {std::move(name), us(t0), us(t1), compute, waited * 1e6});
  }
  for (auto& w : st.sends) {
    w.wait();
  }
  st.sends.clear();
  out.loss_sum = st.loss_sum;
  out.epoch_us =
      std::chrono::duration<double, std::micro>(st.epoch.time_since_epoch())
          .count();
  out.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  st.cells.clear();
  st.inputs = at::Tensor();
  st.labels = at::Tensor();
  st.documents = at::Tensor();
  return out;
}

}  // namespace baton::pipeline
