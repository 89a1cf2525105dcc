// A parallel dimension added from outside Baton: the "toy" parallelism
// (tests/builders/toy_parallelism.h), registered by the tests alone, owns a
// mesh axis (its degree under a config section of its own, toy.degree) and an
// applier that splits the token embedding by rows over that axis. Threaded end
// to end at degree 2 (ranks as threads over real Gloo, each building its
// trainer in process): the config, the mesh and its groups, the chain, what
// each rank holds, the losses and weights against one process, checkpoints
// saved at 2 and loaded at 1 and back (the dry run's count:
// tests/planner/toy_axis_dry_run_test.cpp).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "builders/builder_registry.h"
#include "parallel/dist/mesh.h"
#include "parallel/dist/process_group.h"
#include "tests/builders/rank_builds.h"
#include "tests/builders/toy_parallelism.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tensor_parallel::VocabRange;
using testing::kEmbedding;
using testing::kToy;
using testing::register_toy;
using testing::write_config;

/// What a run leaves: global rank 0's metrics, every rank's whole weights
/// (the embedding assembled from the toy ranks' rows), what rank 1 held of
/// the embedding, its mesh's description and its chain's first steps.
struct ToyRun {
  std::vector<StepMetrics> metrics;
  std::map<std::string, at::Tensor> weights;
  std::vector<int64_t> rank1_embedding;
  std::string rank1_mesh;
  int64_t loss_group = 0;
  int64_t toy_group = 0;
};

ToyRun train(const JobConfig& config, int64_t world) {
  ToyRun run;
  std::mutex mutex;
  std::map<int64_t, at::Tensor> embedding_rows;
  testing::on_each_rank(config, world, [&](int64_t r, TrainerBuilder& b) {
    auto trainer = b.build();
    auto metrics = trainer->train();
    const auto& c = trainer->components();
    std::lock_guard<std::mutex> lock(mutex);
    if (r == 0) {
      run.metrics = std::move(metrics);
      run.loss_group = c.mesh->loss()->size();
      run.toy_group = c.mesh->group(kToy)->size();
    }
    c.model_parts.for_each([&](ModelPart& part) {
      for (const auto& item : part.module().named_parameters()) {
        const at::Tensor w = item.value().detach().clone();
        if (const ParamSlice* slice = part.slice(item.key())) {
          embedding_rows[slice->offsets[0]] = w;
          if (r == 1) {
            run.rank1_embedding = w.sizes().vec();
          }
        } else {
          run.weights[item.key()] = w;
        }
      }
    });
    if (r == 1) {
      run.rank1_mesh = c.mesh->to_string();
    }
  });
  if (!embedding_rows.empty()) {
    std::vector<at::Tensor> rows;
    for (const auto& [offset, t] : embedding_rows) {
      rows.push_back(t);
    }
    run.weights[kEmbedding] = at::cat(rows);
  }
  return run;
}

void expect_same_training(const ToyRun& toy, const ToyRun& one) {
  ASSERT_EQ(toy.metrics.size(), one.metrics.size());
  for (size_t i = 0; i < one.metrics.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(one.metrics[i].step));
    EXPECT_NEAR(toy.metrics[i].loss, one.metrics[i].loss, 1e-5);
    EXPECT_NEAR(toy.metrics[i].grad_norm, one.metrics[i].grad_norm, 1e-5);
  }
  ASSERT_EQ(toy.weights.size(), one.weights.size());
  for (const auto& [fqn, want] : one.weights) {
    ASSERT_EQ(toy.weights.count(fqn), 1u) << fqn;
    EXPECT_TRUE(torch::allclose(toy.weights.at(fqn), want, 1e-5, 1e-6)) << fqn;
  }
}

TEST(ToyAxis, IsAConfigSectionLikeTheBuiltIns) {
  register_toy();
  const JobConfig config = load_job_config(write_config("toy_config", 2));
  EXPECT_EQ(config.section("toy").get<int64_t>("degree"), 2);
  EXPECT_NE(
      job_config_to_yaml(config).find(
          "toy:\n  degree: 2  # toy ranks (-1: the rest of the world)"),
      std::string::npos)
      << job_config_to_yaml(config);
  const auto error = [](const std::vector<std::string>& overrides) {
    try {
      load_job_config("", overrides);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(
      error({"toy.degree=0"}),
      "--toy.degree=0: toy.degree: 0 is out of range; allowed: an integer >= "
      "1, or -1 for the rest");
  EXPECT_NE(
      error({"toy.degree=-1", "parallelism.data_parallel_shard_degree=-1"})
          .find("-1 in at most one parallelism degree"),
      std::string::npos);
  EXPECT_NE(
      error({"toy.degre=2"}).find("did you mean 'toy.degree'"),
      std::string::npos)
      << error({"toy.degre=2"});
  // Its applier is its own: set its degree instead.
  const JobConfig listed = load_job_config(
      write_config("toy_listed", 1), {"parallelism.appliers=[toy]"});
  try {
    make_trainer_builder(listed)->build();
    ADD_FAILURE() << "toy listed in parallelism.appliers was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("hint: set toy.degree instead"),
        std::string::npos)
        << e.what();
  }
  // Its check runs before the model is built, naming its key.
  const JobConfig odd =
      load_job_config(write_config("toy_odd", 2), {"training.seq_len=33"});
  std::vector<std::string> errors(2);
  const dist::RendezvousFolder store;
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto builder = make_trainer_builder(odd);
        builder->use_launch_env(testing::rank_env(r, 2, store));
        builder->build();
      } catch (const ConfigError& e) {
        errors[r] = e.what();
      } catch (const std::exception& e) {
        errors[r] = std::string("not a ConfigError: ") + e.what();
      }
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  for (const auto& e : errors) {
    EXPECT_NE(
        e.find("toy.degree: 2 does not divide training.seq_len 33"),
        std::string::npos)
        << e;
  }
}

TEST(ToyAxis, TrainsAsOneProcessAtDegreeTwo) {
  register_toy();
  const ToyRun one = train(load_job_config(write_config("toy_one", 1)), 1);
  const ToyRun toy = train(load_job_config(write_config("toy_two", 2)), 2);
  // The mesh has its axis; its ranks share the batch, so the loss group is
  // one rank; rank 1 holds the second half of the embedding's rows.
  EXPECT_EQ(toy.toy_group, 2);
  EXPECT_EQ(toy.loss_group, 1);
  EXPECT_EQ(toy.rank1_mesh, "rank 1: toy 1/2 (groups toy [0, 1])");
  const int64_t vocab = one.weights.at(kEmbedding).size(0);
  EXPECT_EQ(
      toy.rank1_embedding,
      (std::vector<int64_t>{
          VocabRange::of(vocab, 1, 2).size(),
          one.weights.at(kEmbedding).size(1)}));
  expect_same_training(toy, one);
  EXPECT_LT(one.metrics.back().loss, one.metrics.front().loss);
}

/// The checkpoint of `from`'s step 2 (and nothing later) in a fresh run
/// folder `name`.out, and the config of a 4-step run there at `toy`.
JobConfig resume_from(
    const JobConfig& from, const std::string& name, int64_t toy) {
  const std::string path =
      write_config(name, toy, "checkpoint:\n  enable: true\n  interval: 2\n");
  const JobConfig config = load_job_config(path);
  const fs::path src = fs::path(from.job.dump_folder) / "checkpoint" / "step-2";
  const fs::path dst = fs::path(config.job.dump_folder) / "checkpoint";
  fs::create_directories(dst);
  fs::copy(src, dst / "step-2", fs::copy_options::recursive);
  return config;
}

TEST(ToyAxis, CheckpointsCrossTheDegree) {
  register_toy();
  const std::string ck = "checkpoint:\n  enable: true\n  interval: 2\n";
  const JobConfig one = load_job_config(write_config("toy_ck_one", 1, ck));
  const JobConfig toy = load_job_config(write_config("toy_ck_two", 2, ck));
  const ToyRun one_run = train(one, 1);
  const ToyRun toy_run = train(toy, 2);
  expect_same_training(toy_run, one_run);

  // Saved at 2: the index lists the axis; each toy rank wrote its rows of
  // the embedding, and rank 0 alone every tensor both hold whole.
  const fs::path step2 = fs::path(toy.job.dump_folder) / "checkpoint/step-2";
  json index;
  std::ifstream(step2 / "index.json") >> index;
  const json toy_axis = {{"name", "toy"}, {"degree", 2}};
  EXPECT_NE(
      std::find(
          index["layout"]["axes"].begin(),
          index["layout"]["axes"].end(),
          toy_axis),
      index["layout"]["axes"].end())
      << index["layout"];
  const json& table = index["tensors"][kEmbedding]["slices"];
  ASSERT_EQ(table.size(), 2u) << index["tensors"][kEmbedding];
  EXPECT_EQ(table[1]["file"], "rank-00001.safetensors");
  for (const auto& [fqn, entry] : index["tensors"].items()) {
    const bool embedding = fqn.find(kEmbedding) != std::string::npos;
    if (!embedding) {
      ASSERT_TRUE(entry.contains("file")) << fqn << ": " << entry;
      EXPECT_EQ(entry["file"], "rank-00000.safetensors") << fqn;
    }
  }

  // Saved at 2, loaded at 1; saved at 1, loaded at 2: steps 3 and 4 as the
  // runs that never stopped.
  const ToyRun two_to_one = train(resume_from(toy, "toy_ck_2to1", 1), 1);
  const ToyRun one_to_two = train(resume_from(one, "toy_ck_1to2", 2), 2);
  for (const ToyRun* resumed : {&two_to_one, &one_to_two}) {
    ASSERT_EQ(resumed->metrics.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(resumed->metrics[i].step, static_cast<int64_t>(i) + 3);
      EXPECT_NEAR(resumed->metrics[i].loss, one_run.metrics[i + 2].loss, 1e-5);
    }
    for (const auto& [fqn, want] : one_run.weights) {
      EXPECT_TRUE(torch::allclose(resumed->weights.at(fqn), want, 1e-5, 1e-6))
          << fqn;
    }
  }
}

}  // namespace
}  // namespace baton
