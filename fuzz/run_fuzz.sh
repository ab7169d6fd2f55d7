#!/usr/bin/env bash
# Runs one libFuzzer target: first replays its regression inputs (fuzz/regressions/<target>/),
# then fuzzes for SECONDS from a seed corpus (fuzz/seed_corpus.sh). A crash, leak, timeout or
# out-of-memory fails the run; the input is left in WORK/<target>/artifacts/ — fix the bug and
# copy the input into fuzz/regressions/<target>/ so it stays a test.
#   run_fuzz.sh FUZZ_BINARY FUZZ_SRC_DIR WORK_DIR SECONDS
set -euo pipefail
bin=$1 src=$2 work=$3 seconds=$4
name=$(basename "$bin")
mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
opts=(-rss_limit_mb=2048 -timeout=20 -max_len=1048576 -print_final_stats=1)

mapfile -t regressions < <(find "$src/regressions/$name" -type f ! -name '.*' 2>/dev/null | sort)
if [ "${#regressions[@]}" -gt 0 ]; then
  echo "== $name: replaying ${#regressions[@]} regression inputs"
  "$bin" "${opts[@]}" "${regressions[@]}"
fi

"$src/seed_corpus.sh" "$name" "$work/$name/seeds"
echo "== $name: fuzzing for ${seconds}s (seeds: $(ls "$work/$name/seeds" | wc -l))"
"$bin" "${opts[@]}" -max_total_time="$seconds" -artifact_prefix="$work/$name/artifacts/" \
  "$work/$name/corpus" "$work/$name/seeds" 2>&1 | tail -n 25
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "== $name: FAILED (exit $status); crashing input(s): $(ls "$work/$name/artifacts")" >&2
  exit 1
fi
echo "== $name: clean"
