"""Ranks of `baton train` as real processes, for the benchmarks that need each
rank's peak RSS (os.wait4) and its log: pipeline_runs.py, fsdp_runs.py and
scaling_runs.py."""

import json
import os
import socket
import statistics
import subprocess
import sys


# The small flavor (about 25M parameters), one ATen thread per rank, 4 x 256
# tokens per local batch, float32 on every CPU (precision_runs.py measures
# bf16): the runs fsdp_runs.py and scaling_runs.py compare.
SMALL_ONE_THREAD = [
    "--config", "configs/debug_model.yaml", "--model.flavor=small",
    "--metrics.log_freq=1", "--metrics.peak_tflops=1",
    "--lr_scheduler.warmup_steps=2", "--training.num_threads=1",
    "--training.local_batch_size=4", "--training.seq_len=256",
    "--training.mixed_precision_param=float32",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(build, name, world, args, tmp, blas_threads=1):
    """Runs `baton train ARGS` as `world` ranks (torchrun's variables), one
    ATen thread and `blas_threads` OpenBLAS threads each, with its dump
    folder under `tmp`. Returns (metrics rows of steps 3.., peak RSS MiB per
    rank, each rank's log); exits naming the run if a rank fails."""
    dump = os.path.join(tmp, name)
    port = free_port()
    procs, logs, files = [], [], []
    for rank in range(world):
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS=str(blas_threads))
        if world > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))
        path = os.path.join(tmp, f"{name}.rank{rank}.log")
        logs.append(path)
        cmd = [os.path.join(build, "baton"), "train", *args,
               f"--job.dump_folder={dump}"]
        files.append(open(path, "w"))
        procs.append(subprocess.Popen(cmd, env=env, stdout=files[-1],
                                      stderr=subprocess.STDOUT))
    rss_mib = []
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        rss_mib.append(usage.ru_maxrss / 1024.0)  # ru_maxrss is in KiB
    for f in files:
        f.close()
    text = []
    for path in logs:
        with open(path) as f:
            text.append(f.read())
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"{name} failed:\n" + "\n".join(t[-2000:] for t in text))
    rows = [json.loads(l) for l in open(os.path.join(dump, "metrics.jsonl"))][2:]
    return rows, rss_mib, text


def speed(rows):
    """Median step time and tokens/s of metrics rows."""
    return {"step_s": statistics.median(r["step_time_s"] for r in rows),
            "tokens_per_sec": statistics.median(r["tokens_per_sec"] for r in rows)}
