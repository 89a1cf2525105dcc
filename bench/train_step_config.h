#pragma once

// The single-process job train_step_bench times and peer_fixture writes the
// torchtitan peer's start from: one config, so both sides train the same.

#include <cstdint>
#include <string>
#include <vector>

namespace baton::bench {

/// The overrides of the job (on the defaults): `flavor` on the bundled
/// corpus, `batch` sequences of `seq_len` tokens, `threads` ATen threads,
/// `precision` as training.mixed_precision_param (float32 | bfloat16).
inline std::vector<std::string> train_step_overrides(
    const std::string& flavor,
    int64_t seq_len,
    int64_t batch,
    int64_t threads,
    const std::string& precision) {
  return {
      "model.flavor=" + flavor,
      "training.seq_len=" + std::to_string(seq_len),
      "training.local_batch_size=" + std::to_string(batch),
      "training.steps=1000000",
      "training.num_threads=" + std::to_string(threads),
      "training.mixed_precision_param=" + precision,
      "metrics.peak_tflops=1",
      "metrics.jsonl=false",
      "job.dump_folder=/tmp/baton_bench"};
}

}  // namespace baton::bench
