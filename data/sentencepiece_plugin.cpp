// libbaton_sentencepiece.so: SentencePiece behind the interface of
// data/sentencepiece_plugin.h (see there for why it is a plugin).

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

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
