#!/usr/bin/env python3
"""Writes the image test fixtures of tests/unit/test_image.cpp and test_train_data.cpp into OUT:
PNG files of every color type / bit depth / interlacing (hand-encoded), JPEG files from PIL,
and what PIL and torchvision make of them (the references).
  image_fixtures.py OUT
OUT/decode.txt: "<file> <width> <height>" per image; OUT/<file>.npy: PIL's convert('RGB').
OUT/transforms.txt: "<name> <source file> <kind> <args...>"; OUT/<name>.npy: torchvision's output.
OUT/folder/: an ImageFolder tree; OUT/folder_samples.txt: "<label>\t<path>" as torchvision lists them.
"""
import os
import struct
import sys
import warnings
import zlib

import numpy as np
from PIL import Image

warnings.simplefilter("ignore")
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.RandomState(1234)


def chunk(tag, data):
    c = struct.pack(">I", len(data)) + tag + data
    return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def pack_rows(samples, bit_depth):
    """samples: [H, W*C] ints -> list of packed row bytes (big-endian for 16-bit)."""
    rows = []
    for r in samples:
        if bit_depth == 16:
            rows.append(r.astype(">u2").tobytes())
        elif bit_depth == 8:
            rows.append(r.astype(np.uint8).tobytes())
        else:
            per = 8 // bit_depth
            padded = np.zeros(((len(r) + per - 1) // per) * per, np.int64)
            padded[: len(r)] = r
            g = padded.reshape(-1, per)
            b = np.zeros(len(g), np.int64)
            for k in range(per):
                b |= g[:, k] << (8 - bit_depth * (k + 1))
            rows.append(b.astype(np.uint8).tobytes())
    return rows


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(name, pixels, color_type, bit_depth, interlace=False, palette=None, trns=None):
    """pixels: [H, W, C] ints (C = channels of the color type; palette indices for type 3)."""
    h, w, c = pixels.shape
    raw = b""
    if not interlace:
        for row in pack_rows(pixels.reshape(h, w * c), bit_depth):
            raw += b"\x00" + row
    else:
        for x0, y0, dx, dy in ADAM7:
            sub = pixels[y0::dy, x0::dx]
            if sub.shape[0] == 0 or sub.shape[1] == 0:
                continue
            for row in pack_rows(sub.reshape(sub.shape[0], -1), bit_depth):
                raw += b"\x00" + row
    png = b"\x89PNG\r\n\x1a\n"
    png += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0))
    if palette is not None:
        png += chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        png += chunk(b"tRNS", trns)
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(os.path.join(out, name), "wb") as f:
        f.write(png)


def rand(h, w, c, bits):
    return rng.randint(0, 1 << bits, size=(h, w, c))


W, H = 13, 7  # odd sizes exercise partial bytes and Adam7 passes
pal = rng.randint(0, 256, size=(256, 3))
pngs = []
for bits in (1, 2, 4, 8, 16):
    write_png(f"gray{bits}.png", rand(H, W, 1, bits), 0, bits); pngs.append(f"gray{bits}.png")
g16 = rand(H, W, 1, 8)  # 16-bit gray holding small values too: PIL clips, does not scale
g16[0, :5, 0] = [0, 1, 255, 256, 65535]
write_png("gray16_small.png", g16, 0, 16); pngs.append("gray16_small.png")
write_png("gray8_trns.png", rand(H, W, 1, 8), 0, 8, trns=struct.pack(">H", 7)); pngs.append("gray8_trns.png")
for bits in (8, 16):
    write_png(f"gray_alpha{bits}.png", rand(H, W, 2, bits), 4, bits); pngs.append(f"gray_alpha{bits}.png")
    write_png(f"rgb{bits}.png", rand(H, W, 3, bits), 2, bits); pngs.append(f"rgb{bits}.png")
    write_png(f"rgba{bits}.png", rand(H, W, 4, bits), 6, bits); pngs.append(f"rgba{bits}.png")
write_png("rgb8_trns.png", rand(H, W, 3, 8), 2, 8, trns=struct.pack(">HHH", 1, 2, 3)); pngs.append("rgb8_trns.png")
for bits in (1, 2, 4, 8):
    write_png(f"palette{bits}.png", rand(H, W, 1, bits), 3, bits, palette=pal[: 1 << bits]); pngs.append(f"palette{bits}.png")
write_png("palette8_trns.png", rand(H, W, 1, 8), 3, 8, palette=pal, trns=bytes(range(0, 200, 3)))
pngs.append("palette8_trns.png")
write_png("interlaced_rgb8.png", rand(H, W, 3, 8), 2, 8, interlace=True); pngs.append("interlaced_rgb8.png")
write_png("interlaced_gray4.png", rand(H, W, 1, 4), 0, 4, interlace=True); pngs.append("interlaced_gray4.png")
write_png("interlaced_rgba16.png", rand(H, W, 4, 16), 6, 16, interlace=True); pngs.append("interlaced_rgba16.png")
write_png("interlaced_1x1.png", rand(1, 1, 3, 8), 2, 8, interlace=True); pngs.append("interlaced_1x1.png")


def photo(h, w):
    """A smooth image with edges and noise: what resampling differences show on."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(x / 17.0) * np.cos(y / 23.0)
    g = 255 * (x + y) / (w + h)
    b = np.where(((x // 31) + (y // 29)) % 2 == 0, 200.0, 40.0)
    img = np.stack([r, g, b], axis=2) + rng.normal(0, 12, size=(h, w, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


jpegs = []
src = photo(37, 53)
src.save(os.path.join(out, "rgb420.jpg"), quality=90); jpegs.append("rgb420.jpg")
src.save(os.path.join(out, "rgb444.jpg"), quality=95, subsampling=0); jpegs.append("rgb444.jpg")
src.save(os.path.join(out, "rgb422.jpg"), quality=85, subsampling=1); jpegs.append("rgb422.jpg")
src.save(os.path.join(out, "progressive.jpg"), quality=80, progressive=True); jpegs.append("progressive.jpg")
src.convert("L").save(os.path.join(out, "gray.jpg"), quality=90); jpegs.append("gray.jpg")
src.convert("CMYK").save(os.path.join(out, "cmyk.jpg"), quality=90); jpegs.append("cmyk.jpg")

with open(os.path.join(out, "decode.txt"), "w") as f:
    for name in pngs + jpegs:
        a = np.asarray(Image.open(os.path.join(out, name)).convert("RGB"))
        np.save(os.path.join(out, name + ".npy"), a)
        f.write(f"{name} {a.shape[1]} {a.shape[0]}\n")

# Transform references (torchvision on PIL images).
import torch  # noqa: E402
from torchvision import transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402

photo(375, 500).save(os.path.join(out, "photo.jpg"), quality=92)
photo(451, 300).save(os.path.join(out, "tall.png"))
photo(40, 50).save(os.path.join(out, "small.png"))
norm = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])


def load(name):
    return Image.open(os.path.join(out, name)).convert("RGB")


def evalt(s):
    return T.Compose([T.Resize(round(s * 256 / 224)), T.CenterCrop(s), T.ToTensor(), norm])


refs = [
    ("eval_photo_224", "photo.jpg", "eval", [224], evalt(224)(load("photo.jpg"))),
    ("eval_tall_64", "tall.png", "eval", [64], evalt(64)(load("tall.png"))),
    ("eval_small_96", "small.png", "eval", [96], evalt(96)(load("small.png"))),
    ("center_pad_64", "small.png", "center_crop", [64],
     norm(T.ToTensor()(T.CenterCrop(64)(load("small.png"))))),
    ("resized_crop", "photo.jpg", "resized_crop", [10, 20, 100, 150, 56],
     norm(T.ToTensor()(F.resized_crop(load("photo.jpg"), 10, 20, 100, 150, [56, 56])))),
    ("resize_up", "small.png", "resize", [123, 77],
     norm(T.ToTensor()(load("small.png").resize((123, 77), Image.BILINEAR)))),
]
with open(os.path.join(out, "transforms.txt"), "w") as f:
    for name, srcname, kind, args, t in refs:
        np.save(os.path.join(out, name + ".npy"), t.numpy())
        f.write(" ".join([name, srcname, kind] + [str(a) for a in args]) + "\n")

# An ImageFolder tree: class order, nested folders, extension case, non-images.
from torchvision.datasets import ImageFolder  # noqa: E402

root = os.path.join(out, "folder")
tree = {
    "b": ["1.jpg", "sub/2.png", "sub-x/3.JPG", "sub/deeper/4.jpeg", "notes.txt"],
    "a": ["z.PNG", "a.jpg"],
    "A": ["0.png"],
    "a_b": ["x.jpg", "sub/y.jpg"],
}
files = {".jpg": "rgb420.jpg", ".jpeg": "rgb444.jpg", ".png": "rgb8.png"}
for cls, names in tree.items():
    for n in names:
        p = os.path.join(root, cls, n)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        ext = os.path.splitext(n)[1].lower()
        with open(p, "wb") as f:
            f.write(open(os.path.join(out, files[ext]), "rb").read() if ext in files else b"not an image")
os.makedirs(os.path.join(root, "zz_single"), exist_ok=True)
with open(os.path.join(root, "zz_single", "keep.jpg"), "wb") as f:
    f.write(open(os.path.join(out, "photo.jpg"), "rb").read())
ds = ImageFolder(root, transform=evalt(32))
with open(os.path.join(out, "folder_samples.txt"), "w") as f:
    for p, label in ds.samples:
        f.write(f"{label}\t{p}\n")
with open(os.path.join(out, "folder_classes.txt"), "w") as f:
    f.write("\n".join(ds.classes) + "\n")
np.save(os.path.join(out, "folder_eval_32.npy"), torch.stack([ds[i][0] for i in range(len(ds))]).numpy())
print("ok")
