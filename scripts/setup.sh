#!/usr/bin/env bash
# Installs, with apt-get, only the Debian packages Baton needs that are missing.
# Idempotent: when everything is present it prints one line and returns at once.
# protobuf-compiler is the tests' independent reader of TensorBoard event files
# (protoc --decode); the binary links no protobuf. iproute2 (`ip`) makes the
# network namespaces of the two-machine test.
# `setup.sh bench` adds what `make bench` needs: Debian's python3-torch (the
# same libtorch 1.13) for the Python peer of the step benchmark.
# BATON_TORCH_PACKAGES replaces the libtorch and Gloo packages (empty: none,
# for a libtorch from elsewhere); scripts/trixie.sh sets it for the CUDA root.
set -euo pipefail

# shellcheck disable=SC2206  # a list of package names, split on purpose
torch_packages=(${BATON_TORCH_PACKAGES-libtorch-dev libgloo-dev})
packages=(
  g++ cmake make ccache pkg-config
  "${torch_packages[@]}"
  libyaml-cpp-dev
  libgoogle-glog-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  nlohmann-json3-dev zlib1g-dev
  libsentencepiece-dev libpcre2-dev
  libopenblas0-pthread
  protobuf-compiler
  iproute2
)
if [ "${1:-}" = bench ]; then
  packages+=(python3 python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

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
