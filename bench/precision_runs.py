#!/usr/bin/env python3
"""bf16 mixed precision against fp32, as real processes.

Trains the debug model (configs/debug_model.yaml, as `make run` does) for
200 steps in one process on the machine's cores, once with
training.mixed_precision_param=float32 and once with bfloat16 (fp32 master
weights, optimizer state and loss), the same data and seed. Per run: the
loss at every logged step, the final loss (mean of the last 10 steps, the
curve's noise averaged), step time and tokens/s (medians of steps 3..), and
the start-up log's mixed-precision line.
Usage: precision_runs.py BUILD_DIR OUT.json [--steps N]
"""

import argparse
import json
import os
import re
import statistics
import tempfile

import process_runs

RUNS = [("float32", ["--training.mixed_precision_param=float32"]),
        ("bfloat16", ["--training.mixed_precision_param=bfloat16"])]
LINE = re.compile(r"mixed precision: [^\n]*")


def run(build, name, extra, steps, threads, tmp):
    rows, rss_mib, text = process_runs.train(
        build, name, 1,
        ["--config", "configs/debug_model.yaml", "--metrics.log_freq=1",
         "--metrics.peak_tflops=1", f"--training.steps={steps}",
         f"--training.num_threads={threads}", *extra],
        tmp, threads=threads)
    line = LINE.search(text[0])
    result = {
        "name": name,
        **process_runs.speed(rows),
        "losses": [r["loss"] for r in rows],
        "final_loss": statistics.mean(r["loss"] for r in rows[-10:]),
        "peak_rss_mib": rss_mib[0],
        "log": line.group(0) if line else "",
    }
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}),
          flush=True)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="baton_precision_runs_") as tmp:
        runs = [run(args.build, name, extra, args.steps, args.threads, tmp)
                for name, extra in RUNS]
    with open(args.out, "w") as f:
        json.dump({"steps": args.steps, "threads": args.threads, "runs": runs},
                  f, indent=1)


if __name__ == "__main__":
    main()
