#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace baton {

// A token shard file (little-endian): a 48-byte header (magic "BATONTOK",
// u32 version 1, u32 bytes per token (2 or 4), u64 vocab size, u32 BOS,
// u32 EOS, u64 documents, u64 tokens), the tokens of every document back to
// back (uint16 or uint32, without BOS or EOS), then u64 offsets[documents +
// 1]: document d is tokens[offsets[d], offsets[d + 1]).

/// Writes documents' tokens to `dir`/shard_000000.bin, shard_000001.bin, ...
/// starting a new shard once one holds `tokens_per_shard` tokens. uint16
/// when the vocabulary fits, else uint32.
class TokenShardWriter {
 public:
  /// `dir` is created if needed and must hold no shards yet (ConfigError).
  TokenShardWriter(
      std::string dir, const Tokenizer& tokenizer, int64_t tokens_per_shard);
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;
  /// Appends one document (ids without BOS or EOS).
  void add(const std::vector<int32_t>& ids);
  /// Completes the last shard; returns the paths written.
  std::vector<std::string> finish();

 private:
  void open_shard();
  void close_shard();

  std::string dir_;
  int64_t vocab_size_;
  int32_t bos_;
  int32_t eos_;
  uint32_t token_bytes_;
  int64_t tokens_per_shard_;
  std::vector<std::string> written_;
  std::FILE* file_ = nullptr;
  std::vector<uint64_t> offsets_;
};

/// Shards written by TokenShardWriter, memory-mapped: a folder of *.bin or
/// a glob, in sorted order. Headers and offsets are checked when opened
/// (naming the shard and byte offset); token ids are checked against the
/// vocabulary when read (naming the shard and token offset), and the
/// tokenizer must match the one the shards were made with.
class TokenShardDataset final : public Dataset {
 public:
  explicit TokenShardDataset(const DatasetOptions& options);
  ~TokenShardDataset() override;
  int64_t size() const override;
  std::vector<int32_t> tokens(
      int64_t index, const Tokenizer& tokenizer) const override;

 private:
  struct Shard;
  std::vector<std::unique_ptr<Shard>> shards_;
  // First document index of each shard, then the total.
  std::vector<int64_t> first_document_;
};

}  // namespace baton
