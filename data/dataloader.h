#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/sequence_split.h"
#include "data/dataset.h"
#include "data/tokenizer.h"

namespace baton {

/// One batch of next-token prediction: `labels` is `inputs` shifted by one.
struct Batch {
  at::Tensor inputs;  // (B, T) int64
  at::Tensor labels;  // (B, T) int64
  /// Under document masking (DataLoaderOptions::documents): each input
  /// position's document within its row, counted from 0 at the row's first
  /// token, (B, seq_len) int64 for the whole row even where a sequence split
  /// leaves this rank T = seq_len / shards of its positions (the keys of
  /// the split attention span the whole row). Undefined otherwise.
  at::Tensor documents;
};

/// How a DataLoader cuts its batches.
struct DataLoaderOptions {
  DataLoaderOptions(int64_t batch_size, int64_t seq_len)
      : batch_size(batch_size), seq_len(seq_len) {}
  /// Sequences per batch (this rank's).
  int64_t batch_size;
  /// Tokens per sequence.
  int64_t seq_len;
  /// This rank's index among the data-parallel ranks: it takes rows
  /// [dp_rank batch_size, (dp_rank + 1) batch_size) of each global batch.
  int64_t dp_rank = 0;
  /// Number of data-parallel ranks: each next() moves the global stream by
  /// dp_size x batch_size rows.
  int64_t dp_size = 1;
  /// Where the sequence is split across ranks (context parallel): every
  /// rank of the split reads the same rows and keeps its SequenceSplit
  /// positions of each, seq_len / shards (seq_len a multiple of 2 x
  /// shards).
  SequenceSplit sequence_split;
  /// Give each batch its documents (Batch::documents), for attention that
  /// keeps packed documents apart (training.document_mask).
  bool documents = false;
  /// Shuffle the corpus's documents anew each epoch (seeded by seed,
  /// epoch).
  bool shuffle = false;
  /// Seed of the shuffles.
  uint64_t seed = 0;
  /// Batches a background thread prepares ahead; 0 = none (next() does the
  /// work itself).
  int64_t prefetch = 2;
};

/// Where the global token stream stands: enough to yield, after
/// load_state(), exactly the batches that would have followed, at any
/// data-parallel degree and rank (every rank's loader holds the same state).
/// Small and plain, so a checkpoint saves one.
struct DataLoaderState {
  /// Passes over the corpus completed before the next document.
  int64_t epoch = 0;
  /// Position, in this epoch's document order, of the document the next
  /// token comes from.
  int64_t document = 0;
  /// Tokens of that document (BOS, ids, EOS) already consumed.
  int64_t token = 0;
  /// Documents in the whole dataset, checked when it is loaded.
  int64_t dataset_size = 0;

  /// One-line JSON object with the fields above.
  std::string to_json() const;
  /// Parses to_json()'s output, or the per-rank state of Baton's earlier
  /// loaders when it was saved by one rank (dp_size 1: the same stream);
  /// throws std::runtime_error on anything else (a missing field, or a
  /// per-rank state of several ranks, which no global position matches).
  static DataLoaderState from_json(const std::string& json);
  bool operator==(const DataLoaderState&) const = default;
};

/// Packs documents (BOS, tokens, EOS) back to back into windows of
/// `seq_len + 1` tokens; each window gives one row of inputs and labels.
/// The windows form one global stream over the whole corpus (optionally
/// shuffled per epoch), cut into global batches of dp_size x batch_size rows,
/// of which rank r takes rows [r batch_size, (r + 1) batch_size). So a step's
/// global batch (every micro-step's, over every rank) depends only on the
/// data, the seed and the global batch size: not on how the data-parallel
/// degree, gradient accumulation or a pipeline's microbatches split it, and
/// a run resumed at another layout continues the same tokens. Every rank
/// packs the whole stream (skipping the rows of the others without copying
/// them): tokenising costs far less than a step, and no rank waits for
/// another's data. Infinite: after the last document the stream starts a new
/// epoch. With `prefetch` > 0 a background thread tokenises and packs
/// ahead; its errors are rethrown by next().
class DataLoader {
 public:
  /// Throws std::invalid_argument for bad options and std::runtime_error
  /// when this rank's shard is empty.
  DataLoader(
      std::unique_ptr<Dataset> dataset,
      std::shared_ptr<const Tokenizer> tokenizer,
      DataLoaderOptions options);
  /// Stops and joins the prefetch thread.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// The next (batch_size, seq_len / sequence_split.shards) batch.
  Batch next();
  /// Completed passes over the corpus.
  int64_t epoch() const {
    return state_.epoch;
  }
  /// The position after the last batch next() returned.
  DataLoaderState state() const {
    return state_;
  }
  /// Continues from `state` (from state() of a loader with the same dataset
  /// and options). Throws std::runtime_error when it does not fit.
  void load_state(const DataLoaderState& state);
  /// Throws std::runtime_error when load_state(state) would (another corpus,
  /// or a position outside it); changes nothing.
  void check_state(const DataLoaderState& state) const;

 private:
  struct Produced {
    Batch batch;
    DataLoaderState after;
    std::exception_ptr error;
  };

  /// Builds the batch at the producer's position and advances it by the
  /// whole global batch.
  Batch produce();
  /// Consumes the next window of seq_len + 1 tokens, copying it into
  /// `window` unless null (another rank's row), and each token's document
  /// within the window (from 0) into `documents` unless null.
  void take_window(int64_t* window, int64_t* documents = nullptr);
  /// Tokens of the document at the producer's position, BOS and EOS added.
  void load_document();
  /// Dataset index of position `document` in `epoch`'s order.
  int64_t document_index(int64_t epoch, int64_t document);
  void start_worker();
  void stop_worker();
  void worker_loop();

  std::unique_ptr<Dataset> dataset_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  DataLoaderOptions options_;
  // Documents in the dataset.
  int64_t dataset_size_ = 0;
  // State after the last batch next() returned.
  DataLoaderState state_;

  // The producer's side: its position, the current document and the order
  // of the epoch it is in. Only the worker touches them while it runs.
  DataLoaderState position_;
  std::vector<int32_t> document_tokens_;
  bool document_loaded_ = false;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Produced> queue_;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace baton
