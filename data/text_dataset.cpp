#include "data/text_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/text.h"

namespace baton {

namespace {

// gzread chunk when decompressing a whole file.
constexpr size_t kReadChunk = 1 << 20;

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

[[noreturn]] void throw_errno(const std::string& path, const char* what) {
  throw std::runtime_error(
      "[data] cannot " + std::string(what) + " '" + path +
      "': " + std::strerror(errno));
}

std::string decompress(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw_errno(path, "open");
  }
  std::string out;
  std::vector<char> chunk(kReadChunk);
  int n = 0;
  while ((n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()))) >
         0) {
    out.append(chunk.data(), static_cast<size_t>(n));
  }
  // A truncated file ends without an error from gzread (zlib allows for a
  // file still being written) but leaves Z_BUF_ERROR behind.
  int code = Z_OK;
  const std::string message = gzerror(file, &code);
  if (n < 0 || code != Z_OK) {
    gzclose(file);
    throw std::runtime_error(
        "[data] cannot read '" + path + "' after " +
        std::to_string(out.size()) + " bytes: " + message);
  }
  gzclose(file);
  return out;
}

}  // namespace

std::unique_ptr<FileBytes> FileBytes::open(const std::string& path) {
  std::unique_ptr<FileBytes> bytes(new FileBytes());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw_errno(path, "open");
  }
  struct stat info {};
  unsigned char magic[2] = {0, 0};
  const bool ok = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  if (!ok) {
    ::close(fd);
    throw std::runtime_error(
        "[data] cannot read '" + path + "': not a regular file");
  }
  const bool gzip = info.st_size >= 2 && ::pread(fd, magic, 2, 0) == 2 &&
                    magic[0] == 0x1f && magic[1] == 0x8b;
  if (gzip) {
    ::close(fd);
    bytes->decompressed_ = decompress(path);
    bytes->data_ = bytes->decompressed_.data();
    bytes->size_ = bytes->decompressed_.size();
    return bytes;
  }
  if (info.st_size > 0) {
    void* mapping = ::mmap(
        nullptr,
        static_cast<size_t>(info.st_size),
        PROT_READ,
        MAP_PRIVATE,
        fd,
        0);
    if (mapping == MAP_FAILED) {
      ::close(fd);
      throw_errno(path, "map");
    }
    bytes->mapping_ = mapping;
    bytes->data_ = static_cast<const char*>(mapping);
    bytes->size_ = static_cast<size_t>(info.st_size);
  }
  ::close(fd);
  return bytes;
}

FileBytes::~FileBytes() {
  if (mapping_ != nullptr) {
    ::munmap(mapping_, size_);
  }
}

JsonlDataset::JsonlDataset(const DatasetOptions& options)
    : text_field_(options.text_field),
      paths_(expand_input_paths(options.path, {".jsonl", ".jsonl.gz"})) {
  for (uint32_t f = 0; f < paths_.size(); ++f) {
    files_.push_back(FileBytes::open(paths_[f]));
    const std::string_view content = files_.back()->view();
    const size_t before = lines_.size();
    int64_t line_number = 0;
    size_t pos = 0;
    while (pos < content.size()) {
      size_t end = content.find('\n', pos);
      if (end == std::string_view::npos) {
        end = content.size();
      }
      ++line_number;
      if (!is_blank(content.substr(pos, end - pos))) {
        lines_.push_back(Line{f, line_number, pos, end - pos});
      }
      pos = end + 1;
    }
    if (lines_.size() == before) {
      throw std::runtime_error(
          "[JsonlDataset] " + paths_[f] + ": holds no documents (" +
          std::to_string(line_number) + " lines, none with content)");
    }
  }
}

JsonlDataset::~JsonlDataset() = default;

int64_t JsonlDataset::size() const {
  return static_cast<int64_t>(lines_.size());
}

std::string JsonlDataset::text(int64_t index) const {
  const Line& line = lines_.at(static_cast<size_t>(index));
  // Built only when a line is bad: text() runs for every document read.
  const auto where = [&] {
    return "[JsonlDataset] " + paths_[line.file] + ":" +
           std::to_string(line.line_number);
  };
  const std::string_view content =
      files_[line.file]->view().substr(line.offset, line.length);
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(content);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(where() + ": invalid JSON: " + e.what());
  }
  if (!value.is_object()) {
    throw std::runtime_error(
        where() + ": expected a JSON object with a string field '" +
        text_field_ + "', got " + value.type_name());
  }
  const auto field = value.find(text_field_);
  if (field == value.end()) {
    std::vector<std::string> keys;
    for (const auto& item : value.items()) {
      keys.push_back(item.key());
    }
    const std::string near = closest_match(text_field_, keys);
    throw std::runtime_error(
        where() + ": missing field '" + text_field_ +
        "' (the text field: training.dataset_text_field, "
        "validation.dataset_text_field or --text-field); the line has " +
        (keys.empty() ? std::string("no fields")
                      : "the fields " + join(keys, ", ")) +
        (near.empty() ? "" : "; did you mean '" + near + "'?"));
  }
  if (!field->is_string()) {
    throw std::runtime_error(
        where() + ": field '" + text_field_ + "' must be a string, got " +
        field->type_name());
  }
  return field->get<std::string>();
}

TextFilesDataset::TextFilesDataset(const DatasetOptions& options)
    : paths_(expand_input_paths(options.path, {})) {
  for (const std::string& path : paths_) {
    if (FileBytes::open(path)->view().empty()) {
      throw std::runtime_error(
          "[TextFilesDataset] " + path +
          ": empty file; allowed: a text "
          "file with at least one byte (one document per file)");
    }
  }
}

int64_t TextFilesDataset::size() const {
  return static_cast<int64_t>(paths_.size());
}

std::string TextFilesDataset::text(int64_t index) const {
  return std::string(
      FileBytes::open(paths_.at(static_cast<size_t>(index)))->view());
}

}  // namespace baton
