#include "checkpoint/inspect.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/safetensors.h"

namespace baton {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_index;

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

/// The step folders of `dir`: itself when it is one, else its step-N
/// children with an index, in step order; leftovers go to `partial`.
std::vector<fs::path> step_folders(
    const fs::path& dir, std::vector<std::string>& partial) {
  if (parse_step_dir(dir.filename().string()) && fs::exists(dir / kIndexFile)) {
    return {dir};
  }
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const auto step = parse_step_dir(name);
    if (step && fs::exists(entry.path() / kIndexFile)) {
      steps.emplace_back(*step, entry.path());
    } else if (name.size() > 8 && name.rfind(".partial") == name.size() - 8) {
      partial.push_back(name);
    }
  }
  if (ec) {
    throw CheckpointError(
        dir.string() + ": cannot be read (" + ec.message() +
        "); allowed: a checkpoint folder or one of its step-N folders");
  }
  std::sort(steps.begin(), steps.end());
  std::vector<fs::path> out;
  for (const auto& [step, path] : steps) {
    out.push_back(path);
  }
  return out;
}

/// Checks one piece of a tensor against its file: present, the dtype and
/// shape the index says, every byte matching the CRC-32.
void check_piece(
    const fs::path& step_dir,
    const std::string& name,
    const std::string& dtype,
    const TensorSlice& piece,
    std::map<std::string, std::unique_ptr<SafetensorsReader>>& readers,
    std::vector<std::string>& problems) {
  const std::string where = step_dir.filename().string() + "/" + piece.file +
                            ": tensor '" + name + "'";
  auto& reader = readers[piece.file];
  if (!reader) {
    try {
      reader =
          std::make_unique<SafetensorsReader>((step_dir / piece.file).string());
    } catch (const std::exception& e) {
      problems.push_back(where + ": " + e.what());
      readers.erase(piece.file);
      return;
    }
  }
  const SafetensorsEntry* entry = reader->find(name);
  if (entry == nullptr) {
    problems.push_back(where + ": not in the file");
    return;
  }
  if (safetensors_dtype(entry->dtype) != dtype || entry->shape != piece.shape) {
    problems.push_back(
        where + ": the file holds " + safetensors_dtype(entry->dtype) + " " +
        shape_text(entry->shape) + ", the index says " + dtype + " " +
        shape_text(piece.shape));
    return;
  }
  std::vector<char> bytes(entry->end - entry->begin);
  try {
    reader->read_bytes(*entry, bytes.data());
  } catch (const std::exception& e) {
    problems.push_back(where + ": " + e.what());
    return;
  }
  const uint32_t crc = crc32_of(bytes.data(), bytes.size());
  if (crc != piece.crc32) {
    std::ostringstream s;
    s << where << ": CRC-32 " << std::hex << crc << " of its bytes, the index "
      << "says " << piece.crc32 << " (the file is damaged)";
    problems.push_back(s.str());
  }
}

void inspect_step(
    const fs::path& step_dir,
    std::ostream& out,
    bool list_tensors,
    std::vector<std::string>& problems) {
  json index;
  try {
    index = read_index(step_dir);
  } catch (const std::exception& e) {
    problems.push_back(e.what());
    return;
  }
  const std::string index_path = (step_dir / kIndexFile).string();
  // A field as the index holds it, whatever its type: the report shows a
  // damaged index as it is.
  const auto field = [&](const char* key) {
    return index.contains(key) ? index[key].dump() : std::string("?");
  };
  out << step_dir.filename().string() << ": step " << field("step") << ", "
      << field("tokens_seen") << " tokens seen, LR step "
      << field("lr_scheduler_steps") << "; saved by "
      << describe_layout(index.value("layout", json())) << " (index version "
      << field("version") << ")\n";
  const json loader = index.value("dataloader", json());
  out << "  loader: "
      << (loader.is_object() && loader.contains("state")
              ? loader["state"].dump()
          : loader.is_null() ? std::string("none")
                             : loader.dump())
      << "\n";
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  int64_t tensors = 0;
  uint64_t bytes = 0;
  const json listed = index.value("tensors", json::object());
  for (const auto& [name, raw] : listed.items()) {
    TensorEntry entry;
    try {
      entry = tensor_entry(index, name, index_path);
    } catch (const std::exception& e) {
      problems.push_back(e.what());
      continue;
    }
    ++tensors;
    if (list_tensors) {
      out << "  " << name << "  " << entry.dtype << " "
          << shape_text(entry.shape);
      if (entry.slices.size() == 1 && raw.contains("file")) {
        out << "  " << entry.slices[0].file << "\n";
      } else {
        out << "  " << entry.slices.size() << " slices:";
        for (const auto& s : entry.slices) {
          out << " " << s.file << " at " << shape_text(s.offsets) << " "
              << shape_text(s.shape) << ";";
        }
        out << "\n";
      }
    }
    for (const auto& piece : entry.slices) {
      check_piece(step_dir, name, entry.dtype, piece, readers, problems);
    }
    bytes += tensor_bytes(json{{"tensors", {{name, raw}}}});
  }
  out << "  " << tensors << " tensors, "
      << (bytes < (1 << 20) ? std::to_string(bytes / 1024) + " KiB"
                            : std::to_string(bytes / (1 << 20)) + " MiB")
      << " in " << readers.size()
      << (readers.size() == 1 ? " file\n" : " files\n");
}

}  // namespace

std::vector<std::string> inspect_checkpoint(
    const fs::path& dir, std::ostream& out, bool list_tensors) {
  if (!fs::is_directory(dir)) {
    throw CheckpointError(
        dir.string() +
        ": not a folder; allowed: a checkpoint folder (a run's "
        "checkpoint/) or one of its step-N folders");
  }
  std::vector<std::string> partial;
  const auto steps = step_folders(dir, partial);
  if (steps.empty()) {
    throw CheckpointError(
        dir.string() +
        ": holds no step-N folder with an index.json; allowed: a "
        "checkpoint folder (a run's checkpoint/) or one of its step-N "
        "folders");
  }
  out << dir.string() << ": " << steps.size()
      << (steps.size() == 1 ? " step" : " steps");
  for (const auto& s : steps) {
    out << " " << s.filename().string();
  }
  out << "\n";
  for (const auto& name : partial) {
    out << "  " << name
        << ": left by a save that did not finish (the next run tidies it)\n";
  }
  std::vector<std::string> problems;
  for (const auto& step : steps) {
    inspect_step(step, out, list_tensors, problems);
  }
  if (problems.empty()) {
    out << "every byte checks out"
        << (list_tensors ? "" : " (--tensors lists every tensor)") << "\n";
  } else {
    out << problems.size() << (problems.size() == 1 ? " problem" : " problems")
        << ":\n";
    for (const auto& p : problems) {
      out << "  " << p << "\n";
    }
  }
  return problems;
}

}  // namespace baton
