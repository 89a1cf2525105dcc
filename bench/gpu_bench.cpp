// For a machine with a CUDA GPU (run by bench/gpu.sh): checks the model on
// the GPU against the CPU, measures the GPU's bf16 matmul peak, then times
// forward + backward of a Llama 3 8B-shaped layer stack in bf16 and reports
// tokens/s and MFU against that peak. Writes its figures as JSON.
// Usage: gpu_bench --out FILE [--layers 8] [--batch 2] [--seq-len 4096]

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "models/common/transformer.h"
#include "models/llama3/llama3.h"
#include "models/loss.h"
#include "models/model_args.h"
#include "optim/fused_adamw.h"
#include "trainer/metrics.h"

namespace {

using Clock = std::chrono::steady_clock;
using baton::models::TransformerImpl;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Largest |a - b| over max(|b|), as a relative figure.
double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  const auto ref = b.to(torch::kCPU, torch::kDouble);
  const double scale = std::max(ref.abs().max().item<double>(), 1e-12);
  return (a.to(torch::kCPU, torch::kDouble) - ref).abs().max().item<double>() /
         scale;
}

/// The debug model in fp32 on the CPU and on the GPU from the same weights:
/// logits, loss and every gradient of one step, then the losses of three
/// AdamW steps.
nlohmann::json check_against_cpu() {
  auto args = baton::llama3::flavors().at("debugmodel");
  args.vocab_size = 258;
  auto cpu = std::make_shared<TransformerImpl>(args);
  auto gpu = std::make_shared<TransformerImpl>(args);
  cpu->init_weights(0);
  gpu->init_weights(0);
  gpu->to(torch::kCUDA);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  const auto tokens = at::randint(0, 258, {4, 129}, gen, at::kLong);
  const auto inputs = tokens.slice(1, 0, 128), labels = tokens.slice(1, 1, 129);
  baton::FusedAdamW opt_cpu(cpu->parameters(), {1e-3});
  baton::FusedAdamW opt_gpu(gpu->parameters(), {1e-3});
  nlohmann::json out;
  std::vector<double> loss_cpu, loss_gpu;
  double worst_grad = 0.0;
  for (int step = 0; step < 4; ++step) {
    opt_cpu.zero_grad();
    opt_gpu.zero_grad();
    const auto lc = cpu->forward(inputs);
    const auto lg = gpu->forward(inputs.to(torch::kCUDA));
    if (step == 0) {
      out["logits_max_rel_diff"] = relative_diff(lg, lc);
    }
    auto loss_c = baton::cross_entropy_sum(lc, labels) / labels.numel();
    auto loss_g =
        baton::cross_entropy_sum(lg, labels.to(torch::kCUDA)) / labels.numel();
    loss_c.backward();
    loss_g.backward();
    loss_cpu.push_back(loss_c.item<double>());
    loss_gpu.push_back(loss_g.item<double>());
    if (step == 0) {
      const auto pc = cpu->named_parameters();
      const auto pg = gpu->named_parameters();
      for (const auto& item : pc) {
        worst_grad = std::max(
            worst_grad,
            relative_diff(pg[item.key()].grad(), item.value().grad()));
      }
    }
    opt_cpu.step();
    opt_gpu.step();
  }
  double worst_loss = 0.0;
  for (size_t i = 0; i < loss_cpu.size(); ++i) {
    worst_loss = std::max(
        worst_loss,
        std::abs(loss_cpu[i] - loss_gpu[i]) / std::abs(loss_cpu[i]));
  }
  out["grad_max_rel_diff"] = worst_grad;
  out["loss_cpu"] = loss_cpu;
  out["loss_gpu"] = loss_gpu;
  out["loss_max_rel_diff"] = worst_loss;
  // fp32 on both sides; cuBLAS may reorder sums, nothing more.
  out["ok"] = out["logits_max_rel_diff"].get<double>() < 1e-3 &&
              worst_grad < 1e-2 && worst_loss < 1e-3;
  return out;
}

/// bf16 matmul throughput of n x n by n x n, TFLOP/s.
double matmul_peak_tflops(int64_t n) {
  const auto opts =
      torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  auto c = torch::empty({n, n}, opts);
  for (int i = 0; i < 5; ++i) {
    at::mm_out(c, a, b);
  }
  torch::cuda::synchronize();
  const int iters = 50;
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    at::mm_out(c, a, b);
  }
  torch::cuda::synchronize();
  return 2.0 * n * n * n * iters / seconds_since(start) / 1e12;
}

/// Forward + backward of `layers` Llama 3 8B blocks in bf16.
nlohmann::json time_layer_stack(
    int64_t layers, int64_t batch, int64_t seq_len, double peak_tflops) {
  auto args = baton::llama3::flavors().at("8B");
  baton::ChunkSpec chunk;
  chunk.first_layer = 0;
  chunk.end_layer = layers;
  chunk.embedding = false;
  chunk.output = false;
  auto model = std::make_shared<TransformerImpl>(args, chunk);
  model->init_weights(0);
  model->to(torch::kCUDA, torch::kBFloat16);
  const auto opts =
      torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto x =
      torch::randn({batch, seq_len, args.dim}, opts).requires_grad_(true);
  const auto gy = torch::randn({batch, seq_len, args.dim}, opts);
  std::vector<double> times;
  for (int i = 0; i < 8; ++i) {
    torch::cuda::synchronize();
    const auto start = Clock::now();
    model->zero_grad();
    model->forward(x).backward(gy);
    torch::cuda::synchronize();
    if (i >= 3) {
      times.push_back(seconds_since(start));
    }
  }
  const double step = median(times);
  const double tokens = static_cast<double>(batch * seq_len);
  // Training FLOPs per token of the blocks alone: 6 x parameters plus
  // attention's 12 x heads x head_dim x seq_len (as ModelArgs counts).
  const double flops_per_token =
      static_cast<double>(layers) *
      (6.0 * static_cast<double>(args.params_per_layer()) +
       12.0 * static_cast<double>(args.n_heads * args.head_dim() * seq_len));
  const double tflops = flops_per_token * tokens / step / 1e12;
  return {
      {"layers", layers},
      {"batch", batch},
      {"seq_len", seq_len},
      {"dtype", "bfloat16"},
      {"step_s", step},
      {"tokens_per_sec", tokens / step},
      {"tflops", tflops},
      {"mfu_pct", 100.0 * tflops / peak_tflops}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  int64_t layers = 8, batch = 2, seq_len = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::string value = argv[i + 1];
    if (key == "--out") {
      out_path = value;
    } else if (key == "--layers") {
      layers = std::stoll(value);
    } else if (key == "--batch") {
      batch = std::stoll(value);
    } else if (key == "--seq-len") {
      seq_len = std::stoll(value);
    } else {
      std::cerr << "error: gpu_bench: unknown option " << key << "\n";
      return 2;
    }
  }
  if (out_path.empty()) {
    std::cerr << "error: gpu_bench: --out FILE is required\n";
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::cerr << "error: gpu_bench needs a CUDA device; none is visible\n";
    return 1;
  }
  nlohmann::json out;
  out["torch_version"] = std::to_string(TORCH_VERSION_MAJOR) + "." +
                         std::to_string(TORCH_VERSION_MINOR);
  out["devices"] = torch::cuda::device_count();
  out["correctness"] = check_against_cpu();
  std::cout << "gpu_bench: correctness " << out["correctness"].dump()
            << std::endl;
  const double peak = matmul_peak_tflops(8192);
  out["matmul_peak_tflops_bf16"] = peak;
  // The data sheet's dense bf16 peak from Baton's table (what `baton train`
  // takes its MFU against), for #44's target on the layer stack.
  if (const auto published = baton::published_peak_tflops(
          baton::cuda_device_name(0), torch::kBFloat16)) {
    out["published_peak_tflops_bf16"] = *published;
  }
  std::cout << "gpu_bench: bf16 matmul peak " << peak << " TFLOP/s"
            << std::endl;
  out["layer_stack"] = time_layer_stack(layers, batch, seq_len, peak);
  std::cout << "gpu_bench: " << out["layer_stack"].dump() << std::endl;
  std::ofstream(out_path) << out.dump(1) << "\n";
  return out["correctness"]["ok"].get<bool>() ? 0 : 1;
}
