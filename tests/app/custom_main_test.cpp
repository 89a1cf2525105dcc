// A program of its own around the command line (app/run.h,
// tests/app/custom_baton.cpp): an applier it registers before handing over
// is selected by an override, which the stock binary refuses; it doubles the
// gradients, at one process and under `--nproc 2` with pp 2, whose ranks
// run the same program again.

#include <gtest/gtest.h>

#include <string>

#include "tests/baton_binary.h"

namespace baton {
namespace {

using testing::baton_bin;
using testing::fresh_dir;
using testing::read_metrics;
using testing::run_command;
using testing::source_path;

const std::string kRun =
    " --training.steps=2 --training.seq_len=32 --training.local_batch_size=2"
    " --training.mixed_precision_param=float32 --lr_scheduler.warmup_steps=1"
    " --metrics.log_freq=1 --metrics.peak_tflops=1"
    " --checkpoint.model_only_export=false";

/// The first step's grad norm of `program train` with `args`.
double first_grad_norm(const std::string& program, const std::string& args) {
  const auto dump = fresh_dir("custom_main_run");
  const auto r = run_command(
      program + " train --config " + source_path("configs/debug_model.yaml") +
      kRun + args + " --job.dump_folder=" + dump.string());
  EXPECT_EQ(r.code, 0) << r.output;
  const auto lines = read_metrics(dump);
  return lines.empty() ? 0.0 : lines.front()["grad_norm"].get<double>();
}

TEST(CustomMain, AProgramOfItsOwnAddsAnApplierTheConfigSelects) {
  const std::string custom = CUSTOM_BATON_BIN;
  const std::string select = " --parallelism.appliers=[scale_grads]";
  const auto stock = run_command(
      baton_bin() + " train --config " +
      source_path("configs/debug_model.yaml") + kRun + select);
  EXPECT_EQ(stock.code, 2) << stock.output;
  EXPECT_NE(stock.output.find("scale_grads"), std::string::npos)
      << stock.output;
  const double plain = first_grad_norm(baton_bin(), "");
  ASSERT_GT(plain, 0.0);
  EXPECT_NEAR(first_grad_norm(custom, select), 2.0 * plain, 1e-5 * plain);
  EXPECT_NEAR(
      first_grad_norm(
          custom,
          select + " --nproc 2 --parallelism.pipeline_parallel_degree=2"
                   " --parallelism.pipeline_parallel_microbatch_size=1"),
      2.0 * plain,
      1e-5 * plain);
  // Its help is the stock binary's.
  EXPECT_EQ(
      run_command(custom + " --help").output,
      run_command(baton_bin() + " --help").output);
}

}  // namespace
}  // namespace baton
