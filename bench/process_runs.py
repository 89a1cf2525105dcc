"""Ranks of `baton train` as real processes, for the benchmarks: started one
by one with torchrun's variables where a benchmark needs each rank's peak RSS
(os.wait4) and its log (pipeline_runs.py, fsdp_runs.py), or by `baton train
--nproc` (launch: scaling_runs.py, plan_runs.py); and what else ran on the
machine meanwhile (Conditions)."""

import json
import os
import socket
import statistics
import subprocess
import sys
import threading


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


def train(build, name, world, args, tmp, threads=1):
    """Runs `baton train ARGS` as `world` ranks (torchrun's variables),
    OMP_NUM_THREADS=`threads` each (ARGS' training.num_threads sets ATen's
    and MKL's threads), with its dump
    folder under `tmp`. Returns (metrics rows of steps 3.., peak RSS MiB per
    rank, each rank's log); exits naming the run if a rank fails."""
    dump = os.path.join(tmp, name)
    port = free_port()
    procs, logs, files = [], [], []
    for rank in range(world):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
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


def whole_cores():
    """The cores this process may run on, each as the set of its allowed
    hardware threads (thread_siblings_list), in the order of their first
    CPU."""
    allowed = os.sched_getaffinity(0)
    cores, seen = [], set()
    for cpu in sorted(allowed):
        if cpu in seen:
            continue
        path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        siblings = {cpu}
        try:
            with open(path) as f:
                for part in f.read().strip().split(","):
                    lo, _, hi = part.partition("-")
                    siblings.update(range(int(lo), int(hi or lo) + 1))
        except OSError:
            pass
        core = siblings & allowed
        seen |= core
        cores.append(core)
    return cores


def launch(build, name, world, args, tmp, cpu_bind, threads=None):
    """`baton train --nproc WORLD --cpu-bind CPU_BIND ARGS`. With `cores` the
    launcher starts on the first WORLD whole cores this process may use, so
    it binds each rank to one of them (one rank: one core, not the machine).
    `threads`, where given, sets each rank's OMP_NUM_THREADS (else the
    launcher's default). Returns (metrics
    rows of steps 3.., the launcher's output); exits naming the run if it
    fails or the machine has too few cores."""
    preexec = None
    if cpu_bind == "cores":
        cores = whole_cores()
        if len(cores) < world:
            sys.exit(f"{name}: needs {world} cores, this process may use {len(cores)}")
        cpus = set().union(*cores[:world])
        preexec = lambda: os.sched_setaffinity(0, cpus)  # noqa: E731
    env = dict(os.environ)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads))
    dump = os.path.join(tmp, name)
    cmd = [os.path.join(build, "baton"), "train", "--nproc", str(world),
           "--cpu-bind", cpu_bind, *args, f"--job.dump_folder={dump}"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          preexec_fn=preexec)
    if done.returncode != 0:
        sys.exit(f"{name} failed:\n" + done.stdout[-3000:] + done.stderr[-3000:])
    with open(os.path.join(dump, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f][2:], done.stdout + done.stderr


def blas_line(output):
    """What `baton train` said of its BLAS at start ("blas: ..."), or "not
    reported"."""
    line = next((l for l in output.splitlines() if "blas: " in l), "")
    return line[line.index("blas: ") + 6:] if line else "not reported"


def cpu_model():
    """The CPU's model name and, since a hypervisor's name may be as bare as
    "AMD EPYC", its family and model numbers (AMD family 25 model 17 is
    Zen 4, family 26 Zen 5)."""
    fields = {}
    for line in open("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        if not line.strip():
            break
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "unknown")
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


class Conditions:
    """What else runs meanwhile, every 10 s: the 1-minute load average and
    the compilers running (a measurement is only as good as the machine is
    quiet)."""

    def __init__(self):
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            load = float(open("/proc/loadavg").read().split()[0])
            compilers = 0
            for pid in os.listdir("/proc"):
                try:
                    if pid.isdigit() and open(f"/proc/{pid}/comm").read().strip() == "cc1plus":
                        compilers += 1
                except OSError:
                    pass
            self.samples.append((load, compilers))
            self._stop.wait(10)

    def summary(self):
        self._stop.set()
        self._thread.join()
        loads = [l for l, _ in self.samples]
        return {"samples": len(self.samples),
                "with_compilers": sum(1 for _, c in self.samples if c > 0),
                "load_median": statistics.median(loads) if loads else 0.0,
                "load_max": max(loads) if loads else 0.0}
