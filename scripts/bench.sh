#!/usr/bin/env bash
# Runs the Google Benchmark binaries and keeps their JSON under bench/results.
set -euo pipefail
build_dir=${1:-build}
out=bench/results
mkdir -p "$out"
echo "bench: BLAS in use: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
for bench in train_step_bench dataloader_bench schedule_bench; do
  "$build_dir/$bench" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/${bench%_bench}.json" --benchmark_out_format=json
done
