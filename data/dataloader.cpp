#include "data/dataloader.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
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

// splitmix64's finaliser: spreads (seed, epoch) over the generator's seed.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Fisher-Yates with an unbiased draw of our own: std::shuffle and the
// standard distributions differ between standard libraries, and a restored
// run must see the same order wherever it runs.
void shuffle_in_place(std::vector<int64_t>& items, uint64_t seed) {
  std::mt19937_64 generator(seed);
  for (size_t i = items.size(); i > 1; --i) {
    const uint64_t bound = i;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t draw = generator();
    while (draw >= limit) {
      draw = generator();
    }
    std::swap(items[i - 1], items[draw % bound]);
  }
}

const char* const kStateFields[] = {
    "epoch", "document", "token", "dataset_size"};

}  // namespace

std::string DataLoaderState::to_json() const {
  const int64_t values[] = {epoch, document, token, dataset_size};
  nlohmann::ordered_json json;
  for (size_t i = 0; i < std::size(kStateFields); ++i) {
    json[kStateFields[i]] = values[i];
  }
  return json.dump();
}

DataLoaderState DataLoaderState::from_json(const std::string& text) {
  DataLoaderState state;
  int64_t* fields[] = {
      &state.epoch, &state.document, &state.token, &state.dataset_size};
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(
        std::string("[DataLoaderState] invalid JSON: ") + e.what());
  }
  for (size_t i = 0; i < std::size(kStateFields); ++i) {
    const auto it = json.is_object() ? json.find(kStateFields[i]) : json.end();
    if (it == json.end() || !it->is_number_integer()) {
      throw std::runtime_error(
          std::string("[DataLoaderState] field '") + kStateFields[i] +
          "' is missing or not an integer in " + text);
    }
    *fields[i] = it->get<int64_t>();
  }
  // Earlier loaders kept one state per rank, each over its own shard of
  // the documents; one rank's shard was the whole corpus, in this order.
  const auto dp_size = json.find("dp_size");
  if (dp_size != json.end() && *dp_size != 1) {
    throw std::runtime_error(
        "[DataLoaderState] " + text + " is the state of one of " +
        dp_size->dump() +
        " ranks of an earlier per-rank loader, which read disjoint shards; "
        "no position in the global stream matches it");
  }
  return state;
}

DataLoader::DataLoader(
    std::unique_ptr<Dataset> dataset,
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
  check_option(
      options_.prefetch >= 0, "prefetch must be >= 0", options_.prefetch);
  const SequenceSplit& split = options_.sequence_split;
  check_option(
      split.shards >= 1 && split.index >= 0 && split.index < split.shards,
      "sequence_split.index must be in [0, shards=" +
          std::to_string(split.shards) + ")",
      split.index);
  check_option(
      options_.seq_len % (split.shards > 1 ? 2 * split.shards : 1) == 0,
      "seq_len must be a multiple of 2 x sequence_split.shards=" +
          std::to_string(split.shards),
      options_.seq_len);
  const int64_t total = dataset_->size();
  if (total == 0) {
    throw std::runtime_error(
        "[DataLoader] the dataset has no document; allowed: a corpus of at "
        "least one");
  }
  dataset_size_ = total;
  state_.dataset_size = total;
  position_ = state_;
}

DataLoader::~DataLoader() {
  stop_worker();
}

Batch DataLoader::next() {
  if (options_.prefetch == 0) {
    Batch batch = produce();
    state_ = position_;
    return batch;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (error_) {
    std::rethrow_exception(error_);
  }
  if (!worker_.joinable()) {
    lock.unlock();
    start_worker();
    lock.lock();
  }
  changed_.wait(lock, [&] { return !queue_.empty(); });
  Produced item = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  changed_.notify_all();
  if (item.error) {
    error_ = item.error;
    std::rethrow_exception(item.error);
  }
  state_ = item.after;
  return std::move(item.batch);
}

void DataLoader::check_state(const DataLoaderState& state) const {
  const auto mismatch = [&](const char* field, int64_t got, int64_t want) {
    if (got != want) {
      throw std::runtime_error(
          std::string("[DataLoader] cannot load state ") + state.to_json() +
          ": its " + field + " is " + std::to_string(got) +
          " but this loader's is " + std::to_string(want));
    }
  };
  mismatch("dataset_size", state.dataset_size, dataset_size_);
  if (state.epoch < 0 || state.document < 0 ||
      state.document >= dataset_size_ || state.token < 0) {
    throw std::runtime_error(
        "[DataLoader] cannot load state " + state.to_json() +
        ": epoch and token must be >= 0 and document in [0, " +
        std::to_string(dataset_size_) + ")");
  }
}

void DataLoader::load_state(const DataLoaderState& state) {
  check_state(state);
  stop_worker();
  error_ = nullptr;
  position_ = state;
  state_ = state;
  document_loaded_ = false;
}

int64_t DataLoader::document_index(int64_t epoch, int64_t document) {
  int64_t position = document;
  if (options_.shuffle) {
    if (order_epoch_ != epoch) {
      order_.resize(static_cast<size_t>(dataset_size_));
      for (int64_t i = 0; i < dataset_size_; ++i) {
        order_[i] = i;
      }
      shuffle_in_place(
          order_, mix(options_.seed ^ mix(static_cast<uint64_t>(epoch))));
      order_epoch_ = epoch;
    }
    position = order_[static_cast<size_t>(document)];
  }
  return position;
}

void DataLoader::load_document() {
  const int64_t index = document_index(position_.epoch, position_.document);
  const std::vector<int32_t> ids = dataset_->tokens(index, *tokenizer_);
  document_tokens_.clear();
  // A tokenizer without BOS (Qwen's) only ends its documents.
  if (tokenizer_->bos_id() >= 0) {
    document_tokens_.push_back(tokenizer_->bos_id());
  }
  document_tokens_.insert(document_tokens_.end(), ids.begin(), ids.end());
  document_tokens_.push_back(tokenizer_->eos_id());
  if (position_.token > static_cast<int64_t>(document_tokens_.size())) {
    throw std::runtime_error(
        "[DataLoader] state " + position_.to_json() + " points past the " +
        std::to_string(document_tokens_.size()) + " tokens of document " +
        std::to_string(index) +
        "; the dataset or tokenizer changed since it was saved");
  }
  document_loaded_ = true;
}

Batch DataLoader::produce() {
  const int64_t B = options_.batch_size;
  const int64_t T = options_.seq_len;
  Batch batch;
  batch.inputs = at::empty({B, T}, at::kLong);  // (B, T)
  batch.labels = at::empty({B, T}, at::kLong);  // (B, T)
  int64_t* inputs = batch.inputs.data_ptr<int64_t>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  int64_t* documents = nullptr;
  if (options_.documents) {
    batch.documents = at::empty({B, T}, at::kLong);
    documents = batch.documents.data_ptr<int64_t>();
  }
  // Each row consumes T + 1 tokens: labels are the inputs shifted by one.
  std::vector<int64_t> window(static_cast<size_t>(T) + 1);
  std::vector<int64_t> window_documents(
      options_.documents ? static_cast<size_t>(T) + 1 : 0);
  for (int64_t rank = 0; rank < options_.dp_size; ++rank) {
    for (int64_t b = 0; b < B; ++b) {
      if (rank != options_.dp_rank) {
        take_window(nullptr);
        continue;
      }
      take_window(window.data(), documents ? window_documents.data() : nullptr);
      std::copy(window.begin(), window.end() - 1, inputs + b * T);
      std::copy(window.begin() + 1, window.end(), labels + b * T);
      if (documents != nullptr) {
        std::copy(
            window_documents.begin(),
            window_documents.end() - 1,
            documents + b * T);
      }
    }
  }
  // A split sequence: this rank's positions of each row (the documents
  // stay whole).
  const SequenceSplit& split = options_.sequence_split;
  if (split.split()) {
    batch.inputs = split.take(batch.inputs, 1);
    batch.labels = split.take(batch.labels, 1);
  }
  return batch;
}

void DataLoader::take_window(int64_t* window, int64_t* documents) {
  const int64_t size = options_.seq_len + 1;
  int64_t filled = 0;
  int64_t document = 0;  // within the window
  while (filled < size) {
    if (!document_loaded_) {
      load_document();
    }
    const int64_t available =
        static_cast<int64_t>(document_tokens_.size()) - position_.token;
    if (available == 0) {
      // The next document is read only when a token is needed, so a state
      // never points past the end of an epoch.
      document_loaded_ = false;
      position_.token = 0;
      if (++position_.document == dataset_size_) {
        position_.document = 0;
        ++position_.epoch;
      }
      if (filled > 0) {
        ++document;  // the window goes on in the next document
      }
      continue;
    }
    const int64_t n = std::min(available, size - filled);
    if (window != nullptr) {
      const int32_t* from = document_tokens_.data() + position_.token;
      std::copy(from, from + n, window + filled);
    }
    if (documents != nullptr) {
      std::fill(documents + filled, documents + filled + n, document);
    }
    filled += n;
    position_.token += n;
  }
}

void DataLoader::start_worker() {
  stop_ = false;
  worker_ = std::thread([this] { worker_loop(); });
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) {
    worker_.join();
  }
  queue_.clear();
  stop_ = false;
}

void DataLoader::worker_loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] {
        return stop_ || static_cast<int64_t>(queue_.size()) < options_.prefetch;
      });
      if (stop_) {
        return;
      }
    }
    Produced item;
    try {
      item.batch = produce();
      item.after = position_;
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool failed = static_cast<bool>(item.error);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(item));
    }
    changed_.notify_all();
    if (failed) {
      return;
    }
  }
}

}  // namespace baton
