#!/usr/bin/env bash
# The package installed into a fresh venv from a clean clone, offline, with Debian's packages only
# (README: "Python package"): clone HEAD, python3 -m venv --system-site-packages, pip install
# --no-build-isolation --no-index, then run the demo model from outside the tree. The build is the
# repository's CMake build at `make build`'s flags, so with ccache (CCACHE_BASEDIR = the clone) the
# library's objects are hits of the main build; it prints the seconds each step took.
#   tests/python/venv_install.sh SOURCE_DIR WORK_DIR [PYTHON]
set -euo pipefail
SRC=$1
WORK=$2
PY=${3:-/usr/bin/python3}
rm -rf "$WORK"
mkdir -p "$WORK"
t0=$(date +%s%N)
git clone -q --no-hardlinks "$SRC" "$WORK/ferry"
"$PY" -m venv --system-site-packages "$WORK/venv"
t1=$(date +%s%N)
FERRY_JOBS=${FERRY_JOBS:-2} "$WORK/venv/bin/python" -m pip install -q --no-build-isolation --no-index "$WORK/ferry" \
  > "$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log"; exit 1; }
t2=$(date +%s%N)
cd "$WORK"  # not the source tree: the installed package must be the one imported
"$WORK/venv/bin/python" - "$SRC" <<'PYEOF'
import os, sys
import numpy as np
import ferry as ort
src = sys.argv[1]
assert ort.__file__.startswith(os.path.join(os.getcwd(), "venv")), ort.__file__
sess = ort.InferenceSession(os.path.join(src, "demo", "digits_cnn.onnx"))
x = np.load(os.path.join(src, "demo", "samples", "digits_batch.npy"))
ref = np.load(os.path.join(src, "demo", "samples", "digits_batch_logits_torch.npy"))
out = sess.run(None, {"image": x})[0]
np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
assert os.path.isfile(os.path.join(os.path.dirname(ort.__file__), "__init__.pyi"))
print("installed ferry", ort.__version__, "runs the demo model:", out.shape)
PYEOF
t3=$(date +%s%N)
echo "venv_install: clone+venv $(( (t1 - t0) / 1000000 )) ms, pip install $(( (t2 - t1) / 1000000 )) ms," \
  "import+run $(( (t3 - t2) / 1000000 )) ms"
rm -rf "$WORK"
