#include "data/dataloader.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace baton {

namespace {

void check_option(bool ok, const std::string& what, int64_t value) {
  if (!ok) {
    throw std::invalid_argument(
        "[DataLoader] " + what + ", got " + std::to_string(value));
  }
}

}  // namespace

DataLoader::DataLoader(
    std::unique_ptr<TextDataset> dataset,
    std::shared_ptr<const Tokenizer> tokenizer,
    DataLoaderOptions options)
    : dataset_(std::move(dataset)),
      tokenizer_(std::move(tokenizer)),
      options_(options) {
  if (!dataset_) {
    throw std::invalid_argument("[DataLoader] dataset must not be null");
  }
  if (!tokenizer_) {
    throw std::invalid_argument("[DataLoader] tokenizer must not be null");
  }
  check_option(
      options_.batch_size >= 1, "batch_size must be >= 1", options_.batch_size);
  check_option(options_.seq_len >= 1, "seq_len must be >= 1", options_.seq_len);
  check_option(options_.dp_size >= 1, "dp_size must be >= 1", options_.dp_size);
  check_option(
      options_.dp_rank >= 0 && options_.dp_rank < options_.dp_size,
      "dp_rank must be in [0, dp_size=" + std::to_string(options_.dp_size) +
          ")",
      options_.dp_rank);
}

Batch DataLoader::next() {
  const int64_t B = options_.batch_size;
  const int64_t T = options_.seq_len;
  // Each row consumes T + 1 tokens: labels are the inputs shifted by one.
  const size_t window = static_cast<size_t>(T) + 1;
  Batch batch;
  batch.inputs = at::empty({B, T}, at::kLong);  // (B, T)
  batch.labels = at::empty({B, T}, at::kLong);  // (B, T)
  int64_t* inputs = batch.inputs.data_ptr<int64_t>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    while (buffer_.size() - offset_ < window) {
      fill_one_document();
    }
    const int32_t* tokens = buffer_.data() + offset_;
    std::copy(tokens, tokens + T, inputs + b * T);
    std::copy(tokens + 1, tokens + T + 1, labels + b * T);
    offset_ += window;
  }
  return batch;
}

void DataLoader::fill_one_document() {
  while (true) {
    std::optional<std::string> text = dataset_->next();
    if (!text) {
      if (documents_this_epoch_ == 0) {
        throw std::runtime_error(
            "[DataLoader] a full pass over the dataset (" +
            std::to_string(document_index_) + " documents) gave dp_rank " +
            std::to_string(options_.dp_rank) + " of dp_size " +
            std::to_string(options_.dp_size) +
            " no document; use fewer data-parallel ranks or a larger corpus");
      }
      dataset_->reset();
      ++epoch_;
      document_index_ = 0;
      documents_this_epoch_ = 0;
      continue;
    }
    const int64_t index = document_index_++;
    if (index % options_.dp_size != options_.dp_rank) {
      continue;
    }
    ++documents_this_epoch_;
    // Drop consumed tokens once they make up half the buffer: amortised O(1)
    // per token, and the buffer stays within about two documents plus a row.
    if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
      buffer_.erase(buffer_.begin(), buffer_.begin() + offset_);
      offset_ = 0;
    }
    const std::vector<int32_t> ids = tokenizer_->encode(*text);
    buffer_.push_back(tokenizer_->bos_id());
    buffer_.insert(buffer_.end(), ids.begin(), ids.end());
    buffer_.push_back(tokenizer_->eos_id());
    return;
  }
}

}  // namespace baton
