// What the torchtitan peer (bench/torchtitan_step.py) starts from, so both
// sides train the same model on the same tokens: Baton's initial weights,
// its first two batches, the model's shape and the loss and grad norm of
// Baton's first two steps, all from the trainer train_step_bench times
// (the same config).
//
// Usage: peer_fixture FLAVOR PRECISION OUT_DIR [SEQ_LEN] [BATCH]
// Writes OUT_DIR/weights.safetensors (Baton's FQNs, float32 master
// weights), OUT_DIR/batch.safetensors (inputs.I and labels.I, int64 (B, T),
// of steps I = 0 and 1) and OUT_DIR/fixture.json.

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/train_step_config.h"
#include "builders/builder_registry.h"
#include "checkpoint/safetensors.h"
#include "common/allocator.h"
#include "models/llama3/llama3.h"
#include "models/model_args.h"

namespace {

int usage() {
  std::cerr << "usage: peer_fixture FLAVOR float32|bfloat16 OUT_DIR "
               "[SEQ_LEN] [BATCH]\n";
  return 2;
}

/// Writes the fixture (see the file's comment).
void write_fixture(
    const std::string& flavor,
    const std::string& precision,
    const std::filesystem::path& out,
    int64_t seq_len,
    int64_t batch) {
  baton::keep_freed_memory_in_process();
  baton::register_builtin_builders();
  const auto config = baton::load_job_config(
      "",
      baton::bench::train_step_overrides(
          flavor, seq_len, batch, /*threads=*/1, precision));
  auto trainer = baton::make_trainer_builder(config)->build();
  const auto& c = trainer->components();

  std::filesystem::create_directories(out);
  std::vector<baton::SafetensorsItem> weights;
  for (const auto& item : c.model_parts[0].module().named_parameters()) {
    weights.push_back(
        baton::safetensors_item(item.key(), item.value().detach().clone()));
  }
  baton::write_safetensors((out / "weights.safetensors").string(), weights);
  // The batches the first two steps will read: the loader rewound after.
  const auto start = c.dataloader->state();
  std::vector<baton::SafetensorsItem> batches;
  for (int i = 0; i < 2; ++i) {
    const baton::Batch batch = c.dataloader->next();
    const std::string n = std::to_string(i);
    batches.push_back(baton::safetensors_item("inputs." + n, batch.inputs));
    batches.push_back(baton::safetensors_item("labels." + n, batch.labels));
  }
  c.dataloader->load_state(start);
  baton::write_safetensors((out / "batch.safetensors").string(), batches);

  // Two steps: the second's loss follows the first update (AdamW, clipping
  // and the LR schedule's first rate).
  const baton::StepMetrics step = trainer->optimizer_step();
  const baton::StepMetrics second = trainer->optimizer_step();
  baton::ModelArgs args = baton::llama3::flavors().at(flavor);
  args.vocab_size = c.tokenizer->vocab_size();
  const nlohmann::json fixture = {
      {"flavor", flavor},
      {"precision", precision},
      {"seq_len", seq_len},
      {"batch", batch},
      {"model",
       {{"dim", args.dim},
        {"n_layers", args.n_layers},
        {"n_heads", args.n_heads},
        {"n_kv_heads", args.kv_heads()},
        {"vocab_size", args.vocab_size},
        {"ffn_hidden_dim", args.ffn_hidden_dim()},
        {"norm_eps", args.norm_eps},
        {"rope_theta", args.rope_theta}}},
      {"optimizer",
       {{"name", config.optimizer.name},
        {"lr", config.optimizer.lr},
        {"betas", config.optimizer.betas},
        {"eps", config.optimizer.eps},
        {"weight_decay", config.optimizer.weight_decay},
        {"warmup_steps", config.lr_scheduler.warmup_steps},
        {"max_norm", config.training.max_norm}}},
      {"params", args.num_params()},
      {"flops_per_token", c.flops_per_token},
      {"first_step",
       {{"loss", step.loss}, {"grad_norm", step.grad_norm}, {"lr", step.lr}}},
      {"second_step",
       {{"loss", second.loss},
        {"grad_norm", second.grad_norm},
        {"lr", second.lr}}}};
  std::ofstream(out / "fixture.json") << fixture.dump(1) << "\n";
  std::cout << "peer_fixture: " << flavor << " " << precision << " loss "
            << step.loss << " -> " << out.string() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6) {
    return usage();
  }
  const std::string precision = argv[2];
  if (precision != "float32" && precision != "bfloat16") {
    return usage();
  }
  try {
    write_fixture(
        argv[1],
        precision,
        argv[3],
        argc > 4 ? std::stoll(argv[4]) : 256,
        argc > 5 ? std::stoll(argv[5]) : 8);
  } catch (const std::exception& e) {
    std::cerr << "peer_fixture: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
