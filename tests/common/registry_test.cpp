#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "common/registry.h"

namespace baton {
namespace {

using Creator = std::function<int()>;

TEST(Registry, FindsEntriesCaseInsensitively) {
  Registry<Creator> r("widget");
  r.add(
      "Alpha", [] { return 1; }, "the first");
  r.add(
      "beta", [] { return 2; }, "the second");
  EXPECT_TRUE(r.contains("ALPHA"));
  EXPECT_EQ(r.get("alpha")(), 1);
  EXPECT_EQ(r.get("Beta")(), 2);
  EXPECT_EQ(r.help("alpha"), "the first");
  EXPECT_EQ(r.names(), (std::vector<std::string>{"Alpha", "beta"}));
}

TEST(Registry, BuiltinsAreAddedOnceAcrossThreads) {
  Registry<Creator> r("widget");
  int calls = 0;
  const auto add = [&](Registry<Creator>& registry) {
    ++calls;
    registry.add(
        "alpha", [] { return 1; }, "");
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] { r.add_builtins_once(add); });
  }
  for (auto& t : threads) {
    t.join();
  }
  r.add_builtins_once(add);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.names(), std::vector<std::string>{"alpha"});
}

TEST(Registry, DuplicateNameIsAProgrammingError) {
  Registry<Creator> r("widget");
  r.add(
      "alpha", [] { return 1; }, "");
  EXPECT_THROW(
      r.add(
          "ALPHA", [] { return 2; }, ""),
      std::logic_error);
}

TEST(Registry, UnknownNameListsTheKnownOnesAndSuggests) {
  Registry<Creator> r("widget");
  r.add(
      "alpha", [] { return 1; }, "");
  r.add(
      "beta", [] { return 2; }, "");
  try {
    r.get("alhpa", "job.yaml:4");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(
        e.what(),
        "job.yaml:4: unknown widget 'alhpa'; known: alpha, beta; did you mean "
        "'alpha'?");
  }
  try {
    r.get("gamma");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "unknown widget 'gamma'; known: alpha, beta");
  }
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(RegistryIndex, NamesByKindWhileARegistryLives) {
  EXPECT_FALSE(RegistryIndex::names("gadget").has_value());
  {
    Registry<int> gadgets("gadget");
    gadgets.add("b", 1, "");
    gadgets.add("a", 2, "");
    EXPECT_EQ(
        RegistryIndex::names("gadget"), (std::vector<std::string>{"a", "b"}));
    {
      // A stand-in shadows it while it lives, then the first is back.
      Registry<int> stand_in("gadget");
      stand_in.add("z", 0, "");
      EXPECT_EQ(
          RegistryIndex::names("gadget"), (std::vector<std::string>{"z"}));
    }
    EXPECT_EQ(
        RegistryIndex::names("gadget"), (std::vector<std::string>{"a", "b"}));
  }
  EXPECT_FALSE(RegistryIndex::names("gadget").has_value());
}

}  // namespace
}  // namespace baton
