#include "data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "common/error.h"
#include "common/paths.h"
#include "common/text.h"
#include "data/text_dataset.h"
#include "data/token_shards.h"

namespace baton {

namespace {

namespace fs = std::filesystem;

constexpr const char* kKjvDefaultPath = "assets/kjv.jsonl.gz";

bool ends_with_any(
    const std::string& name, const std::vector<std::string>& suffixes) {
  if (suffixes.empty()) {
    return true;
  }
  return std::any_of(suffixes.begin(), suffixes.end(), [&](const auto& s) {
    return name.ends_with(s);
  });
}

// A creator that needs dataset_path set.
template <class D>
DatasetCreator with_required_path(const char* name, const char* allowed) {
  return [name, allowed](const DatasetOptions& options) {
    if (options.path.empty()) {
      throw_config_error(
          "training.dataset_path",
          std::string("empty; allowed: ") + allowed +
              " (required by dataset '" + name + "')");
    }
    return std::unique_ptr<Dataset>(std::make_unique<D>(options));
  };
}

}  // namespace

std::vector<int32_t> TextDataset::tokens(
    int64_t index, const Tokenizer& tokenizer) const {
  return tokenizer.encode(text(index));
}

Registry<DatasetCreator>& dataset_registry() {
  static Registry<DatasetCreator> registry("dataset");
  return registry;
}

void register_builtin_datasets() {
  dataset_registry().add_builtins_once([](Registry<DatasetCreator>& registry) {
    registry.add(
        "kjv",
        [](const DatasetOptions& options) -> std::unique_ptr<Dataset> {
          if (options.path.empty()) {
            DatasetOptions kjv = options;
            kjv.path = resolve_asset_path(kKjvDefaultPath);
            return std::make_unique<JsonlDataset>(kjv);
          }
          // A config of the bundled corpus pointed at the user's own: read
          // it as its name says, not always as JSON Lines.
          if (dataset_for_path(options.path, "training.dataset_path") ==
              "text") {
            return std::make_unique<TextFilesDataset>(options);
          }
          return std::make_unique<JsonlDataset>(options);
        },
        "the bundled King James Bible, one chapter per document "
        "(assets/kjv.jsonl.gz); with training.dataset_path set, that path, "
        "read by its name (*.txt text, *.jsonl JSON Lines)");
    registry.add(
        "jsonl",
        with_required_path<JsonlDataset>(
            "jsonl", "a JSON Lines file, directory or glob"),
        "JSON Lines (each file plain or gzip) at training.dataset_path (a "
        "file, a directory of *.jsonl / *.jsonl.gz, or a glob), one object "
        "per line with the text in training.dataset_text_field");
    registry.add(
        "text",
        with_required_path<TextFilesDataset>(
            "text", "a text file, directory or glob"),
        "plain text files at training.dataset_path (a file, a directory or a "
        "glob), one document per file");
    registry.add(
        "tokens",
        with_required_path<TokenShardDataset>(
            "tokens", "a folder of token shards from baton data tokenize"),
        "pre-tokenised shards written by `baton data tokenize` (a folder of "
        "*.bin or a glob), memory-mapped");
  });
}

std::string dataset_for_path(
    const std::string& path, const std::string& where) {
  static const std::vector<std::pair<std::string, std::string>> kEndings = {
      {".txt", "text"},
      {".txt.gz", "text"},
      {".jsonl", "jsonl"},
      {".jsonl.gz", "jsonl"}};
  for (const auto& [ending, dataset] : kEndings) {
    if (path.ends_with(ending)) {
      return dataset;
    }
  }
  std::error_code ec;
  if (path.find_first_of("*?[") == std::string::npos &&
      fs::is_directory(path, ec)) {
    return "jsonl";
  }
  std::vector<std::string> endings;
  for (const auto& [ending, dataset] : kEndings) {
    endings.push_back("*" + ending + " (" + dataset + ")");
  }
  throw_config_error(
      where,
      "'" + path +
          "': cannot tell its format from its name; allowed: a folder, " +
          join(endings, ", ") +
          "; or name the dataset (--dataset jsonl|text, "
          "training.dataset)");
}

std::string resolve_asset_path(const std::string& path) {
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

std::vector<std::string> expand_input_paths(
    const std::string& path, const std::vector<std::string>& suffixes) {
  std::vector<std::string> files;
  std::error_code ec;
  if (path.find_first_of("*?[") != std::string::npos) {
    glob_t matches{};
    if (::glob(path.c_str(), 0, nullptr, &matches) == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) {
        if (fs::is_regular_file(matches.gl_pathv[i], ec)) {
          files.emplace_back(matches.gl_pathv[i]);
        }
      }
    }
    globfree(&matches);
  } else if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::recursive_directory_iterator(path, ec)) {
      if (entry.is_regular_file() &&
          ends_with_any(entry.path().filename().string(), suffixes)) {
        files.push_back(entry.path().string());
      }
    }
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    throw std::runtime_error(
        "[data] cannot open '" + path + "': No such file or directory");
  }
  if (files.empty()) {
    std::string wanted = "files";
    if (!suffixes.empty()) {
      wanted += " named *" + join(suffixes, " or *");
    }
    throw std::runtime_error(
        "[data] '" + path +
        "' names no input; allowed: a file, a directory "
        "with " +
        wanted + ", or a glob matching files");
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace baton
