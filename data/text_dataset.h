#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/registry.h"

namespace baton {

/// A corpus read one document at a time, in file order.
class TextDataset {
 public:
  virtual ~TextDataset() = default;
  /// The next document's text, or nullopt after the last one.
  virtual std::optional<std::string> next() = 0;
  /// Starts again from the first document (a new epoch).
  virtual void reset() = 0;
};

/// JSON Lines, optionally gzip-compressed (detected from the content): one
/// object per line with the document in `text_field`. Blank lines are
/// skipped. A line that is not a JSON object, or lacks a string `text_field`,
/// throws std::runtime_error naming the file and line; so does a file that
/// cannot be opened or holds no document.
class JsonlDataset final : public TextDataset {
 public:
  explicit JsonlDataset(std::string path, std::string text_field = "text");
  ~JsonlDataset() override;
  std::optional<std::string> next() override;
  void reset() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Makes a dataset from `training.dataset_path` (empty: its default file).
using DatasetCreator =
    std::function<std::unique_ptr<TextDataset>(const std::string& path)>;

/// The dataset registry (`training.dataset`).
Registry<DatasetCreator>& dataset_registry();

/// Registers the built-in datasets: `kjv` (the bundled King James Bible,
/// assets/kjv.jsonl.gz) and `jsonl` (any JSON Lines file, path required).
void register_builtin_datasets();

/// `path` when it exists, else the same relative path under the source
/// tree's assets/ folder (so the bundled corpus is found from any working
/// directory); throws std::runtime_error when neither exists.
std::string resolve_asset_path(const std::string& path);

}  // namespace baton
