#!/usr/bin/env python3
"""Context parallel against one process, as real processes.

The debug model (dim 256, 6 layers, 16 heads) in float32, one ATen thread
per rank, one sequence per data-parallel rank and step, with `baton train`:

- seq 8192: one process; cp 2 on two ranks; cp 2 x dp_shard 2 on four
  ranks (two sequences per step);
- seq 16384, full activation checkpointing in every layout (one process
  does not fit 24 GiB otherwise: its attention's saved probabilities alone
  would be 48 GiB): one process; cp 2 on two ranks;
- document masking (training.document_mask): one process at seq 2048
  (with and without) and 8192, cp 2 at 8192.

Per run: step time and tokens/s (medians of steps 3..), rank 0's activation
peak and tensor peak (metrics.jsonl's `activation_peak_mib`,
`tensor_peak_mib`: the most CPU tensor memory the step held at once beyond
what it began with), each rank's peak RSS (os.wait4), and the losses. The
ranks of a run share the machine's cores; on two cores, cp 2's two ranks
have one core each, as the one process has one thread.
Usage: context_parallel_runs.py BUILD_DIR OUT.json [--steps N] [--only NAME...]
(--only: run those alone and replace them in an existing OUT.json, each run
keeping the date it ran)
"""

import argparse
import datetime
import json
import os
import tempfile

import process_runs

COMMON = [
    "--config", "configs/debug_model.yaml",
    "--metrics.log_freq=1", "--metrics.peak_tflops=1",
    "--lr_scheduler.warmup_steps=2", "--training.local_batch_size=1",
    "--training.num_threads=1",
    "--training.mixed_precision_param=float32",
]
RUNS = [
    # (name, seq_len, ranks, cp, extra)
    ("one_8192", 8192, 1, 1, []),
    ("cp2_8192", 8192, 2, 2, []),
    ("cp2_dp2_8192", 8192, 4, 2, []),
    ("one_16384_ac", 16384, 1, 1, ["--activation_checkpoint.mode=full"]),
    ("cp2_16384_ac", 16384, 2, 2, ["--activation_checkpoint.mode=full"]),
    ("one_2048", 2048, 1, 1, []),
    ("docs_2048", 2048, 1, 1, ["--training.document_mask=true"]),
    ("docs_8192", 8192, 1, 1, ["--training.document_mask=true"]),
    ("cp2_docs_8192", 8192, 2, 2, ["--training.document_mask=true"]),
]


def run(build, name, seq, ranks, cp, extra, steps, tmp):
    rows, rss_mib, logs = process_runs.train(
        build, name, ranks,
        COMMON + [f"--training.seq_len={seq}", f"--training.steps={steps}",
                  f"--parallelism.context_parallel_degree={cp}", *extra],
        tmp, threads=1)
    result = {
        "name": name, "seq_len": seq, "ranks": ranks, "cp": cp,
        "dp_shard": ranks // cp,
        "activation_checkpoint":
            "full" if "--activation_checkpoint.mode=full" in extra else "none",
        "documents": "--training.document_mask=true" in extra,
        "date": datetime.date.today().isoformat(),
        **process_runs.speed(rows),
        "steps_timed": len(rows),
        "activation_peak_mib": max(r["activation_peak_mib"] for r in rows),
        "tensor_peak_mib": max(r["tensor_peak_mib"] for r in rows),
        "peak_rss_mib": rss_mib,
        "losses": [r["loss"] for r in rows],
        "blas": process_runs.blas_line(logs[0]),
    }
    print(json.dumps(result), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--only", nargs="+", default=None,
                        choices=[r[0] for r in RUNS])
    args = parser.parse_args()
    previous = {}
    if args.only and os.path.exists(args.out):
        with open(args.out) as f:
            old = json.load(f)
        if old["steps"] != args.steps or old["cpu"] != process_runs.cpu_model():
            raise SystemExit(f"{args.out}: another machine's or step count's runs")
        previous = {r["name"]: r for r in old["runs"]}
    conditions = process_runs.Conditions()
    with tempfile.TemporaryDirectory(prefix="baton_cp_runs_") as tmp:
        fresh = {r[0]: run(args.build, *r, args.steps, tmp) for r in RUNS
                 if not args.only or r[0] in args.only}
    runs = [fresh.get(r[0]) or previous.get(r[0]) for r in RUNS]
    with open(args.out, "w") as f:
        json.dump({"steps": args.steps, "cpu": process_runs.cpu_model(),
                   "conditions": conditions.summary(),
                   "runs": [r for r in runs if r]}, f, indent=1)


if __name__ == "__main__":
    main()
