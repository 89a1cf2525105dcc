#!/usr/bin/env bash
# For a machine with a CUDA GPU and PyTorch installed: builds Baton against
# that PyTorch's libtorch (CUDA, NCCL), runs the GPU test (the model on the
# GPU against the CPU), then bench/gpu_bench: correctness of a few training
# steps against the CPU, the bf16 matmul peak, and tokens/s and MFU of a
# Llama 3 8B-shaped layer stack in bf16. Meant to finish inside ten minutes.
# Writes bench/results/gpu.json (and a copy under $OUT when set);
# `bench/report.py` puts its figures into docs/PERFORMANCE.md.
# Usage: bench/gpu.sh [BUILD_DIR [gpu_bench options]]   (default build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
shift || true
start=$(date +%s)
log() { echo "gpu.sh [$(( $(date +%s) - start ))s]: $*"; }

python=${PYTHON:-python3}
prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
cuda=$("$python" -c 'import torch; print(torch.version.cuda or "")')
abi=$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
log "PyTorch $("$python" -c 'import torch; print(torch.__version__)') at $torch_dir, CUDA '${cuda}', C++11 ABI $abi"
if [ -z "$cuda" ]; then
  echo "error: gpu.sh: this PyTorch has no CUDA; install a CUDA build" >&2
  exit 1
fi
if [ "$abi" != 1 ]; then
  # yaml-cpp, glog and GoogleTest from the distribution use the C++11 ABI.
  echo "error: gpu.sh: this PyTorch uses the pre-C++11 ABI; Baton links" \
       "distribution libraries built with the C++11 ABI. Use a PyTorch" \
       "built with _GLIBCXX_USE_CXX11_ABI=1 (pytorch.org wheels since 2.7)" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

# The libraries Baton needs besides libtorch (not Debian's CPU libtorch).
if command -v apt-get >/dev/null; then
  pkgs=(g++ cmake make pkg-config libyaml-cpp-dev libgoogle-glog-dev
        libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
        zlib1g-dev libsentencepiece-dev libpcre2-dev)
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q \
      --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# Gloo's headers and code ship inside PyTorch (in libtorch_cpu).
gloo_include="$torch_dir/include"
if [ ! -f "$gloo_include/gloo/algorithm.h" ]; then
  if [ -f /usr/include/gloo/algorithm.h ]; then
    gloo_include=/usr/include
  else
    echo "error: gpu.sh: no Gloo headers in $torch_dir/include or /usr/include" >&2
    exit 1
  fi
fi
log "configuring $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DGLOO_INCLUDE_DIR="$gloo_include" \
  -DGLOO_LIBRARY="$torch_dir/lib/libtorch_cpu.so" > "$build.configure.log" 2>&1 ||
  { tail -30 "$build.configure.log"; exit 1; }
grep -E "CUDA|NCCL" "$build.configure.log" || true
log "building gpu_bench and models_test"
cmake --build "$build" -j"$(nproc)" --target gpu_bench models_test > "$build.build.log" 2>&1 ||
  { grep -E "error" "$build.build.log" | head -30; exit 1; }

log "GPU test"
"$build/models_test" --gtest_filter='Gpu.*:FusedOps.*:BlockedAttention*'

mkdir -p bench/results
log "gpu_bench"
timeout 420 "$build/gpu_bench" --out bench/results/gpu.json "$@"
if [ -n "${OUT:-}" ]; then
  cp bench/results/gpu.json "$OUT/gpu.json"
fi
log "done; figures in bench/results/gpu.json"
