#!/usr/bin/env bash
# Installs what is missing, builds cgrad, and runs the whole test suite with CTest. GPU tests on
# a machine without a GPU exit 77 and CTest reports them skipped. Arguments go to ctest (e.g. -R
# matmul). The exit code is ctest's.
# Environment: see scripts/setup.sh (BUILD_DIR, CGRAD_CUDA_ARCH, CGRAD_CMAKE_ARGS, CGRAD_OFFLINE).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export BUILD_DIR=${BUILD_DIR:-build}
"$ROOT/scripts/setup.sh"
exec ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
