#!/usr/bin/env bash
# Benchmark of `ferry scan`: generates a tree of N Python files (default 5000; copies of the test
# fixtures with renamed identifiers, in 50 folders) and times scanning it, as text and as JSON.
# usage: bench/scan_bench.sh [FERRY] [N] [WORKDIR]       prints files/s and MB/s
set -euo pipefail
FERRY=${1:-build/ferry}
N=${2:-5000}
WORK=${3:-$(mktemp -d /tmp/ferry-scan-bench.XXXXXX)}
HERE=$(cd "$(dirname "$0")/.." && pwd)
/usr/bin/python3 - "$HERE/tests/scan/fixtures" "$WORK/tree" "$N" <<'PY'
import os, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
texts = [open(os.path.join(src, f), encoding="utf-8").read() for f in sorted(os.listdir(src)) if f.endswith(".py")]
for i in range(n):
    d = os.path.join(out, f"pkg{i % 50}")
    os.makedirs(d, exist_ok=True)
    t = texts[i % len(texts)].replace("def main", f"def main_{i}").replace("AverageMeter", f"Meter{i}")
    open(os.path.join(d, f"mod{i}.py"), "w", encoding="utf-8").write(t)
PY
bytes=$(du -sb "$WORK/tree" | cut -f1)
for mode in text json; do
  flag=""; [ "$mode" = json ] && flag="--json"
  "$FERRY" scan $flag "$WORK/tree" > /dev/null  # warm the page cache
  best=""; cpu=""
  for run in 1 2 3; do
    /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$FERRY" scan $flag "$WORK/tree" > "$WORK/out.$mode"
    read -r wall user sys < "$WORK/time"
    if [ -z "$best" ] || [ "$(echo "$wall < $best" | bc -l)" = 1 ]; then best=$wall; cpu=$(echo "$user + $sys" | bc -l); fi
  done
  printf "scan %-4s: %d files (%.1f MB) in %.2f s wall (best of 3; %.2f s CPU, %d cores): %.0f files/s, %.1f MB/s\n" "$mode" "$N" \
    "$(echo "$bytes / 1000000" | bc -l)" "$best" "$cpu" "$(nproc)" "$(echo "$N / $best" | bc -l)" "$(echo "$bytes / 1000000 / $best" | bc -l)"
done
grep -m1 "^ferry scan" "$WORK/out.text" || true
echo "tree: $WORK/tree"
