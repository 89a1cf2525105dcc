#!/usr/bin/env python3
"""Fully sharded data parallel and tensor parallel against replicated data
parallel, as real processes.

Trains the small flavor (about 25M parameters) on two ranks, one ATen and
one MKL thread each, 4 x 256 tokens per rank and step, with `baton
train`, each rank a process started here with the torchrun variables so that
os.wait4 gives each rank's peak RSS:

- dp_replicate 2 (DDP);
- dp_shard 2 (FSDP, gathered parameters freed after forward: the default);
- dp_shard 2 with fsdp_reshard_after_forward=never;
- tp 2 (tensor parallel with sequence parallel: each step trains on half
  the tokens of the data-parallel runs, one global batch of 4 sequences).

The four run one after the other in each of three rounds; the report takes
medians over the rounds. Per run: tokens/s and step time (medians of steps
3..), each rank's parameter, gradient and optimizer-state bytes (the log line
after the first step), peak RSS per rank, and for FSDP the seconds rank 0
waited for gathers and reduce-scatters (the communication not hidden).
Usage: fsdp_runs.py BUILD_DIR OUT.json [--steps N] [--rounds R]
"""

import argparse
import json
import re
import tempfile

import process_runs

COMMON = process_runs.SMALL_ONE_THREAD
RUNS = [
    ("dp_replicate2", ["--parallelism.data_parallel_replicate_degree=2"]),
    ("dp_shard2", ["--parallelism.data_parallel_shard_degree=2"]),
    ("dp_shard2_never", ["--parallelism.data_parallel_shard_degree=2",
                         "--parallelism.fsdp_reshard_after_forward=never"]),
    ("tp2", ["--parallelism.tensor_parallel_degree=2"]),
]
MEMORY = re.compile(r"memory: this rank holds ([0-9.]+) MiB of parameters, "
                    r"([0-9.]+) MiB of gradients and ([0-9.]+) MiB of optimizer")
WAITED = re.compile(r"fully_shard: waited ([0-9.e+-]+) s for gathers and "
                    r"([0-9.e+-]+) s for reduce-scatters")


def run(build, name, extra, steps, tmp):
    rows, rss_mib, text = process_runs.train(
        build, name, 2, COMMON + [f"--training.steps={steps}", *extra], tmp)
    mem = MEMORY.search(text[0])
    result = {
        "name": name,
        **process_runs.speed(rows),
        "steps_timed": len(rows),
        "param_mib": float(mem.group(1)),
        "grad_mib": float(mem.group(2)),
        "optimizer_mib": float(mem.group(3)),
        "peak_rss_mib_per_rank": rss_mib,
    }
    waited = WAITED.search(text[0])
    if waited:
        result["gather_wait_s"] = float(waited.group(1))
        result["reduce_wait_s"] = float(waited.group(2))
    print(json.dumps(result), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="baton_fsdp_runs_") as tmp:
        for _ in range(args.rounds):
            rounds.append([run(args.build, name, extra, args.steps, tmp)
                           for name, extra in RUNS])
    with open(args.out, "w") as f:
        json.dump({"steps": args.steps, "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
