#include "data/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <glog/logging.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "common/text.h"
#include "data/sentencepiece_plugin.h"
#include "data/sentencepiece_tokenizer_json.h"

namespace baton {

namespace {

namespace fs = std::filesystem;
namespace plugin = sentencepiece_plugin;

// SentencePiece skips sentences longer than its max_sentence_length; long
// lines are cut at a space (or hard) into pieces of at most this many bytes.
constexpr size_t kMaxSentenceBytes = 16384;

// The plugin's entry points, loaded once (see sentencepiece_plugin.h).
struct Plugin {
  plugin::LoadFn load = nullptr;
  plugin::TrainFn train = nullptr;
};

// Where the plugin may be, in the order tried: BATON_SENTENCEPIECE_PLUGIN
// alone when set; else relative to this executable, as `cmake --install`
// lays it out (bin/baton, lib/baton/) and beside it, so an installed or
// moved binary finds its own; last the build tree's (the path baked in).
std::vector<std::string> plugin_candidates() {
  if (const char* path = std::getenv(kSentencePiecePluginVar);
      path != nullptr && *path != '\0') {
    return {path};
  }
  const fs::path built(BATON_SENTENCEPIECE_BUILD_PATH);
  std::vector<std::string> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = exe.parent_path();
    candidates.push_back(
        (dir.parent_path() / "lib" / "baton" / built.filename()).string());
    candidates.push_back((dir / built.filename()).string());
  }
  candidates.push_back(built.string());
  return candidates;
}

const Plugin& sentencepiece() {
  static Plugin loaded;
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const std::vector<std::string> candidates = plugin_candidates();
    std::error_code ec;
    const auto found =
        std::find_if(candidates.begin(), candidates.end(), [&](const auto& c) {
          return fs::is_regular_file(c, ec);
        });
    if (found == candidates.end()) {
      error = "none found; looked at " + join(candidates, ", ") +
              "; allowed: the plugin `cmake --install` puts in "
              "PREFIX/lib/baton/, or a path in " +
              kSentencePiecePluginVar;
      return;
    }
    void* handle =
        ::dlopen(found->c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      error = *found + ": " + ::dlerror();
      return;
    }
    const auto version = reinterpret_cast<plugin::InterfaceVersionFn>(
        ::dlsym(handle, "baton_sentencepiece_interface_version"));
    loaded.load = reinterpret_cast<plugin::LoadFn>(
        ::dlsym(handle, "baton_sentencepiece_load"));
    loaded.train = reinterpret_cast<plugin::TrainFn>(
        ::dlsym(handle, "baton_sentencepiece_train"));
    if (version == nullptr || loaded.load == nullptr ||
        loaded.train == nullptr) {
      error = *found +
              ": missing entry points; allowed: the plugin of this Baton's "
              "build or install";
      return;
    }
    if (version() != plugin::kInterfaceVersion) {
      error = *found + ": interface version " + std::to_string(version()) +
              "; allowed: " + std::to_string(plugin::kInterfaceVersion) +
              " (the plugin of this Baton's build or install)";
      return;
    }
    LOG(INFO) << "SentencePiece: plugin " << *found;
  });
  if (!error.empty()) {
    throw std::runtime_error(
        "[SentencePiece] cannot load the plugin: " + error);
  }
  return loaded;
}

// Cuts the texts of `next_text` into the non-empty lines SentencePiece
// trains on. An exception from `next_text` ends the lines and is kept.
class LineSource {
 public:
  explicit LineSource(
      const std::function<std::optional<std::string>()>& next_text)
      : next_text_(next_text) {}

  /// The next line, or null after the last (or after an error).
  const std::string* next() {
    try {
      return advance() ? &line_ : nullptr;
    } catch (...) {
      error_ = std::current_exception();
      return nullptr;
    }
  }
  std::exception_ptr error() const {
    return error_;
  }

 private:
  bool advance() {
    while (true) {
      while (pos_ < text_.size()) {
        size_t end = text_.find('\n', pos_);
        if (end == std::string::npos) {
          end = text_.size();
        }
        if (end - pos_ > kMaxSentenceBytes) {
          const size_t space = text_.rfind(' ', pos_ + kMaxSentenceBytes);
          end = space != std::string::npos && space > pos_
                    ? space
                    : pos_ + kMaxSentenceBytes;
        }
        line_ = text_.substr(pos_, end - pos_);
        pos_ = end + (end < text_.size() && text_[end] == '\n' ? 1 : 0);
        if (!line_.empty() && line_ != "\r") {
          return true;
        }
      }
      std::optional<std::string> text = next_text_();
      if (!text) {
        return false;
      }
      text_ = std::move(*text);
      pos_ = 0;
    }
  }

  const std::function<std::optional<std::string>()>& next_text_;
  std::string text_;
  size_t pos_ = 0;
  std::string line_;
  std::exception_ptr error_;
};

}  // namespace

struct SentencePieceTokenizer::Impl {
  std::string path;
  std::unique_ptr<plugin::Processor> processor;
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  std::string error;
  impl_->processor.reset(sentencepiece().load(path, &error));
  if (!impl_->processor) {
    throw std::runtime_error(
        "[SentencePieceTokenizer] cannot load '" + path + "': " + error);
  }
  if (bos_id() < 0 || eos_id() < 0) {
    throw std::runtime_error(
        "[SentencePieceTokenizer] '" + path +
        "' has no BOS or EOS piece; allowed: a model trained with bos_id and "
        "eos_id set (baton tokenizer train sets them)");
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(
    std::string_view text) const {
  std::vector<int32_t> ids;
  if (const std::string error = impl_->processor->encode(text, ids);
      !error.empty()) {
    throw std::runtime_error(
        "[SentencePieceTokenizer] cannot encode: " + error);
  }
  return ids;
}

std::string SentencePieceTokenizer::decode(
    const std::vector<int32_t>& ids) const {
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id == bos_id() || id == eos_id()) {
      continue;
    }
    check_decodable("SentencePieceTokenizer", id, vocab_size());
    kept.push_back(id);
  }
  std::string text;
  if (const std::string error = impl_->processor->decode(kept, text);
      !error.empty()) {
    throw std::runtime_error(
        "[SentencePieceTokenizer] cannot decode: " + error);
  }
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return impl_->processor->piece_size();
}

int32_t SentencePieceTokenizer::bos_id() const {
  return impl_->processor->bos_id();
}

int32_t SentencePieceTokenizer::eos_id() const {
  return impl_->processor->eos_id();
}

std::string SentencePieceTokenizer::hf_tokenizer_json() const {
  plugin::ModelDescription model;
  if (const std::string error = impl_->processor->describe(model);
      !error.empty()) {
    throw std::runtime_error(
        "[SentencePieceTokenizer] '" + impl_->path + "': " + error);
  }
  try {
    return sentencepiece_tokenizer_json(model, bos_id());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(
        "[SentencePieceTokenizer] '" + impl_->path +
        "' has no tokenizer.json form: " + e.what());
  }
}

void train_sentencepiece(
    const std::function<std::optional<std::string>()>& next_text,
    const SentencePieceTrainOptions& options,
    const std::string& out_path) {
  std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"num_threads", std::to_string(options.num_threads)},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      // A sample keeps memory bounded on large corpora.
      {"input_sentence_size", "2000000"},
      {"shuffle_input_sentence", "true"},
      // Nothing on std::cerr (see silence_logging in the plugin), whatever
      // the flags say.
      {"minloglevel", "4"},
  };
  for (const auto& [flag, value] : options.flags) {
    if (flag != "minloglevel") {
      args.insert_or_assign(flag, value);
    }
  }
  LineSource lines(next_text);
  const std::function<const std::string*()> next = [&] { return lines.next(); };
  std::string model;
  const std::string error = sentencepiece().train(args, next, &model);
  if (lines.error()) {
    std::rethrow_exception(lines.error());
  }
  if (!error.empty()) {
    throw std::runtime_error("[train_sentencepiece] training failed: " + error);
  }
  std::ofstream out(out_path, std::ios::binary);
  out.write(model.data(), static_cast<std::streamsize>(model.size()));
  out.close();
  if (!out) {
    throw std::runtime_error(
        "[train_sentencepiece] cannot write '" + out_path + "'");
  }
}

}  // namespace baton
