#!/usr/bin/env bash
# The benchmark suite (`make bench`): installs the Python peer's package,
# runs the Google Benchmark binaries, the Python peer and the pipeline runs
# side by side, keeps every result as JSON under bench/results, and
# regenerates docs/PERFORMANCE.md (tables and SVG plots) from them.
# Usage: scripts/bench.sh [BUILD_DIR]
set -euo pipefail
build_dir=${1:-build}
out=bench/results
# The venv of the pinned PyTorch (scripts/versions.env): the Python peer
# runs on the same libtorch as Baton.
bash scripts/setup.sh bench
python=$(bash scripts/setup.sh --venv)/bin/python
mkdir -p "$out"
rm -f "$out"/*.json "$out"/conditions.txt

blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)
echo "bench: BLAS in use: $blas"
case "$blas" in
  *openblas-pthread*) ;;
  *) echo "bench: warning: expected OpenBLAS (pthread); timings are for $blas" >&2 ;;
esac
# Both sides run with glibc keeping freed memory in the process and with
# OpenMP's and OpenBLAS's idle threads sleeping: Baton's binaries set these
# themselves (common/allocator.h, common/threads.h); the peer gets them from
# GLIBC_TUNABLES, OMP_WAIT_POLICY and OPENBLAS_THREAD_TIMEOUT. It also runs
# once without any, as a user would run it.
tunables=glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=1073741824
same_settings=(GLIBC_TUNABLES=$tunables OMP_WAIT_POLICY=PASSIVE
  OPENBLAS_THREAD_TIMEOUT=12)

# What else runs meanwhile (1-minute load, compiler processes), every 10 s,
# for the report: a shared machine's figures depend on it.
(while true; do
  echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg) $(pgrep -c cc1plus || true)"
  sleep 10
done >> "$out/conditions.txt") &
monitor=$!
trap 'kill "$monitor" 2>/dev/null || true' EXIT

"$python" - "$out/machine.json" "$blas" <<'PY'
import json, os, platform, subprocess, sys, datetime
import ctypes
import torch


def blas_kernels():
    """The kernel set OpenBLAS picked for this CPU (its core name)."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown (not OpenBLAS)"


def cpu_field(name):
    for line in open("/proc/cpuinfo"):
        if line.split(":")[0].strip() == name:
            return line.split(":", 1)[1].strip()
    return "unknown"


cpu = "unknown"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
mem = int(open("/proc/meminfo").readline().split()[1]) / 2**20
osname = "unknown"
if os.path.exists("/etc/os-release"):
    for line in open("/etc/os-release"):
        if line.startswith("PRETTY_NAME="):
            osname = line.split("=", 1)[1].strip().strip('"')
libtorch = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libtorch-dev"],
                          capture_output=True, text=True).stdout
json.dump({
    "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem),
    "os": osname, "libtorch": libtorch, "python_torch": torch.__version__,
    "blas": sys.argv[2],
    "blas_kernels": blas_kernels(),
    "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
    "cpu_family": cpu_field("cpu family"),
    "cpu_mhz": max(float(l.split(":", 1)[1]) for l in open("/proc/cpuinfo")
                   if l.startswith("cpu MHz")),
    "simd": [f for f in ("avx2", "avx512f", "avx512_bf16")
             if f in cpu_field("flags").split()],
    "threads_note": "ATen intra-op threads as stated per table; OpenBLAS: its "
        "default (one thread per core) unless a table says otherwise; "
        "OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "unset") +
        ", OPENBLAS_NUM_THREADS=" + os.environ.get("OPENBLAS_NUM_THREADS", "unset") +
        ", OMP_WAIT_POLICY=" + os.environ.get("OMP_WAIT_POLICY", "unset") +
        ", OPENBLAS_THREAD_TIMEOUT=" +
        os.environ.get("OPENBLAS_THREAD_TIMEOUT", "unset") +
        " (Baton's binaries run with PASSIVE and 12 unless they are set)",
    "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
}, open(sys.argv[1], "w"), indent=1)
PY

gbench() {  # binary result-name extra-args...
  local bin=$1 name=$2
  shift 2
  echo "bench: $bin"
  "$build_dir/$bin" --benchmark_out="$out/$name.json" \
    --benchmark_out_format=json "$@"
}
repeat3=(--benchmark_repetitions=3 --benchmark_report_aggregates_only=true)

# Single-process step, Baton beside the Python peer on the same shapes and
# ATen thread count, interleaved config by config and repeated in three
# rounds, so drift in the machine's speed hits both sides alike.
for round in 1 2 3; do
  gbench train_step_bench "kernels_r$round" \
    --benchmark_filter='BM_MatmulPeak|BM_CausalAttention|BM_AttentionKernel|BM_Swiglu'
  for flavor in debugmodel small; do
    for threads in 1 2; do
      gbench train_step_bench "train_step_${flavor}_t${threads}_r$round" \
        --benchmark_filter="BM_TrainStep/$flavor/seq_len:256/threads:$threads/"
      env "${same_settings[@]}" "$python" bench/peer_step.py --flavor "$flavor" \
        --threads "$threads" --reps 3 \
        --out "$out/peer_${flavor}_t${threads}_tuned_r$round.json"
    done
  done
done
# The peer's other settings, once: AdamW(foreach=True), and the defaults a
# user gets (glibc's allocator, OpenMP's and OpenBLAS's spinning).
for flavor in debugmodel small; do
  env "${same_settings[@]}" "$python" bench/peer_step.py --flavor "$flavor" \
    --threads 1 --reps 3 --foreach --out "$out/peer_${flavor}_t1_foreach.json"
  for threads in 1 2; do
    env -u GLIBC_TUNABLES -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT \
      "$python" bench/peer_step.py \
      --flavor "$flavor" --threads "$threads" --reps 3 \
      --out "$out/peer_${flavor}_t${threads}_default.json"
  done
done

# Pipelines: one BLAS thread per rank thread.
OPENBLAS_NUM_THREADS=1 gbench pipeline_bench pipeline
"$python" bench/pipeline_runs.py "$build_dir" "$out/pipeline_runs.json"
"$python" bench/fsdp_runs.py "$build_dir" "$out/fsdp_runs.json"
"$python" bench/scaling_runs.py "$build_dir" "$out/scaling_runs.json"
"$python" bench/plan_runs.py "$build_dir" "$out/plan_runs.json"
OPENBLAS_NUM_THREADS=1 gbench tensor_parallel_bench tensor_parallel
"$python" bench/memory_runs.py "$build_dir" "$out/memory_runs.json"
"$python" bench/precision_runs.py "$build_dir" "$out/precision_runs.json"

gbench schedule_bench schedule "${repeat3[@]}"
gbench dataloader_bench dataloader "${repeat3[@]}"

"$python" bench/report.py "$out" docs
echo "bench: wrote docs/PERFORMANCE.md from $out/*.json"
