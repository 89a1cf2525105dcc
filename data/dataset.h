#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"
#include "data/tokenizer.h"

namespace baton {

/// Where a dataset's documents come from (`training.dataset_path`,
/// `training.dataset_text_field`).
struct DatasetOptions {
  /// A file, a directory or a glob; empty = the dataset's default.
  std::string path;
  /// The JSON Lines field that holds each document's text.
  std::string text_field = "text";
};

/// A corpus of documents in a fixed order, read by index, so that the loader
/// can shard, shuffle and resume without reading what it skips. Documents
/// are indexed when the dataset is made; one thread reads at a time.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of documents.
  virtual int64_t size() const = 0;
  /// Token ids of document `index` (in [0, size())), without BOS or EOS.
  /// Throws std::runtime_error naming the file and line (or shard and
  /// offset) of bad data.
  virtual std::vector<int32_t> tokens(
      int64_t index, const Tokenizer& tokenizer) const = 0;
};

/// A dataset of texts: tokens() encodes text().
class TextDataset : public Dataset {
 public:
  /// The text of document `index`.
  virtual std::string text(int64_t index) const = 0;
  std::vector<int32_t> tokens(
      int64_t index, const Tokenizer& tokenizer) const final;
};

/// Makes a dataset from its options.
using DatasetCreator =
    std::function<std::unique_ptr<Dataset>(const DatasetOptions& options)>;

/// The dataset registry (`training.dataset`).
Registry<DatasetCreator>& dataset_registry();

/// Registers the built-in datasets: `kjv` (the bundled King James Bible;
/// given a path, the dataset_for_path reads), `jsonl`, `text` and `tokens`
/// (shards of `baton data tokenize`).
void register_builtin_datasets();

/// The dataset that reads `path` when none is named, by its name: `text`
/// for *.txt and *.txt.gz (one document per file), `jsonl` for *.jsonl and
/// *.jsonl.gz, and for a folder (its *.jsonl and *.jsonl.gz files); a glob
/// by how its pattern ends. Throws ConfigError starting `where: 'path'`
/// and listing these endings for any other.
std::string dataset_for_path(const std::string& path, const std::string& where);

/// `path` when it exists, else the same relative path under the source
/// tree's assets/ folder (so the bundled corpus is found from any working
/// directory); throws std::runtime_error when neither exists.
std::string resolve_asset_path(const std::string& path);

/// The files `path` names, sorted: the file itself; for a directory, the
/// regular files below it whose names end with one of `suffixes` (all when
/// empty); for a glob (`*`, `?`, `[`), the files it matches. Throws
/// std::runtime_error when it names no file.
std::vector<std::string> expand_input_paths(
    const std::string& path, const std::vector<std::string>& suffixes);

}  // namespace baton
