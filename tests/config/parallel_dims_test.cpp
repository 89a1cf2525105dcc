#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "config/job_config.h"
#include "config/parallel_dims.h"

namespace baton {
namespace {

MeshAxisSpec spec(const char* name, int order, const char* key) {
  const bool data = std::string(name).rfind("dp_", 0) == 0;
  return MeshAxisSpec{
      name,
      order,
      key,
      data ? std::vector<std::string>{"dp", "loss"}
           : std::vector<std::string>{}};
}

/// Four axes in a scrambled order, keyed like the built-ins.
ParallelDims resolve(
    int64_t r, int64_t s, int64_t t, int64_t p, int64_t world) {
  return ParallelDims::resolve(
      {{spec("dp_replicate", 100, "parallelism.data_parallel_replicate_degree"),
        r},
       {spec("tp", 1000, "parallelism.tensor_parallel_degree"), t},
       {spec("pp", 0, "parallelism.pipeline_parallel_degree"), p},
       {spec("dp_shard", 200, "parallelism.data_parallel_shard_degree"), s}},
      world);
}

TEST(ParallelDims, ResolvesTheRestDegreeInAxisOrder) {
  const auto d = resolve(-1, 1, 1, 4, 8);
  EXPECT_EQ(d.degree("dp_replicate"), 2);
  EXPECT_EQ(d.degree("pp"), 4);
  EXPECT_EQ(d.dp(), 2);
  EXPECT_EQ(d.degree("loss"), 2);
  EXPECT_EQ(d.to_string(), "pp=4 dp_replicate=2 dp_shard=1 tp=1 (world 8)");
  ASSERT_EQ(d.axes.size(), 4u);
  EXPECT_EQ(d.axes.front().name, "pp");
  EXPECT_EQ(d.axes.back().name, "tp");
}

TEST(ParallelDims, SingleRank) {
  const auto d = resolve(1, 1, 1, 1, 1);
  EXPECT_EQ(d.dp(), 1);
  EXPECT_TRUE(d.has("dp"));
  EXPECT_FALSE(d.has("cp"));
  EXPECT_EQ(d.degree("cp"), 1);
}

void expect_error(
    int64_t r,
    int64_t s,
    int64_t t,
    int64_t p,
    int64_t world,
    const std::string& fragment) {
  try {
    resolve(r, s, t, p, world);
    FAIL() << "expected ConfigError containing " << fragment;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << e.what();
  }
}

TEST(ParallelDims, RejectsWhatDoesNotFitTheWorld) {
  expect_error(2, 1, 1, 2, 8, "multiply to 4, not the world size 8");
  expect_error(-1, -1, 1, 1, 8, "-1 in at most one parallelism degree");
  expect_error(-1, 1, 1, 3, 8, "does not divide the world size 8");
  expect_error(
      0, 1, 1, 1, 1, "data_parallel_replicate_degree: 0 is out of range");
}

/// The message of from_config's ConfigError for `overrides` at `world`.
std::string from_config_error(
    const std::vector<std::string>& overrides, int64_t world) {
  try {
    ParallelDims::from_config(load_job_config("", overrides), world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ParallelDims, AnUnsetShardDegreeTakesTheRestOfTheWorld) {
  declare_mesh_axis(
      spec("dp_shard", 200, "parallelism.data_parallel_shard_degree"));
  declare_mesh_axis(spec("pp", 0, "parallelism.pipeline_parallel_degree"));
  // torchtitan's default: `--nproc 4` with no degree set is FSDP over 4.
  const auto four = ParallelDims::from_config(load_job_config("", {}), 4);
  EXPECT_EQ(four.degree("dp_shard"), 4);
  EXPECT_EQ(
      four.inferred,
      "parallelism.data_parallel_shard_degree unset: 4, what the other "
      "degrees leave of the world of 4");
  const auto pp = ParallelDims::from_config(
      load_job_config("", {"parallelism.pipeline_parallel_degree=2"}), 4);
  EXPECT_EQ(pp.degree("pp"), 2);
  EXPECT_EQ(pp.degree("dp_shard"), 2);
  EXPECT_TRUE(
      ParallelDims::from_config(load_job_config("", {}), 1).inferred.empty());
  // Set, it stays: the degrees must fit, and the message says how.
  EXPECT_NE(
      from_config_error({"parallelism.data_parallel_shard_degree=1"}, 2)
          .find("multiply to 1, not the world size 2; allowed: degrees whose "
                "product is the world size (use -1 for one degree to take the "
                "rest); a layout that fits: "
                "--parallelism.data_parallel_shard_degree=-1 (data parallel "
                "over the 2 ranks)"),
      std::string::npos)
      << from_config_error({"parallelism.data_parallel_shard_degree=1"}, 2);
  // What the set degrees leave is no whole number of ranks.
  EXPECT_NE(
      from_config_error({"parallelism.pipeline_parallel_degree=3"}, 4)
          .find("a layout that fits: --nproc 3 or a multiple of it (the "
                "rest data parallel), or "
                "--parallelism.pipeline_parallel_degree=1 "
                "--parallelism.data_parallel_shard_degree=-1 (data parallel "
                "over the 4 ranks)"),
      std::string::npos)
      << from_config_error({"parallelism.pipeline_parallel_degree=3"}, 4);
}

TEST(ParallelDims, DeclaredAxesComeFromTheConfig) {
  // A section of this test's own with a mesh degree, and its axis declared
  // between the data axes and tp.
  register_config_section(
      "dims_test",
      {{"degree",
        int64_t{1},
        FieldSpec("the test axis's ranks").mesh_degree()}});
  declare_mesh_axis(MeshAxisSpec{"dims_test", 500, "dims_test.degree", {}});
  EXPECT_THROW(
      declare_mesh_axis(MeshAxisSpec{"dims_test", 501, "dims_test.degree", {}}),
      std::logic_error);
  EXPECT_THROW(
      declare_mesh_axis(MeshAxisSpec{"other", 500, "dims_test.degree", {}}),
      std::logic_error);
  const JobConfig config = load_job_config("", {"dims_test.degree=-1"});
  const auto d = ParallelDims::from_config(config, 4);
  EXPECT_EQ(d.degree("dims_test"), 4);
  EXPECT_EQ(d.dp(), 1);
  try {
    load_job_config(
        "",
        {"dims_test.degree=-1", "parallelism.data_parallel_shard_degree=-1"});
    FAIL() << "two -1 degrees";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("dims_test.degree: -1 conflicts with "
                                   "parallelism.data_parallel_shard_degree -1"),
        std::string::npos)
        << e.what();
  }
  // A degree key that no declared axis reads: above 1 it is refused rather
  // than ignored.
  register_config_section(
      "dims_test",
      {{"orphan_degree",
        int64_t{1},
        FieldSpec("ranks of nothing").mesh_degree()}});
  const JobConfig orphan =
      load_job_config("", {"dims_test.orphan_degree=2", "dims_test.degree=2"});
  try {
    ParallelDims::from_config(orphan, 4, "world 4 from the test");
    FAIL() << "a degree without its parallelism";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "--dims_test.orphan_degree=2: "
            "dims_test.orphan_degree: 2 needs its parallelism"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace baton
