#include "data/text_dataset.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "common/error.h"
#include "common/paths.h"

namespace baton {

namespace {

constexpr const char* kKjvDefaultPath = "assets/kjv.jsonl.gz";
// gzread chunk; lines may be longer, they are assembled across chunks.
constexpr size_t kReadChunk = 256 * 1024;

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

}  // namespace

struct JsonlDataset::Impl {
  std::string path;
  std::string text_field;
  gzFile file = nullptr;
  std::vector<char> chunk = std::vector<char>(kReadChunk);
  size_t chunk_pos = 0;
  size_t chunk_end = 0;
  bool at_eof = false;
  // 1-based number of the line last read.
  int64_t line_number = 0;
  int64_t documents_this_pass = 0;

  std::string where() const {
    return "[JsonlDataset] " + path + ":" + std::to_string(line_number);
  }

  // Reads the next chunk; returns false at the end of the file.
  bool refill() {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(kReadChunk));
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      throw std::runtime_error(
          "[JsonlDataset] " + path + ": read error after line " +
          std::to_string(line_number) + ": " +
          (code == Z_ERRNO ? std::strerror(errno) : message));
    }
    chunk_pos = 0;
    chunk_end = static_cast<size_t>(n);
    return n > 0;
  }

  // The next line without its '\n' into `line`; false at the end of the file.
  bool read_line(std::string& line) {
    line.clear();
    if (at_eof) {
      return false;
    }
    bool any = false;
    while (true) {
      if (chunk_pos == chunk_end && !refill()) {
        at_eof = true;
        if (any) {
          ++line_number;
        }
        return any;
      }
      any = true;
      const char* begin = chunk.data() + chunk_pos;
      const size_t available = chunk_end - chunk_pos;
      const void* newline = std::memchr(begin, '\n', available);
      if (newline != nullptr) {
        const size_t length = static_cast<const char*>(newline) - begin;
        line.append(begin, length);
        chunk_pos += length + 1;
        ++line_number;
        return true;
      }
      line.append(begin, available);
      chunk_pos = chunk_end;
    }
  }

  void rewind() {
    if (gzrewind(file) != 0) {
      throw std::runtime_error(
          "[JsonlDataset] " + path + ": cannot rewind to the first line");
    }
    chunk_pos = chunk_end = 0;
    at_eof = false;
    line_number = 0;
    documents_this_pass = 0;
  }
};

JsonlDataset::JsonlDataset(std::string path, std::string text_field)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->text_field = std::move(text_field);
  errno = 0;
  // gzopen reads uncompressed files transparently.
  impl_->file = gzopen(impl_->path.c_str(), "rb");
  if (impl_->file == nullptr) {
    const int code = errno;
    throw std::runtime_error(
        "[JsonlDataset] cannot open '" + impl_->path +
        "': " + (code != 0 ? std::strerror(code) : "out of memory"));
  }
}

JsonlDataset::~JsonlDataset() {
  if (impl_ && impl_->file != nullptr) {
    gzclose(impl_->file);
  }
}

std::optional<std::string> JsonlDataset::next() {
  Impl& d = *impl_;
  std::string line;
  while (d.read_line(line)) {
    if (is_blank(line)) {
      continue;
    }
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(d.where() + ": invalid JSON: " + e.what());
    }
    if (!value.is_object()) {
      throw std::runtime_error(
          d.where() + ": expected a JSON object with a string field '" +
          d.text_field + "', got " + value.type_name());
    }
    const auto field = value.find(d.text_field);
    if (field == value.end()) {
      throw std::runtime_error(
          d.where() + ": missing field '" + d.text_field + "'");
    }
    if (!field->is_string()) {
      throw std::runtime_error(
          d.where() + ": field '" + d.text_field + "' must be a string, got " +
          field->type_name());
    }
    ++d.documents_this_pass;
    return field->get<std::string>();
  }
  if (d.documents_this_pass == 0) {
    throw std::runtime_error(
        "[JsonlDataset] " + d.path + ": holds no documents (" +
        std::to_string(d.line_number) + " lines, none with content)");
  }
  return std::nullopt;
}

void JsonlDataset::reset() {
  impl_->rewind();
}

Registry<DatasetCreator>& dataset_registry() {
  static Registry<DatasetCreator> registry("dataset");
  return registry;
}

void register_builtin_datasets() {
  dataset_registry().add_builtins_once([](Registry<DatasetCreator>& registry) {
    registry.add(
        "kjv",
        [](const std::string& path) -> std::unique_ptr<TextDataset> {
          return std::make_unique<JsonlDataset>(
              path.empty() ? resolve_asset_path(kKjvDefaultPath) : path);
        },
        "the bundled King James Bible, one chapter per document "
        "(assets/kjv.jsonl.gz unless training.dataset_path is set)");
    registry.add(
        "jsonl",
        [](const std::string& path) -> std::unique_ptr<TextDataset> {
          if (path.empty()) {
            throw_config_error(
                "training.dataset_path",
                "empty; allowed: a JSON Lines file (required by dataset "
                "'jsonl')");
          }
          return std::make_unique<JsonlDataset>(path);
        },
        "JSON Lines (optionally gzip) at training.dataset_path, one object "
        "per line with a string field 'text'");
  });
}

std::string resolve_asset_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    return path;
  }
  const fs::path relative(path);
  if (relative.is_relative()) {
    const fs::path assets_dir(kSourceAssetsDir);
    // "assets/x" is relative to the source root, "x" to assets/ itself.
    for (const fs::path& candidate :
         {assets_dir.parent_path() / relative, assets_dir / relative}) {
      if (fs::exists(candidate, ec)) {
        return candidate.string();
      }
    }
  }
  throw std::runtime_error(
      "[data] asset '" + path + "' not found from the working directory (" +
      fs::current_path(ec).string() + ") nor under " + kSourceAssetsDir);
}

}  // namespace baton
