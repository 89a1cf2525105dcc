#!/usr/bin/env python3
"""Pipelined training as real processes: peak RSS per rank and pp 2 speed-up.

Trains the debug model (8 x 256 tokens per step) with `baton train`, each
rank a process started here with the torchrun variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), so os.wait4 gives each rank's peak RSS:

- one process, one ATen thread, OpenBLAS's two threads (2 threads in all);
- pp 2 with GPipe, 1F1B and Interleaved1F1B (2 stages per rank) at the same
  microbatch count, and ZBVZeroBubble, one ATen and one OpenBLAS thread per
  rank (2 threads in all).

Step time and tokens/s are medians of steps 3.. from metrics.jsonl.
Usage: pipeline_runs.py BUILD_DIR OUT.json [--steps N] [--microbatches M]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

COMMON = [
    "--config", "configs/debug_model.yaml",
    "--metrics.log_freq=1", "--metrics.peak_tflops=1",
    "--lr_scheduler.warmup_steps=2", "--training.num_threads=1",
    "--training.local_batch_size=8", "--training.seq_len=256",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(build, name, world, blas_threads, extra, steps, tmp):
    dump = os.path.join(tmp, name)
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS=str(blas_threads))
        if world > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))
        log = open(os.path.join(tmp, f"{name}.rank{rank}.log"), "w")
        cmd = [os.path.join(build, "baton"), "train", *COMMON,
               f"--training.steps={steps}", f"--job.dump_folder={dump}", *extra]
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    rss_mib = []
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        rss_mib.append(usage.ru_maxrss / 1024.0)  # ru_maxrss is in KiB
    if any(p.returncode != 0 for p in procs):
        logs = [open(os.path.join(tmp, f"{name}.rank{r}.log")).read()[-2000:]
                for r in range(world)]
        sys.exit(f"pipeline_runs: {name} failed:\n" + "\n".join(logs))
    rows = [json.loads(l) for l in open(os.path.join(dump, "metrics.jsonl"))][2:]
    result = {
        "name": name,
        "ranks": world,
        "blas_threads_per_rank": blas_threads,
        "step_s": statistics.median(r["step_time_s"] for r in rows),
        "tokens_per_sec": statistics.median(r["tokens_per_sec"] for r in rows),
        "peak_rss_mib_per_rank": rss_mib,
    }
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
