#pragma once

#include "app/cli.h"

namespace baton {

/// Logs the CPU code a run computes with: the BLAS (common/blas.h) and the
/// instruction set of the CPU attention kernel.
void log_cpu_kernels();

/// `baton schedule`: generates (or loads) a schedule, plans it and writes it
/// in the asked format; returns the exit code.
int run_schedule(const ScheduleArgs& args);
/// `baton plan`: ranks the layouts of the world size from a cost file (or
/// from the costs it profiles on this machine first, launching min(N,
/// cores) ranks), writes the chosen one as an overlay and its schedule as
/// an SVG (or, with --write-costs-from-flops / --write-costs, writes a cost
/// file). On the ranks the profile launches (--profile-rank) it profiles.
int run_plan(const PlanArgs& args);
/// `baton tokenizer train`: trains a SentencePiece model on the inputs'
/// texts.
int run_tokenizer_train(const TokenizerTrainArgs& args);
/// `baton data tokenize`: tokenises the inputs into token shards, with a
/// progress report on stderr.
int run_data_tokenize(const DataTokenizeArgs& args);
/// `baton checkpoint inspect`: prints what a checkpoint holds and checks
/// every byte; 1 (the first problem on stderr) when something does not
/// check out.
int run_checkpoint_inspect(const CheckpointInspectArgs& args);
/// `baton generate`: loads a checkpoint or Hugging Face folder into one
/// process and prints the prompt's continuation as it is generated.
int run_generate(const GenerateArgs& args);

}  // namespace baton
