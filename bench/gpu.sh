#!/usr/bin/env bash
# For a machine with a CUDA GPU and PyTorch installed: builds Baton against
# that PyTorch's libtorch (CUDA, NCCL), runs the GPU test (the model on the
# GPU against the CPU), then bench/gpu_bench: correctness of a few training
# steps against the CPU, the bf16 matmul peak, and tokens/s and MFU of a
# Llama 3 8B-shaped layer stack in bf16. Meant to finish inside ten minutes.
# Then the same work beside torchtitan on the same GPU, eager and compiled
# (bench/torchtitan_gpu.py, from BATON_WHEELS where the machine has no
# torchtitan: scripts/gpu_deps.sh): the layer stack, and `baton train` of
# the Llama 3.2 1B flavor in bf16 against torchtitan's training step of the
# same model.
# Writes bench/results/gpu.json (and a copy under $OUT when set);
# `bench/report.py` puts its figures into docs/PERFORMANCE.md.
# BATON_GPU_BUDGET_S (seconds, optional): a hard limit on the whole script
# (a lent machine's command limit): each step after the build is given
# what is left less 30 s for the report, and one with under 60 s left is
# skipped and named, so that the figures made in time still come back.
# Usage: bench/gpu.sh [BUILD_DIR [gpu_bench options]]   (default build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
shift || true
start=$(date +%s)
log() { echo "gpu.sh [$(( $(date +%s) - start ))s]: $*"; }
# The seconds a step may take: its own limit, or what BATON_GPU_BUDGET_S
# leaves (less 30 s for the report) where that is less; 0: no time left.
step_limit() {
  local limit=$1
  if [ -n "${BATON_GPU_BUDGET_S:-}" ]; then
    local left=$(( BATON_GPU_BUDGET_S - ($(date +%s) - start) - 30 ))
    [ "$left" -lt "$limit" ] && limit=$left
    [ "$limit" -lt 60 ] && limit=0
  fi
  echo "$limit"
}

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

# A failure from here on is reported and the rest still runs (one device
# call should bring back every figure it can); the script then exits 1.
failed=()
log "GPU tests"
limit=$(step_limit 240)
if [ "$limit" -le 0 ]; then
  failed+=("GPU tests (skipped: out of time)")
elif ! { timeout "$limit" "$build/models_test" \
           --gtest_filter='Gpu.*:FusedOps.*:BlockedAttention*' || status=1
         timeout "$limit" "$build/trainer_test" \
           --gtest_filter='PeakProbe.*' || status=1
         exit "${status:-0}"; } 2>&1 |
     tee "$build.tests.log" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]"; then
  failed+=("GPU tests ($build.tests.log)")
fi

mkdir -p bench/results
rm -f bench/results/gpu.json
log "gpu_bench"
limit=$(step_limit 180)
if [ "$limit" -gt 0 ]; then
  timeout "$limit" "$build/gpu_bench" --out bench/results/gpu.json "$@" ||
    failed+=(gpu_bench)
else
  failed+=("gpu_bench (skipped: out of time)")
fi

log "training the debug model on the GPU (make run's config)"
limit=$(step_limit 120)
if [ "$limit" -le 0 ]; then
  failed+=("baton train, debug model (skipped: out of time)")
else
  timeout "$limit" "$build/baton" train --config configs/debug_model.yaml \
    --training.steps=30 2>&1 | tee "$build.train.log" ||
    failed+=("baton train, debug model")
fi

# A 1B-class model trained by `baton train`: the Llama 3.2 1B flavor's
# blocks (973M parameters; the byte tokenizer's vocabulary of 258 on the
# bundled corpus, since this machine has no 128K tokenizer), bf16 compute on
# float32 weights, 2 x 4096 tokens a step, every step logged.
log "baton train, Llama 3.2 1B flavor, bf16, 2 x 4096 tokens a step"
rm -rf "$build-1b"
limit=$(step_limit 300)
if [ "$limit" -le 0 ]; then
  failed+=("baton train, 1B flavor (skipped: out of time)")
elif ! timeout "$limit" "$build/baton" train --config configs/debug_model.yaml \
       --model.flavor=1B --training.seq_len=4096 \
       --training.local_batch_size=2 \
       --training.mixed_precision_param=bfloat16 --training.steps=20 \
       --optimizer.lr=3e-4 --metrics.log_freq=1 \
       --job.dump_folder="$build-1b" 2>&1 |
     tee "$build.train1b.log" | grep -E "step +(1|5|10|15|20)/"; then
  failed+=("baton train, 1B flavor ($build.train1b.log)")
  tail -5 "$build.train1b.log"
fi

# torchtitan beside it, on the same GPU.
peer_path=
if ! "$python" -c 'import torchtitan' 2>/dev/null && [ -n "${BATON_WHEELS:-}" ]; then
  peer_path=$PWD/$build-site
  log "installing torchtitan's wheels from $BATON_WHEELS into $peer_path"
  rm -rf "$peer_path"
  "$python" -m pip install -q --no-index --no-deps --no-compile \
    --disable-pip-version-check --target "$peer_path" "$BATON_WHEELS"/*.whl
fi
peer_env=(env PYTHONUNBUFFERED=1 ${peer_path:+PYTHONPATH=$peer_path${PYTHONPATH:+:$PYTHONPATH}})
if "${peer_env[@]}" "$python" -c 'import torchtitan' 2>/dev/null; then
  for what in layers train; do
    for mode in eager compiled; do
      if [ $what = layers ]; then
        shape=(--preset 8B --layers 8 --batch 2 --seq-len 4096)
      else
        shape=(--preset 1B --batch 2 --seq-len 4096 --vocab 258 --reps 10)
      fi
      flags=(); [ $mode = compiled ] && flags=(--compile)
      limit=$(step_limit 300)
      if [ "$limit" -le 0 ]; then
        failed+=("torchtitan $what, $mode (skipped: out of time)")
        continue
      fi
      log "torchtitan $what, $mode"
      if timeout "$limit" "${peer_env[@]}" "$python" bench/torchtitan_gpu.py \
           --what $what "${shape[@]}" "${flags[@]}" \
           --out "$build-torchtitan-$what-$mode.json" \
           > "$build-torchtitan-$what-$mode.log" 2>&1; then
        tail -1 "$build-torchtitan-$what-$mode.log"
      else
        failed+=("torchtitan $what, $mode")
        tail -8 "$build-torchtitan-$what-$mode.log"
      fi
    done
  done
else
  log "no torchtitan (neither installed nor BATON_WHEELS): its side is not run"
fi

# What ran it, for the report.
"$python" - bench/results/gpu.json "$build.train.log" \
  "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
  "$build-1b/metrics.jsonl" "$build-torchtitan" \
  "$(printf '%s\n' "${failed[@]}")" <<'PY'
import datetime, json, os, re, statistics, sys
path, train_log, name, metrics_1b, peer_prefix, failed = sys.argv[1:]
doc = json.load(open(path)) if os.path.exists(path) else {}
doc["device_name"] = name
doc["failed"] = [f for f in failed.split("\n") if f]
# `baton train` of the 1B flavor: the median over the steps after the
# fifth (the first ones fill the caching allocator and the caches).
if os.path.exists(metrics_1b):
    rows = [json.loads(l) for l in open(metrics_1b) if l.strip()]
    steady = [r for r in rows if r["step"] > 5]
    if steady:
        doc["train_1b"] = {
            "steps": len(rows), "loss_first": rows[0]["loss"],
            "loss": rows[-1]["loss"],
            "tokens_per_sec": statistics.median(r["tokens_per_sec"] for r in steady),
            "step_s": statistics.median(r["step_time_s"] for r in steady),
            "tflops": statistics.median(r["tflops"] for r in steady)}
peer = {}
for what in ("layers", "train"):
    for mode in ("eager", "compiled"):
        f = f"{peer_prefix}-{what}-{mode}.json"
        if os.path.exists(f):
            peer.setdefault(what, {})[mode] = json.load(open(f))
if peer:
    doc["torchtitan"] = peer
# The debug model's last logged step: "step N/M loss L ... tok/s T ... mfu M%".
steps = [l for l in open(train_log) if re.search(r"\bstep +\d+(/\d+)? +loss", l)
         ] if os.path.exists(train_log) else []
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
  for f in tests train1b; do
    [ -f "$build.$f.log" ] && cp "$build.$f.log" "$OUT/$f.log"
  done
fi
if [ ${#failed[@]} -gt 0 ]; then
  log "done, with failures: $(printf '%s; ' "${failed[@]}")figures in bench/results/gpu.json"
  exit 1
fi
log "done; figures in bench/results/gpu.json"
