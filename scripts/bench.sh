#!/usr/bin/env bash
# The benchmark suite (`make bench`): installs the peer (torchtitan, on the
# pinned PyTorch), runs the Google Benchmark binaries, torchtitan's training
# step and the process runs side by side, keeps every result as JSON under
# bench/results, and regenerates docs/PERFORMANCE.md (tables and SVG plots)
# from them.
# Usage: scripts/bench.sh [BUILD_DIR]
set -euo pipefail
build_dir=${1:-build}
out=bench/results
# The venv of the pinned PyTorch (scripts/versions.env) with torchtitan: the
# peer runs on the same libtorch as Baton.
bash scripts/setup.sh bench
python=$(bash scripts/setup.sh --venv)/bin/python
mkdir -p "$out"
rm -rf "$out"/*.json "$out"/conditions.txt "$out"/fixtures

# Both sides run with glibc keeping freed memory in the process and with
# OpenMP's idle threads sleeping: Baton's binaries set these themselves
# (common/allocator.h, common/threads.h); the peer gets them from
# GLIBC_TUNABLES and OMP_WAIT_POLICY.
tunables=glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=1073741824
same_settings=(GLIBC_TUNABLES=$tunables OMP_WAIT_POLICY=PASSIVE)

# What else runs meanwhile (1-minute load, compiler processes), every 10 s,
# for the report: a shared machine's figures depend on it.
(while true; do
  echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg) $(pgrep -c cc1plus || true)"
  sleep 10
done >> "$out/conditions.txt") &
monitor=$!
trap 'kill "$monitor" 2>/dev/null || true' EXIT

"$python" - "$out/machine.json" <<'PY'
import datetime, importlib.metadata, json, os, re, sys
import torch


def cpu_field(name):
    for line in open("/proc/cpuinfo"):
        if line.split(":")[0].strip() == name:
            return line.split(":", 1)[1].strip()
    return "unknown"


def mkl_version():
    """MKL's version line from torch's build configuration."""
    match = re.search(r"Math Kernel Library Version [^\n]*", torch.__config__.show())
    return match.group(0) if match else "no MKL"


mem = int(open("/proc/meminfo").readline().split()[1]) / 2**20
osname = "unknown"
if os.path.exists("/etc/os-release"):
    for line in open("/etc/os-release"):
        if line.startswith("PRETTY_NAME="):
            osname = line.split("=", 1)[1].strip().strip('"')
json.dump({
    "cpu": cpu_field("model name"), "cores": os.cpu_count(),
    "memory_gib": round(mem), "os": osname,
    "torch": torch.__version__,
    "torchtitan": importlib.metadata.version("torchtitan"),
    "blas": mkl_version(),
    "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    "mkldnn": torch.backends.mkldnn.is_available(),
    "cpu_family": cpu_field("cpu family"),
    "cpu_mhz": max(float(l.split(":", 1)[1]) for l in open("/proc/cpuinfo")
                   if l.startswith("cpu MHz")),
    "simd": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
             if f in cpu_field("flags").split()],
    "threads_note": "ATen intra-op threads as stated per table; "
        "OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "unset") +
        ", OMP_WAIT_POLICY=" + os.environ.get("OMP_WAIT_POLICY", "unset") +
        " (Baton's binaries run with PASSIVE unless it is set; the peer is "
        "given PASSIVE)",
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

# Single-process step, Baton beside torchtitan's own Llama 3 (eager and
# compiled) on the same shapes, precision, ATen thread count, weights and
# batches: peer_fixture writes Baton's initial weights, first batches and
# first losses; bench/torchtitan_step.py loads them and fails when its first
# losses differ. Config by config, in 3 rounds, so drift in the machine's
# speed hits every side alike.
for flavor in debugmodel small; do
  for precision in float32 bfloat16; do
    "$build_dir/peer_fixture" "$flavor" "$precision" \
      "$out/fixtures/${flavor}_$precision"
  done
done
for round in 1 2 3; do
  gbench train_step_bench "kernels_r$round" \
    --benchmark_filter='BM_MatmulPeak|BM_CausalAttention|BM_AttentionKernel|BM_Swiglu'
  for flavor in debugmodel small; do
    for precision in float32 bfloat16; do
      bf16=$([ "$precision" = bfloat16 ] && echo 1 || echo 0)
      for threads in 1 2; do
        config="${flavor}_${precision}_t$threads"
        gbench train_step_bench "train_step_${config}_r$round" \
          --benchmark_filter="BM_TrainStep/$flavor/seq_len:256/threads:$threads/bf16:$bf16/"
        for mode in eager compiled; do
          flags=(--reps 3)
          [ $mode = eager ] || flags+=(--compile)
          # Round 1's eager runs also profile a step (its ops by kind).
          [ $mode = compiled ] || [ $round != 1 ] || flags+=(--profile)
          env "${same_settings[@]}" "$python" bench/torchtitan_step.py \
            --fixture "$out/fixtures/${flavor}_$precision" \
            --threads "$threads" "${flags[@]}" \
            --out "$out/torchtitan_${config}_${mode}_r$round.json"
        done
      done
    done
  done
done

gbench pipeline_bench pipeline
"$python" bench/pipeline_runs.py "$build_dir" "$out/pipeline_runs.json"
"$python" bench/fsdp_runs.py "$build_dir" "$out/fsdp_runs.json"
"$python" bench/scaling_runs.py "$build_dir" "$out/scaling_runs.json"
"$python" bench/plan_runs.py "$build_dir" "$out/plan_runs.json"
"$python" bench/plan_path.py "$build_dir" "$out/plan_path.json"
gbench tensor_parallel_bench tensor_parallel
gbench expert_parallel_bench expert_parallel "${repeat3[@]}"
gbench context_parallel_bench context_parallel "${repeat3[@]}"
"$python" bench/context_parallel_runs.py "$build_dir" "$out/context_parallel_runs.json"
"$python" bench/memory_runs.py "$build_dir" "$out/memory_runs.json"
"$python" bench/precision_runs.py "$build_dir" "$out/precision_runs.json"

gbench schedule_bench schedule "${repeat3[@]}"
gbench dataloader_bench dataloader "${repeat3[@]}"

"$python" bench/report.py "$out" docs
echo "bench: wrote docs/PERFORMANCE.md from $out/*.json"
