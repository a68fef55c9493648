#!/usr/bin/env bash
# Fuzz the model readers for a bounded time each (default 60 s) under ASan + UBSan,
# starting from the seed corpus in fuzz/corpus/. Fails if the fuzzer finds anything.
# Usage: scripts/fuzz.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
cc=$(command -v clang || command -v clang-16 || command -v clang-15 || command -v clang-14 || true)
if [ -z "$cc" ]; then
  echo "fuzz: clang not found (apt-get install clang)" >&2
  exit 1
fi
out=build/fuzz
mkdir -p "$out"
flags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude"
"$cc" $flags -o "$out/gguf_fuzz" fuzz/gguf_fuzz.c src/load/gguf.c
work="$out/corpus-gguf"
rm -rf "$work"
mkdir -p "$work"
cp fuzz/corpus/gguf/* "$work/"
echo "fuzz: gguf reader for ${secs}s" >&2
"$out/gguf_fuzz" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="$out/crash-" "$work" 2>"$out/gguf_fuzz.log" || {
  tail -40 "$out/gguf_fuzz.log" >&2
  echo "fuzz: the gguf fuzzer found a problem; the input is in $out/crash-*" >&2
  exit 1
}
grep -E "stat::number_of_executed_units|stat::new_units_added" "$out/gguf_fuzz.log" >&2 || true
echo "fuzz: no findings"
