#include "data/token_shards.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "common/error.h"
#include "data/text_dataset.h"

namespace baton {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'B', 'A', 'T', 'O', 'N', 'T', 'O', 'K'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t vocab_size;
  uint32_t bos;
  uint32_t eos;
  uint64_t documents;
  uint64_t tokens;
};
static_assert(sizeof(Header) == 48, "the shard header is 48 bytes");

void write_or_throw(
    std::FILE* file, const void* data, size_t bytes, const std::string& path) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file) != bytes) {
    throw std::runtime_error(
        "[TokenShardWriter] cannot write '" + path +
        "': " + std::strerror(errno));
  }
}

}  // namespace

TokenShardWriter::TokenShardWriter(
    std::string dir, const Tokenizer& tokenizer, int64_t tokens_per_shard)
    : dir_(std::move(dir)),
      vocab_size_(tokenizer.vocab_size()),
      bos_(tokenizer.bos_id()),
      eos_(tokenizer.eos_id()),
      token_bytes_(tokenizer.vocab_size() <= 65536 ? 2 : 4),
      tokens_per_shard_(tokens_per_shard) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_)) {
    throw std::runtime_error(
        "[TokenShardWriter] cannot create the folder '" + dir_ +
        "': " + ec.message());
  }
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().extension() == ".bin") {
      throw_config_error(
          "--out",
          "'" + dir_ + "' already holds shards (" +
              entry.path().filename().string() +
              "); allowed: a new or empty folder");
    }
  }
}

TokenShardWriter::~TokenShardWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
  }
}

void TokenShardWriter::open_shard() {
  char name[32];
  std::snprintf(name, sizeof(name), "shard_%06zu.bin", written_.size());
  written_.push_back((fs::path(dir_) / name).string());
  file_ = std::fopen(written_.back().c_str(), "wb");
  if (file_ == nullptr) {
    throw std::runtime_error(
        "[TokenShardWriter] cannot create '" + written_.back() +
        "': " + std::strerror(errno));
  }
  const Header placeholder{};
  write_or_throw(file_, &placeholder, sizeof(placeholder), written_.back());
  offsets_.assign(1, 0);
}

void TokenShardWriter::add(const std::vector<int32_t>& ids) {
  if (file_ == nullptr) {
    open_shard();
  }
  const std::string& path = written_.back();
  if (token_bytes_ == 2) {
    std::vector<uint16_t> narrow(ids.begin(), ids.end());
    write_or_throw(file_, narrow.data(), narrow.size() * 2, path);
  } else {
    write_or_throw(file_, ids.data(), ids.size() * 4, path);
  }
  offsets_.push_back(offsets_.back() + ids.size());
  if (static_cast<int64_t>(offsets_.back()) >= tokens_per_shard_) {
    close_shard();
  }
}

void TokenShardWriter::close_shard() {
  const std::string& path = written_.back();
  write_or_throw(file_, offsets_.data(), offsets_.size() * 8, path);
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.token_bytes = token_bytes_;
  header.vocab_size = static_cast<uint64_t>(vocab_size_);
  header.bos = static_cast<uint32_t>(bos_);
  header.eos = static_cast<uint32_t>(eos_);
  header.documents = offsets_.size() - 1;
  header.tokens = offsets_.back();
  if (std::fseek(file_, 0, SEEK_SET) != 0) {
    throw std::runtime_error(
        "[TokenShardWriter] cannot seek in '" + path + "'");
  }
  write_or_throw(file_, &header, sizeof(header), path);
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!closed) {
    throw std::runtime_error(
        "[TokenShardWriter] cannot write '" + path +
        "': " + std::strerror(errno));
  }
}

std::vector<std::string> TokenShardWriter::finish() {
  if (file_ != nullptr) {
    close_shard();
  }
  return written_;
}

struct TokenShardDataset::Shard {
  std::string path;
  std::unique_ptr<FileBytes> bytes;
  Header header{};
  const uint64_t* offsets = nullptr;
  const char* tokens = nullptr;

  [[noreturn]] void fail(size_t byte_offset, const std::string& what) const {
    throw std::runtime_error(
        "[TokenShardDataset] " + path + " at byte " +
        std::to_string(byte_offset) + ": " + what);
  }

  void check() {
    const std::string_view data = bytes->view();
    if (data.size() < sizeof(Header)) {
      fail(
          0,
          "too short for a shard header (" + std::to_string(data.size()) +
              " bytes); not a shard of baton data tokenize");
    }
    std::memcpy(&header, data.data(), sizeof(Header));
    if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
      fail(0, "not a shard of baton data tokenize (no BATONTOK magic)");
    }
    if (header.version != kVersion) {
      fail(
          8,
          "version " + std::to_string(header.version) +
              " is not supported; allowed: 1");
    }
    if (header.token_bytes != 2 && header.token_bytes != 4) {
      fail(
          12,
          std::to_string(header.token_bytes) +
              " bytes per token; allowed: 2 or 4");
    }
    // Counts from the header bound the sizes before any product is taken:
    // a damaged count must not wrap around to the file's size.
    const uint64_t body = data.size() - sizeof(Header);
    const bool fits = header.tokens <= body / header.token_bytes &&
                      header.documents < body / 8;
    const size_t tokens_end =
        fits ? sizeof(Header) + header.tokens * header.token_bytes : 0;
    const size_t expected = fits ? tokens_end + (header.documents + 1) * 8 : 0;
    if (!fits || data.size() != expected) {
      fail(
          data.size(),
          "file size " + std::to_string(data.size()) +
              " does not match its header (" +
              std::to_string(header.documents) + " documents, " +
              std::to_string(header.tokens) + " tokens: " +
              (fits ? std::to_string(expected)
                    : "over " + std::to_string(data.size())) +
              " bytes); the shard is truncated or damaged");
    }
    tokens = data.data() + sizeof(Header);
    offsets = reinterpret_cast<const uint64_t*>(data.data() + tokens_end);
    for (uint64_t d = 0; d <= header.documents; ++d) {
      const bool bad =
          d == 0 ? offsets[0] != 0
                 : offsets[d] < offsets[d - 1] || offsets[d] > header.tokens;
      if (bad || (d == header.documents && offsets[d] != header.tokens)) {
        fail(
            tokens_end + d * 8,
            "document offset " + std::to_string(offsets[d]) +
                " is out of order; the shard is damaged");
      }
    }
  }
};

TokenShardDataset::TokenShardDataset(const DatasetOptions& options) {
  first_document_.push_back(0);
  for (const std::string& path : expand_input_paths(options.path, {".bin"})) {
    auto shard = std::make_unique<Shard>();
    shard->path = path;
    shard->bytes = FileBytes::open(path);
    shard->check();
    if (!shards_.empty()) {
      const Header& first = shards_.front()->header;
      if (shard->header.vocab_size != first.vocab_size ||
          shard->header.bos != first.bos || shard->header.eos != first.eos) {
        shard->fail(
            16,
            "made with another tokenizer than " + shards_.front()->path +
                " (vocab " + std::to_string(shard->header.vocab_size) + " vs " +
                std::to_string(first.vocab_size) + ")");
      }
    }
    if (shard->header.documents == 0) {
      shard->fail(40, "holds no documents");
    }
    first_document_.push_back(
        first_document_.back() + static_cast<int64_t>(shard->header.documents));
    shards_.push_back(std::move(shard));
  }
}

TokenShardDataset::~TokenShardDataset() = default;

int64_t TokenShardDataset::size() const {
  return first_document_.back();
}

std::vector<int32_t> TokenShardDataset::tokens(
    int64_t index, const Tokenizer& tokenizer) const {
  const auto it =
      std::upper_bound(first_document_.begin(), first_document_.end(), index);
  const size_t s = static_cast<size_t>(it - first_document_.begin()) - 1;
  const Shard& shard = *shards_.at(s);
  const Header& h = shard.header;
  if (static_cast<int64_t>(h.vocab_size) != tokenizer.vocab_size() ||
      static_cast<int32_t>(h.bos) != tokenizer.bos_id() ||
      static_cast<int32_t>(h.eos) != tokenizer.eos_id()) {
    throw std::runtime_error(
        "[TokenShardDataset] " + shard.path +
        " was made with a tokenizer of "
        "vocab " +
        std::to_string(h.vocab_size) + " (BOS " + std::to_string(h.bos) +
        ", EOS " + std::to_string(h.eos) + "), but model.tokenizer has vocab " +
        std::to_string(tokenizer.vocab_size()) + " (BOS " +
        std::to_string(tokenizer.bos_id()) + ", EOS " +
        std::to_string(tokenizer.eos_id()) +
        "); use the tokenizer the shards were made with");
  }
  const uint64_t d = static_cast<uint64_t>(index - first_document_[s]);
  const uint64_t begin = shard.offsets[d];
  const uint64_t end = shard.offsets[d + 1];
  std::vector<int32_t> ids(end - begin);
  for (uint64_t t = begin; t < end; ++t) {
    uint32_t id = 0;
    if (h.token_bytes == 2) {
      uint16_t narrow = 0;
      std::memcpy(&narrow, shard.tokens + t * 2, 2);
      id = narrow;
    } else {
      std::memcpy(&id, shard.tokens + t * 4, 4);
    }
    if (id >= h.vocab_size) {
      throw std::runtime_error(
          "[TokenShardDataset] " + shard.path + " at token offset " +
          std::to_string(t) + " (byte " +
          std::to_string(sizeof(Header) + t * h.token_bytes) + "): token id " +
          std::to_string(id) + " is out of the vocabulary range [0, " +
          std::to_string(h.vocab_size) + ")");
    }
    ids[t - begin] = static_cast<int32_t>(id);
  }
  return ids;
}

}  // namespace baton
