// The applier chain and the built-in appliers: steps by name (insert,
// replace, remove, and their errors), the order they run in, and to_device,
// check_replicas and replicate on real Gloo ranks.

#include "parallel/applier.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/job_config.h"
#include "parallel/data_parallel/replicate.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "parallel/model_parts.h"
#include "tests/models/tiny_llama.h"
#include "tests/parallel/multi_rank.h"
#include "tests/parallel/test_parts.h"

namespace baton {
namespace {

/// Appends its name to `log` when applied.
class Recorder final : public Applier {
 public:
  Recorder(std::string name, std::vector<std::string>& log)
      : name_(std::move(name)), log_(log) {}
  void apply(ModelPart&, const ParallelContext&) override {
    log_.push_back(name_);
  }

 private:
  std::string name_;
  std::vector<std::string>& log_;
};

class Failing final : public Applier {
 public:
  void apply(ModelPart&, const ParallelContext&) override {
    throw std::runtime_error("no room");
  }
};

std::string logic_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a std::logic_error";
  return "";
}

TEST(ApplierChain, StepsAreFoundByNameAndRunInOrder) {
  std::vector<std::string> log;
  const auto step = [&](const std::string& name) {
    return std::make_unique<Recorder>(name, log);
  };
  ApplierChain chain;
  EXPECT_TRUE(chain.empty());
  chain.append("a", step("a"));
  chain.append("c", step("c"));
  chain.insert_before("c", "b", step("b"));
  chain.insert_after("c", "d", step("d"));
  chain.insert_before("a", "first", step("first"));
  EXPECT_EQ(
      chain.names(), (std::vector<std::string>{"first", "a", "b", "c", "d"}));
  chain.replace("b", step("b2"));
  chain.remove("first");
  EXPECT_TRUE(chain.contains("d"));
  EXPECT_FALSE(chain.contains("first"));

  const JobConfig config;
  const dist::ParallelMesh mesh(
      baton::testing::builtin_dims(1, 1, 1, 1, 1), 0, nullptr);
  ModelPart part(testing::tiny_llama(16, 1), /*stage=*/3);
  chain.apply(part, ParallelContext{config, mesh, at::kCPU});
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b2", "c", "d"}));

  // An applier's error names its step and the part's stage.
  chain.append("failing", std::make_unique<Failing>());
  try {
    chain.apply(part, ParallelContext{config, mesh, at::kCPU});
    ADD_FAILURE() << "the failing step passed";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "[parallelize] stage 3, step 'failing': no room");
  }
}

TEST(ApplierChain, BadNamesAreRefusedListingTheSteps) {
  std::vector<std::string> log;
  ApplierChain chain;
  chain.append("a", std::make_unique<Recorder>("a", log));
  EXPECT_EQ(
      logic_error_of([&] { chain.remove("z"); }),
      "[ApplierChain] step: 'z' is not in the chain; allowed: a");
  EXPECT_EQ(
      logic_error_of(
          [&] { chain.append("a", std::make_unique<Recorder>("a", log)); }),
      "[ApplierChain] step: 'a' is already in the chain; allowed: each name "
      "once");
  EXPECT_NE(
      logic_error_of([&] { chain.replace("a", nullptr); }).find("null"),
      std::string::npos);
  // Registered steps: an unknown name is a config error listing the known.
  register_builtin_appliers();
  try {
    chain.append("replicat", "cfg.yaml:4");
    ADD_FAILURE() << "an unknown applier was appended";
  } catch (const ConfigError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "cfg.yaml:4: unknown applier 'replicat'; known: "
        "activation_checkpoint, check_replicas, context_parallel, "
        "expert_parallel, fully_shard, mixed_precision, replicate, "
        "tensor_parallel, to_device; did you mean "
        "'replicate'?");
  }
  chain.append("to_device");
  EXPECT_THROW(chain.append("to_device", "cfg.yaml:5"), ConfigError);
  EXPECT_EQ(chain.names(), (std::vector<std::string>{"a", "to_device"}));
}

TEST(ModelParts, PartsKeepStageOrderAndMarks) {
  ModelParts parts;
  parts.push_back(std::make_shared<ModelPart>(testing::tiny_llama(16, 1), 1));
  parts.push_back(std::make_shared<ModelPart>(testing::tiny_llama(16, 1), 3));
  EXPECT_THROW(
      parts.push_back(
          std::make_shared<ModelPart>(testing::tiny_llama(16, 1), 2)),
      std::invalid_argument);
  EXPECT_EQ(parts.at_stage(3).stage(), 3);
  EXPECT_THROW(parts.at_stage(0), std::out_of_range);
  auto& part = parts[0];
  EXPECT_TRUE(part.grad_split("norm.weight").empty());
  part.mark_grad_split("norm.weight", "tp");
  part.mark_grad_split("norm.weight", "dp_shard");
  part.mark_grad_split("norm.weight", "tp");
  EXPECT_EQ(
      part.grad_split("norm.weight"),
      (std::vector<std::string>{"tp", "dp_shard"}));
  EXPECT_THROW(
      part.mark_grad_split("no.such.weight", "tp"), std::invalid_argument);
  EXPECT_THROW(
      part.mark_grad_split("norm.weight", "pp"), std::invalid_argument);
}

TEST(BuiltinAppliers, ReplicasAreCheckedThenGradientsSummedOverDp) {
  register_builtin_appliers();
  std::vector<std::map<std::string, at::Tensor>> grads(2);
  baton::testing::run_ranks(2, [&](int64_t rank, dist::Runtime& rt) {
    JobConfig config;
    config.parallelism.data_parallel_replicate_degree = 2;
    const dist::ParallelMesh mesh(
        baton::testing::builtin_dims(2, 1, 1, 1, 2),
        rank,
        rt.shared_from_this());
    ModelPart part(testing::tiny_llama(16, 1));
    part.module().eval();
    ApplierChain chain;
    for (const char* name : {"to_device", "check_replicas", "replicate"}) {
      chain.append(name);
    }
    chain.apply(part, ParallelContext{config, mesh, at::kCPU});
    EXPECT_TRUE(part.module().is_training());
    ASSERT_EQ(part.grad_sync().size(), 1u);
    // Each rank's own batch; the synchroniser sums the gradients.
    const auto tokens = torch::full({1, 5}, rank + 1, torch::kLong);
    part.grad_sync().prepare(/*sync=*/true);
    part.module().forward(tokens).sum().backward();
    part.grad_sync().finish();
    for (const auto& item : part.module().named_parameters()) {
      grads[rank][item.key()] = item.value().grad().clone();
    }
  });
  // The reference: one process running both batches.
  auto model = testing::tiny_llama(16, 1);
  for (int64_t rank = 0; rank < 2; ++rank) {
    model->forward(torch::full({1, 5}, rank + 1, torch::kLong))
        .sum()
        .backward();
  }
  for (const auto& item : model->named_parameters()) {
    for (int64_t rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(torch::allclose(
          grads[rank].at(item.key()), item.value().grad(), 1e-5, 1e-6))
          << item.key() << " on rank " << rank;
    }
  }
}

TEST(BuiltinAppliers, CheckReplicasNamesTheFirstThatDiffers) {
  register_builtin_appliers();
  baton::testing::run_ranks(2, [](int64_t rank, dist::Runtime& rt) {
    const JobConfig config;
    const dist::ParallelMesh mesh(
        baton::testing::builtin_dims(2, 1, 1, 1, 2),
        rank,
        rt.shared_from_this());
    ModelPart part(testing::tiny_llama(16, /*seed=*/rank == 1 ? 2 : 1), 0);
    ApplierChain chain;
    chain.append("check_replicas");
    try {
      chain.apply(part, ParallelContext{config, mesh, at::kCPU});
      ADD_FAILURE() << "replicas that differ passed";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(
          std::string(e.what()).find(
              "[parallelize] stage 0, step 'check_replicas': [data_parallel] "
              "parameter tok_embeddings.weight differs"),
          std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace baton
