#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data/text_dataset.h"
#include "data/tokenizer.h"

namespace baton {

/// One batch of next-token prediction: `labels` is `inputs` shifted by one.
struct Batch {
  at::Tensor inputs;  // (B, T) int64
  at::Tensor labels;  // (B, T) int64
};

/// How a DataLoader cuts its batches.
struct DataLoaderOptions {
  DataLoaderOptions(int64_t batch_size, int64_t seq_len)
      : batch_size(batch_size), seq_len(seq_len) {}
  /// Sequences per batch.
  int64_t batch_size;
  /// Tokens per sequence.
  int64_t seq_len;
  /// This rank's index among the data-parallel ranks.
  int64_t dp_rank = 0;
  /// Number of data-parallel ranks; document i goes to rank i % dp_size.
  int64_t dp_size = 1;
};

/// Packs documents (BOS, tokens, EOS) back to back into windows of
/// `seq_len + 1` tokens; each window gives one row of inputs and labels.
/// Infinite: at the end of the corpus it starts a new epoch.
class DataLoader {
 public:
  DataLoader(
      std::unique_ptr<TextDataset> dataset,
      std::shared_ptr<const Tokenizer> tokenizer,
      DataLoaderOptions options);
  /// The next (batch_size, seq_len) batch.
  Batch next();
  /// Completed passes over this rank's documents.
  int64_t epoch() const {
    return epoch_;
  }

 private:
  /// Appends the next document of this rank to `buffer_`.
  void fill_one_document();

  std::unique_ptr<TextDataset> dataset_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  DataLoaderOptions options_;
  // Packed tokens not yet consumed are buffer_[offset_:].
  std::vector<int32_t> buffer_;
  size_t offset_ = 0;
  int64_t document_index_ = 0;
  int64_t documents_this_epoch_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace baton
