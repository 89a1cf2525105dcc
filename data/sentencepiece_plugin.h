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
};

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
