// Layout-independent initialisation of the decoder's weights (torchtitan's
// scheme).

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <regex>
#include <stdexcept>

#include "models/common/transformer.h"

namespace baton::models {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Fills `t` from N(mean, std) truncated to [a, b], by inverting the normal
/// CDF of a uniform draw (as torch.nn.init.trunc_normal_ does).
void trunc_normal_(
    at::Tensor& t, double std, double a, double b, at::Generator& gen) {
  const auto cdf = [](double x) {
    return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0;
  };
  const double lo = cdf(a / std), hi = cdf(b / std);
  t.uniform_(2 * lo - 1, 2 * hi - 1, gen);
  t.erfinv_();
  t.mul_(std * std::sqrt(2.0));
  t.clamp_(a, b);
}

}  // namespace

uint64_t parameter_seed(uint64_t seed, const std::string& fqn) {
  uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a of the name
  for (const unsigned char c : fqn) {
    h = (h ^ c) * 0x100000001B3ULL;
  }
  return splitmix64(h ^ splitmix64(seed));
}

void TransformerImpl::init_weights(uint64_t seed) {
  static const std::regex layer_param(
      R"(layers\.(\d+)\.(attention\.w[qkvo]|feed_forward\.w[123]|moe\.shared_experts\.w[123])\.weight)");
  // MoE: the router and the grouped experts (torchtitan's: the router and
  // the experts' inputs at 0.02, the experts' outputs by depth).
  static const std::regex moe_param(
      R"(layers\.(\d+)\.moe\.(router\.gate\.weight|experts\.w[123]))");
  static const std::regex norm_param(
      R"((layers\.\d+\.(attention_norm|ffn_norm|attention\.[qk]_norm)|norm)\.weight)");
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    const std::string& fqn = item.key();
    auto& param = item.value();
    // Draw on the CPU in float32 so the values do not depend on the device.
    auto values = torch::empty(param.sizes(), torch::kFloat32);
    auto gen =
        at::make_generator<at::CPUGeneratorImpl>(parameter_seed(seed, fqn));
    std::smatch match;
    if (fqn == "tok_embeddings.weight" && !args_.tie_embeddings) {
      values.normal_(0.0, 1.0, gen);
    } else if (std::regex_match(fqn, norm_param)) {
      values.fill_(1.0);
    } else if (std::regex_match(fqn, match, layer_param)) {
      // Output projections of each block shrink with depth (depth init).
      const std::string name = match[2];
      const bool input_side =
          name == "attention.wq" || name == "attention.wk" ||
          name == "attention.wv" || name == "feed_forward.w1" ||
          name == "moe.shared_experts.w1";
      const double layer = std::stod(match[1]);
      const double std =
          input_side ? 0.02 : 0.02 / std::sqrt(2.0 * (layer + 1));
      trunc_normal_(values, std, -2.0, 2.0, gen);
    } else if (std::regex_match(fqn, match, moe_param)) {
      const std::string name = match[2];
      const double layer = std::stod(match[1]);
      const bool input_side =
          name == "router.gate.weight" || name == "experts.w1";
      const double std =
          input_side ? 0.02 : 0.02 / std::sqrt(2.0 * (layer + 1));
      trunc_normal_(values, std, -2.0, 2.0, gen);
    } else if (fqn == "output.weight" || fqn == "tok_embeddings.weight") {
      // Tied: the embedding takes the output's rule (N(0, 1) logits would
      // be sqrt(dim) wide).
      const double std = 1.0 / std::sqrt(static_cast<double>(args_.dim));
      trunc_normal_(values, std, -3.0 * std, 3.0 * std, gen);
    } else {
      throw std::logic_error("[model] no initialisation rule for " + fqn);
    }
    param.copy_(values);
  }
}

}  // namespace baton::models
