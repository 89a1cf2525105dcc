// The extension story: a user subclasses TrainerBuilder, overrides one hook,
// calls the base, registers the subclass and selects it from YAML.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "builders/builder_registry.h"

namespace baton {
namespace {

/// Freezes every norm weight: overrides one hook, calls the base for the
/// optimizer, then removes the frozen parameters from it.
class FrozenNormBuilder final : public TrainerBuilder {
 public:
  using TrainerBuilder::TrainerBuilder;
  static int optimizers_built;

 protected:
  std::unique_ptr<torch::optim::Optimizer> build_optimizer(
      ModelPart& part) override {
    for (auto& item : part.module().named_parameters()) {
      if (item.key().find("norm") != std::string::npos) {
        item.value().requires_grad_(false);
      }
    }
    auto optimizer = TrainerBuilder::build_optimizer(part);
    auto& params = optimizer->param_groups().at(0).params();
    params.erase(
        std::remove_if(
            params.begin(),
            params.end(),
            [](const at::Tensor& p) { return !p.requires_grad(); }),
        params.end());
    ++optimizers_built;
    return optimizer;
  }
};
int FrozenNormBuilder::optimizers_built = 0;

/// A broken subclass: its model hook returns no parts.
class NoModelBuilder final : public TrainerBuilder {
 public:
  using TrainerBuilder::TrainerBuilder;

 protected:
  ModelParts build_model(const ModelArgs&) override {
    return {};
  }
};

void register_test_builders() {
  register_builtin_builders();
  auto& registry = builder_registry();
  if (!registry.contains("frozen_norm")) {
    registry.add(
        "frozen_norm",
        [](const JobConfig& c) {
          return std::make_unique<FrozenNormBuilder>(c);
        },
        "test: norms frozen");
    registry.add(
        "no_model",
        [](const JobConfig& c) { return std::make_unique<NoModelBuilder>(c); },
        "test: broken model hook");
  }
}

std::string write_config(const std::string& name, const std::string& builder) {
  const auto path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << "builder: " << builder << "\n"
                      << "job:\n  dump_folder: " << ::testing::TempDir() << "/"
                      << name << ".out\n"
                      << "model:\n  flavor: debugmodel\n"
                      << "lr_scheduler:\n  warmup_steps: 1\n"
                      << "training:\n  steps: 3\n  seq_len: 16\n"
                      << "  local_batch_size: 2\n  num_threads: 1\n"
                      << "metrics:\n  peak_tflops: 1\n";
  return path.string();
}

TEST(TrainerBuilder, SubclassSelectedFromYamlOverridesOneHook) {
  register_test_builders();
  const auto config =
      load_job_config(write_config("frozen.yaml", "frozen_norm"));
  auto builder = make_trainer_builder(config);
  ASSERT_NE(dynamic_cast<FrozenNormBuilder*>(builder.get()), nullptr);
  FrozenNormBuilder::optimizers_built = 0;
  auto trainer = builder->build();
  EXPECT_EQ(FrozenNormBuilder::optimizers_built, 1);  // once per part

  const auto& parts = trainer->components().model_parts;
  std::map<std::string, at::Tensor> before;
  for (const auto& item : parts[0].module().named_parameters()) {
    before[item.key()] = item.value().clone();
  }
  trainer->train();
  for (const auto& item : parts[0].module().named_parameters()) {
    const bool is_norm = item.key().find("norm") != std::string::npos;
    EXPECT_EQ(torch::equal(item.value(), before[item.key()]), is_norm)
        << item.key();
  }
}

TEST(TrainerBuilder, VocabularyFollowsTheTokenizer) {
  register_test_builders();
  struct Case {
    const char* tokenizer;
    const char* path;
    int64_t vocab;
  };
  for (const Case& t :
       {Case{"bytes", "", 258},
        Case{"sentencepiece", "assets/kjv_sp.model", 2000},
        Case{"tiktoken", "assets/kjv_tiktoken.txt", 1024 + 256}}) {
    const std::string tokenizer = t.tokenizer;
    const int64_t vocab = t.vocab;
    const auto config = load_job_config(
        write_config("vocab.yaml", "default"),
        {"model.tokenizer=" + tokenizer,
         "model.tokenizer_path=" + std::string(t.path)});
    auto trainer = make_trainer_builder(config)->build();
    const auto& c = trainer->components();
    EXPECT_EQ(c.tokenizer->vocab_size(), vocab) << tokenizer;
    for (const auto& item : c.model_parts[0].module().named_parameters()) {
      if (item.key() == "tok_embeddings.weight" ||
          item.key() == "output.weight") {
        EXPECT_EQ(item.value().size(0), vocab) << tokenizer << item.key();
      }
    }
    // The batches hold ids of that vocabulary.
    const Batch batch = c.dataloader->next();
    EXPECT_LT(batch.inputs.max().item<int64_t>(), vocab) << tokenizer;
  }
}

TEST(TrainerBuilder, AutoPicksTheDefaultBuilderWithoutPipelining) {
  register_test_builders();
  const auto config = load_job_config(write_config("auto.yaml", "auto"));
  auto builder = make_trainer_builder(config);
  EXPECT_EQ(typeid(*builder), typeid(TrainerBuilder));
}

TEST(TrainerBuilder, UnknownBuilderListsTheKnownOnes) {
  register_test_builders();
  const auto path = write_config("unknown.yaml", "frozen_nrom");
  const auto config = load_job_config(path);
  try {
    make_trainer_builder(config);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(path + ":1: unknown builder 'frozen_nrom'", 0), 0u) << m;
    EXPECT_NE(m.find("default"), std::string::npos) << m;
    EXPECT_NE(m.find("did you mean 'frozen_norm'?"), std::string::npos) << m;
  }
}

TEST(TrainerBuilder, BuildRejectsAHookThatReturnsNothing) {
  register_test_builders();
  const auto config = load_job_config(write_config("broken.yaml", "no_model"));
  try {
    make_trainer_builder(config)->build();
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "[TrainerBuilder] build_model returned no parts");
  }
}

TEST(TrainerBuilder, DuplicateRegistrationThrows) {
  register_test_builders();
  EXPECT_THROW(
      builder_registry().add(
          "Default",
          [](const JobConfig& c) {
            return std::make_unique<TrainerBuilder>(c);
          },
          ""),
      std::logic_error);
}

}  // namespace
}  // namespace baton
