#include "checkpoint/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

namespace baton {

static_assert(
    std::endian::native == std::endian::little,
    "safetensors stores little-endian bytes; Baton writes them as they are");

namespace {

const std::pair<at::ScalarType, const char*> kDtypes[] = {
    {at::kDouble, "F64"},
    {at::kFloat, "F32"},
    {at::kHalf, "F16"},
    {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},
    {at::kInt, "I32"},
    {at::kShort, "I16"},
    {at::kChar, "I8"},
    {at::kByte, "U8"},
    {at::kBool, "BOOL"},
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw CheckpointError("[checkpoint] " + path + ": " + what);
}

std::string errno_text() {
  return std::strerror(errno);
}

/// Bytes of `shape` in `dtype`; nothing when it overflows 64 bits.
std::optional<uint64_t> bytes_of(
    const std::vector<int64_t>& shape, at::ScalarType dtype) {
  uint64_t n = c10::elementSize(dtype);
  for (const int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) {
      return std::nullopt;
    }
  }
  return n;
}

/// The format's reference reader refuses larger headers; so does this one,
/// rather than allocate what a corrupt length says.
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

void write_all(int fd, const std::string& path, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail(path, "write failed: " + errno_text());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

/// Reads exactly `n` bytes at `offset`; false when the file ends first.
bool pread_all(int fd, void* dst, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

/// A safetensors file's JSON header and where its data begins.
struct Header {
  nlohmann::json json;
  uint64_t data_start = 0;
  uint64_t file_size = 0;
};

Header read_header(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    fail(path, "cannot stat: " + errno_text());
  }
  Header header;
  header.file_size = static_cast<uint64_t>(st.st_size);
  uint64_t header_size = 0;
  if (!pread_all(fd, &header_size, sizeof(header_size), 0)) {
    fail(path, "truncated: too short for a safetensors header");
  }
  if (header_size > kMaxHeaderBytes) {
    fail(
        path,
        "header length " + std::to_string(header_size) +
            " exceeds the format's limit of 100 MiB: not a safetensors "
            "file, or a corrupt one");
  }
  if (header_size > header.file_size - sizeof(header_size)) {
    fail(
        path,
        "truncated: the header says " + std::to_string(header_size) +
            " bytes of JSON but the file has " +
            std::to_string(header.file_size) + " bytes");
  }
  std::string text(header_size, '\0');
  if (!pread_all(fd, text.data(), header_size, sizeof(header_size))) {
    fail(path, "truncated header");
  }
  header.data_start = sizeof(header_size) + header_size;
  try {
    header.json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.json.is_object()) {
    fail(path, "header is not a JSON object");
  }
  return header;
}

/// The header entry of tensor `name`, checked against the file's size.
SafetensorsEntry parse_entry(
    const std::string& path,
    const std::string& name,
    const nlohmann::json& value,
    const Header& header) {
  SafetensorsEntry e;
  e.name = name;
  try {
    e.dtype = dtype_from_safetensors(value.at("dtype").get<std::string>());
    e.shape = value.at("shape").get<std::vector<int64_t>>();
    const auto offsets = value.at("data_offsets").get<std::vector<uint64_t>>();
    if (offsets.size() != 2) {
      throw std::invalid_argument("data_offsets needs two numbers");
    }
    e.begin = offsets[0];
    e.end = offsets[1];
  } catch (const std::exception& ex) {
    fail(path, "tensor '" + name + "': bad header entry: " + ex.what());
  }
  for (const int64_t d : e.shape) {
    if (d < 0) {
      fail(path, "tensor '" + name + "': negative dimension");
    }
  }
  const auto bytes = bytes_of(e.shape, e.dtype);
  if (!bytes) {
    fail(path, "tensor '" + name + "': shape too large");
  }
  const uint64_t need = *bytes;
  if (e.end < e.begin || e.end - e.begin != need) {
    fail(
        path,
        "tensor '" + name + "': data_offsets [" + std::to_string(e.begin) +
            ", " + std::to_string(e.end) + ") do not hold " +
            std::to_string(need) + " bytes for " + safetensors_dtype(e.dtype) +
            " " + shape_string(e.shape));
  }
  if (e.end > header.file_size - header.data_start) {
    fail(
        path,
        "truncated: tensor '" + name + "' ends at byte " +
            std::to_string(header.data_start + e.end) + " but the file has " +
            std::to_string(header.file_size) + " bytes");
  }
  return e;
}

}  // namespace

std::string safetensors_dtype(at::ScalarType dtype) {
  for (const auto& [type, name] : kDtypes) {
    if (type == dtype) {
      return name;
    }
  }
  throw std::invalid_argument(
      std::string("[safetensors] dtype ") + c10::toString(dtype) +
      " has no safetensors name");
}

at::ScalarType dtype_from_safetensors(const std::string& name) {
  for (const auto& [type, n] : kDtypes) {
    if (name == n) {
      return type;
    }
  }
  throw std::invalid_argument(
      "[safetensors] unknown dtype '" + name +
      "'; known: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL");
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

uint32_t crc32_of(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  // zlib takes the length as uInt: feed it at most 1 GiB at a time.
  constexpr size_t kChunk = size_t{1} << 30;
  while (size > 0) {
    const size_t n = std::min(size, kChunk);
    c = ::crc32(c, p, static_cast<uInt>(n));
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(c);
}

SafetensorsItem safetensors_item(std::string name, at::Tensor tensor) {
  SafetensorsItem item;
  item.name = std::move(name);
  item.dtype = tensor.scalar_type();
  item.shape = tensor.sizes().vec();
  item.data = [tensor = std::move(tensor)] { return tensor; };
  return item;
}

std::vector<SafetensorsEntry> write_safetensors(
    const std::string& path,
    const std::vector<SafetensorsItem>& items,
    const SafetensorsWriteOptions& options) {
  std::vector<SafetensorsEntry> entries;
  entries.reserve(items.size());
  nlohmann::json header = nlohmann::json::object();
  if (!options.metadata.empty()) {
    header["__metadata__"] = options.metadata;
  }
  uint64_t offset = 0;
  for (const auto& item : items) {
    SafetensorsEntry e;
    e.name = item.name;
    e.dtype = item.dtype;
    e.shape = item.shape;
    e.begin = offset;
    const auto bytes = bytes_of(item.shape, item.dtype);
    if (!bytes) {
      throw std::invalid_argument(
          "[safetensors] " + path + ": tensor '" + e.name + "' has shape " +
          shape_string(item.shape) + ", which is negative or too large");
    }
    e.end = offset + *bytes;
    offset = e.end;
    if (header.contains(e.name)) {
      throw std::invalid_argument(
          "[safetensors] " + path + ": tensor '" + e.name + "' given twice");
    }
    header[e.name] = {
        {"dtype", safetensors_dtype(e.dtype)},
        {"shape", e.shape},
        {"data_offsets", {e.begin, e.end}}};
    entries.push_back(std::move(e));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_size = text.size();

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    fail(path, "cannot create: " + errno_text());
  }
  try {
    write_all(fd, path, &header_size, sizeof(header_size));
    write_all(fd, path, text.data(), text.size());
    for (size_t i = 0; i < items.size(); ++i) {
      auto& e = entries[i];
      const at::Tensor t = items[i].data().contiguous().cpu();
      if (t.scalar_type() != e.dtype || t.sizes().vec() != e.shape) {
        throw std::invalid_argument(
            "[safetensors] " + path + ": tensor '" + e.name + "' declared " +
            safetensors_dtype(e.dtype) + " " + shape_string(e.shape) +
            " but its data is " + c10::toString(t.scalar_type()) + " " +
            shape_string(t.sizes().vec()));
      }
      const size_t n = e.end - e.begin;
      e.crc32 = crc32_of(t.data_ptr(), n);
      write_all(fd, path, t.data_ptr(), n);
      if (options.on_progress) {
        options.on_progress(e.end, offset);
      }
    }
    if (options.sync && ::fsync(fd) != 0) {
      fail(path, "fsync failed: " + errno_text());
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) {
    fail(path, "close failed: " + errno_text());
  }
  return entries;
}

SafetensorsReader::SafetensorsReader(std::string path)
    : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY);
  if (fd_ < 0) {
    fail(path_, "cannot open: " + errno_text());
  }
  try {
    const Header header = read_header(fd_, path_);
    data_start_ = header.data_start;
    for (const auto& [name, value] : header.json.items()) {
      if (name != "__metadata__") {
        entries_.push_back(parse_entry(path_, name, value, header));
        continue;
      }
      try {
        metadata_ = value.get<std::map<std::string, std::string>>();
      } catch (const nlohmann::json::exception&) {
        fail(path_, "__metadata__ must map strings to strings");
      }
    }
    std::sort(
        entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
          return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
        });
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (i > 0 && entries_[i].begin < entries_[i - 1].end) {
        fail(
            path_,
            "tensors '" + entries_[i - 1].name + "' and '" + entries_[i].name +
                "' overlap");
      }
      by_name_[entries_[i].name] = i;
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  ::close(fd_);
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsReader::read_bytes(
    const SafetensorsEntry& entry, void* dst) const {
  if (!pread_all(
          fd_, dst, entry.end - entry.begin, data_start_ + entry.begin)) {
    fail(path_, "tensor '" + entry.name + "': truncated while reading");
  }
}

at::Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) {
    fail(path_, "has no tensor '" + name + "'");
  }
  at::Tensor t = at::empty(e->shape, at::TensorOptions().dtype(e->dtype));
  read_bytes(*e, t.data_ptr());
  return t;
}

void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) {
    fail(path, "cannot open folder: " + errno_text());
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) {
    fail(path, "fsync of folder failed: " + errno_text());
  }
}

}  // namespace baton
