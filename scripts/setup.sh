#!/usr/bin/env bash
# Installs what Baton needs that is missing, and nothing else: when
# everything is present it prints two lines and returns at once.
#
# 1. Debian packages, with apt-get (as root, or through sudo): the compiler,
#    CMake, the libraries Baton links besides libtorch, Python's venv.
#    libgloo-dev is there for its headers only: ProcessGroupGloo.hpp includes
#    Gloo's, which the PyTorch wheel does not ship; Gloo's code is inside the
#    wheel's libtorch_cpu, and Baton never links Debian's libgloo.
#    protobuf-compiler is the tests' reader of TensorBoard event files;
#    libicu-dev gives NFC for tokenizer.json files that normalize (Qwen's);
#    iproute2 makes the two-machine test's network namespaces; libcli11-dev
#    (header-only) parses the command line.
# 2. The pinned PyTorch wheel (scripts/versions.env) into a virtual
#    environment of the project's, $BATON_TORCH_HOME/torch-VERSION (default
#    ~/.cache/baton/torch-VERSION), whose libtorch Baton builds against. With
#    the CUDA toolkit (nvcc) the wheel comes with its NVIDIA libraries (CUDA,
#    cuDNN, NCCL: Baton's NCCL backend is built); without it, the wheel alone
#    with its pure-Python dependencies and the CUDA runtime and CUPTI wheels
#    that libtorch_cpu needs to load: cmake/torch.cmake then links the
#    wheel's CPU libraries itself, and 3 GB of NVIDIA wheels are not
#    downloaded. BATON_TORCH_CUDA=OFF chooses that where a toolkit is.
#
# 3. The tests' references, pinned in versions.env: transformers and
#    tokenizers (pure Python and Rust wheels; no torch of their own). Where
#    torch does not import (the CPU-only install) the tests that need
#    transformers' models skip, saying why.
#
# Usage: scripts/setup.sh [bench|floor]
#   bench   also torchtitan (the bench's peer) and numpy into the venv
#   floor   the floor's PyTorch (BATON_TORCH_FLOOR) into its own venv
#   scripts/setup.sh --venv [floor]   prints the venv's path, installs nothing
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

mode=${1:-}
if [ "$mode" = --venv ]; then
  mode=${2:-}
  print_only=1
fi
torch_version=$BATON_TORCH_VERSION
[ "$mode" = floor ] && torch_version=$BATON_TORCH_FLOOR
venv=${BATON_TORCH_HOME:-$HOME/.cache/baton}/torch-$torch_version
if [ -n "${print_only:-}" ]; then
  echo "$venv"
  exit 0
fi

packages=(
  g++ cmake make ccache pkg-config
  python3 python3-venv
  libgloo-dev
  libyaml-cpp-dev
  libgoogle-glog-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  nlohmann-json3-dev zlib1g-dev
  libcli11-dev
  libsentencepiece-dev libpcre2-dev libicu-dev
  protobuf-compiler
  iproute2
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  if [ "$(id -u)" -eq 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "error: setup needs root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "setup: installed ${#missing[@]} packages"
fi

# The venv records what was installed into it once pip succeeded: a venv
# left half-made by an interrupted download is made again.
want="torch==$torch_version"
# BATON_TORCH_CUDA=OFF asks for the CPU-only build where a toolkit is too
# (the Makefile passes it on to CMake).
case ${BATON_TORCH_CUDA:-AUTO} in
  OFF|off|0) flavour=cpu ;;
  *) if command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
       flavour=cuda
     else
       flavour=cpu
     fi ;;
esac
if [ "$mode" = bench ]; then
  want_tt="torchtitan==$BATON_TORCHTITAN_VERSION numpy"
  # The bench's Python imports torch, which loads libtorch_cuda and its
  # NVIDIA libraries even to compute on the CPU: the whole wheel.
  flavour=cuda
fi
stamp=$venv/.baton-installed
# The whole wheel serves a CPU-only build too.
if [ -f "$stamp" ] && grep -qx -e "$want $flavour" -e "$want cuda" "$stamp"; then
  echo "setup: PyTorch $torch_version ($(head -1 "$stamp" | cut -d' ' -f2)) in $venv"
else
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  start=$(date +%s)
  echo "setup: installing PyTorch $torch_version ($flavour) into $venv"
  python3 -m venv "$venv"
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  if [ $flavour = cuda ]; then
    "${pip[@]}" "$want"
  else
    # The wheel, its pure-Python requirements and, of its NVIDIA wheels,
    # only the CUDA runtime and CUPTI, which libtorch_cpu needs to load (its
    # profiler links them); not cuBLAS, cuDNN, NCCL, Triton and the rest
    # (pip's warning that they are missing is filtered out: they are left
    # out on purpose). Such a torch does not import (libtorch_cuda needs
    # them); cmake/torch.cmake finds it by its location instead.
    "${pip[@]}" --no-deps "$want"
    mapfile -t reqs < <("$venv/bin/python" - <<'PY'
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
for line in md.requires("torch") or []:
    r = Requirement(line)
    if r.marker and not r.marker.evaluate({"extra": ""}):
        continue
    name = r.name.lower()
    if name == "cuda-toolkit":
        # libtorch_cpu itself needs the CUDA runtime and CUPTI to load.
        print(f"cuda-toolkit[cudart,cupti]{r.specifier}")
        continue
    if name.startswith(("nvidia", "cuda", "triton")):
        continue
    print(str(r).split(";")[0])
PY
)
    "${pip[@]}" "${reqs[@]}" 2>&1 | { grep -v -E \
      "^(ERROR: pip's dependency resolver|torch .* requires .*which is not installed)" || true; } >&2
    [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
  fi
  echo "$want $flavour" > "$stamp"
  echo "setup: PyTorch $torch_version installed in $(( $(date +%s) - start )) s," \
       "$(du -sh "$venv" | cut -f1) on disk"
fi
want_hf="transformers==$BATON_TRANSFORMERS_VERSION tokenizers==$BATON_TOKENIZERS_VERSION huggingface-hub<2"
if ! grep -qxF "$want_hf" "$stamp"; then
  start=$(date +%s)
  echo "setup: installing $want_hf into $venv"
  # shellcheck disable=SC2086  # three requirements, split on purpose
  "$venv/bin/python" -m pip install -q --disable-pip-version-check $want_hf
  echo "$want_hf" >> "$stamp"
  echo "setup: installed in $(( $(date +%s) - start )) s"
fi
if [ -n "${want_tt:-}" ]; then
  if ! grep -qx "$want_tt" "$stamp"; then
    echo "setup: installing $want_tt into $venv"
    # shellcheck disable=SC2086  # two requirements, split on purpose
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $want_tt
    echo "$want_tt" >> "$stamp"
  fi
  echo "setup: $want_tt in $venv"
fi
