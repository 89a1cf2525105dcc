#!/usr/bin/env bash
# Trains the debug model side by side as one process, as two data-parallel
# ranks and as two pipeline ranks (1F1B, Interleaved1F1B, ZBVZeroBubble), one
# intra-op thread per rank, and prints the median step time and tokens/s of
# steps 3.. of each (metrics.jsonl). Usage: bench/parallel_runs.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-12}
out=bench/results/parallel_runs
mkdir -p "$out"
common="--training.steps=$steps --metrics.log_freq=1 --metrics.peak_tflops=1 \
  --lr_scheduler.warmup_steps=2 --training.num_threads=1"
run() {  # name nproc config extra...
  local name=$1 nproc=$2 config=$3
  shift 3
  local launch=""
  [ "$nproc" -gt 1 ] && launch="--nproc $nproc"
  "$build/baton" train $launch --config "$config" --job.dump_folder="$out/$name" \
    $common "$@" > "$out/$name.log" 2>&1
}
rm -rf "${out:?}"/*
run single 1 configs/debug_model.yaml
run dp2 2 configs/debug_model.yaml --parallelism.data_parallel_replicate_degree=2
run pp2_1f1b 2 configs/debug_pp_1f1b.yaml
run pp2_interleaved 2 configs/debug_pp_interleaved.yaml
run pp2_zbv 2 configs/debug_pp_zbv.yaml
python3 - "$out" <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
print(f"{'run':<18}{'step s':>9}{'tokens/s':>10}{'bubble % (per pp rank)':>26}")
for name in ["single", "dp2", "pp2_1f1b", "pp2_interleaved", "pp2_zbv"]:
    rows = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl"))][2:]
    t = statistics.median(r["step_time_s"] for r in rows)
    tok = statistics.median(r["tokens_per_sec"] for r in rows)
    bub = ""
    if "pipeline_bubble_pct" in rows[0]:
        n = len(rows[0]["pipeline_bubble_pct"])
        bub = "/".join(f"{statistics.median(r['pipeline_bubble_pct'][i] for r in rows):.0f}" for i in range(n))
    print(f"{name:<18}{t:>9.3f}{tok:>10.0f}{bub:>26}")
PY
