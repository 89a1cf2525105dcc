#!/usr/bin/env python3
"""Scaling efficiency of data and pipeline parallel, as real processes.

Trains the small flavor (about 25M parameters) with `baton train`, one ATen
and one OpenBLAS thread per rank (one core each), 4 x 256 tokens per local
batch, float32:

- one process on one core (the baseline);
- dp_replicate 2 (each rank its own 4 sequences: twice the tokens per step);
- pp 2 under ZBVZeroBubble (2 stages per rank, 4 microbatches of one
  sequence: the baseline's tokens per step, over two ranks).

Efficiency = tokens/s of the two-rank run over twice the baseline's (1.0:
two cores do twice the work of one). The three run one after the other in
each of three rounds; the report takes medians over the rounds (steps 3..).
Usage: scaling_runs.py BUILD_DIR OUT.json [--steps N] [--rounds R]
"""

import argparse
import json
import tempfile

import process_runs

COMMON = process_runs.SMALL_ONE_THREAD
RUNS = [
    ("one", 1, []),
    ("dp_replicate2", 2, ["--parallelism.data_parallel_replicate_degree=2"]),
    ("pp2_zbv", 2, ["--parallelism.pipeline_parallel_degree=2",
                    "--parallelism.pipeline_parallel_schedule=ZBVZeroBubble",
                    "--parallelism.pipeline_parallel_stages_per_rank=2"]),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="baton_scaling_runs_") as tmp:
        for _ in range(args.rounds):
            results = []
            for name, world, extra in RUNS:
                rows, _, _ = process_runs.train(
                    args.build, name, world,
                    COMMON + [f"--training.steps={args.steps}", *extra], tmp)
                result = {"name": name, "ranks": world, **process_runs.speed(rows)}
                print(json.dumps(result), flush=True)
                results.append(result)
            rounds.append(results)
    with open(args.out, "w") as f:
        json.dump({"steps": args.steps, "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
