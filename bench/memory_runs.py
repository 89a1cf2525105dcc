#!/usr/bin/env python3
"""Activation checkpointing against none, as real processes.

Trains the small flavor (about 25M parameters) in one process on the
machine's cores, 2 x 1024 tokens per step in float32, with `baton train` under each
activation_checkpoint mode:

- none;
- full (every block keeps only its input);
- selective op (every block keeps its matmul and attention outputs);
- selective layer, every 2nd block.

The modes run one after the other in each of three rounds; the report takes
medians over the rounds. Per run: step time and tokens/s (medians of steps
3..), the step's activation peak and tensor peak (the most CPU tensor
memory held at once, less / with what the step began with:
`activation_peak_mib`, `tensor_peak_mib` of metrics.jsonl) and the
process's peak RSS (os.wait4).
Usage: memory_runs.py BUILD_DIR OUT.json [--steps N] [--rounds R]
"""

import argparse
import json
import os
import statistics
import tempfile

import process_runs

SEQ = 1024
COMMON = [
    "--config", "configs/debug_model.yaml", "--model.flavor=small",
    "--metrics.log_freq=1", "--metrics.peak_tflops=1",
    "--lr_scheduler.warmup_steps=2", "--training.local_batch_size=2",
    f"--training.seq_len={SEQ}",
    # float32 on every CPU, so the figures compare across machines
    # (precision_runs.py measures bf16).
    "--training.mixed_precision_param=float32",
]
RUNS = [
    ("none", ["--activation_checkpoint.mode=none"]),
    ("full", ["--activation_checkpoint.mode=full"]),
    ("selective_op", ["--activation_checkpoint.mode=selective",
                      "--activation_checkpoint.selective=op"]),
    ("selective_layer2", ["--activation_checkpoint.mode=selective",
                          "--activation_checkpoint.selective=layer",
                          "--activation_checkpoint.selective_every=2"]),
]


def run(build, name, extra, steps, threads, tmp):
    rows, rss_mib, _ = process_runs.train(
        build, name, 1,
        COMMON + [f"--training.steps={steps}",
                  f"--training.num_threads={threads}", *extra],
        tmp, threads=threads)
    result = {
        "name": name,
        **process_runs.speed(rows),
        "steps_timed": len(rows),
        "activation_peak_mib": max(r["activation_peak_mib"] for r in rows),
        "tensor_peak_mib": max(r["tensor_peak_mib"] for r in rows),
        "peak_rss_mib": rss_mib[0],
        "losses": [r["loss"] for r in rows],
    }
    print(json.dumps(result), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="baton_memory_runs_") as tmp:
        for _ in range(args.rounds):
            rounds.append([run(args.build, name, extra, args.steps,
                               args.threads, tmp)
                           for name, extra in RUNS])
    with open(args.out, "w") as f:
        json.dump({"steps": args.steps, "seq_len": SEQ, "threads": args.threads,
                   "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
