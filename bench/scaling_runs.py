#!/usr/bin/env python3
"""Scaling efficiency of data and pipeline parallel, as real processes.

Trains the small flavor (about 25M parameters) with `baton train`, one ATen
and one MKL thread per rank, 4 x 256 tokens per local batch, float32:

- one process on one core (the baseline);
- dp_replicate 2 (each rank its own 4 sequences: twice the tokens per step);
- pp 2 under ZBVZeroBubble (2 stages per rank, 4 microbatches of one
  sequence: the baseline's tokens per step, over two ranks).

Efficiency = tokens/s of the two-rank run over twice the baseline's (1.0:
two cores do twice the work of one), taken within each round (the three run
one after the other, each round starting one run further on) and the median
over the rounds reported: on a machine whose speed drifts between minutes a
ratio of runs minutes apart measures the drift.

Every run is `baton train --nproc W`. With --cpu-bind cores (the default)
the launcher starts on the first W whole cores this process may use and
binds each rank to one of them, so the baseline runs on one core and each
of the two ranks on its own, as "one core per rank" says; --cpu-bind none
leaves all of them to the scheduler.
Usage: scaling_runs.py BUILD_DIR OUT.json [--steps N] [--rounds R]
                       [--cpu-bind cores|none]
"""

import argparse
import json
import statistics
import tempfile
import time

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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu-bind", default="cores", choices=["cores", "none"])
    args = parser.parse_args()
    report = {"steps": args.steps, "cpu_bind": args.cpu_bind,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "cpu": process_runs.cpu_model(), "rounds": []}
    conditions = process_runs.Conditions()
    with tempfile.TemporaryDirectory(prefix="baton_scaling_runs_") as tmp:
        for r in range(args.rounds):
            results = {}
            for name, world, extra in RUNS[r % len(RUNS):] + RUNS[:r % len(RUNS)]:
                rows, output = process_runs.launch(
                    args.build, f"{name}_{r}", world,
                    COMMON + [f"--training.steps={args.steps}", *extra], tmp,
                    args.cpu_bind, threads=1)
                report.setdefault("blas", process_runs.blas_line(output))
                results[name] = {"name": name, "ranks": world,
                                 **process_runs.speed(rows)}
                print(json.dumps({"round": r, **results[name]}), flush=True)
            one = results["one"]["tokens_per_sec"]
            for result in results.values():
                result["efficiency"] = (result["tokens_per_sec"] /
                                        (result["ranks"] * one))
            report["rounds"].append([results[name] for name, _, _ in RUNS])
    report["conditions"] = conditions.summary()
    for name, _, _ in RUNS[1:]:
        effs = [r["efficiency"] for rnd in report["rounds"] for r in rnd
                if r["name"] == name]
        print(json.dumps({"name": name, "efficiency": statistics.median(effs)}))
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
