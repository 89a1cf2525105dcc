#pragma once

// The safetensors file format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length N, N bytes of JSON (padded with
// spaces), then the tensors' bytes. The header maps each name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data
// section) and may hold "__metadata__": {string: string}. Nothing in it is
// executed on load.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace baton {

/// A checkpoint or safetensors file that cannot be used: truncated, corrupt,
/// inconsistent with its index, or not what the model needs. The message
/// names the file and the tensor. Exit code 1.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One tensor of a safetensors file.
struct SafetensorsEntry {
  /// The tensor's name (a model FQN in Baton's files).
  std::string name;
  at::ScalarType dtype = at::kFloat;
  /// Empty for a scalar.
  std::vector<int64_t> shape;
  /// Byte range in the data section (after the header).
  uint64_t begin = 0;
  uint64_t end = 0;
  /// CRC-32 of the bytes; set by write_safetensors (not stored in the file).
  uint32_t crc32 = 0;
};

/// The format's name of a dtype ("F32", "BF16", "I64", ...); throws
/// std::invalid_argument for a dtype the format lacks.
std::string safetensors_dtype(at::ScalarType dtype);
/// The dtype of a format name; throws std::invalid_argument for others.
at::ScalarType dtype_from_safetensors(const std::string& name);
/// "[256, 258]".
std::string shape_string(const std::vector<int64_t>& shape);

/// CRC-32 (zlib's polynomial) of `size` bytes, continuing from `crc`.
uint32_t crc32_of(const void* data, size_t size, uint32_t crc = 0);

/// One tensor to write. `data` is called when its turn comes and returns the
/// contents (any device or layout: made contiguous on the CPU), so a writer
/// can convert or read tensors one at a time.
struct SafetensorsItem {
  /// Name, dtype and shape as the header will give them.
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  /// The contents, produced when the writer reaches this item.
  std::function<at::Tensor()> data;
};

/// An item for an existing tensor, written as it is.
SafetensorsItem safetensors_item(std::string name, at::Tensor tensor);

/// Options of write_safetensors.
struct SafetensorsWriteOptions {
  /// The header's "__metadata__".
  std::map<std::string, std::string> metadata;
  /// fsync the file before returning.
  bool sync = true;
  /// Called after each tensor's bytes are written with the data bytes
  /// written so far and in all (the fault injection of the tests uses it).
  std::function<void(uint64_t written, uint64_t total)> on_progress;
};

/// Writes `items` to `path`, in the given order, and returns their entries
/// with CRC-32s. Throws CheckpointError naming the file on I/O failure, and
/// std::invalid_argument when an item's data has another dtype or shape than
/// it declared.
std::vector<SafetensorsEntry> write_safetensors(
    const std::string& path,
    const std::vector<SafetensorsItem>& items,
    const SafetensorsWriteOptions& options = {});

/// A safetensors file opened for reading. The constructor parses and checks
/// the header: valid JSON, known dtypes, every byte range inside the file
/// and exactly as long as its dtype and shape need, no overlaps. Any problem
/// throws CheckpointError naming the file (and the tensor).
class SafetensorsReader {
 public:
  /// Opens `path` and checks its header (CheckpointError on any problem).
  explicit SafetensorsReader(std::string path);
  /// Closes the file.
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  /// The file it reads.
  const std::string& path() const {
    return path_;
  }
  /// Entries in file order.
  const std::vector<SafetensorsEntry>& entries() const {
    return entries_;
  }
  /// The entry named `name`, or null.
  const SafetensorsEntry* find(const std::string& name) const;
  /// The header's "__metadata__".
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  /// The tensor `name` on the CPU. Throws CheckpointError when it is absent
  /// or cannot be read whole.
  at::Tensor read(const std::string& name) const;
  /// The bytes of `entry` into `dst` (entry.end - entry.begin bytes).
  void read_bytes(const SafetensorsEntry& entry, void* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

/// fsyncs a folder so that a rename or a new file in it is durable.
void sync_directory(const std::string& path);

}  // namespace baton
