#!/usr/bin/python3
"""Exports the side-by-side benchmark's models (opset 17, dynamic batch) and their inputs.

    /usr/bin/python3 bench/bench_models.py --out DIR [--only resnet50,...] [--batches 1,8]

The networks are the model zoo's (tests/zoo/gen_zoo.py builds them: same seeds, same weights);
here each is exported once with a dynamic batch axis so batch 1 and batch 8 run the same file.
Layout: DIR/<model>/model.onnx, DIR/<model>/meta.json (input and output names),
DIR/<model>/b<B>/input_<i>.npy. Existing files are kept (delete DIR/<model> to redo one).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "zoo"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

import numpy as np  # noqa: E402

OPSET = 17
BERT_SEQ, BERT_PAD = 128, 16


def image_model(build, hw=(224, 224)):
    return dict(build=build, inputs=["input"], outputs=["output"], axes={"input": {0: "batch"}, "output": {0: "batch"}},
                make=lambda b, rng: [rng.standard_normal((b, 3) + hw).astype(np.float32)])


def bert_make(b, rng):
    ids = rng.integers(1, 1000, size=(b, BERT_SEQ), dtype=np.int64)
    mask = np.zeros((b, BERT_SEQ), dtype=bool)
    mask[:, BERT_SEQ - BERT_PAD:] = True  # trailing padding, as the zoo's case
    ids[:, BERT_SEQ - BERT_PAD:] = 0
    return [ids, mask]


def lstm_make(b, rng):
    import gen_zoo as z
    return [rng.standard_normal((z.LSTM_SEQ, b, z.LSTM_IN)).astype(np.float32),
            (0.5 * rng.standard_normal((4, b, z.LSTM_HID))).astype(np.float32),
            (0.5 * rng.standard_normal((4, b, z.LSTM_HID))).astype(np.float32)]


def specs():
    import gen_zoo as z
    return {
        "resnet50": image_model(lambda: z.build_tv_cnn("resnet50")),
        "mobilenet_v2": image_model(lambda: z.build_tv_cnn("mobilenet_v2")),
        "efficientnet_b0": image_model(lambda: z.build_tv_cnn("efficientnet_b0")),
        "vit_b_16": image_model(z.build_vit),
        "bert_encoder": dict(build=z.build_bert, inputs=["input_ids", "attention_mask"], outputs=["last_hidden_state"],
                             axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"},
                                   "last_hidden_state": {0: "batch"}},
                             make=bert_make),
        "bilstm": dict(build=z.build_lstm, inputs=["x", "h0", "c0"], outputs=["output", "h_n", "c_n"],
                       axes={"x": {1: "batch"}, "h0": {1: "batch"}, "c0": {1: "batch"}, "output": {1: "batch"},
                             "h_n": {1: "batch"}, "c_n": {1: "batch"}},
                       make=lstm_make),
        "unet": image_model(z.build_unet, hw=z.UNET_HW),
    }


def export(name, spec, out_dir, batches):
    import torch
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    model_path = os.path.join(d, "model.onnx")
    meta_path = os.path.join(d, "meta.json")
    if not (os.path.exists(model_path) and os.path.exists(meta_path)):
        model = spec["build"]()
        example = [torch.from_numpy(a) for a in spec["make"](2, np.random.default_rng(0))]
        tmp = model_path + ".tmp"
        torch.onnx.export(model, tuple(example), tmp, export_params=True, opset_version=OPSET, do_constant_folding=True,
                          input_names=spec["inputs"], output_names=spec["outputs"], dynamic_axes=spec["axes"])
        os.replace(tmp, model_path)
        with open(meta_path, "w") as f:
            json.dump({"model": name, "opset": OPSET, "inputs": spec["inputs"], "outputs": spec["outputs"],
                       "batch_axes": {k: list(v)[0] for k, v in spec["axes"].items()}}, f, indent=1)
        print(f"[{name}] exported {os.path.getsize(model_path) / 2**20:.1f} MiB", flush=True)
    for b in batches:
        bd = os.path.join(d, f"b{b}")
        if all(os.path.exists(os.path.join(bd, f"input_{i}.npy")) for i in range(len(spec["inputs"]))):
            continue
        os.makedirs(bd, exist_ok=True)
        for i, a in enumerate(spec["make"](b, np.random.default_rng(1000 + b))):
            np.save(os.path.join(bd, f"input_{i}.npy"), a)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    args = ap.parse_args()
    all_specs = specs()
    if args.list:
        print("\n".join(all_specs))
        return 0
    names = [n for n in args.only.split(",") if n] or list(all_specs)
    unknown = [n for n in names if n not in all_specs]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(all_specs)}", file=sys.stderr)
        return 2
    import torch
    torch.set_num_threads(2)
    batches = [int(b) for b in args.batches.split(",")]
    for n in names:
        export(n, all_specs[n], args.out, batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
