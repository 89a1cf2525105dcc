#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "parallel/parallelism.h"
#include "planner/plan.h"

// The cost files of `baton plan` (docs/plan.md): reading one, field by
// field with errors naming the file and the key, and writing one.

namespace baton {

namespace {

using nlohmann::json;

// ---------------------------------------------------------------- cost file

/// Reads fields of one JSON object, naming `path` and the field path in
/// every error.
class FieldReader {
 public:
  FieldReader(const json& node, std::string path, std::string field)
      : node_(node), path_(std::move(path)), field_(std::move(field)) {
    if (!node_.is_object()) {
      fail("", "is not an object", "an object");
    }
  }

  [[noreturn]] void fail(
      const std::string& key,
      const std::string& problem,
      const std::string& allowed) const {
    throw_config_error(
        path_,
        name(key) + ": " + problem + "; allowed: " + allowed +
            "; see docs/plan.md");
  }

  std::string name(const std::string& key) const {
    if (key.empty()) {
      return field_.empty() ? "the top level" : field_;
    }
    return field_.empty() ? key : field_ + "." + key;
  }

  bool has(const std::string& key) const {
    return node_.contains(key);
  }

  const json& at(const std::string& key) const {
    if (!node_.contains(key)) {
      fail(key, "missing", "a value");
    }
    return node_.at(key);
  }

  FieldReader object(const std::string& key) const {
    return FieldReader(at(key), path_, name(key));
  }

  /// Entry `k` of the list `key`.
  FieldReader item(const std::string& key, size_t k) const {
    return FieldReader(
        at(key).at(k), path_, name(key) + "[" + std::to_string(k) + "]");
  }

  /// A finite number above `above`; negative `above`: one >= 0.
  double number(const std::string& key, double above = -1.0) const {
    const json& value = at(key);
    if (!value.is_number() || !std::isfinite(value.get<double>()) ||
        (above < 0.0 ? value.get<double>() < 0.0
                     : value.get<double>() <= above)) {
      fail(
          key,
          "'" + value.dump() + "' is not allowed",
          above < 0.0 ? "a number >= 0" : "a number > 0");
    }
    return value.get<double>();
  }

  std::string text(const std::string& key) const {
    const json& value = at(key);
    if (!value.is_string()) {
      fail(key, "'" + value.dump() + "' is not a string", "a string");
    }
    return value.get<std::string>();
  }

 private:
  const json& node_;
  std::string path_;
  std::string field_;
};

PassCosts read_passes(const FieldReader& r) {
  PassCosts c;
  c.f = r.number("F");
  c.b = r.number("B");
  c.i = r.number("I");
  c.w = r.number("W");
  return c;
}

LinkCosts read_link(const FieldReader& r) {
  LinkCosts link;
  link.latency_s = r.number("latency_s");
  link.bandwidth = r.number("bandwidth_GBps", 0.0) * 1e9;
  return link;
}

CommCosts read_comm(const FieldReader& top, const std::string& key) {
  const FieldReader r = top.object(key);
  CommCosts c;
  c.inter_node = read_link(r);
  if (r.has("intra_node")) {
    c.intra_node = read_link(r.object("intra_node"));
  }
  return c;
}

json passes_json(const PassCosts& c) {
  return {{"F", c.f}, {"B", c.b}, {"I", c.i}, {"W", c.w}};
}

json link_json(const LinkCosts& l) {
  return {{"latency_s", l.latency_s}, {"bandwidth_GBps", l.bandwidth / 1e9}};
}

json comm_json(const CommCosts& c) {
  json out = link_json(c.inter_node);
  if (c.intra_node) {
    out["intra_node"] = link_json(*c.intra_node);
  }
  return out;
}

/// `r`'s "microbatches": a non-empty list of {rows, block, embedding,
/// output}, by increasing rows.
std::vector<MicrobatchCosts> read_microbatches(const FieldReader& r) {
  const json& rows = r.at("microbatches");
  if (!rows.is_array() || rows.empty()) {
    r.fail(
        "microbatches",
        "is not a non-empty list",
        "a list of {rows, block, embedding, output}");
  }
  std::vector<MicrobatchCosts> out;
  for (size_t k = 0; k < rows.size(); ++k) {
    const FieldReader m_reader = r.item("microbatches", k);
    MicrobatchCosts m;
    const double n = m_reader.number("rows", 0.0);
    if (n != std::floor(n)) {
      m_reader.fail(
          "rows",
          "'" + m_reader.at("rows").dump() + "' is not allowed",
          "an integer >= 1");
    }
    m.rows = static_cast<int64_t>(n);
    m.block = read_passes(m_reader.object("block"));
    m.embedding = read_passes(m_reader.object("embedding"));
    m.output = read_passes(m_reader.object("output"));
    if (m_reader.has("post")) {
      const FieldReader post = m_reader.object("post");
      m.send_s = post.number("send_s");
      m.recv_s = post.number("recv_s");
    }
    if (m_reader.has("spread")) {
      m.spread = read_passes(m_reader.object("spread"));
    }
    out.push_back(m);
  }
  std::sort(
      out.begin(),
      out.end(),
      [](const MicrobatchCosts& a, const MicrobatchCosts& b) {
        return a.rows < b.rows;
      });
  return out;
}

json microbatches_json(const std::vector<MicrobatchCosts>& list) {
  json rows = json::array();
  for (const auto& m : list) {
    json row = {
        {"rows", m.rows},
        {"block", passes_json(m.block)},
        {"embedding", passes_json(m.embedding)},
        {"output", passes_json(m.output)}};
    if (m.send_s > 0.0 || m.recv_s > 0.0) {
      row["post"] = {{"send_s", m.send_s}, {"recv_s", m.recv_s}};
    }
    const PassCosts& v = m.spread;
    if (v.f > 0.0 || v.b > 0.0 || v.i > 0.0 || v.w > 0.0) {
      row["spread"] = passes_json(v);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

/// Each searched parallelism's measured costs, under its name.
void read_split_costs(
    const FieldReader& top, const std::string& path, PlanCosts& costs) {
  register_builtin_parallelisms();
  for (const Parallelism* p : searched_parallelisms()) {
    if (!top.has(p->name)) {
      continue;
    }
    const json& list = top.at(p->name);
    if (!list.is_array()) {
      top.fail(p->name, "is not a list", "a list of {degree, microbatches}");
    }
    for (size_t k = 0; k < list.size(); ++k) {
      const FieldReader r(
          list[k], path, p->name + "[" + std::to_string(k) + "]");
      const double degree = r.number("degree", 1.0);
      if (degree != std::floor(degree)) {
        r.fail(
            "degree",
            "'" + r.at("degree").dump() + "' is not allowed",
            "an integer >= 2");
      }
      costs.split_costs[p->name][static_cast<int64_t>(degree)] =
          read_microbatches(r);
    }
  }
}

/// The profile's measured data parallelism.
DataParallelCosts read_data_parallel(const FieldReader& dp) {
  DataParallelCosts measured;
  measured.degree = static_cast<int64_t>(dp.number("degree", 1.0));
  measured.rows = static_cast<int64_t>(dp.number("rows", 0.0));
  const json& per_block = dp.at("block_s");
  if (!per_block.is_object()) {
    dp.fail("block_s", "is not an object", "{mode: seconds per block}");
  }
  for (const auto& [mode, seconds] : per_block.items()) {
    if (!seconds.is_number() || !std::isfinite(seconds.get<double>())) {
      dp.fail("block_s." + mode, "is not a number", "seconds");
    }
    measured.block_s[mode] = seconds.get<double>();
  }
  return measured;
}

}  // namespace

PlanCosts load_plan_costs(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw_config_error(
        path, "cannot read the cost file; allowed: a readable JSON file");
  }
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    throw_config_error(
        path,
        std::string("not JSON: ") + e.what() +
            "; allowed: a cost file (docs/plan.md)");
  }
  const FieldReader top(root, path, "");
  PlanCosts costs;
  costs.path = path;
  costs.description = top.text("description");
  costs.obtained = top.text("obtained");
  costs.microbatches = read_microbatches(top);
  if (top.has("ranks_per_node")) {
    costs.ranks_per_node = static_cast<int64_t>(top.number("ranks_per_node"));
  }
  costs.p2p = read_comm(top, "p2p");
  costs.all_reduce = read_comm(top, "all_reduce");
  costs.all_gather = read_comm(top, "all_gather");
  costs.reduce_scatter = read_comm(top, "reduce_scatter");
  if (top.has("all_to_all")) {
    costs.all_to_all = read_comm(top, "all_to_all");
  }
  if (top.has("memory_per_rank_gib")) {
    costs.memory_per_rank_gib = top.number("memory_per_rank_gib", 0.0);
  }
  read_split_costs(top, path, costs);
  if (top.has("data_parallel")) {
    costs.data_parallel = read_data_parallel(top.object("data_parallel"));
  }
  if (top.has("optimizer")) {
    costs.optimizer_s_per_parameter =
        top.object("optimizer").number("seconds_per_parameter");
  }
  if (top.has("compute_dtype")) {
    costs.compute_dtype = top.text("compute_dtype");
    if (costs.compute_dtype != "float32" && costs.compute_dtype != "bfloat16") {
      top.fail(
          "compute_dtype",
          "'" + costs.compute_dtype + "' is not allowed",
          "float32 | bfloat16");
    }
  }
  if (top.has("device")) {
    costs.device = top.text("device");
    if (costs.device != "cpu" && costs.device != "cuda") {
      top.fail("device", "'" + costs.device + "' is not allowed", "cpu | cuda");
    }
  }
  return costs;
}

std::string plan_costs_to_json(const PlanCosts& costs) {
  const json rows = microbatches_json(costs.microbatches);
  json out = {
      {"description", costs.description},
      {"obtained", costs.obtained},
      {"ranks_per_node", costs.ranks_per_node},
      {"microbatches", rows},
      {"p2p", comm_json(costs.p2p)},
      {"all_reduce", comm_json(costs.all_reduce)},
      {"all_gather", comm_json(costs.all_gather)},
      {"reduce_scatter", comm_json(costs.reduce_scatter)}};
  if (costs.all_to_all) {
    out["all_to_all"] = comm_json(*costs.all_to_all);
  }
  if (costs.memory_per_rank_gib) {
    out["memory_per_rank_gib"] = *costs.memory_per_rank_gib;
  }
  for (const auto& [name, by_degree] : costs.split_costs) {
    json list = json::array();
    for (const auto& [degree, measured] : by_degree) {
      list.push_back(
          {{"degree", degree}, {"microbatches", microbatches_json(measured)}});
    }
    out[name] = list;
  }
  if (costs.data_parallel) {
    out["data_parallel"] = {
        {"degree", costs.data_parallel->degree},
        {"rows", costs.data_parallel->rows},
        {"block_s", costs.data_parallel->block_s}};
  }
  if (costs.optimizer_s_per_parameter > 0.0) {
    out["optimizer"] = {
        {"seconds_per_parameter", costs.optimizer_s_per_parameter}};
  }
  if (!costs.compute_dtype.empty()) {
    out["compute_dtype"] = costs.compute_dtype;
  }
  if (!costs.device.empty()) {
    out["device"] = costs.device;
  }
  return out.dump(2) + "\n";
}

}  // namespace baton
