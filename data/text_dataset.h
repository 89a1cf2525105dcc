#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace baton {

/// The bytes of a file: memory-mapped, or decompressed into memory when the
/// file is gzip (detected from its first bytes).
class FileBytes {
 public:
  /// Maps (or decompresses) `path`; throws std::runtime_error naming the
  /// file when it cannot be read.
  static std::unique_ptr<FileBytes> open(const std::string& path);
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  /// The file's (decompressed) content.
  std::string_view view() const {
    return {data_, size_};
  }

 private:
  FileBytes() = default;
  const char* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;
  std::string decompressed_;
};

/// JSON Lines files, each plain or gzip: one object per line with the
/// document in `text_field`; blank lines are skipped. A file without any
/// document throws when the dataset is made; a line that is not a JSON
/// object, or lacks a string `text_field`, throws when read. Messages name
/// the file and line.
class JsonlDataset final : public TextDataset {
 public:
  /// The files `options.path` names (a file, a directory of *.jsonl and
  /// *.jsonl.gz, or a glob), in sorted order.
  explicit JsonlDataset(const DatasetOptions& options);
  ~JsonlDataset() override;
  int64_t size() const override;
  std::string text(int64_t index) const override;

 private:
  struct Line {
    uint32_t file;
    int64_t line_number;
    size_t offset;
    size_t length;
  };
  std::string text_field_;
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<FileBytes>> files_;
  std::vector<Line> lines_;
};

/// Plain text files (each plain or gzip), one document per file: a file,
/// a directory (every file below it) or a glob. An empty file throws when
/// the dataset is made.
class TextFilesDataset final : public TextDataset {
 public:
  explicit TextFilesDataset(const DatasetOptions& options);
  int64_t size() const override;
  std::string text(int64_t index) const override;

 private:
  std::vector<std::string> paths_;
};

}  // namespace baton
