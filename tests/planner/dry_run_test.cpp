// `baton train --dry-run`'s arithmetic against figures computed by hand for
// the debug model (dim 256, 6 layers, 16 heads of 16, no GQA, feed-forward
// hidden 768, the byte tokenizer's 258 ids), and against the model a run
// really builds.

#include "planner/dry_run.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "builders/builder_registry.h"
#include "common/error.h"
#include "models/model_spec.h"
#include "parallel/pipeline/schedules.h"
#include "tests/baton_binary.h"
#include "tests/builders/rank_builds.h"
#include "trainer/trainer.h"

namespace baton {
namespace {

using testing::source_path;

// Per block: wq, wk, wv, wo 256 x 256 each (262144), w1, w2, w3 768 x 256
// each (589824), two norms of 256: 852480. Embedding and output 258 x 256
// (66048) each, the final norm 256.
constexpr int64_t kBlock = 852480;
constexpr int64_t kVocabRows = 66048;

// Attention on the CPU in float32 keeps each head's probabilities for its
// backward in groups of 4 query rows, each group against its keys rounded up
// to 16: at T 256, 4 x 16 x (1 + 1 + 1 + 1 + 2 + ... + 16) = 64 x 4 x 136
// = 34816 floats per head; 16 heads per sequence and block.
constexpr int64_t kProbsPerHead = 34816;
constexpr int64_t kAttentionBytes = 16 * kProbsPerHead * 4;

/// The dry run as on a CPU, whatever this machine has.
DryRunReport cpu_dry_run(
    const JobConfig& config,
    int64_t world,
    DryRunOptions options = DryRunOptions()) {
  return dry_run(config, world, options.device("cpu"));
}

JobConfig debug_config(const std::vector<std::string>& overrides) {
  register_builtin_builders();
  std::vector<std::string> all = {"training.mixed_precision_param=float32"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return load_job_config(source_path("configs/debug_model.yaml"), all);
}

TEST(DryRun, ExpertParallelHoldsItsExpertsAndCountsTheAllToAll) {
  register_builtin_builders();
  const JobConfig config = load_job_config(
      source_path("configs/debug_moe.yaml"),
      {"training.mixed_precision_param=float32",
       "parallelism.expert_parallel_degree=2"});
  const auto report = cpu_dry_run(config, 2);
  // 6 MoE blocks of 8 experts (3 x 256 x 256 each), a token using 2.
  const int64_t expert = 3 * 256 * 256;
  EXPECT_EQ(report.model_parameters - report.active_parameters, 6 * 6 * expert);
  ASSERT_TRUE(report.experts.has_value());
  EXPECT_EQ(report.experts->ep, 2);
  EXPECT_EQ(report.experts->moe_layers, 6);
  // 8 x 256 tokens / 2 ranks x top 2 rows of 256 float32s, half of them
  // to the other rank, four times; and the counts' exchange.
  EXPECT_EQ(
      report.experts->all_to_all_bytes_per_layer,
      4 * (2048 * 2 / 2) * 256 * 4 + 4 * 8);
  // Each rank holds 4 experts per layer and half the rest (fully_shard):
  // the same elements as dp_shard 2 alone, all told.
  ASSERT_EQ(report.ranks.size(), 2u);
  EXPECT_EQ(
      report.ranks[0].parameters + report.ranks[1].parameters,
      report.model_parameters);
  const std::string text = format_dry_run(report, "text");
  EXPECT_NE(text.find("active per token"), std::string::npos) << text;
  EXPECT_NE(
      text.find("each rank holds 4 of each layer's experts"), std::string::npos)
      << text;
}

TEST(DryRun, MoeBlocksKeepTheirRowsExpertsAndRouting) {
  register_builtin_builders();
  const JobConfig config = load_job_config(
      source_path("configs/debug_moe.yaml"),
      {"training.mixed_precision_param=float32"});
  const DryRunRank r = cpu_dry_run(config, 1).ranks.at(0);
  // 8 x 256 tokens. Per token and block: norm inputs and outputs 4 x 256;
  // q (8 heads of 64), k and v expanded to the 8 query heads 3 x 512,
  // attention's output and wo's input 2 x 512, the q/k norms' inputs 512 +
  // 256; the MoE's 2 rows of 256 as the experts read them and their
  // outputs before the weighting 2 x 2 x 256, w1, w3 and their product
  // per row 3 x 2 x 256 (expert hidden 256): 6912 float32s. Routing: 8
  // float32 scores, the 2 weights, their normalisation and their copy per
  // row, and 3 x 2 int64 indices: 104 bytes.
  const int64_t tokens = 2048;
  const int64_t attention = 8 * kProbsPerHead * 4;
  const int64_t blocks = 6 * ((6912 * 4 + 104) * tokens + 8 * attention);
  const int64_t ids = tokens * 8;
  const int64_t head = (256 + 256) * tokens * 4 + 2 * tokens * 258 * 4;
  EXPECT_EQ(r.activation_bytes_per_microbatch, blocks + ids + head);
  // Full checkpointing recomputes one block at a time, routing included.
  const JobConfig full = load_job_config(
      source_path("configs/debug_moe.yaml"),
      {"training.mixed_precision_param=float32",
       "activation_checkpoint.mode=full"});
  EXPECT_EQ(
      cpu_dry_run(full, 1).ranks.at(0).stages.at(0).recompute_bytes,
      (6912 * 4 + 104) * tokens + 8 * attention);
}

TEST(DryRun, OneProcessHoldsTheWholeDebugModel) {
  const auto report = cpu_dry_run(debug_config({}), 1);
  ASSERT_EQ(report.ranks.size(), 1u);
  const DryRunRank& r = report.ranks[0];
  const int64_t params = 6 * kBlock + 2 * kVocabRows + 256;
  EXPECT_EQ(params, 5247232);
  EXPECT_EQ(report.model_parameters, params);
  EXPECT_EQ(report.vocab_size, 258);
  EXPECT_EQ(r.parameters, params);
  EXPECT_EQ(r.weight_bytes, 4 * params);
  EXPECT_EQ(r.gradient_bytes, 4 * params);
  EXPECT_EQ(r.optimizer_bytes, 8 * params);
  EXPECT_EQ(r.buffer_bytes, 0);  // float32: no casts; no fully_shard
  // 8 x 256 tokens. Per token and block: norm inputs 2 x 256, their outputs
  // 2 x 256, q, k, v 3 x 256, attention's output and wo's input 2 x 256,
  // w1, w3 and their product 3 x 768: 4608 float32s; and per sequence and
  // block attention's probabilities.
  const int64_t tokens = 2048;
  const int64_t blocks = 6 * (4608 * tokens * 4 + 8 * kAttentionBytes);
  const int64_t ids = tokens * 8;
  const int64_t head = (256 + 256) * tokens * 4 + 2 * tokens * 258 * 4;
  EXPECT_EQ(r.activation_bytes_per_microbatch, blocks + ids + head);
  EXPECT_EQ(r.activation_bytes_per_microbatch, 341884928);
  EXPECT_EQ(r.peak_microbatches, 1);
  EXPECT_EQ(r.activation_peak_bytes, r.activation_bytes_per_microbatch);
  EXPECT_EQ(r.total_bytes, 16 * params + 341884928);
  EXPECT_EQ(report.device, "cpu");
}

TEST(DryRun, FullCheckpointingKeepsBlockInputsAndOneRecompute) {
  const auto report =
      cpu_dry_run(debug_config({"activation_checkpoint.mode=full"}), 1);
  const int64_t tokens = 2048;
  // Six block inputs of 256 saved, and one block's 4608 and its attention
  // probabilities while it is recomputed.
  const int64_t saved = 6 * 256 * tokens * 4 + tokens * 8 + 512 * tokens * 4 +
                        2 * tokens * 258 * 4;
  const int64_t recompute = 4608 * tokens * 4 + 8 * kAttentionBytes;
  const DryRunRank& r = report.ranks[0];
  EXPECT_EQ(r.activation_bytes_per_microbatch, saved);
  EXPECT_EQ(r.recompute_bytes, recompute);
  EXPECT_EQ(r.activation_peak_bytes, saved + recompute);
}

TEST(DryRun, PipelineStagesAndInFlightMicrobatches) {
  const auto report = cpu_dry_run(
      debug_config(
          {"parallelism.pipeline_parallel_degree=2",
           "parallelism.pipeline_parallel_schedule=1F1B",
           "parallelism.pipeline_parallel_microbatch_size=2"}),
      2);
  EXPECT_EQ(report.schedule, "1F1B");
  EXPECT_EQ(report.num_stages, 2);
  EXPECT_EQ(report.microbatches, 4);
  EXPECT_EQ(report.microbatch_tokens, 512);
  ASSERT_EQ(report.ranks.size(), 2u);
  const auto& first = report.ranks[0];
  const auto& last = report.ranks[1];
  ASSERT_EQ(first.stages.size(), 1u);
  EXPECT_EQ(first.stages[0].holds, "tok_embeddings, layers.0-2");
  EXPECT_EQ(first.parameters, kVocabRows + 3 * kBlock);
  EXPECT_EQ(last.parameters, 3 * kBlock + 256 + kVocabRows);
  // 1F1B: the first rank holds pp = 2 microbatches in flight, the last 1.
  EXPECT_EQ(first.peak_microbatches, 2);
  EXPECT_EQ(last.peak_microbatches, 1);
  const int64_t tokens = 512;
  const int64_t blocks = 3 * (4608 * tokens * 4 + 2 * kAttentionBytes);
  EXPECT_EQ(first.activation_bytes_per_microbatch, blocks + tokens * 8);
  EXPECT_EQ(
      last.activation_bytes_per_microbatch,
      blocks + 512 * tokens * 4 + 2 * tokens * 258 * 4);
  EXPECT_EQ(first.activation_peak_bytes, 2 * (blocks + tokens * 8));
}

TEST(DryRun, CheckpointingOnlyTheFirstStageCountsItsRankAlone) {
  const std::vector<std::string> pipeline = {
      "parallelism.pipeline_parallel_degree=2",
      "parallelism.pipeline_parallel_schedule=1F1B",
      "parallelism.pipeline_parallel_microbatch_size=2"};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), pipeline.begin(), pipeline.end());
    return cpu_dry_run(debug_config(extra), 2);
  };
  const auto none = with({});
  const auto full = with({"activation_checkpoint.mode=full"});
  const auto first_only = with(
      {"activation_checkpoint.mode=full", "activation_checkpoint.stages=[0]"});
  ASSERT_EQ(first_only.ranks.size(), 2u);
  const int64_t tokens = 512;
  // Stage 0 keeps its three blocks' inputs and the ids, and recomputes one
  // block at a time; stage 1 keeps everything and recomputes nothing.
  const auto& s0 = first_only.ranks[0].stages.at(0);
  const auto& s1 = first_only.ranks[1].stages.at(0);
  const int64_t block = 4608 * tokens * 4 + 2 * kAttentionBytes;
  EXPECT_EQ(s0.activation_bytes, 3 * 256 * tokens * 4 + tokens * 8);
  EXPECT_EQ(s0.recompute_bytes, block);
  EXPECT_EQ(
      s1.activation_bytes, 3 * block + 512 * tokens * 4 + 2 * tokens * 258 * 4);
  EXPECT_EQ(s1.recompute_bytes, 0);
  // 1F1B's first rank holds 2 microbatches, plus the recompute.
  EXPECT_EQ(
      first_only.ranks[0].activation_peak_bytes,
      2 * s0.activation_bytes + block);
  EXPECT_EQ(first_only.ranks[0].total_bytes, full.ranks[0].total_bytes);
  EXPECT_EQ(first_only.ranks[1].total_bytes, none.ranks[1].total_bytes);
  EXPECT_LT(first_only.ranks[0].total_bytes, none.ranks[0].total_bytes);
  // A stage the schedule does not have: known only once the degree is.
  try {
    cpu_dry_run(
        debug_config(
            {"parallelism.pipeline_parallel_degree=-1",
             "activation_checkpoint.mode=full",
             "activation_checkpoint.stages=[2]"}),
        2);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "activation_checkpoint.stages: stage 2 is out of range for 2 "
            "stages"),
        std::string::npos)
        << e.what();
  }
}

TEST(DryRun, FullyShardedStagesHoldWholeGradientsUntilTheirReduction) {
  const auto run = [](const std::string& reshard,
                      std::vector<std::string> extra,
                      int64_t world = 2) {
    extra.push_back("parallelism.data_parallel_shard_degree=2");
    extra.push_back("parallelism.fsdp_reshard_after_forward=" + reshard);
    return cpu_dry_run(debug_config(extra), world);
  };
  // pp 2 x dp_shard 2, 1F1B, microbatches of 2: rank 0 holds the
  // embedding (258 rows: 129 here) and layers 0-2.
  const std::vector<std::string> pipeline = {
      "parallelism.pipeline_parallel_degree=2",
      "parallelism.pipeline_parallel_schedule=1F1B",
      "parallelism.pipeline_parallel_microbatch_size=2"};
  const auto never = run("never", pipeline, 4);
  const auto always = run("always", pipeline, 4);
  const int64_t all = kVocabRows + 3 * kBlock;  // whole, float32
  EXPECT_EQ(never.ranks[0].stages.at(0).root_parameters, 129 * 256);
  // Kept: every unit whole and its whole gradient.
  EXPECT_EQ(never.ranks[0].buffer_bytes, 2 * all * 4);
  // Freed after each forward: the whole gradients stay over the stage's
  // microbatches; the parameters whole are the root and two blocks after a
  // forward, or every unit after a backward with one microbatch fewer in
  // flight (here smaller: a microbatch outweighs the stage's weights).
  const int64_t one_microbatch =
      always.ranks[0].activation_bytes_per_microbatch;
  EXPECT_GT(one_microbatch, all * 4);
  EXPECT_EQ(
      always.ranks[0].buffer_bytes,
      all * 4 + std::max<int64_t>(
                    (kVocabRows + 2 * kBlock) * 4, all * 4 - one_microbatch));
  EXPECT_LT(always.ranks[0].total_bytes, never.ranks[0].total_bytes);
  // Without pipelining each unit's gradient is reduced as its backward
  // ends, unless micro-steps accumulate into it.
  const int64_t whole = 6 * kBlock + 2 * kVocabRows + 256;
  const int64_t root = 2 * kVocabRows + 256;
  EXPECT_EQ(
      run("always", {}).ranks[0].buffer_bytes, 2 * (root + 2 * kBlock) * 4);
  EXPECT_EQ(
      run("always", {"training.gradient_accumulation_steps=2"})
          .ranks[0]
          .buffer_bytes,
      whole * 4 + (root + 2 * kBlock) * 4);
  EXPECT_EQ(run("never", {}).ranks[0].buffer_bytes, 2 * whole * 4);
}

TEST(DryRun, TensorParallelInsideFullyShardedBfloat16) {
  // tp 2 x dp_shard 2: rank = dp_shard * 2 + tp.
  const auto report = cpu_dry_run(
      debug_config(
          {"parallelism.tensor_parallel_degree=2",
           "parallelism.data_parallel_shard_degree=2",
           "training.mixed_precision_param=bfloat16"}),
      4);
  ASSERT_EQ(report.ranks.size(), 4u);
  EXPECT_EQ(report.ranks[1].coordinates.at("tp"), 1);
  EXPECT_EQ(report.ranks[2].coordinates.at("dp_shard"), 1);
  // A block's slices halve (8 of 16 heads, 384 of 768 hidden rows; norms
  // whole): 426496, and fully_shard halves each again: 213248. The
  // vocabulary's 258 rows are 129 per tp rank, of which fully_shard gives
  // dp_shard 0 ceil(129 / 2) = 65 rows and dp_shard 1 the other 64.
  const int64_t blocks = 6 * 213248;
  EXPECT_EQ(report.ranks[0].parameters, blocks + 2 * 65 * 256 + 128);
  EXPECT_EQ(report.ranks[1].parameters, blocks + 2 * 65 * 256 + 128);
  EXPECT_EQ(report.ranks[2].parameters, blocks + 2 * 64 * 256 + 128);
  // Gathered in bf16, with their whole gradients: the root unit (129 x 256
  // twice and the norm) and two blocks.
  const int64_t gathered = (2 * 129 * 256 + 256) + 2 * 426496;
  EXPECT_EQ(report.ranks[0].buffer_bytes, 2 * gathered * 2);
  // bf16, T / 2 positions between blocks: per token and block 256 + 512 +
  // 384 + 256 + 1152 = 2560 elements; attention in bf16 takes the blocked
  // path, whose probabilities are blocks of 64 rows against the keys up to
  // the block's end: 64 x (64 + 128 + 192 + 256) = 40960 per head, 8 heads
  // per sequence on each tp rank.
  const int64_t tokens = 2048;
  const int64_t attention = 8 * 8 * 40960 * 2;
  EXPECT_EQ(
      report.ranks[0].activation_bytes_per_microbatch,
      6 * (2560 * tokens * 2 + attention) + tokens * 8 +
          (128 + 256) * tokens * 2 + 2 * tokens * 129 * 4);
}

TEST(DryRun, AStageCacheAndAGivenScheduleChangeNoFigure) {
  // What a planner shares across its dry runs: the stages' parameter
  // figures (one cache, hit from the second layout on) and the schedule it
  // has made already. Every rank of every layout reads the same.
  pipeline::register_builtin_schedules();
  const auto cache = std::make_shared<DryRunStageCache>();
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{
            "parallelism.pipeline_parallel_degree=2",
            "parallelism.tensor_parallel_degree=2",
            "parallelism.data_parallel_shard_degree=2",
            "parallelism.pipeline_parallel_schedule=Interleaved1F1B",
            "parallelism.pipeline_parallel_stages_per_rank=2",
            "parallelism.pipeline_parallel_microbatch_size=2"},
        std::vector<std::string>{
            "parallelism.pipeline_parallel_degree=2",
            "parallelism.tensor_parallel_degree=2",
            "parallelism.data_parallel_shard_degree=2",
            "parallelism.fsdp_reshard_after_forward=always",
            "activation_checkpoint.mode=full",
            "parallelism.pipeline_parallel_schedule=Interleaved1F1B",
            "parallelism.pipeline_parallel_stages_per_rank=2",
            "parallelism.pipeline_parallel_microbatch_size=2"}}) {
    const JobConfig config = debug_config(layout);
    const pipeline::Schedule schedule =
        pipeline::make_schedule("Interleaved1F1B", 2, 2, 4);
    const std::string plain = format_dry_run(cpu_dry_run(config, 8), "json");
    for (int pass = 0; pass < 2; ++pass) {
      const auto options =
          DryRunOptions().stage_cache(cache).schedule(&schedule);
      EXPECT_EQ(format_dry_run(cpu_dry_run(config, 8, options), "json"), plain)
          << "pass " << pass;
    }
  }
}

TEST(DryRun, ShapesAreThoseTheModelBuilds) {
  register_builtin_builders();
  const auto& spec = model_registry().get("llama3");
  ModelArgs args = spec.flavors.at("small");  // grouped-query
  args.vocab_size = 258;
  for (const ChunkSpec chunk :
       {ChunkSpec{},
        ChunkSpec{0, 3, true, false},
        ChunkSpec{3, 5, false, false},
        ChunkSpec{5, -1, false, true}}) {
    const auto shapes = spec.parameter_shapes(args, chunk);
    const auto built = spec.build(args, chunk, 0)->named_parameters();
    ASSERT_EQ(shapes.size(), built.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(shapes[i].first, built[i].key());
      EXPECT_EQ(shapes[i].second, built[i].value().sizes().vec())
          << shapes[i].first;
    }
  }
}

/// Builds `config` on `world` ranks (threads over a store, real Gloo) as a
/// run does and returns the parameter elements each rank's parts store.
std::vector<int64_t> built_parameters(const JobConfig& config, int64_t world) {
  std::vector<int64_t> counts(world, -1);
  testing::on_each_rank(config, world, [&](int64_t r, TrainerBuilder& b) {
    const auto trainer = b.build();
    int64_t n = 0;
    trainer->components().model_parts.for_each([&](ModelPart& part) {
      for (const auto& p : part.module().parameters()) {
        n += p.numel();
      }
    });
    counts[r] = n;
  });
  return counts;
}

TEST(DryRun, EveryRankHoldsWhatTheBuiltLayoutStores) {
  for (const auto& layout : std::vector<std::vector<std::string>>{
           {"parallelism.tensor_parallel_degree=2",
            "parallelism.data_parallel_shard_degree=2"},
           {"parallelism.pipeline_parallel_degree=2",
            "parallelism.pipeline_parallel_schedule=Interleaved1F1B",
            "parallelism.pipeline_parallel_stages_per_rank=2",
            "parallelism.pipeline_parallel_microbatch_size=4",
            "parallelism.data_parallel_shard_degree=2"}}) {
    std::vector<std::string> overrides = layout;
    overrides.push_back("training.seq_len=32");
    overrides.push_back("metrics.peak_tflops=1");
    overrides.push_back(
        "job.dump_folder=" + testing::fresh_dir("dry_run_built").string());
    const JobConfig config = debug_config(overrides);
    const auto report = cpu_dry_run(config, 4);
    const auto built = built_parameters(config, 4);
    for (int64_t r = 0; r < 4; ++r) {
      EXPECT_EQ(report.ranks[r].parameters, built[r])
          << "rank " << r << " of " << layout[0];
    }
  }
}

TEST(DryRun, ALayoutTheRunRefusesIsAConfigError) {
  // 3 ranks for degrees whose product is 2.
  EXPECT_THROW(
      cpu_dry_run(debug_config({"parallelism.pipeline_parallel_degree=2"}), 3),
      ConfigError);
  // 16 heads do not split over 3 tp ranks.
  EXPECT_THROW(
      cpu_dry_run(debug_config({"parallelism.tensor_parallel_degree=3"}), 3),
      ConfigError);
}

TEST(DryRun, AttentionKeepsWhatItsDevicesPathKeeps) {
  const JobConfig config = debug_config({});
  const auto cpu = cpu_dry_run(config, 1);
  const auto cuda = dry_run(config, 1, DryRunOptions().device("cuda"));
  // On CUDA scaled_dot_product_attention keeps a float32 log-sum-exp per
  // row of each head instead of the probabilities.
  EXPECT_EQ(cuda.device, "cuda");
  EXPECT_EQ(
      cpu.ranks[0].activation_bytes_per_microbatch -
          cuda.ranks[0].activation_bytes_per_microbatch,
      6 * 8 * (kAttentionBytes - 16 * 256 * 4));
  EXPECT_NE(cpu.attention_saved.find("probabilities"), std::string::npos);
  EXPECT_NE(cuda.attention_saved.find("log-sum-exp"), std::string::npos);
  // Document masking's tiles keep the log-sum-exp too (the debug model has
  // no grouped heads, so the unexpanded keys and values change nothing).
  const auto documents =
      cpu_dry_run(debug_config({"training.document_mask=true"}), 1);
  EXPECT_EQ(
      documents.ranks[0].activation_bytes_per_microbatch,
      cuda.ranks[0].activation_bytes_per_microbatch);
  EXPECT_NE(
      documents.attention_saved.find("log-sum-exp per row (document masking"),
      std::string::npos);
  // The op-selective checkpoint keeps attention's output only, and its
  // backward recomputes the probabilities head by head: none counted.
  const auto op = [](const std::string& device) {
    return dry_run(
        debug_config(
            {"activation_checkpoint.mode=selective",
             "activation_checkpoint.selective=op"}),
        1,
        DryRunOptions().device(device));
  };
  EXPECT_EQ(
      op("cpu").ranks[0].activation_peak_bytes,
      op("cuda").ranks[0].activation_peak_bytes);
  // The text names what attention keeps.
  EXPECT_NE(
      format_dry_run(cpu, "text")
          .find("on cpu; attention keeps the "
                "probabilities"),
      std::string::npos);
}

TEST(DryRun, TextGroupsRanksWithEqualFigures) {
  const auto report = cpu_dry_run(
      debug_config({"parallelism.data_parallel_replicate_degree=4"}), 4);
  const std::string text = format_dry_run(report, "text");
  // Four replicas hold the same: one row for ranks 0-3.
  EXPECT_NE(
      text.find("\n0-3 | 0 0-3 0 0 0 | 0 (tok_embeddings, layers.0-5, "
                "norm, output) | 5.25M |"),
      std::string::npos)
      << text;
  const std::string json = format_dry_run(report, "json");
  EXPECT_NE(json.find("\"world_size\": 4"), std::string::npos) << json;
}

}  // namespace
}  // namespace baton
