#!/usr/bin/env bash
# Installs a built cgrad into a temporary prefix and builds tests/consumer against that installed
# copy only, four ways: CMake (find_package: cgrad::cgrad, cgrad::cgrad_static) and pkg-config
# (libcgrad.so, libcgrad.a + Libs.private). Each program runs on the CPU, so a CUDA build works on
# a machine without a GPU. Also fails when an installed CMake/pkg-config file, or the library's run
# path, names the source or build tree.
#
# Usage: scripts/ci_consumer.sh [BUILD_DIR]   (default build-cpu: configured and built already)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-build-cpu}
[[ -f $BUILD_DIR/CMakeCache.txt ]] || { echo "ci_consumer: $BUILD_DIR is not a configured build directory" >&2; exit 1; }
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cgrad-consumer.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix

step() { printf '[ci_consumer] %s\n' "$*"; }
fail() { printf '[ci_consumer] FAILED: %s\n' "$*" >&2; exit 1; }

step "install $BUILD_DIR into $PREFIX"
cmake --install "$BUILD_DIR" --prefix "$PREFIX" >/dev/null
libdir=$(dirname "$(find "$PREFIX" -name cgrad.pc -path '*/pkgconfig/*')")
libdir=$(dirname "$libdir")

# The installed files must not point back at this machine's trees.
if grep -rlF -e "$ROOT" -e "$BUILD_DIR" "$libdir/cmake" "$libdir/pkgconfig"; then
  fail "installed package files above name the source or build tree"
fi
runpath=$(readelf -d "$libdir/libcgrad.so" | grep -E 'R(UN)?PATH' || true)
if grep -qF -e "$ROOT" -e "$BUILD_DIR" <<< "$runpath"; then
  fail "installed libcgrad.so has a run path into the source or build tree: $runpath"
fi

# The consumer is built from a copy, away from the source tree.
mkdir "$WORK/src"
cp "$ROOT/tests/consumer/main.c" "$ROOT/tests/consumer/CMakeLists.txt" "$WORK/src/"

# Runs a consumer binary; it must load libcgrad.so (if at all) from the prefix.
run() {
  local exe=$1 loaded
  loaded=$(ldd "$exe" | grep -F libcgrad || true)
  if [[ -n $loaded && $loaded != *"$PREFIX"* ]]; then
    fail "$exe loads a libcgrad outside $PREFIX: $loaded"
  fi
  step "run ${exe##*/}"
  "$exe" || fail "${exe##*/} exited with status $?"
}

step "CMake: find_package(cgrad) with CMAKE_PREFIX_PATH=$PREFIX"
cmake -S "$WORK/src" -B "$WORK/cmake" -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >/dev/null || fail "configuring the consumer"
found=$(sed -n 's/^cgrad_DIR:PATH=//p' "$WORK/cmake/CMakeCache.txt")
[[ $found == "$libdir/cmake/cgrad" ]] || fail "find_package(cgrad) found $found, not the installed copy"
cmake --build "$WORK/cmake" >/dev/null || fail "building the consumer with CMake"
run "$WORK/cmake/consumer"
run "$WORK/cmake/consumer_static"

step "pkg-config: cc main.c \$(pkg-config --cflags --libs cgrad)"
export PKG_CONFIG_PATH=$libdir/pkgconfig
pc_libdir=$(pkg-config --variable=libdir cgrad)
cc -std=c11 -o "$WORK/consumer_pc" "$WORK/src/main.c" $(pkg-config --cflags --libs cgrad) \
  -Wl,-rpath,"$pc_libdir" || fail "building the consumer with pkg-config"
run "$WORK/consumer_pc"

step "pkg-config: libcgrad.a \$(pkg-config --static --libs cgrad)"
# --static adds Libs.private; -lcgrad becomes the archive itself, which the linker would
# otherwise pass over for libcgrad.so.
static_libs=$(pkg-config --static --libs cgrad)
cc -std=c11 -o "$WORK/consumer_pc_static" "$WORK/src/main.c" $(pkg-config --cflags cgrad) \
  ${static_libs/-lcgrad/-l:libcgrad.a} || fail "building the static consumer with pkg-config"
needed=$(readelf -d "$WORK/consumer_pc_static")
[[ $needed != *libcgrad* ]] || fail "consumer_pc_static still needs libcgrad.so"
run "$WORK/consumer_pc_static"

step "passed: the installed cgrad builds and runs a consumer with CMake and with pkg-config"
