#include "checkpoint/checkpoint_index.h"

#include <ATen/ATen.h>

#include <charconv>
#include <fstream>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"

namespace baton::checkpoint_index {

using json = nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw CheckpointError("[checkpoint] " + what);
}

}  // namespace

std::string step_dir_name(int64_t step) {
  return "step-" + std::to_string(step);
}

std::optional<int64_t> parse_step_dir(const std::string& name) {
  if (name.rfind("step-", 0) != 0) {
    return std::nullopt;
  }
  int64_t step = -1;
  const char* first = name.data() + 5;
  const char* last = name.data() + name.size();
  const auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last || first == last || *first == '-') {
    return std::nullopt;
  }
  return step;
}

std::string rank_file_name(int64_t rank) {
  std::string digits = std::to_string(rank);
  digits.insert(0, digits.size() < 5 ? 5 - digits.size() : 0, '0');
  return "rank-" + digits + ".safetensors";
}

std::string optimizer_fqn(const std::string& param, const char* field) {
  return "optimizer." + param + "." + field;
}

json layout_json(const CheckpointLayout& l) {
  json axes = json::array();
  for (const auto& axis : l.axes) {
    axes.push_back({{"name", axis.name}, {"degree", axis.degree}});
  }
  return {
      {"world_size", l.world_size},
      {"axes", axes},
      {"stages_per_rank", l.stages_per_rank},
      {"schedule", l.schedule}};
}

namespace {

/// The axes of a saved layout above degree 1, in order: version 4's list,
/// or version 3's four named degrees (pp, dp_replicate, dp_shard, tp, the
/// axes of the day); nothing for what is neither.
std::optional<std::vector<std::pair<std::string, int64_t>>> saved_axes(
    const json& l) {
  std::vector<std::pair<std::string, int64_t>> out;
  if (!l.is_object()) {
    return std::nullopt;
  }
  if (l.contains("axes")) {
    if (!l["axes"].is_array()) {
      return std::nullopt;
    }
    for (const auto& axis : l["axes"]) {
      if (!axis.is_object() || !axis.contains("name") ||
          !axis["name"].is_string() || !axis.contains("degree") ||
          !axis["degree"].is_number_integer()) {
        return std::nullopt;
      }
      if (axis["degree"].get<int64_t>() > 1) {
        out.emplace_back(
            axis["name"].get<std::string>(), axis["degree"].get<int64_t>());
      }
    }
    return out;
  }
  for (const char* name : {"pp", "dp_replicate", "dp_shard", "tp"}) {
    if (!l.contains(name) || !l[name].is_number_integer()) {
      return std::nullopt;
    }
    if (l[name].get<int64_t>() > 1) {
      out.emplace_back(name, l[name].get<int64_t>());
    }
  }
  return out;
}

/// "pp 2 x dp_shard 2 (2 stages per rank, Interleaved1F1B)", "one rank".
std::string describe_axes(const json& l) {
  const auto axes = saved_axes(l);
  if (!axes) {
    return "?";
  }
  std::vector<std::string> items;
  for (const auto& [name, degree] : *axes) {
    items.push_back(name + " " + std::to_string(degree));
  }
  std::string text = items.empty() ? "one rank" : items.front();
  for (size_t i = 1; i < items.size(); ++i) {
    text += " x " + items[i];
  }
  if (l.contains("schedule") && l["schedule"].is_string() &&
      !l["schedule"].get<std::string>().empty()) {
    const auto stages = l.value("stages_per_rank", json());
    text += " (" +
            (stages.is_number_integer() ? std::to_string(stages.get<int64_t>())
                                        : std::string("?")) +
            " stages per rank, " + l["schedule"].get<std::string>() + ")";
  }
  return text;
}

}  // namespace

bool same_layout(const json& saved, const CheckpointLayout& layout) {
  const json now = layout_json(layout);
  const auto saved_list = saved_axes(saved);
  return saved_list && *saved_list == *saved_axes(now) &&
         saved.value("world_size", json()) == now["world_size"] &&
         saved.value("stages_per_rank", json()) == now["stages_per_rank"] &&
         saved.value("schedule", json()) == now["schedule"];
}

std::string describe_layout(const json& l) {
  if (l.is_string()) {
    return l.get<std::string>();  // a version 1 index
  }
  if (!l.is_object()) {
    return "?";
  }
  if (l.contains("axes")) {
    return describe_axes(l);
  }
  // A version 3 layout names its four degrees. A damaged index must still
  // describe: no field's type is trusted.
  const auto number = [&](const char* key) -> std::optional<int64_t> {
    if (l.contains(key) && l[key].is_number_integer()) {
      return l[key].get<int64_t>();
    }
    return std::nullopt;
  };
  const auto n = [&](const char* key) {
    const auto v = number(key);
    return v ? std::to_string(*v) : std::string("?");
  };
  const auto above_one = [&](const char* key) {
    return number(key).value_or(1) > 1;
  };
  const std::string schedule =
      l.contains("schedule") && l["schedule"].is_string()
          ? l["schedule"].get<std::string>()
          : "?";
  std::string text = "pp " + n("pp");
  if (above_one("pp")) {
    text +=
        ", " + n("stages_per_rank") +
        (number("stages_per_rank").value_or(1) == 1 ? " stage" : " stages") +
        " per rank (" + schedule + ")";
  }
  text += ", dp " + n("dp_replicate");
  if (above_one("dp_shard")) {
    text += " x " + n("dp_shard") + " shards";
  }
  if (above_one("tp")) {
    text += ", tp " + n("tp");
  }
  return text;
}

namespace {

TensorSlice parse_slice(
    const json& j,
    int64_t dims,
    const std::string& fqn,
    const std::string& index_path) {
  TensorSlice t;
  t.file = j.at("file").get<std::string>();
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  t.offsets = j.contains("offsets")
                  ? j.at("offsets").get<std::vector<int64_t>>()
                  : std::vector<int64_t>(t.shape.size(), 0);
  const auto crc = j.at("crc32").get<int64_t>();
  if (crc < 0 || crc > UINT32_MAX) {
    throw std::out_of_range("crc32 " + std::to_string(crc));
  }
  t.crc32 = static_cast<uint32_t>(crc);
  if (static_cast<int64_t>(t.shape.size()) != dims ||
      static_cast<int64_t>(t.offsets.size()) != dims) {
    throw std::out_of_range("a slice of another rank than the tensor");
  }
  if (t.file.empty() || t.file.find('/') != std::string::npos) {
    fail(index_path + ": bad file name '" + t.file + "'");
  }
  return t;
}

}  // namespace

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) {
    n *= d;
  }
  return n;
}

int64_t overlap(
    const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& shape,
    const std::vector<int64_t>& other_offsets,
    const std::vector<int64_t>& other_shape) {
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t lo = std::max(offsets[d], other_offsets[d]);
    const int64_t hi =
        std::min(offsets[d] + shape[d], other_offsets[d] + other_shape[d]);
    n *= std::max<int64_t>(0, hi - lo);
  }
  return n;
}

std::string tiling_problem(
    const std::vector<int64_t>& shape, const std::vector<TensorSlice>& slices) {
  int64_t covered = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const auto& s = slices[i];
    for (size_t d = 0; d < shape.size(); ++d) {
      if (s.offsets[d] < 0 || s.shape[d] < 0 ||
          s.offsets[d] + s.shape[d] > shape[d]) {
        return "a slice at " + shape_string(s.offsets) + " of shape " +
               shape_string(s.shape) + " lies outside it";
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (overlap(s.offsets, s.shape, slices[j].offsets, slices[j].shape) > 0) {
        return "the slices at " + shape_string(slices[j].offsets) + " and " +
               shape_string(s.offsets) + " overlap";
      }
    }
    covered += numel_of(s.shape);
  }
  if (covered != numel_of(shape)) {
    return "its slices hold " + std::to_string(covered) + " of its " +
           std::to_string(numel_of(shape)) + " elements";
  }
  return "";
}

TensorEntry tensor_entry(
    const json& index, const std::string& fqn, const std::string& index_path) {
  TensorEntry t;
  try {
    const json& entry = index.at("tensors").at(fqn);
    t.dtype = entry.at("dtype").get<std::string>();
    dtype_from_safetensors(t.dtype);  // throws for a dtype the format lacks
    t.shape = entry.at("shape").get<std::vector<int64_t>>();
    const auto dims = static_cast<int64_t>(t.shape.size());
    if (entry.contains("slices")) {
      for (const auto& slice : entry.at("slices")) {
        t.slices.push_back(parse_slice(slice, dims, fqn, index_path));
      }
    } else {
      t.slices.push_back(parse_slice(entry, dims, fqn, index_path));
    }
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    fail(index_path + ": tensor '" + fqn + "': bad entry (" + e.what() + ")");
  }
  if (const std::string problem = tiling_problem(t.shape, t.slices);
      !problem.empty()) {
    fail(index_path + ": tensor '" + fqn + "': " + problem);
  }
  return t;
}

json slice_json(
    const std::string& file,
    const std::string& dtype,
    const std::vector<int64_t>& global_shape,
    const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& shape,
    uint32_t crc32) {
  return {
      {"dtype", dtype},
      {"shape", global_shape},
      {"slices",
       json::array(
           {{{"file", file},
             {"offsets", offsets},
             {"shape", shape},
             {"crc32", crc32}}})}};
}

json read_index(const std::filesystem::path& dir) {
  const std::string path = (dir / kIndexFile).string();
  std::ifstream in(path);
  if (!in) {
    fail(path + ": cannot open");
  }
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& e) {
    fail(path + ": not valid JSON (" + e.what() + ")");
  }
  const bool versioned = index.is_object() && index.contains("version") &&
                         index["version"].is_number_integer();
  const int64_t version = versioned ? index["version"].get<int64_t>() : 0;
  const bool formatted = index.is_object() && index.contains("format") &&
                         index["format"] == kFormat;
  if (!formatted || version < 1 || version > kVersion) {
    fail(
        path + ": not a " + kFormat + " index of version 1 to " +
        std::to_string(kVersion));
  }
  return index;
}

json make_index(
    int64_t step,
    int64_t tokens_seen,
    const json& lr_steps,
    const CheckpointLayout& layout,
    const std::vector<std::string>& rank_metas,
    const std::string& optimizer) {
  json index = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", step},
      {"tokens_seen", tokens_seen},
      {"lr_scheduler_steps", lr_steps},
      {"layout", layout_json(layout)},
      {"world_size", layout.world_size},
      {"optimizer", optimizer},
      {"tensors", json::object()},
      {"dataloader", json()},
      {"rng", json::object()}};
  for (const auto& text : rank_metas) {
    const json m = json::parse(text);
    for (const auto& [name, entry] : m["tensors"].items()) {
      json& merged = index["tensors"][name];
      if (merged.is_null()) {
        merged = entry;
      } else if (merged.contains("slices") && entry.contains("slices")) {
        for (const auto& slice : entry["slices"]) {
          merged["slices"].push_back(slice);
        }
      } else {
        throw std::logic_error(
            "[checkpoint] tensor '" + name + "': written by two ranks");
      }
    }
    // Every rank that loads data holds the same global state.
    if (!m["loader"].is_null()) {
      if (index["dataloader"].is_null()) {
        index["dataloader"] = {{"state", m["loader"]}};
      } else if (index["dataloader"]["state"] != m["loader"]) {
        throw std::logic_error(
            "[checkpoint] the loader state of rank " + m["rank"].dump() + " (" +
            m["loader"].dump() + ") differs from another's (" +
            index["dataloader"]["state"].dump() + ")");
      }
    }
    index["rng"][std::to_string(m["rank"].get<int64_t>())] = m["rng"];
  }
  // Every element of a sharded tensor in exactly one slice.
  for (const auto& [name, entry] : index["tensors"].items()) {
    if (!entry.contains("slices")) {
      continue;
    }
    std::vector<TensorSlice> slices;
    for (const auto& slice : entry["slices"]) {
      slices.push_back(
          {slice["file"], slice["offsets"], slice["shape"], slice["crc32"]});
    }
    if (const std::string problem =
            tiling_problem(entry["shape"].get<std::vector<int64_t>>(), slices);
        !problem.empty()) {
      throw std::logic_error("[checkpoint] tensor '" + name + "': " + problem);
    }
  }
  return index;
}

uint64_t tensor_bytes(const json& index) {
  uint64_t bytes = 0;
  for (const auto& [name, entry] : index["tensors"].items()) {
    bytes += at::elementSize(dtype_from_safetensors(entry["dtype"])) *
             static_cast<uint64_t>(
                 numel_of(entry["shape"].get<std::vector<int64_t>>()));
  }
  return bytes;
}

}  // namespace baton::checkpoint_index
