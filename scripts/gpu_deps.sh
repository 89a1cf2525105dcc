#!/usr/bin/env bash
# Downloads, on a Debian 12 machine with network, the packages Baton needs
# besides libtorch (yaml-cpp, glog, GoogleTest, Google Benchmark, nlohmann
# JSON, sentencepiece, PCRE2, zlib, pkgconf) and Debian 13's Gloo headers,
# as .deb files into DIR, for a CUDA machine that has PyTorch but no network:
# `BATON_DEBS=DIR bench/gpu.sh` unpacks them there (dpkg-deb -x, outside /)
# instead of installing with apt-get. Debian 12's libraries need glibc 2.36
# and GCC 12's libstdc++, which newer distributions (Ubuntu 24.04) provide.
# Also the torchtitan peer's wheels into DIR/wheels (BATON_WHEELS=DIR/wheels
# there): the release that runs on that machine's PyTorch
# (BATON_TORCHTITAN_FLOOR_VERSION) and those of its imports the machine's
# image lacks (the rest, tensorboard, huggingface-hub 1.x, pandas, pyarrow,
# are there; device README, KINDS.md), for its Python (GPU_PYTHON, 3.12).
# Usage: scripts/gpu_deps.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/gpu_deps.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# shellcheck source=versions.env
source "$(dirname "$0")/versions.env"

# datasets below 4.8 is what torchtitan pins and runs with huggingface-hub
# 1.x; the versions are the ones checked on PyTorch 2.11 here.
wheels=("torchtitan==$BATON_TORCHTITAN_FLOOR_VERSION" torchdata==0.11.0
        tyro==1.0.17 docstring_parser==0.18.0 datasets==4.7.0 dill==0.4.1
        multiprocess==0.70.19)
rm -rf "$dir/wheels"
python3 -m pip download -q --disable-pip-version-check --no-deps \
  --only-binary=:all: --python-version "${GPU_PYTHON:-3.12}" \
  --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir/wheels" "${wheels[@]}"

pkgs=(libyaml-cpp-dev libyaml-cpp0.7
      libgoogle-glog-dev libgoogle-glog0v6 libgflags-dev libgflags2.2
      libunwind-dev libunwind8 liblzma-dev
      libgtest-dev libgmock-dev googletest
      libbenchmark-dev libbenchmark1debian
      nlohmann-json3-dev zlib1g-dev zlib1g
      libsentencepiece-dev libsentencepiece0
      libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
      pkgconf pkgconf-bin libpkgconf3)
# Downloaded as root into a folder the _apt user may not write.
apt=(apt-get -q -o APT::Sandbox::User=root)
(cd "$dir" && "${apt[@]}" download "${pkgs[@]}" >/dev/null)

# Gloo's headers, in case the PyTorch there ships none: Debian 13's (the
# version libtorch 2.6 was built with), from Debian 13's package lists kept
# apart from the system's.
lists=$(mktemp -d)
trap 'rm -rf "$lists"' EXIT
mkdir -p "$lists/lists/partial"
echo "deb http://deb.debian.org/debian trixie main" > "$lists/sources.list"
opts=(-o "Dir::Etc::SourceList=$lists/sources.list"
      -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$lists/lists"
      -o "APT::Get::List-Cleanup=0")
"${apt[@]}" "${opts[@]}" update >/dev/null
(cd "$dir" && "${apt[@]}" "${opts[@]}" download libgloo-dev >/dev/null)
ls "$dir"
du -sh "$dir"
