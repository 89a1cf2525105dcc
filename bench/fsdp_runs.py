#!/usr/bin/env python3
"""Fully sharded against replicated data parallel, as real processes.

Trains the small flavor (about 25M parameters) on two ranks, one ATen and
one OpenBLAS thread each, 4 x 256 tokens per rank and step, with `baton
train`, each rank a process started here with the torchrun variables so that
os.wait4 gives each rank's peak RSS:

- dp_replicate 2 (DDP);
- dp_shard 2 (FSDP, gathered parameters freed after forward: the default);
- dp_shard 2 with fsdp_reshard_after_forward=never.

The three run one after the other in each of three rounds; the report takes
medians over the rounds. Per run: tokens/s and step time (medians of steps
3..), each rank's parameter, gradient and optimizer-state bytes (the log line
after the first step), peak RSS per rank, and for FSDP the seconds rank 0
waited for gathers and reduce-scatters (the communication not hidden).
Usage: fsdp_runs.py BUILD_DIR OUT.json [--steps N] [--rounds R]
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

COMMON = [
    "--config", "configs/debug_model.yaml", "--model.flavor=small",
    "--metrics.log_freq=1", "--metrics.peak_tflops=1",
    "--lr_scheduler.warmup_steps=2", "--training.num_threads=1",
    "--training.local_batch_size=4", "--training.seq_len=256",
]
RUNS = [
    ("dp_replicate2", ["--parallelism.data_parallel_replicate_degree=2"]),
    ("dp_shard2", ["--parallelism.data_parallel_shard_degree=2"]),
    ("dp_shard2_never", ["--parallelism.data_parallel_shard_degree=2",
                         "--parallelism.fsdp_reshard_after_forward=never"]),
]
MEMORY = re.compile(r"memory: this rank holds ([0-9.]+) MiB of parameters, "
                    r"([0-9.]+) MiB of gradients and ([0-9.]+) MiB of optimizer")
WAITED = re.compile(r"fully_shard: waited ([0-9.e+-]+) s for gathers and "
                    r"([0-9.e+-]+) s for reduce-scatters")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(build, name, extra, steps, tmp):
    world = 2
    dump = os.path.join(tmp, name)
    port = free_port()
    procs, logs = [], []
    for rank in range(world):
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        path = os.path.join(tmp, f"{name}.rank{rank}.log")
        logs.append(path)
        cmd = [os.path.join(build, "baton"), "train", *COMMON,
               f"--training.steps={steps}", f"--job.dump_folder={dump}", *extra]
        procs.append(subprocess.Popen(cmd, env=env, stdout=open(path, "w"),
                                      stderr=subprocess.STDOUT))
    rss_mib = []
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        rss_mib.append(usage.ru_maxrss / 1024.0)  # ru_maxrss is in KiB
    text = [open(path).read() for path in logs]
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"fsdp_runs: {name} failed:\n" + "\n".join(t[-2000:] for t in text))
    rows = [json.loads(l) for l in open(os.path.join(dump, "metrics.jsonl"))][2:]
    mem = MEMORY.search(text[0])
    result = {
        "name": name,
        "step_s": statistics.median(r["step_time_s"] for r in rows),
        "tokens_per_sec": statistics.median(r["tokens_per_sec"] for r in rows),
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
