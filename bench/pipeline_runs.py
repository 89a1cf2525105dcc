#!/usr/bin/env python3
"""Pipelined training as real processes: peak RSS per rank and pp 2 speed-up.

Trains the debug model (8 x 256 tokens per step) with `baton train`, each
rank a process started here with the torchrun variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), so os.wait4 gives each rank's peak RSS:

- one process with two ATen threads (MKL's follow them);
- pp 2 with GPipe, 1F1B and Interleaved1F1B (2 stages per rank) at the same
  microbatch count, and ZBVZeroBubble, one ATen thread per rank (2 threads
  in all).

Step time and tokens/s are medians of steps 3.. from metrics.jsonl.
Usage: pipeline_runs.py BUILD_DIR OUT.json [--steps N] [--microbatches M]
"""

import argparse
import json
import statistics
import tempfile

import process_runs

COMMON = [
    "--config", "configs/debug_model.yaml",
    "--metrics.log_freq=1", "--metrics.peak_tflops=1",
    "--lr_scheduler.warmup_steps=2",
    "--training.local_batch_size=8", "--training.seq_len=256",
    # float32 on every CPU (precision_runs.py measures bf16).
    "--training.mixed_precision_param=float32",
]


def run(build, name, world, threads, extra, steps, tmp):
    rows, rss_mib, _ = process_runs.train(
        build, name, world,
        COMMON + [f"--training.steps={steps}",
                  f"--training.num_threads={threads}", *extra],
        tmp, threads)
    result = {"name": name, "ranks": world, "threads_per_rank": threads,
              **process_runs.speed(rows), "peak_rss_mib_per_rank": rss_mib}
    if "pipeline_bubble_pct" in rows[0]:
        result["bubble_pct_per_rank"] = [
            statistics.median(r["pipeline_bubble_pct"][i] for r in rows)
            for i in range(len(rows[0]["pipeline_bubble_pct"]))]
    print(json.dumps(result), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=8)
    args = parser.parse_args()
    m = args.microbatches
    pp = ["--parallelism.pipeline_parallel_degree=2",
          f"--parallelism.pipeline_parallel_microbatch_size={8 // m}"]
    runs = []
    with tempfile.TemporaryDirectory(prefix="baton_pipeline_runs_") as tmp:
        runs.append(run(args.build, "single", 1, 2, [], args.steps, tmp))
        for schedule, v in [("GPipe", 1), ("1F1B", 1), ("Interleaved1F1B", 2),
                            ("ZBVZeroBubble", 2)]:
            runs.append(run(
                args.build, f"pp2_{schedule}", 2, 1,
                pp + [f"--parallelism.pipeline_parallel_schedule={schedule}",
                      f"--parallelism.pipeline_parallel_stages_per_rank={v}"],
                args.steps, tmp))
    with open(args.out, "w") as f:
        json.dump({"microbatches": m, "steps": args.steps, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
