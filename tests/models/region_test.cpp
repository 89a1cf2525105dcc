#include "models/region.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace baton {
namespace {

TEST(RegionHooks, EmptyHooksPassTheTensorThrough) {
  const RegionHooks hooks;
  const auto x = torch::randn({2, 3});
  EXPECT_TRUE(hooks.empty());
  EXPECT_TRUE(hooks.in(x).is_same(x));
  EXPECT_TRUE(hooks.out(x).is_same(x));
}

TEST(RegionHooks, TheLastAddedWrapsTheOthers) {
  // Two appliers hook the same module: the second's enter runs first and
  // its leave last, as the second of two nested wrappers would; neither
  // replaces the other.
  std::vector<std::string> calls;
  const auto hook = [&calls](std::string name, double add) {
    return [&calls, name, add](const at::Tensor& x) {
      calls.push_back(name);
      return x + add;
    };
  };
  RegionHooks hooks;
  hooks.add(hook("tp enter", 1), hook("tp leave", 10));
  hooks.add(hook("cp enter", 100), hook("cp leave", 1000));
  hooks.add({}, hook("leave only", 10000));
  EXPECT_FALSE(hooks.empty());
  const auto x = torch::zeros({1});
  EXPECT_EQ(hooks.in(x).item<double>(), 101);
  EXPECT_EQ(hooks.out(x).item<double>(), 11010);
  EXPECT_EQ(
      calls,
      (std::vector<std::string>{
          "cp enter", "tp enter", "tp leave", "cp leave", "leave only"}));
}

}  // namespace
}  // namespace baton
