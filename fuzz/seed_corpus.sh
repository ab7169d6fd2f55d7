#!/usr/bin/env bash
# Builds a fuzz target's seed corpus in OUT from files in the repository (and, when present,
# the generated conformance suite): small valid models, arrays and tensors to mutate.
#   seed_corpus.sh TARGET OUT
set -euo pipefail
target=$1 out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
n=0
add() { local f=$1; [ -f "$f" ] || return 0; [ "$(stat -c %s "$f")" -le 1048576 ] || return 0
        cp "$f" "$out/seed_$n$(basename "$f" | sed 's/.*\(\.[a-z]*\)$/\1/')"; n=$((n+1)); }
suite=""
for d in "$root"/build*/onnx_node_suite; do [ -d "$d" ] && suite=$d && break; done
case "$target" in
  fuzz_onnx_model)
    add "$root/demo/digits_cnn.onnx"
    if [ -n "$suite" ]; then
      for f in $(ls -d "$suite"/*/model.onnx | awk 'NR % 4 == 0' | head -n 250); do add "$f"; done
    fi ;;
  fuzz_npy)
    for f in "$root"/demo/samples/*.npy; do add "$f"; done
    /usr/bin/python3 - "$out" <<'PY'
import sys, numpy as np, os
o = sys.argv[1]
np.save(os.path.join(o, "f16.npy"), np.arange(6, dtype=np.float16).reshape(2, 3))
np.save(os.path.join(o, "i64_fortran.npy"), np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)))
np.save(os.path.join(o, "bool0d.npy"), np.array(True))
np.savez(os.path.join(o, "two.npz"), a=np.ones((2, 2), np.float32), b=np.arange(3, dtype=np.int32))
np.savez_compressed(os.path.join(o, "zipped.npz"), x=np.linspace(0, 1, 50, dtype=np.float64))
PY
    ;;
  fuzz_tensor_pb)
    if [ -n "$suite" ]; then
      for f in $(ls "$suite"/*/test_data_set_0/input_0.pb | awk 'NR % 4 == 0' | head -n 200); do add "$f"; done
    fi
    /usr/bin/python3 - "$out" <<'PY'
import sys, os, numpy as np
from onnx import numpy_helper
o = sys.argv[1]
for i, a in enumerate([np.arange(6, dtype=np.float32).reshape(2, 3), np.array(["ab", "c"], dtype=object),
                       np.arange(4, dtype=np.int8), np.zeros((0, 3), np.float64)]):
    with open(os.path.join(o, "py_%d.pb" % i), "wb") as f:
        f.write(numpy_helper.from_array(a, "t%d" % i).SerializeToString())
PY
    ;;
  fuzz_compiled_model)
    # Compiled files made from small models by the ferry next to the fuzz build, when there is one.
    ferry_bin=""
    for b in "$root"/build/ferry "$root"/build-*/ferry; do [ -x "$b" ] && ferry_bin=$b && break; done
    if [ -n "$ferry_bin" ]; then
      "$ferry_bin" compile "$root/demo/digits_cnn.onnx" -o "$out/digits.ferry" >/dev/null 2>&1 || true
      if [ -n "$suite" ]; then
        i=0
        for m in $(ls -d "$suite"/*/model.onnx | awk 'NR % 40 == 0' | head -n 20); do
          "$ferry_bin" compile "$m" -o "$out/suite_$i.ferry" >/dev/null 2>&1 || true; i=$((i+1))
        done
      fi
    fi ;;
  fuzz_jpeg)
    /usr/bin/python3 - "$out" <<'PY'
import sys, os, numpy as np
from PIL import Image
o = sys.argv[1]
rng = np.random.RandomState(0)
img = Image.fromarray(rng.randint(0, 256, (11, 17, 3)).astype(np.uint8), "RGB")
img.save(os.path.join(o, "rgb420.jpg"), quality=75)
img.save(os.path.join(o, "rgb444.jpg"), quality=90, subsampling=0)
img.save(os.path.join(o, "progressive.jpg"), quality=60, progressive=True)
img.save(os.path.join(o, "optimized.jpg"), quality=50, optimize=True)
img.convert("L").save(os.path.join(o, "gray.jpg"), quality=80)
img.convert("CMYK").save(os.path.join(o, "cmyk.jpg"), quality=80)
Image.new("RGB", (1, 1), (200, 10, 30)).save(os.path.join(o, "one.jpg"))
PY
    ;;
  fuzz_png)
    /usr/bin/python3 - "$out" <<'PY'
import sys, os, numpy as np
from PIL import Image
o = sys.argv[1]
rng = np.random.RandomState(0)
rgb = Image.fromarray(rng.randint(0, 256, (7, 9, 3)).astype(np.uint8), "RGB")
rgb.save(os.path.join(o, "rgb.png"))
rgb.convert("RGBA").save(os.path.join(o, "rgba.png"))
rgb.convert("L").save(os.path.join(o, "gray.png"))
rgb.convert("LA").save(os.path.join(o, "gray_alpha.png"))
rgb.convert("1").save(os.path.join(o, "bilevel.png"))
p = rgb.convert("P", palette=Image.ADAPTIVE, colors=16)
p.save(os.path.join(o, "palette4.png"), bits=4)
p.save(os.path.join(o, "palette_trns.png"), transparency=3)
Image.fromarray((rng.randint(0, 65536, (5, 6))).astype(np.uint16)).save(os.path.join(o, "gray16.png"))
PY
    ;;
  fuzz_checkpoint)
    # Checkpoints written by ferry's own writer, kept in the regression folder (all dtypes, meta).
    for f in "$root"/fuzz/regressions/fuzz_checkpoint/*.fckpt; do add "$f"; done ;;
  fuzz_kserve_request)
    # KServe v2 requests: JSON tensors (flat and nested), a binary section after the first newline.
    printf '%s' '{"id":"a","inputs":[{"name":"x","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,5,6,7,8.5]},{"name":"ids","datatype":"INT64","shape":[2,3],"data":[[1,2,3],[4,5,6]]},{"name":"mask","datatype":"BOOL","shape":[2,2,2],"data":[true,false,true,true,false,false,true,false]},{"name":"h","datatype":"FP16","shape":[2,3],"data":[0.5,1,2,3,4,5]},{"name":"u","datatype":"UINT8","shape":[2,1,2],"data":[0,255,1,2]}],"outputs":[{"name":"y","parameters":{"binary_data":true}}],"parameters":{"timeout":1000}}' > "$out/seed_json"
    printf '%s\n%s' '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":16}},{"name":"ids","datatype":"INT64","shape":[1,1],"parameters":{"binary_data_size":8}},{"name":"mask","datatype":"BOOL","shape":[1,2,2],"data":[1,0,1,0]},{"name":"h","datatype":"FP16","shape":[1,3],"data":[1,2,3]},{"name":"u","datatype":"UINT8","shape":[1,1,2],"data":[1,2]}]}' '0123456789abcdefghijklmn' > "$out/seed_binary"
    # BYTES elements: binary (4-byte little-endian length, then the bytes) and as JSON strings.
    { printf '%s\n' '{"inputs":[{"name":"s","datatype":"BYTES","shape":[1,2],"parameters":{"binary_data_size":13}}],"outputs":[{"name":"t","parameters":{"binary_data":true}}]}'
      printf '\005\000\000\000hello\000\000\000\000'; } > "$out/seed_bytes_binary"
    printf '%s' '{"inputs":[{"name":"s","datatype":"BYTES","shape":[2,1],"data":["a","bc"]}]}' > "$out/seed_bytes_json"
    printf '%s' '{"parameters":{"config":"{}"}}' > "$out/seed_load"
    printf '%s' '{"ready":true}' > "$out/seed_index" ;;
  fuzz_model_config)
    # config.pbtxt files in Triton's text format, with fields ferry supports and fields it warns about.
    cat > "$out/seed_full.pbtxt" <<'PBTXT'
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 4
version_policy: { specific: { versions: [1, 3] } }
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100
  default_queue_policy { max_queue_size: 8 default_timeout_microseconds: 10 allow_timeout_override: true timeout_action: DELAY } }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "threads" value: { string_value: "2" } }
optimization { execution_accelerators { cpu_execution_accelerator : [ { name : "openvino" } ] } }
PBTXT
    printf '%s\n' 'backend: "onnxruntime"' 'version_policy: { latest: { num_versions: 2 } }' 'model_warmup [ { name: "w" batch_size: 1 } ]' > "$out/seed_small.pbtxt"
    # Triton's reshape and format (clients' dims [2,2], the model's [4]).
    printf '%s\n' 'max_batch_size: 4' 'input [ { name: "x" data_type: TYPE_FP32 format: FORMAT_NONE dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]' \
      'output [ { name: "y" data_type: TYPE_FP32 dims: [ 2, -1 ] reshape { shape: [ 2, -1 ] } } ]' > "$out/seed_reshape.pbtxt" ;;
  *) echo "seed_corpus.sh: unknown target '$target'" >&2; exit 2 ;;
esac
