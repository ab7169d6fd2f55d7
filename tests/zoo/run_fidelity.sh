#!/usr/bin/env bash
# Fidelity check of ferry against PyTorch on the model zoo.
#
#   tests/zoo/run_fidelity.sh FERRY ZOO_DIR [--write-doc docs/fidelity.md] [--device D] [--timeout S] [--json F] [CASE...]
#
# ZOO_DIR is made by `/usr/bin/python3 tests/zoo/gen_zoo.py --out ZOO_DIR`.  Runs
# `FERRY run` on each case (all generated cases when no CASE is given), compares every
# output with PyTorch's in float64 (cosine >= 1-1e-9, max abs err <= 1e-4 * max|ref|;
# integer/bool outputs exactly equal), prints one row per case and, with --write-doc,
# writes the Markdown report.  Exit 0: all PASS; 1: any FAIL; 2: bad arguments / no zoo.
# Env: PYTHON (default /usr/bin/python3).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 FERRY ZOO_DIR [--write-doc docs/fidelity.md] [--device D] [--timeout S] [--json FILE] [CASE...]" >&2
  exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || PYTHON=python3
# The command line quoted in the report, as the user typed it.
CMDLINE="$0"
for a in "$@"; do CMDLINE+=" $(printf '%q' "$a")"; done
exec "$PYTHON" "$HERE/fidelity.py" --command "$CMDLINE" "$@"
