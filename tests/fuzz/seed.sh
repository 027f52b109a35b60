#!/usr/bin/env bash
# Turns the captured pgoutput fixtures into a libFuzzer seed corpus
# (tests/fuzz/corpus/decode/, one message per file; not committed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/corpus/decode"
mkdir -p "$out"
n=0
for f in "$here"/../data/pgoutput/*.hex; do
    grep -v '^#' "$f" | cut -f3 | while read -r hex; do
        printf '%s' "$hex" | xxd -r -p >"$out/$(printf '%s' "$hex" | sha1sum | cut -c1-16)"
    done
    n=$((n + $(grep -vc '^#' "$f")))
done
echo "seeded $out from $n fixture lines"
