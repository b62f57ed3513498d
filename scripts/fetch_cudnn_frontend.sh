#!/usr/bin/env bash
# The headers of cudnn-frontend 1.32.0 (NVIDIA's header-only C++ graph API over cuDNN, MIT), which
# src/cuda/cuda_attention.cpp builds cuDNN's fused attention with. Writes .deps/cudnn-frontend/include/
# (cudnn_frontend.h, cudnn_frontend/..., the bundled nlohmann/json): the include/ tree of the PyPI
# package nvidia-cudnn-frontend's wheel, never `pip install`ed. It has no sdist, and its wheels differ
# only in the Python extension beside the headers: one wheel (CPython 3.11, x86-64) is pinned, whatever
# Python and machine run this.
#
# Downloads the wheel with `pip download` when .deps/cudnn-frontend/ does not hold it yet (scripts/setup.sh
# installs pip first; scripts/fetch_gpu_deps.sh calls this so the GPU machine gets the wheel with the
# .debs) and checks its sha256. Offline (--offline), the wheel already there is used, never pip.
# Idempotent: nothing is done when the headers exist and are newer than the wheel. Exit status: 0 when
# the headers are there at the end, 1 when they cannot be made (no wheel and no pip or network) or the
# wheel's checksum is wrong.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/.deps/cudnn-frontend
WHL=$DIR/nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
HDR=$DIR/include/cudnn_frontend.h
SHA256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0

log() { printf '[cudnn-frontend] %s\n' "$*" >&2; }

if [[ -f $HDR && ( ! -f $WHL || $HDR -nt $WHL ) ]]; then
  exit 0
fi
if [[ ! -f $WHL ]]; then
  [[ ${1:-} == --offline ]] && { log "offline and no $WHL (scripts/fetch_gpu_deps.sh fetches it)"; exit 1; }
  mkdir -p "$DIR"
  python3 -m pip --version >/dev/null 2>&1 || { log "no pip (python3 -m pip) to download the wheel"; exit 1; }
  log "downloading nvidia-cudnn-frontend==1.32.0 (wheel) into $DIR"
  python3 -m pip download --quiet --no-deps --only-binary :all: --python-version 3.11 --implementation cp \
    --abi cp311 --platform manylinux_2_28_x86_64 -d "$DIR" nvidia-cudnn-frontend==1.32.0 ||
    { log "pip download failed"; exit 1; }
fi
read -r sum _ < <(sha256sum "$WHL")
if [[ $sum != "$SHA256" ]]; then
  log "$WHL: sha256 $sum, expected $SHA256"
  exit 1
fi

# A wheel is a zip file: Python's zipfile reads it where unzip is not installed. Extracted beside the
# target, then swapped in, so an interrupted run never leaves a partial include/.
command -v python3 >/dev/null 2>&1 || { log "no python3 to unpack $WHL"; exit 1; }
tmp=$(mktemp -d "$DIR/.extract.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 - "$WHL" "$tmp" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    whl.extractall(sys.argv[2], [n for n in whl.namelist() if n.startswith("include/")])
EOF
[[ -f $tmp/include/cudnn_frontend.h ]] || { log "no include/cudnn_frontend.h in $WHL"; exit 1; }
rm -rf "$DIR/include"
mv "$tmp/include" "$DIR/include"
log "wrote $DIR/include ($(find "$DIR/include" -type f | wc -l) files)"
