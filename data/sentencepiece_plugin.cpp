// libbaton_sentencepiece.so: SentencePiece behind the interface of
// data/sentencepiece_plugin.h (see there for why it is a plugin).

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <stdexcept>

#include "data/sentencepiece_plugin.h"

// Exported by libsentencepiece, not declared in its public headers.
namespace sentencepiece::logging {
void SetMinLogLevel(int v);
}  // namespace sentencepiece::logging

namespace {

namespace plugin = baton::sentencepiece_plugin;

// Silences SentencePiece's logging, which writes to std::cerr: under
// RTLD_DEEPBIND its std::cerr is libstdc++'s own, never-constructed copy
// (the executable holds the live one), so any log line would crash. Errors
// still come back as statuses.
void silence_logging() {
  sentencepiece::logging::SetMinLogLevel(4);
}

// Reads protobuf's wire format. The model's description comes from its
// serialized ModelProto: SentencePiece's API (0.1.97) tells neither which
// pieces are user-defined nor the normalizer's settings, and Debian ships no
// generated code for sentencepiece_model.proto to read model_proto() with.
// Only a handful of fields matter; a malformed one throws, and describe()
// turns that into its message (nothing thrown leaves the plugin).
class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}
  /// The next field's number and wire type; false at the end.
  bool next(uint32_t& field, uint32_t& wire) {
    if (pos_ == data_.size()) {
      return false;
    }
    const uint64_t key = varint();
    field = static_cast<uint32_t>(key >> 3);
    wire = static_cast<uint32_t>(key & 7);
    return true;
  }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto byte = static_cast<uint8_t>(take(1)[0]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) {
        return value;
      }
    }
    throw std::runtime_error("a varint longer than 10 bytes");
  }
  std::string_view bytes() {
    return take(varint());
  }
  float fixed32_float() {
    const std::string_view raw = take(4);
    uint32_t bits = 0;
    for (int i = 3; i >= 0; --i) {
      bits = (bits << 8) | static_cast<uint8_t>(raw[i]);
    }
    float value = 0.0f;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  /// Passes over a field this reader does not keep.
  void skip(uint32_t wire) {
    switch (wire) {
      case 0:
        varint();
        return;
      case 1:
        take(8);
        return;
      case 2:
        bytes();
        return;
      case 5:
        take(4);
        return;
      default:
        throw std::runtime_error(
            "wire type " + std::to_string(wire) + " is not read");
    }
  }

 private:
  std::string_view take(uint64_t n) {
    if (n > data_.size() - pos_) {
      throw std::runtime_error("a field runs past its message");
    }
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  std::string_view data_;
  size_t pos_ = 0;
};

// ModelProto.SentencePiece: piece 1, score 2, type 3.
plugin::ModelDescription::Piece read_piece(std::string_view data) {
  plugin::ModelDescription::Piece piece;
  WireReader in(data);
  for (uint32_t field = 0, wire = 0; in.next(field, wire);) {
    if (field == 1 && wire == 2) {
      piece.piece = in.bytes();
    } else if (field == 2 && wire == 5) {
      piece.score = in.fixed32_float();
    } else if (field == 3 && wire == 0) {
      piece.type =
          static_cast<plugin::ModelDescription::PieceType>(in.varint());
    } else {
      in.skip(wire);
    }
  }
  return piece;
}

// TrainerSpec: model_type 3, treat_whitespace_as_suffix 24, byte_fallback 35.
void read_trainer_spec(std::string_view data, plugin::ModelDescription& m) {
  WireReader in(data);
  for (uint32_t field = 0, wire = 0; in.next(field, wire);) {
    if (field == 3 && wire == 0) {
      const uint64_t type = in.varint();
      static const char* const kTypes[] = {"unigram", "bpe", "word", "char"};
      m.model_type = type >= 1 && type <= 4 ? kTypes[type - 1]
                                            : "type " + std::to_string(type);
    } else if (field == 24 && wire == 0) {
      m.treat_whitespace_as_suffix = in.varint() != 0;
    } else if (field == 35 && wire == 0) {
      m.byte_fallback = in.varint() != 0;
    } else {
      in.skip(wire);
    }
  }
}

// NormalizerSpec: precompiled_charsmap 2, add_dummy_prefix 3,
// remove_extra_whitespaces 4, escape_whitespaces 5.
void read_normalizer_spec(std::string_view data, plugin::ModelDescription& m) {
  WireReader in(data);
  for (uint32_t field = 0, wire = 0; in.next(field, wire);) {
    if (field == 2 && wire == 2) {
      m.precompiled_charsmap = in.bytes();
    } else if (field == 3 && wire == 0) {
      m.add_dummy_prefix = in.varint() != 0;
    } else if (field == 4 && wire == 0) {
      m.remove_extra_whitespaces = in.varint() != 0;
    } else if (field == 5 && wire == 0) {
      m.escape_whitespaces = in.varint() != 0;
    } else {
      in.skip(wire);
    }
  }
}

// The ModelProto's fields (sentencepiece_model.proto): pieces 1,
// trainer_spec 2, normalizer_spec 3, denormalizer_spec 5.
plugin::ModelDescription read_model(std::string_view data) {
  plugin::ModelDescription m;
  WireReader in(data);
  for (uint32_t field = 0, wire = 0; in.next(field, wire);) {
    if (wire != 2) {
      in.skip(wire);
    } else if (field == 1) {
      m.pieces.push_back(read_piece(in.bytes()));
    } else if (field == 2) {
      read_trainer_spec(in.bytes(), m);
    } else if (field == 3) {
      read_normalizer_spec(in.bytes(), m);
    } else if (field == 5) {
      plugin::ModelDescription denormalizer;
      read_normalizer_spec(in.bytes(), denormalizer);
      m.denormalizer_charsmap = denormalizer.precompiled_charsmap;
    } else {
      in.skip(wire);
    }
  }
  return m;
}

class Processor final : public plugin::Processor {
 public:
  std::string load(const std::string& path) {
    const auto status = processor_.Load(path);
    return status.ok() ? "" : status.ToString();
  }
  std::string encode(
      std::string_view text, std::vector<int32_t>& ids) const override {
    std::vector<int> out;
    const auto status =
        processor_.Encode(absl::string_view(text.data(), text.size()), &out);
    ids.assign(out.begin(), out.end());
    return status.ok() ? "" : status.ToString();
  }
  std::string decode(
      const std::vector<int32_t>& ids, std::string& text) const override {
    const std::vector<int> in(ids.begin(), ids.end());
    const auto status = processor_.Decode(in, &text);
    return status.ok() ? "" : status.ToString();
  }
  int64_t piece_size() const override {
    return processor_.GetPieceSize();
  }
  int32_t bos_id() const override {
    return processor_.bos_id();
  }
  int32_t eos_id() const override {
    return processor_.eos_id();
  }
  std::string describe(plugin::ModelDescription& model) const override {
    try {
      model = read_model(processor_.serialized_model_proto());
    } catch (const std::exception& e) {
      return std::string("cannot read the model's description: ") + e.what();
    }
    if (static_cast<int64_t>(model.pieces.size()) != piece_size()) {
      return "the model's description has " +
             std::to_string(model.pieces.size()) + " pieces, the model " +
             std::to_string(piece_size());
    }
    return "";
  }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

// Hands SentencePiece's trainer the sentences of `next`.
class SentenceIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit SentenceIterator(const std::function<const std::string*()>& next)
      : next_(next), current_(next_()) {}
  bool done() const override {
    return current_ == nullptr;
  }
  void Next() override {
    current_ = next_();
  }
  const std::string& value() const override {
    return *current_;
  }
  sentencepiece::util::Status status() const override {
    return sentencepiece::util::Status();
  }

 private:
  const std::function<const std::string*()>& next_;
  const std::string* current_;
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int32_t
baton_sentencepiece_interface_version() {
  return plugin::kInterfaceVersion;
}

__attribute__((visibility("default"))) plugin::Processor*
baton_sentencepiece_load(const std::string& path, std::string* error) {
  silence_logging();
  auto processor = std::make_unique<Processor>();
  *error = processor->load(path);
  return error->empty() ? processor.release() : nullptr;
}

__attribute__((visibility("default"))) std::string baton_sentencepiece_train(
    const std::unordered_map<std::string, std::string>& args,
    const std::function<const std::string*()>& next,
    std::string* model) {
  silence_logging();
  SentenceIterator sentences(next);
  const auto status =
      sentencepiece::SentencePieceTrainer::Train(args, &sentences, model);
  return status.ok() ? "" : status.ToString();
}

}  // extern "C"
