#!/usr/bin/env bash
# Builds Baton in a Debian 13 (trixie) root against libtorch 2.6 and runs the
# whole test suite there (`make test-trixie`, `make test-trixie-cuda`).
#
#   scripts/trixie.sh cpu           libtorch-dev 2.6 (CPU, Gloo)
#   scripts/trixie.sh cuda          libtorch-cuda-dev 2.6 with NCCL: compiles
#                                   and links the NCCL backend, runs the CPU
#                                   tests; the GPU tests skip where no GPU is
#   scripts/trixie.sh MODE CMD...   runs CMD in that root instead (e.g. bash)
#
# Each mode has its own root, made once with debootstrap and kept under
# $BATON_TRIXIE_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/baton), with
# the .debs and the ccache cache beside it; a root without its completion
# mark (an interrupted debootstrap) is made again. Every run installs what
# scripts/setup.sh lists that the root lacks, so the package list has one
# home. The source tree is bind-mounted at /src and built into
# build-trixie-MODE/ (git-ignored). The mounts live in a mount namespace of
# the script's own, so none outlives it whatever way it ends; where none can
# be made (inside a chroot, whose / is no mount point), an EXIT trap unmounts
# them. One run at a time per cache folder (the .debs are shared).
# Needs root (debootstrap, chroot, mounts); installs debootstrap if missing.
set -euo pipefail

usage() {
  echo "usage: scripts/trixie.sh cpu|cuda [COMMAND...]" >&2
  exit 2
}

src=$(cd "$(dirname "$0")/.." && pwd)

# ------------------------------------------------------------ in the root
# The part that runs inside the root: the packages, then configure, build
# and ctest into /src/build-trixie-MODE (or the command given instead).
inside() {
  local mode=$1
  shift
  packages "$mode"
  if [ $# -gt 0 ]; then
    cd /src
    exec "$@"
  fi
  build_and_test "$mode"
}

# What scripts/setup.sh lists that the root lacks (a no-op when complete).
packages() {
  local mode=$1
  local t0 t1
  export DEBIAN_FRONTEND=noninteractive
  cd /src
  t0=$(date +%s)
  # An interrupted earlier run may have left dpkg half-way.
  dpkg --configure -a
  if [ "$mode" = cuda ]; then
    # nvidia-cudnn is an installer that downloads cuDNN from NVIDIA once its
    # licence is accepted (the default answer); NVIDIA is out of reach here,
    # and agreeing is the user's call: decline, and stub it below.
    echo "nvidia-cudnn nvidia-cudnn/question select I Decline" |
      debconf-set-selections 2>/dev/null || true
    export BATON_TORCH_PACKAGES="libtorch-cuda-dev libgloo-cuda-dev
      libnccl-dev nvidia-cuda-toolkit"
  fi
  bash scripts/setup.sh
  if [ "$mode" = cuda ]; then
    cudnn_stub
  fi
  t1=$(date +%s)
  echo "trixie: packages ready in $((t1 - t0)) s"
  echo "trixie: $(dpkg-query -W -f='${Package} ${Version}' \
    "$([ "$mode" = cuda ] && echo libtorch-cuda-dev || echo libtorch-dev)")," \
    "$(g++ --version | head -1), $(cmake --version | head -1)"
}

build_and_test() {
  local mode=$1
  local build=build-trixie-$mode
  local t0 t1
  export CCACHE_DIR=/ccache CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-10G}
  local jobs=${JOBS:-$(nproc)}
  t0=$(date +%s)
  if [ ! -f "$build/Makefile" ]; then
    mkdir -p "$build"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
      2>&1 | tee "$build/configure.log"
  fi
  cmake --build "$build" -j"$jobs"
  t1=$(date +%s)
  echo "trixie: built in $((t1 - t0)) s"
  check_build "$mode" "$build"

  t0=$(date +%s)
  local rc=0
  (cd "$build" && ctest --output-on-failure -j"$jobs") 2>&1 |
    tee "$build/ctest.log" || rc=$?
  t1=$(date +%s)
  local total failed skipped
  total=$(sed -n 's/.* tests failed out of \([0-9]*\).*/\1/p' "$build/ctest.log")
  failed=$(sed -n 's/.*, \([0-9]*\) tests failed out of.*/\1/p' "$build/ctest.log")
  skipped=$(grep -c '(Skipped)$' "$build/ctest.log" || true)
  echo "trixie: tests ran in $((t1 - t0)) s: ${total:-?} tests," \
    "$(( ${total:-0} - ${failed:-0} - skipped )) passed, $skipped skipped," \
    "${failed:-?} failed"
  skip_reasons "$build"
  return "$rc"
}

# Each skipped test with the reason it gave (ctest shows only failures').
skip_reasons() {
  local build=$1 name reason
  sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$build/ctest.log" |
    while read -r name; do
      reason=$(cd "$build" &&
        ctest -R "^$(printf '%s' "$name" | sed 's/[][\.*^$(){}?+|]/\\&/g')\$" -V |
        awk '/: Skipped$/ { getline; sub(/^[0-9]+: /, ""); if (!n++) print }') ||
        true
      echo "trixie: skipped $name: ${reason:-(no reason given)}"
    done
}

# cuDNN is not in Debian (see above), yet libtorch_cuda.so needs
# libcudnn.so.9 to link and to load. Without a real one, a stub with the
# symbols libtorch asks for, each returning CUDNN_STATUS_NOT_INITIALIZED:
# enough to build, and to run on the CPU, where nothing calls cuDNN. A GPU
# machine needs the real library (NVIDIA's cuDNN 9 for CUDA 12).
cudnn_stub() {
  # grep without -q throughout: under pipefail, -q's early exit makes the
  # writer's SIGPIPE fail the pipeline.
  if ldconfig -p | grep 'libcudnn\.so\.9 ' >/dev/null; then
    return
  fi
  echo "trixie: no libcudnn.so.9: building a stub in /usr/local/lib"
  local dir=/usr/local/src/baton-cudnn-stub
  mkdir -p "$dir"
  local symbols
  symbols=$(nm -D --undefined-only /usr/lib/x86_64-linux-gnu/lib*.so.2.6 |
    sed -n 's/.* U \(cudnn[A-Za-z0-9_]*\)@libcudnn\.so\.9$/\1/p' | sort -u)
  {
    echo "// A stub of cuDNN 9 for building without it (scripts/trixie.sh)."
    echo "#include <stddef.h>"
    for s in $symbols; do
      case $s in
        cudnnGetErrorString)
          echo "const char* $s(int s) { return \"cuDNN stub: no cuDNN\"; }" ;;
        cudnnGetVersion | cudnnGetCudartVersion | cudnnGetMaxDeviceVersion)
          echo "size_t $s(void) { return 0; }" ;;
        *) echo "int $s(void) { return 1001; }" ;;
      esac
    done
  } > "$dir/cudnn_stub.c"
  echo "libcudnn.so.9 { global: cudnn*; local: *; };" > "$dir/cudnn_stub.map"
  gcc -shared -fPIC -O1 -o /usr/local/lib/libcudnn.so.9 "$dir/cudnn_stub.c" \
    -Wl,-soname,libcudnn.so.9 -Wl,--version-script="$dir/cudnn_stub.map"
  ldconfig
  echo "trixie: stub exports $(echo "$symbols" | wc -w) cuDNN symbols"
}

# What the build must show: the libtorch version it compiled against and,
# in CUDA mode, the NCCL backend compiled and linked.
check_build() {
  local mode=$1 build=$2
  local h=/usr/include/torch/csrc/api/include/torch/version.h
  echo "trixie: compiled against libtorch" \
    "$(awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH)/ {printf "%s%s", s, $3; s="."}' "$h")"
  if [ "$mode" = cuda ]; then
    if ! grep -q -- '-DUSE_C10D_NCCL' \
        "$build/CMakeFiles/baton_parallel.dir/flags.make"; then
      echo "error: trixie: process_group.cpp was not compiled with" \
        "USE_C10D_NCCL" >&2
      exit 1
    fi
    if ! nm -C "$build/libbaton_parallel.a" |
        grep ' U c10d::ProcessGroupNCCL::ProcessGroupNCCL(' >/dev/null; then
      echo "error: trixie: libbaton_parallel.a does not use ProcessGroupNCCL" >&2
      exit 1
    fi
    echo "trixie: process_group.cpp compiled with USE_C10D_NCCL and" \
      "calls ProcessGroupNCCL"
    ldd "$build/baton" | grep -E 'libnccl|libtorch_cuda|libcudnn' |
      sed 's/^[[:space:]]*/trixie: baton loads /'
  fi
}

# ------------------------------------------------------------- on the host

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: trixie.sh needs root (debootstrap, chroot and bind mounts);" \
      "run it as root or with sudo" >&2
    exit 1
  fi
}

need_debootstrap() {
  if ! command -v debootstrap >/dev/null; then
    if ! command -v apt-get >/dev/null; then
      echo "error: trixie.sh needs debootstrap; install it" >&2
      exit 1
    fi
    echo "trixie: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null ||
      { apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
  fi
  if [ ! -e /usr/share/debootstrap/scripts/trixie ]; then
    echo "error: this debootstrap ($(debootstrap --version)) does not know" \
      "trixie; install a newer one (Debian 12's 1.0.128 does)" >&2
    exit 1
  fi
}

# Makes the root with debootstrap unless a complete one is there.
make_root() {
  local root=$1 cache=$2
  local mark=$root/.baton-root-complete
  if [ -f "$mark" ]; then
    echo "trixie: reusing $root (made $(cat "$mark"))"
    return
  fi
  if [ -e "$root" ]; then
    echo "trixie: $root is half-made (no completion mark): making it again"
    if grep -q " $root/" /proc/self/mountinfo; then
      echo "error: trixie: something is still mounted under $root" >&2
      exit 1
    fi
    rm -rf --one-file-system "$root"
  fi
  local mirror=${BATON_TRIXIE_MIRROR:-http://deb.debian.org/debian}
  local t0
  t0=$(date +%s)
  echo "trixie: making $root with debootstrap from $mirror"
  mkdir -p "$cache/debootstrap-debs"
  if ! debootstrap --variant=minbase \
      --components=main,contrib,non-free,non-free-firmware \
      --cache-dir="$cache/debootstrap-debs" \
      trixie "$root" "$mirror" > "$root.debootstrap.log" 2>&1; then
    tail -20 "$root.debootstrap.log" >&2
    echo "error: trixie: debootstrap failed (log: $root.debootstrap.log)" >&2
    exit 1
  fi
  # apt's download user cannot write the shared .deb folder; nothing here
  # needs that sandbox.
  cat > "$root/etc/apt/apt.conf.d/99baton" <<'EOF'
APT::Sandbox::User "root";
APT::Install-Recommends "false";
EOF
  date -u +%FT%TZ > "$mark"
  echo "trixie: root made in $(($(date +%s) - t0)) s"
}

mounts=()
unmount_all() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -R "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true
  done
  mounts=()
}

bind() {
  local from=$1 to=$2
  shift 2
  mkdir -p "$to"
  mount "$@" "$from" "$to"
  mounts+=("$to")
}

main() {
  [ $# -ge 1 ] || usage
  local mode=$1
  shift
  case $mode in
    cpu | cuda) ;;
    --inside) inside "$@"; return ;;
    *) usage ;;
  esac
  need_root
  # Every mount below belongs to this namespace and goes with it.
  if [ -z "${BATON_TRIXIE_NAMESPACE:-}" ]; then
    export BATON_TRIXIE_NAMESPACE=1
    if unshare --mount --propagation private true 2>/dev/null; then
      exec unshare --mount --propagation private -- bash "$0" "$mode" "$@"
    fi
    echo "trixie: no private mount namespace here; unmounting on exit instead"
  fi
  need_debootstrap
  local cache=${BATON_TRIXIE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/baton}
  mkdir -p "$cache"
  cache=$(cd "$cache" && pwd)
  local root=$cache/trixie-$mode
  exec 9> "$cache/lock"
  if ! flock -n 9; then
    echo "trixie: another trixie.sh run holds $cache; waiting for it"
    flock 9
  fi
  local start
  start=$(date +%s)
  make_root "$root" "$cache"

  trap unmount_all EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  cp /etc/hosts "$root/etc/hosts"
  mkdir -p "$cache/apt-archives/partial" "$cache/ccache"
  bind proc "$root/proc" -t proc
  bind /sys "$root/sys" --rbind -o ro
  bind /dev "$root/dev" --rbind
  bind "$src" "$root/src" --bind
  bind "$cache/apt-archives" "$root/var/cache/apt/archives" --bind
  bind "$cache/ccache" "$root/ccache" --bind

  local env=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" JOBS="${JOBS:-$(nproc)}")
  local rc=0
  chroot "$root" "${env[@]}" CCACHE_DIR=/ccache \
    bash /src/scripts/trixie.sh --inside "$mode" "$@" || rc=$?
  echo "trixie: $mode mode finished in $(($(date +%s) - start)) s" \
    "with exit code $rc"
  return "$rc"
}

main "$@"
