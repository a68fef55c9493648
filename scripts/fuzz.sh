#!/usr/bin/env bash
# Fuzz the model readers (GGUF, safetensors), both at once, for a bounded time each (default 60 s) under ASan + UBSan,
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
"$cc" $flags -o "$out/model_fuzz" fuzz/model_fuzz.c src/load/model.c src/load/gguf.c src/load/safetensors.c src/load/check.c
# One reader: 0 when the fuzzer ran out its time without a finding.
fuzz_reader() {
  local reader=$1 work="$out/corpus-$1"
  rm -rf "$work"
  mkdir -p "$work"
  cp fuzz/corpus/$reader/* "$work/"
  "$out/model_fuzz" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$out/crash-$reader-" "$work" 2>"$out/$reader.log"
}
# The two at once, one per CPU: each still gets its whole time.
pids=()
for reader in gguf safetensors; do
  echo "fuzz: $reader reader for ${secs}s" >&2
  fuzz_reader $reader &
  pids+=($!)
done
found=0
i=0
for reader in gguf safetensors; do
  if wait "${pids[$i]}"; then
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$out/$reader.log" | sed "s/^/$reader: /" >&2 || true
  else
    tail -40 "$out/$reader.log" >&2
    echo "fuzz: the $reader fuzzer found a problem; the input is in $out/crash-$reader-*" >&2
    found=1
  fi
  i=$((i + 1))
done
[ $found -eq 0 ] || exit 1
echo "fuzz: no findings"
