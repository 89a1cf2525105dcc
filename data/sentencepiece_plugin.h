#pragma once

// The boundary between Baton and libsentencepiece. Debian's libsentencepiece
// carries its own copy of protobuf-lite and exports its symbols; loaded with
// the process, it replaces parts of the libprotobuf that libtorch uses and
// crashes the process at start-up. So SentencePiece lives in a plugin,
// libbaton_sentencepiece.so, that SentencePieceTokenizer loads with dlopen
// (RTLD_LOCAL | RTLD_DEEPBIND): each side keeps its own protobuf. Only
// standard-library types cross; errors come back as strings, not exceptions.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace baton::sentencepiece_plugin {

/// What a model file says of itself beyond ids: its pieces and the settings
/// that decide how text becomes pieces, with sentencepiece_model.proto's
/// names and defaults.
struct ModelDescription {
  /// A piece's kind, numbered as ModelProto.SentencePiece.Type.
  enum class PieceType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };
  /// One piece: its text (U+2581 for a space), score and kind.
  struct Piece {
    std::string piece;
    float score = 0.0f;
    PieceType type = PieceType::kNormal;
  };
  /// The pieces by id.
  std::vector<Piece> pieces;
  /// trainer_spec.model_type: "unigram", "bpe", "word" or "char".
  std::string model_type = "unigram";
  /// trainer_spec.byte_fallback: unknown characters as <0xXX> pieces.
  bool byte_fallback = false;
  /// trainer_spec.treat_whitespace_as_suffix: U+2581 ends words instead.
  bool treat_whitespace_as_suffix = false;
  /// normalizer_spec.precompiled_charsmap: its rule (nmt_nfkc, say) as
  /// SentencePiece's double-array trie; "" for none (identity).
  std::string precompiled_charsmap;
  /// normalizer_spec.add_dummy_prefix: a space put before the text.
  bool add_dummy_prefix = true;
  /// normalizer_spec.remove_extra_whitespaces: leading and trailing spaces
  /// dropped, runs of spaces made one.
  bool remove_extra_whitespaces = true;
  /// normalizer_spec.escape_whitespaces: spaces become U+2581.
  bool escape_whitespaces = true;
  /// denormalizer_spec.precompiled_charsmap: a rule decode applies; "" none.
  std::string denormalizer_charsmap;
};

/// A loaded SentencePiece model.
class Processor {
 public:
  virtual ~Processor() = default;
  /// Ids of `text` into `ids`; an error message, or "" on success.
  virtual std::string encode(
      std::string_view text, std::vector<int32_t>& ids) const = 0;
  /// Text of `ids` into `text`; an error message, or "" on success.
  virtual std::string decode(
      const std::vector<int32_t>& ids, std::string& text) const = 0;
  virtual int64_t piece_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  /// The model's description into `model`; an error message, or "".
  virtual std::string describe(ModelDescription& model) const = 0;
};

/// This interface's version, which the loader and the plugin must share: a
/// plugin built from an older tree (a Processor without describe, say) is
/// refused rather than called through a vtable it lacks.
inline constexpr int32_t kInterfaceVersion = 2;

/// `baton_sentencepiece_interface_version`: the plugin's kInterfaceVersion.
using InterfaceVersionFn = int32_t (*)();

/// `baton_sentencepiece_load`: the model at `path`, or null with `*error`.
using LoadFn = Processor* (*)(const std::string& path, std::string* error);

/// `baton_sentencepiece_train`: trains with SentencePiece's `args` on the
/// sentences `next` returns (null ends them; `next` does not throw); the
/// serialised model into `*model`. Returns an error message, or "" on
/// success.
using TrainFn = std::string (*)(
    const std::unordered_map<std::string, std::string>& args,
    const std::function<const std::string*()>& next,
    std::string* model);

}  // namespace baton::sentencepiece_plugin
