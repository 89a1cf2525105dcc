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

# The libraries Baton needs besides libtorch (not Debian's CPU libtorch):
# from BATON_DEBS, a folder of .deb files (scripts/gpu_deps.sh) unpacked
# beside the build for a machine with no network, else installed with apt.
cmake_prefix=$prefix
if [ -n "${BATON_DEBS:-}" ]; then
  case $build in /*) deps=$build-deps ;; *) deps=$PWD/$build-deps ;; esac
  log "unpacking $(ls "$BATON_DEBS"/*.deb | wc -l) packages from $BATON_DEBS into $deps"
  rm -rf "$deps"
  mkdir -p "$deps"
  for f in "$BATON_DEBS"/*.deb; do dpkg-deb -x "$f" "$deps"; done
  # Their CMake and pkg-config files and some links name /usr and /lib.
  find "$deps" \( -name "*.pc" -o -name "*.cmake" \) -exec sed -i -E \
    -e "s#(^|[^A-Za-z0-9_.+-])/usr(/|\"|\$| |;|\))#\1$deps/usr\2#g" \
    -e "s#-([IL])/usr/#-\1$deps/usr/#g" {} +
  find "$deps" -type l -lname '/*' | while read -r link; do
    ln -sfn "$deps$(readlink "$link")" "$link"
  done
  lib=$deps/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_PATH=$lib/pkgconfig:$deps/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  # Indirect dependencies (glog's gflags and libunwind) at run time too.
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  command -v pkg-config >/dev/null || export PKG_CONFIG=$deps/usr/bin/pkgconf
  cmake_prefix="$prefix;$deps/usr"
elif command -v apt-get >/dev/null; then
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

# Gloo's code ships inside PyTorch (in libtorch_cpu), its headers may not.
gloo_include="$torch_dir/include"
if [ ! -f "$gloo_include/gloo/algorithm.h" ]; then
  gloo_include=
  for d in /usr/include ${deps:+"$deps/usr/include"}; do
    [ -f "$d/gloo/algorithm.h" ] && { gloo_include=$d; break; }
  done
  if [ -z "$gloo_include" ]; then
    echo "error: gpu.sh: no Gloo headers in $torch_dir/include, /usr/include" \
         "or BATON_DEBS" >&2
    exit 1
  fi
fi
log "Gloo headers from $gloo_include"
# Ninja where there is one (a pip PyTorch machine has it); keep going past
# a failing translation unit so one run names them all.
if command -v ninja >/dev/null; then
  generator=(-G Ninja); keep_going=(-k 0)
else
  generator=(-G "Unix Makefiles"); keep_going=(-k)
fi
log "configuring $build"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DBATON_TORCH_PYTHON="$(command -v "$python")" -DBATON_TORCH_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$cmake_prefix" \
  -DGLOO_INCLUDE_DIR="$gloo_include" > "$build.configure.log" 2>&1 ||
  { tail -30 "$build.configure.log"; exit 1; }
grep -E "CUDA|NCCL" "$build.configure.log" || true
log "building baton, gpu_bench, models_test and trainer_test"
cmake --build "$build" -j"$(nproc)" --target baton gpu_bench models_test trainer_test \
  -- "${keep_going[@]}" > "$build.build.log" 2>&1 ||
  { grep -E -A3 "error|Error" "$build.build.log" | head -80; exit 1; }

log "GPU test"
"$build/models_test" --gtest_filter='Gpu.*:FusedOps.*:BlockedAttention*'
"$build/trainer_test" --gtest_filter='PeakProbe.*'

mkdir -p bench/results
log "gpu_bench"
timeout 180 "$build/gpu_bench" --out bench/results/gpu.json "$@"

log "training the debug model on the GPU (make run's config)"
"$build/baton" train --config configs/debug_model.yaml --training.steps=30 \
  2>&1 | tee "$build.train.log"

# What ran it, for the report.
"$python" - bench/results/gpu.json "$build.train.log" \
  "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" <<'PY'
import datetime, json, re, sys
path, train_log, name = sys.argv[1:]
doc = json.load(open(path))
doc["device_name"] = name
# The debug model's last logged step: "step N/M loss L ... tok/s T ... mfu M%".
steps = [l for l in open(train_log) if re.search(r"\bstep +\d+(/\d+)? +loss", l)]
if steps:
    f = lambda key: re.search(key + r" +([0-9.e+-]+)", steps[-1]).group(1)
    first = re.search(r"loss +([0-9.]+)", steps[0]).group(1)
    doc["debug_train"] = {"step": int(f("step")), "loss_first": float(first),
                          "loss": float(f("loss")), "tokens_per_sec": float(f("tok/s")),
                          "mfu_pct": float(f("mfu"))}
doc["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
json.dump(doc, open(path, "w"), indent=1)
PY
if [ -n "${OUT:-}" ]; then
  cp bench/results/gpu.json "$OUT/gpu.json"
  cp "$build.train.log" "$OUT/train.log"
fi
log "done; figures in bench/results/gpu.json"
