#include "config/job_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/registry.h"

namespace baton {
namespace {

/// Writes `text` to a file named after the running test and returns its path.
std::string write_yaml(const std::string& text, const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string path =
      ::testing::TempDir() + "baton_job_config_" + info->name() + tag + ".yaml";
  std::ofstream(path) << text;
  return path;
}

/// The ConfigError message of loading `path` with `overrides`; records a
/// failure when nothing (or something else) is thrown.
std::string load_error(
    const std::string& path, const std::vector<std::string>& overrides = {}) {
  try {
    load_job_config(path, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError loading '" << path << "'";
  return "";
}

void expect_contains(
    const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "missing '" << part << "' in: " << message;
  }
}

TEST(JobConfig, DefaultsWithEmptyPath) {
  const JobConfig c = load_job_config("");
  EXPECT_EQ(c.builder, "auto");
  EXPECT_EQ(c.model.name, "llama3");
  EXPECT_EQ(c.training.steps, 10000);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 8e-4);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_FALSE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_EQ(c.comm.backend, "auto");
  EXPECT_TRUE(c.origins.empty());
  EXPECT_EQ(c.origin("training.steps"), "");
}

TEST(JobConfig, EmptyFileAndEmptySectionsKeepDefaults) {
  EXPECT_EQ(load_job_config(write_yaml("", "_empty")).training.seq_len, 2048);
  const JobConfig c = load_job_config(write_yaml("job:\ntraining:\n"));
  EXPECT_EQ(c.training.seq_len, 2048);
  EXPECT_EQ(c.job.dump_folder, "./outputs");
}

TEST(JobConfig, LaterFilesOverrideEarlierOnesKeyByKey) {
  const std::string base = write_yaml(
      "training:\n  seq_len: 128\n  local_batch_size: 4\n"
      "parallelism:\n  pipeline_parallel_degree: 2\n",
      "_base");
  const std::string overlay =
      write_yaml("training:\n  local_batch_size: 16\n", "_overlay");
  const JobConfig c = load_job_config({base, overlay}, {});
  EXPECT_EQ(c.training.local_batch_size, 16);
  EXPECT_EQ(c.training.seq_len, 128);
  EXPECT_EQ(c.parallelism.pipeline_parallel_degree, 2);
  EXPECT_EQ(c.origin("training.local_batch_size"), overlay + ":2");
  EXPECT_EQ(c.origin("training.seq_len"), base + ":2");
  // Overrides still come last; a key twice in one file is still refused.
  EXPECT_EQ(
      load_job_config({base, overlay}, {"training.local_batch_size=2"})
          .training.local_batch_size,
      2);
  const std::string twice =
      write_yaml("training:\n  seq_len: 128\n  seq_len: 64\n", "_twice");
  EXPECT_NE(load_error(twice).find("duplicate key"), std::string::npos);
}

TEST(JobConfig, LoadsFullFile) {
  const std::string path = write_yaml(
      "builder: default\n"
      "job:\n"
      "  dump_folder: /tmp/run1\n"
      "  description: debug run\n"
      "model:\n"
      "  name: llama3\n"
      "  flavor: 8B\n"
      "  tokenizer: BYTES\n"
      "optimizer:\n"
      "  lr: 3e-4\n"
      "  betas: [0.8, 0.99]\n"
      "  eps: 1.0e-6\n"
      "  weight_decay: 0\n"
      "lr_scheduler:\n"
      "  warmup_steps: 10\n"
      "  decay_ratio: 0.5\n"
      "  decay_type: Cosine\n"
      "  min_lr_factor: 0.1\n"
      "training:\n"
      "  dataset: c4_test\n"
      "  local_batch_size: 4\n"
      "  seq_len: 256\n"
      "  steps: 100\n"
      "  max_norm: 2\n"
      "  gradient_accumulation_steps: 2\n"
      "  seed: +42\n"
      "  deterministic: True\n"
      "  num_threads: 3\n"
      "parallelism:\n"
      "  pipeline_parallel_schedule: interleaved1f1b\n"
      "  pipeline_parallel_module_fqns_per_stage: []\n"
      "checkpoint:\n"
      "  interval: 50\n"
      "  export_dtype: bfloat16\n"
      "metrics:\n"
      "  log_freq: 1\n"
      "  jsonl: false\n"
      "  peak_tflops: 989.5\n"
      "comm:\n"
      "  backend: GLOO\n"
      "  train_timeout_seconds: 30\n");
  // The tokenizer registry lives in data/, which config may not use: a
  // stand-in holds the names the check matches against.
  Registry<int> tokenizers("tokenizer");
  for (const char* name : {"bytes", "sentencepiece", "tiktoken"}) {
    tokenizers.add(name, 0, "stand-in");
  }
  const JobConfig c = load_job_config(path);
  EXPECT_EQ(c.builder, "default");
  EXPECT_EQ(c.job.dump_folder, "/tmp/run1");
  EXPECT_EQ(c.job.description, "debug run");
  EXPECT_EQ(c.model.flavor, "8B");
  EXPECT_EQ(c.model.tokenizer, "bytes");  // canonical spelling
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.8, 0.99}));
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 10);
  ASSERT_TRUE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_DOUBLE_EQ(*c.lr_scheduler.decay_ratio, 0.5);
  EXPECT_EQ(c.lr_scheduler.decay_type, "cosine");
  EXPECT_DOUBLE_EQ(c.lr_scheduler.min_lr_factor, 0.1);
  EXPECT_EQ(c.training.dataset, "c4_test");
  EXPECT_EQ(c.training.local_batch_size, 4);
  EXPECT_EQ(c.training.seq_len, 256);
  EXPECT_EQ(c.training.steps, 100);
  EXPECT_DOUBLE_EQ(c.training.max_norm, 2.0);  // an int into a double
  EXPECT_EQ(c.training.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.training.seed, 42);
  EXPECT_TRUE(c.training.deterministic);
  EXPECT_EQ(c.training.num_threads, 3);
  EXPECT_EQ(c.parallelism.pipeline_parallel_schedule, "interleaved1f1b");
  EXPECT_TRUE(c.parallelism.pipeline_parallel_module_fqns_per_stage.empty());
  EXPECT_EQ(c.checkpoint.interval, 50);
  EXPECT_EQ(c.checkpoint.export_dtype, "bfloat16");
  EXPECT_EQ(c.metrics.log_freq, 1);
  EXPECT_FALSE(c.metrics.jsonl);
  EXPECT_DOUBLE_EQ(c.metrics.peak_tflops, 989.5);
  EXPECT_EQ(c.comm.backend, "gloo");
  EXPECT_EQ(c.comm.train_timeout_seconds, 30);
  // Keys the file does not name keep their defaults.
  EXPECT_EQ(c.comm.init_timeout_seconds, 300);
  EXPECT_EQ(c.checkpoint.folder, "checkpoint");
}

TEST(JobConfig, RejectsNonIntegers) {
  const std::string path =
      write_yaml("training:\n  seq_len: 16\n  steps: ten\n");
  EXPECT_THROW(load_job_config(path), ConfigError);
  EXPECT_EQ(
      load_error(path),
      path +
          ":3: training.steps: 'ten' is not an integer; allowed: an integer "
          ">= 1");
  expect_contains(
      load_error(write_yaml("training:\n  steps: 1.5\n", "_float")),
      {":2: training.steps: '1.5' is not an integer"});
  expect_contains(
      load_error(write_yaml("training:\n  steps:\n", "_null")),
      {"training.steps: null is not an integer"});
  expect_contains(
      load_error(
          write_yaml("training:\n  seed: 99999999999999999999\n", "_big")),
      {"training.seed: 99999999999999999999 is out of range"});
}

TEST(JobConfig, RejectsWrongTypes) {
  expect_contains(
      load_error(write_yaml("optimizer:\n  lr: fast\n", "_number")),
      {":2: optimizer.lr: 'fast' is not a number; allowed: a number > 0"});
  expect_contains(
      load_error(write_yaml("optimizer:\n  lr: .nan\n", "_nan")),
      {"optimizer.lr: '.nan' is not a number"});
  expect_contains(
      load_error(write_yaml("training:\n  deterministic: yes\n", "_bool")),
      {"training.deterministic: 'yes' is not a boolean; allowed: true or "
       "false"});
  expect_contains(
      load_error(write_yaml("training:\n  dataset: [a, b]\n", "_string")),
      {"training.dataset: a list is not a string; allowed: a string"});
  expect_contains(
      load_error(write_yaml("builder: {a: 1}\n", "_builder")),
      {":1: builder: a map is not a string"});
  expect_contains(
      load_error(write_yaml("optimizer:\n  betas: 0.9\n", "_list")),
      {"optimizer.betas: '0.9' is not a list; allowed: a list of 2 numbers "
       "each >= 0 and < 1"});
  expect_contains(
      load_error(write_yaml(
          "parallelism:\n"
          "  pipeline_parallel_module_fqns_per_stage: [[a], 5]\n",
          "_lists")),
      {":2: parallelism.pipeline_parallel_module_fqns_per_stage[1]: '5' is "
       "not a list; allowed: a list of lists of strings"});
}

TEST(JobConfig, RejectsOutOfRange) {
  const std::string path = write_yaml("training:\n  seq_len: -5\n");
  EXPECT_EQ(
      load_error(path),
      path +
          ":2: training.seq_len: -5 is out of range; allowed: an integer "
          ">= 1");
  expect_contains(
      load_error(write_yaml("optimizer:\n  lr: 0\n", "_exclusive")),
      {"optimizer.lr: 0 is out of range; allowed: a number > 0"});
  expect_contains(
      load_error(write_yaml("lr_scheduler:\n  min_lr_factor: 1.5\n", "_in")),
      {"lr_scheduler.min_lr_factor: 1.5 is out of range; allowed: a number "
       "in [0, 1]"});
  expect_contains(
      load_error(write_yaml("lr_scheduler:\n  decay_ratio: 2\n", "_opt")),
      {"lr_scheduler.decay_ratio: 2 is out of range; allowed: a number in "
       "[0, 1], or null"});
  expect_contains(
      load_error(write_yaml("optimizer:\n  betas: [0.9, 1.0]\n", "_elem")),
      {":2: optimizer.betas[1]: 1.0 is out of range; allowed: a list of 2 "
       "numbers each >= 0 and < 1"});
  expect_contains(
      load_error(write_yaml("optimizer:\n  betas: [0.9]\n", "_len")),
      {"optimizer.betas: a list of 1 elements has the wrong length; allowed: "
       "a list of 2 numbers"});
}

TEST(JobConfig, RejectsValueOutsideChoicesWithSuggestion) {
  const std::string path =
      write_yaml("lr_scheduler:\n  warmup_steps: 1\n  decay_type: cosin\n");
  EXPECT_EQ(
      load_error(path),
      path +
          ":3: lr_scheduler.decay_type: 'cosin' is not allowed; allowed: one "
          "of linear, sqrt, cosine; did you mean 'cosine'?");
  const std::string far =
      load_error(write_yaml("comm:\n  backend: mpi\n", "_far"));
  expect_contains(
      far,
      {"comm.backend: 'mpi' is not allowed; allowed: one of "
       "auto, gloo, nccl"});
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
}

TEST(JobConfig, MixedPrecisionDtypesAreChoicesNamingTheKey) {
  const JobConfig defaults = load_job_config("");
  EXPECT_EQ(defaults.training.mixed_precision_param, "auto");
  EXPECT_EQ(defaults.training.mixed_precision_reduce, "float32");
  const JobConfig set = load_job_config(
      "",
      {"training.mixed_precision_param=BFloat16",
       "training.mixed_precision_reduce=bfloat16"});
  EXPECT_EQ(set.training.mixed_precision_param, "bfloat16");
  EXPECT_EQ(set.training.mixed_precision_reduce, "bfloat16");
  expect_contains(
      load_error("", {"training.mixed_precision_param=fp16"}),
      {"training.mixed_precision_param: 'fp16' is not allowed; allowed: one "
       "of auto, bfloat16, float32"});
  const std::string path =
      write_yaml("training:\n  mixed_precision_reduce: auto\n");
  expect_contains(
      load_error(path),
      {path + ":2: training.mixed_precision_reduce: 'auto' is not allowed; "
              "allowed: one of float32, bfloat16"});
}

TEST(JobConfig, UnknownKeySuggestsNearMiss) {
  const std::string path = write_yaml("training:\n  seq_len: 16\n  stpes: 5\n");
  EXPECT_THROW(load_job_config(path), ConfigError);
  EXPECT_EQ(
      load_error(path),
      path +
          ":3: unknown key 'training.stpes'; did you mean 'training.steps'?");
}

TEST(JobConfig, UnknownKeySuggestsOtherSection) {
  const std::string path = write_yaml("model:\n  steps: 5\n");
  EXPECT_EQ(
      load_error(path),
      path + ":2: unknown key 'model.steps'; did you mean 'training.steps'?");
}

TEST(JobConfig, UnknownKeyWithoutSuggestionListsKeys) {
  const std::string message = load_error(write_yaml("comm:\n  zzzzzzzz: 1\n"));
  expect_contains(
      message,
      {":2: unknown key 'comm.zzzzzzzz'; allowed: one of backend, "
       "init_timeout_seconds, train_timeout_seconds"});
}

TEST(JobConfig, UnknownSectionSuggestsSection) {
  const std::string path =
      write_yaml("job:\n  description: x\ntrainng:\n  steps: 5\n");
  EXPECT_EQ(
      load_error(path),
      path + ":3: unknown section 'trainng'; did you mean 'training'?");
  // A key that lost its section.
  expect_contains(
      load_error(write_yaml("seq_len: 5\n", "_bare")),
      {":1: unknown section 'seq_len'; did you mean 'training.seq_len'?"});
  expect_contains(
      load_error(write_yaml("qqqqqqqq: 5\n", "_far")),
      {"unknown section 'qqqqqqqq'; allowed: one of builder, plugins, job, "
       "model"});
}

TEST(JobConfig, ATabOrAMisspeltPathIsNamed) {
  namespace fs = std::filesystem;
  // yaml-cpp says "illegal map value" or the like; the error names the tab.
  const std::string tab =
      write_yaml("job:\n  description: x\ntraining:\n\tsteps: 5\n", "_tab");
  expect_contains(
      load_error(tab),
      {tab + ":4: invalid YAML: a tab in the indentation (yaml-cpp: ",
       "allowed: spaces, YAML does not indent with tabs"});
  // A misspelt file: the closest file of its folder.
  const fs::path dir = fs::path(::testing::TempDir()) / "config_paths";
  fs::create_directories(dir);
  std::ofstream(dir / "debug_model.yaml") << "job:\n  description: x\n";
  const std::string typo = (dir / "debug_modle.yaml").string();
  EXPECT_EQ(
      load_error(typo),
      typo +
          ": cannot read the config file; allowed: a readable YAML file; did "
          "you mean '" +
          (dir / "debug_model.yaml").string() + "'?");
  const std::string nowhere = (dir / "nowhere" / "run.yaml").string();
  EXPECT_EQ(
      load_error(nowhere),
      nowhere + ": cannot read the config file: the folder " +
          (dir / "nowhere").string() +
          " does not exist; allowed: a readable YAML file");
  EXPECT_EQ(
      load_error(dir.string()),
      dir.string() +
          ": is a folder, not a config file; allowed: a readable YAML file");
}

TEST(JobConfig, PluginsAreRelativeToTheFileOrTheWorkingFolder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "plugins_key" / "sub";
  fs::create_directories(dir);
  const std::string path = (dir / "run.yaml").string();
  // The plugins' own section is unknown until they are loaded: plugin_paths
  // reads the key alone.
  std::ofstream(path) << "plugins: [../libmine.so, /opt/abs.so]\n"
                      << "mine:\n  degree: 2\n";
  const auto want = std::vector<std::string>{
      (dir.parent_path() / "libmine.so").string(), "/opt/abs.so"};
  EXPECT_EQ(plugin_paths({path}, {}), want);
  // An override's are relative to the working folder, and win.
  EXPECT_EQ(
      plugin_paths({path}, {"plugins=[x.so]"}),
      std::vector<std::string>{(fs::current_path() / "x.so").string()});
  EXPECT_TRUE(plugin_paths({}, {}).empty());
  // Loaded (without the section), they are absolute and printed so.
  std::ofstream(path) << "plugins: [../libmine.so]\n";
  const JobConfig c = load_job_config(path);
  EXPECT_EQ(c.plugins, std::vector<std::string>{want[0]});
  EXPECT_EQ(c.origin("plugins"), path + ":1");
  expect_contains(
      job_config_to_yaml(c),
      {"plugins: [" + want[0] + "]  # shared libraries"});
  // Not a list of paths.
  std::ofstream(path) << "plugins: {a: 1}\n";
  expect_contains(load_error(path), {path + ":1: plugins: "});
  try {
    plugin_paths({path}, {});
    ADD_FAILURE() << "plugin_paths accepted a map";
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {path + ":1: plugins: "});
  }
  expect_contains(
      load_error("", {"plugins=['']"}),
      {"--plugins=['']: plugins: an empty path; allowed: paths of shared "
       "libraries"});
}

TEST(JobConfig, RejectsMalformedStructure) {
  const std::string section = write_yaml("job: {}\ntraining: 5\n", "_section");
  EXPECT_THROW(load_job_config(section), ConfigError);
  expect_contains(
      load_error(section),
      {section + ":2: training: '5' is not a map; allowed: a map of training "
                 "keys"});
  const std::string top = write_yaml("- a\n- b\n", "_top");
  expect_contains(load_error(top), {top + ":1: the top level is a list"});
  const std::string dup =
      write_yaml("training:\n  steps: 5\n  steps: 6\n", "_dup");
  expect_contains(
      load_error(dup),
      {dup + ":3: duplicate key 'training.steps' (first set at " + dup +
       ":2)"});
}

TEST(JobConfig, ReportsYamlSyntaxErrorWithLine) {
  const std::string path =
      write_yaml("training:\n  steps: 5\n  seq_len: 1: 2\n");
  EXPECT_THROW(load_job_config(path), ConfigError);
  EXPECT_EQ(load_error(path), path + ":3: invalid YAML: illegal map value");
  const std::string unclosed =
      write_yaml("optimizer:\n  betas: [0.9, 0.95\n", "_unclosed");
  expect_contains(load_error(unclosed), {unclosed + ":", ": invalid YAML: "});
}

TEST(JobConfig, RejectsUnreadableFile) {
  const std::string path = ::testing::TempDir() + "baton_no_such_file.yaml";
  EXPECT_THROW(load_job_config(path), ConfigError);
  expect_contains(load_error(path), {path, "cannot read"});
  expect_contains(
      load_error(::testing::TempDir()), {"is a folder, not a config file"});
}

TEST(JobConfig, AppliesOverridesAfterFile) {
  const std::string path = write_yaml("training:\n  steps: 100\n");
  const JobConfig c = load_job_config(
      path,
      {"training.steps=50",
       "lr_scheduler.warmup_steps=5",
       "optimizer.betas=[0.8,0.9]",
       "lr_scheduler.decay_type=Cosine",
       "job.description=a: b # not a comment",
       "training.dataset=123",
       "builder=pipeline",
       "--training.deterministic=true"});
  EXPECT_EQ(c.training.steps, 50);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 5);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.8, 0.9}));
  EXPECT_EQ(c.lr_scheduler.decay_type, "cosine");
  EXPECT_EQ(c.job.description, "a: b # not a comment");
  EXPECT_EQ(c.training.dataset, "123");
  EXPECT_EQ(c.builder, "pipeline");
  EXPECT_TRUE(c.training.deterministic);
}

TEST(JobConfig, OverrideNullUnsetsDecayRatio) {
  const std::string path =
      write_yaml("lr_scheduler:\n  warmup_steps: 1\n  decay_ratio: 0.2\n");
  EXPECT_TRUE(load_job_config(path).lr_scheduler.decay_ratio.has_value());
  const JobConfig c = load_job_config(path, {"lr_scheduler.decay_ratio=null"});
  EXPECT_FALSE(c.lr_scheduler.decay_ratio.has_value());
  EXPECT_EQ(
      c.origin("lr_scheduler.decay_ratio"), "--lr_scheduler.decay_ratio=null");
}

TEST(JobConfig, RejectsBadOverrideValues) {
  EXPECT_THROW(load_job_config("", {"training.steps=ten"}), ConfigError);
  EXPECT_EQ(
      load_error("", {"training.steps=ten"}),
      "--training.steps=ten: training.steps: 'ten' is not an integer; "
      "allowed: an integer >= 1");
  EXPECT_EQ(
      load_error("", {"training.seq_len=0"}),
      "--training.seq_len=0: training.seq_len: 0 is out of range; allowed: "
      "an integer >= 1");
  expect_contains(
      load_error("", {"optimizer.betas=[0.9,0.95,0.99]"}),
      {"--optimizer.betas=[0.9,0.95,0.99]: optimizer.betas: a list of 3 "
       "elements has the wrong length"});
  expect_contains(
      load_error("", {"optimizer.betas=[0.9"}),
      {"--optimizer.betas=[0.9: optimizer.betas: '[0.9' is not valid YAML"});
  expect_contains(
      load_error("", {"comm.backend=ncl"}),
      {"--comm.backend=ncl: comm.backend: 'ncl' is not allowed",
       "did you mean 'nccl'?"});
}

TEST(JobConfig, RejectsUnknownOverrideKeys) {
  EXPECT_EQ(
      load_error("", {"training.stpes=5"}),
      "--training.stpes=5: unknown key 'training.stpes'; did you mean "
      "'training.steps'?");
  EXPECT_EQ(
      load_error("", {"model.steps=5"}),
      "--model.steps=5: unknown key 'model.steps'; did you mean "
      "'training.steps'?");
  EXPECT_EQ(
      load_error("", {"trainng.steps=5"}),
      "--trainng.steps=5: unknown section 'trainng'; did you mean "
      "'training'?");
  expect_contains(
      load_error("", {"steps=5"}),
      {"--steps=5: unknown section 'steps'; did you mean 'training.steps'?"});
}

TEST(JobConfig, RejectsMalformedOverrides) {
  EXPECT_THROW(load_job_config("", {"training.steps"}), ConfigError);
  expect_contains(
      load_error("", {"training.steps"}),
      {"--training.steps: malformed override", "--SECTION.KEY=VALUE"});
  expect_contains(
      load_error("", {"=5"}), {"--=5: malformed override (no key)"});
  expect_contains(
      load_error("", {"training=5"}),
      {"'training' is a section", "--training.KEY=VALUE"});
}

TEST(JobConfig, WarmupBeyondStepsIsAWarningNotAnError) {
  // A five-step smoke run of a config made for more: torchtitan warns and
  // goes on, and so does Baton (the builder logs the warning).
  const std::string path = write_yaml(
      "training:\n  steps: 100\nlr_scheduler:\n  warmup_steps: 200\n");
  JobConfig c;
  ASSERT_NO_THROW(c = load_job_config(path));
  const auto warning = c.lr_scheduler.phases_warning(c.training.steps);
  ASSERT_TRUE(warning.has_value());
  EXPECT_EQ(warning->key, "lr_scheduler.warmup_steps");
  expect_contains(
      warning->message,
      {"lr_scheduler.warmup_steps: 200 exceeds training.steps 100",
       "step s at s / 200 of optimizer.lr"});
  EXPECT_FALSE(c.lr_scheduler.phases_problem(c.training.steps).has_value());
  EXPECT_EQ(c.lr_scheduler.decay_steps(c.training.steps), 0);
  // With a decay_ratio too: warmup takes the whole run, nothing decays.
  c = load_job_config(path, {"lr_scheduler.decay_ratio=0.5"});
  EXPECT_FALSE(c.lr_scheduler.phases_problem(c.training.steps).has_value());
  EXPECT_EQ(c.lr_scheduler.decay_steps(c.training.steps), 0);
  // Warmup equal to steps, or shorter, warns of nothing.
  for (const char* warmup : {"100", "10"}) {
    c = load_job_config(
        path, {std::string("lr_scheduler.warmup_steps=") + warmup});
    EXPECT_FALSE(c.lr_scheduler.phases_warning(c.training.steps).has_value())
        << warmup;
  }
}

TEST(JobConfig, RejectsDecayRatioBeyondRemainingSteps) {
  const std::string path = write_yaml(
      "training:\n  steps: 100\n"
      "lr_scheduler:\n  warmup_steps: 60\n  decay_ratio: 0.5\n");
  expect_contains(
      load_error(path),
      {path + ":5: lr_scheduler.decay_ratio: 0.5 gives 50 decay steps",
       "training.steps 100",
       "allowed: at most 0.4"});
  EXPECT_NO_THROW(load_job_config(path, {"lr_scheduler.decay_ratio=0.4"}));
}

TEST(JobConfig, ValidationNeedsHeldOutData) {
  const std::string path =
      write_yaml("training:\n  dataset_path: train.jsonl\n");
  expect_contains(
      load_error(path, {"validation.enable=true"}),
      {"--validation.enable=true: validation.dataset_path: empty",
       "allowed: a held-out file"});
  expect_contains(
      load_error(
          path,
          {"validation.enable=true", "validation.dataset_path=train.jsonl"}),
      {"--validation.dataset_path=train.jsonl: validation.dataset_path: "
       "'train.jsonl' is the training data"});
  const JobConfig c = load_job_config(
      path,
      {"validation.enable=true",
       "validation.dataset_path=held_out.jsonl",
       "validation.freq=50",
       "validation.steps=4"});
  EXPECT_EQ(c.validation.freq, 50);
  EXPECT_EQ(c.validation.steps, 4);
  expect_contains(
      load_error(path, {"validation.freq=0"}),
      {"validation.freq: 0 is out of range"});
  // Off, nothing is asked of it.
  EXPECT_NO_THROW(load_job_config(path, {"validation.steps=3"}));
}

TEST(JobConfig, RejectsTwoInferredDegrees) {
  // A degree a parallelism registers into the section (as tensor parallel
  // does) joins the check.
  register_config_section(
      "parallelism",
      {{"test_parallel_degree",
        int64_t{1},
        FieldSpec("test ranks").mesh_degree()}});
  const std::string message = load_error(
      "",
      {"parallelism.data_parallel_shard_degree=-1",
       "parallelism.test_parallel_degree=-1"});
  EXPECT_EQ(
      message,
      "--parallelism.test_parallel_degree=-1: "
      "parallelism.test_parallel_degree: -1 conflicts with "
      "parallelism.data_parallel_shard_degree -1; allowed: -1 in at most one "
      "parallelism degree");
  EXPECT_NE(
      job_config_to_yaml(load_job_config("", {}))
          .find("  test_parallel_degree: 1  # test ranks"),
      std::string::npos);
  // A built-in section other than parallelism, or a built-in key, is not
  // for registering.
  EXPECT_THROW(
      register_config_section("training", {{"x", int64_t{1}, FieldSpec("x")}}),
      std::logic_error);
  EXPECT_THROW(
      register_config_section(
          "parallelism", {{"appliers", int64_t{1}, FieldSpec("x")}}),
      std::logic_error);
  EXPECT_NO_THROW(
      load_job_config("", {"parallelism.data_parallel_shard_degree=-1"}));
}

TEST(JobConfig, AcceptsTensorBoard) {
  const std::string path =
      write_yaml("metrics:\n  log_freq: 5\n  tensorboard: true\n");
  EXPECT_TRUE(load_job_config(path).metrics.tensorboard);
  EXPECT_TRUE(
      load_job_config("", {"metrics.tensorboard=true"}).metrics.tensorboard);
  EXPECT_FALSE(load_job_config("").metrics.tensorboard);
}

TEST(JobConfig, ActivationCheckpointValuesAreCheckedByName) {
  const std::string path = write_yaml(
      "activation_checkpoint:\n  mode: selective\n  selective: ops\n", "_ac");
  expect_contains(
      load_error(path),
      {path + ":3: activation_checkpoint.selective: 'ops'", "op"});
  expect_contains(
      load_error("", {"activation_checkpoint.mode=partial"}),
      {"--activation_checkpoint.mode=partial: activation_checkpoint.mode",
       "none",
       "full",
       "selective"});
  expect_contains(
      load_error("", {"activation_checkpoint.selective_every=0"}),
      {"activation_checkpoint.selective_every"});
  const auto ok = load_job_config(
      "",
      {"activation_checkpoint.mode=selective",
       "activation_checkpoint.selective=op"});
  EXPECT_EQ(ok.activation_checkpoint.mode, "selective");
  EXPECT_EQ(ok.activation_checkpoint.selective, "op");
  EXPECT_EQ(ok.activation_checkpoint.selective_every, 2);
}

TEST(JobConfig, RecordsOrigins) {
  const std::string path =
      write_yaml("builder: default\ntraining:\n  seq_len: 16\n  steps: 20\n");
  const JobConfig c = load_job_config(
      path, {"training.steps=30", "lr_scheduler.warmup_steps=3"});
  EXPECT_EQ(c.origin("builder"), path + ":1");
  EXPECT_EQ(c.origin("training.seq_len"), path + ":3");
  EXPECT_EQ(c.origin("training.steps"), "--training.steps=30");
  EXPECT_EQ(c.origin("training.seed"), "");
  EXPECT_EQ(
      c.origin("lr_scheduler.warmup_steps"), "--lr_scheduler.warmup_steps=3");
  EXPECT_EQ(c.origins.size(), 4u);
}

TEST(JobConfig, PrintsEveryKeyAndNullForUnset) {
  const std::string yaml = job_config_to_yaml(load_job_config(""));
  expect_contains(
      yaml,
      {"builder: auto",
       "lr: 0.0008",
       "eps: 1e-08",
       "betas: [0.9, 0.95]",
       "decay_ratio: null",
       "description: \"\"",
       "train_timeout_seconds: 100"});
  // builder first, then the sections in visit order.
  EXPECT_EQ(yaml.rfind("builder:", 0), 0u) << yaml;
  EXPECT_LT(yaml.find("\njob:"), yaml.find("\nmodel:"));
  EXPECT_LT(yaml.find("\nmetrics:"), yaml.find("\ncomm:"));
}

TEST(JobConfig, PrintLoadRoundTrip) {
  const JobConfig original = load_job_config(
      "",
      {"builder=true",
       "job.description=123",
       "job.dump_folder=null",
       "optimizer.lr=3e-4",
       "optimizer.eps=1e-20",
       "optimizer.betas=[0.1, 0.30000000000000004]",
       "lr_scheduler.decay_ratio=0.1",
       "lr_scheduler.decay_type=SQRT",
       "training.dataset=1F1B",
       "training.steps=1000",
       "training.max_norm=0.3",
       "training.deterministic=true",
       "metrics.peak_tflops=1e20",
       "checkpoint.load_step=-1"});
  const std::string yaml = job_config_to_yaml(original);
  const JobConfig loaded = load_job_config(write_yaml(yaml));
  EXPECT_EQ(job_config_to_yaml(loaded), yaml);
  EXPECT_EQ(loaded.builder, "true");
  EXPECT_EQ(loaded.job.description, "123");
  EXPECT_EQ(loaded.job.dump_folder, "null");
  EXPECT_EQ(loaded.optimizer.lr, original.optimizer.lr);
  EXPECT_EQ(loaded.optimizer.eps, original.optimizer.eps);
  EXPECT_EQ(loaded.optimizer.betas, original.optimizer.betas);
  EXPECT_EQ(loaded.lr_scheduler.decay_ratio, original.lr_scheduler.decay_ratio);
  EXPECT_EQ(loaded.training.max_norm, original.training.max_norm);
  EXPECT_EQ(loaded.metrics.peak_tflops, 1e20);

  const std::string defaults = job_config_to_yaml(load_job_config(""));
  EXPECT_EQ(
      job_config_to_yaml(load_job_config(write_yaml(defaults, "_defaults"))),
      defaults);
}

TEST(JobConfig, NamesAreCheckedAgainstTheirRegistry) {
  // Stand-ins for registries of folders config may not use; any registry of
  // that kind in the process is what the names are matched against.
  Registry<int> optimizers("optimizer");
  optimizers.add("AdamW", 0, "stand-in");
  optimizers.add("Lion", 0, "stand-in");
  // A registered optimizer passes, in any case, and takes its spelling.
  EXPECT_EQ(
      load_job_config("", {"optimizer.name=Lion"}).optimizer.name, "Lion");
  EXPECT_EQ(
      load_job_config("", {"optimizer.name=adamw"}).optimizer.name, "AdamW");
  const std::string path = write_yaml("optimizer:\n  name: Adam\n");
  EXPECT_EQ(
      load_error(path),
      path +
          ":2: optimizer.name: 'Adam' is not a registered optimizer; allowed: "
          "one of AdamW, Lion; did you mean 'AdamW'?");
  // A kind with no registry in the process is left to the build's look-up.
  EXPECT_EQ(
      load_job_config("", {"lr_scheduler.name=step_decay"}).lr_scheduler.name,
      "step_decay");
  Registry<int> schedules("lr schedule");
  schedules.add("warmup_stable_decay", 0, "stand-in");
  expect_contains(
      load_error("", {"lr_scheduler.name=step_decay"}),
      {"--lr_scheduler.name=step_decay: lr_scheduler.name: 'step_decay' is "
       "not a registered lr schedule; allowed: one of warmup_stable_decay"});
}

TEST(JobConfig, AppliersAreAListOfRegisteredNames) {
  EXPECT_TRUE(load_job_config("").parallelism.appliers.empty());
  const std::string path =
      write_yaml("parallelism:\n  appliers: [scale_grads, noise]\n");
  EXPECT_EQ(
      load_job_config(path).parallelism.appliers,
      (std::vector<std::string>{"scale_grads", "noise"}));
  EXPECT_EQ(
      load_job_config("", {"parallelism.appliers=[a]"}).parallelism.appliers,
      (std::vector<std::string>{"a"}));
  EXPECT_EQ(
      load_error("", {"parallelism.appliers=scale_grads"}),
      "--parallelism.appliers=scale_grads: parallelism.appliers: "
      "'scale_grads' is not a list; allowed: a list of strings");
  expect_contains(
      load_error("", {"parallelism.appliers=[[a]]"}),
      {"parallelism.appliers[0]: a list is not a string"});
  Registry<int> appliers("applier");
  appliers.add("scale_grads", 0, "stand-in");
  expect_contains(
      load_error(path),
      {path + ":2: parallelism.appliers: 'noise' is not a registered applier",
       "allowed: one of scale_grads"});
  // --print-config writes the list back loadably.
  const JobConfig c =
      load_job_config("", {"parallelism.appliers=[Scale_Grads]"});
  EXPECT_EQ(c.parallelism.appliers, (std::vector<std::string>{"scale_grads"}));
  const std::string yaml = job_config_to_yaml(c);
  expect_contains(yaml, {"appliers: [scale_grads]"});
  EXPECT_EQ(
      load_job_config(write_yaml(yaml, "_printed")).parallelism.appliers,
      c.parallelism.appliers);
}

TEST(JobConfig, ActivationCheckpointStagesAreDistinctStagesOfThePipeline) {
  const auto ok = load_job_config(
      "",
      {"activation_checkpoint.mode=full",
       "activation_checkpoint.stages=[0, 2]",
       "parallelism.pipeline_parallel_degree=2",
       "parallelism.pipeline_parallel_stages_per_rank=2"});
  EXPECT_EQ(ok.activation_checkpoint.stages, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(load_job_config("").activation_checkpoint.stages.empty());
  // Without pipelining the one stage is 0.
  EXPECT_EQ(
      load_job_config("", {"activation_checkpoint.stages=[0]"})
          .activation_checkpoint.stages,
      (std::vector<int64_t>{0}));
  const std::string twice = write_yaml(
      "parallelism:\n  pipeline_parallel_degree: 2\n"
      "activation_checkpoint:\n  mode: full\n  stages: [1, 1]\n",
      "_twice");
  expect_contains(
      load_error(twice),
      {twice + ":5: activation_checkpoint.stages: stage 1 is listed twice",
       "allowed: distinct"});
  expect_contains(
      load_error(
          "",
          {"parallelism.pipeline_parallel_degree=2",
           "activation_checkpoint.stages=[2]"}),
      {"--activation_checkpoint.stages=[2]: activation_checkpoint.stages: "
       "stage 2 is out of range for 2 stages; allowed: global stage indices "
       "in [0, 1]"});
  expect_contains(
      load_error("", {"activation_checkpoint.stages=[1]"}),
      {"activation_checkpoint.stages: stage 1 is out of range for 1 stage"});
  expect_contains(
      load_error("", {"activation_checkpoint.stages=[-1]"}),
      {"activation_checkpoint.stages[0]: -1 is out of range",
       "a list of integers each >= 0"});
  expect_contains(
      load_error("", {"activation_checkpoint.stages=[first]"}),
      {"activation_checkpoint.stages[0]: 'first' is not an integer"});
  expect_contains(
      load_error("", {"activation_checkpoint.stages=0"}),
      {"activation_checkpoint.stages: '0' is not a list"});
  // An inferred degree leaves the range to the builders and the dry run.
  EXPECT_NO_THROW(load_job_config(
      "",
      {"parallelism.pipeline_parallel_degree=-1",
       "activation_checkpoint.stages=[5]"}));
}

TEST(JobConfig, DegreesAreCheckedBeforeTheWorldSizeIsKnown) {
  EXPECT_EQ(
      load_error("", {"parallelism.pipeline_parallel_degree=0"}),
      "--parallelism.pipeline_parallel_degree=0: "
      "parallelism.pipeline_parallel_degree: 0 is out of range; allowed: an "
      "integer >= 1, or -1 for the rest");
  expect_contains(
      load_error(
          "",
          {"parallelism.data_parallel_replicate_degree=-1",
           "parallelism.pipeline_parallel_degree=-1"}),
      {"--parallelism.pipeline_parallel_degree=-1: "
       "parallelism.pipeline_parallel_degree: -1 conflicts with "
       "parallelism.data_parallel_replicate_degree -1"});
}

}  // namespace
}  // namespace baton
