"""Decoding speed of EyePACS-size fundus JPEGs into 64 px tensors: prints one JSON line.

Target (issue 13): >= 50 EyePACS-size (4752 x 3168) JPEGs per second into 64 px tensors on 2 cores, with
output within 1/255 of the full-decode path. Both paths run in the same process on the same files:

* ``pil``: plain Pillow, full decode and a Lanczos resize to the output size (no field-of-view crop): the
  floor of any full-decode path;
* ``plain``: Pillow full decode, then medanon's preprocessing at full resolution (the path before issue 13:
  ``preprocess(imageio.read(path))``), against which the outputs are compared;
* ``medanon``: ``open_dataset(...).tensors(workers=2)``, i.e. JPEG draft-mode decoding at 1/8 scale, the crop
  planned in source pixels, the same Lanczos resize (``medanon.data.decode``), two threads.

Synthetic photographs are written to a temporary folder (a cut-off orange disc with vessels, optic disc and
sensor noise, JPEG quality 90, about 1 MB each, like EyePACS); nothing is downloaded. ``cpu_ms_per_image`` is
process CPU time per image (what 2 free cores turn into ``2000 / cpu_ms`` images per second);
``images_per_s`` is wall-clock and drops when other work shares the cores (``load_average`` says how busy
they were); ``thread_speedup`` is two threads over one in the same run (near 1 when the cores are taken by
other work). Differences are in [0, 1] intensity units x 255, over every pixel of every image, and also over
the pixels at least two output pixels inside the field-of-view border (``inside_fov_border``), where JPEG's
half-resolution colour planes, which draft mode decodes at 1/16, no longer reach.

    python benchmarks/decode.py [--files 8] [--images 200] [--plain 4] [--size 64]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

from medanon.config import DataConfig
from medanon.data import imageio
from medanon.data.dataset import open_dataset
from medanon.data.layouts import GenericOptions
from medanon.data.transforms import preprocess
from medanon.runtime import cpu_count

W, H = 4752, 3168


def synthetic_fundus(seed: int) -> Image.Image:
    """A fundus-like 4752 x 3168 photograph: the disc cut at top and bottom, vessels, optic disc, noise."""
    rng = np.random.default_rng(seed)
    lw, lh = W // 4, H // 4
    yy, xx = np.mgrid[0:lh, 0:lw].astype(np.float32)
    cx, cy = lw / 2 + rng.uniform(-20, 20), lh / 2 + rng.uniform(-10, 10)
    r = lh * rng.uniform(0.52, 0.56)
    d = np.hypot(xx - cx, yy - cy)
    fov = np.clip((r - d) / 2.0, 0, 1)
    img = np.stack([0.75 - 0.25 * d / r, 0.35 - 0.15 * d / r, 0.12 + 0 * d], -1)
    vessels = np.zeros((lh, lw), np.float32)
    t = np.linspace(0, 1, 600)
    for _ in range(14):
        a, ph, f = rng.uniform(-1, 1), rng.uniform(0, 6), rng.uniform(1, 4)
        px = cx + t * r * np.cos(a * 3) + 30 * np.sin(f * 6 * t + ph)
        py = cy + t * r * np.sin(a * 3) + 30 * np.cos(f * 5 * t + ph)
        ok = (px >= 0) & (px < lw) & (py >= 0) & (py < lh)
        vessels[py[ok].astype(int), px[ok].astype(int)] = 1
    vessels = ndimage.gaussian_filter(ndimage.binary_dilation(vessels, iterations=2).astype(np.float32), 1.2)
    img = img * (1 - 0.5 * vessels[..., None])
    img = img + 0.3 * np.exp(-((xx - cx - r * 0.4) ** 2 + (yy - cy) ** 2) / (2 * (r * 0.08) ** 2))[..., None]
    img = np.clip(img * fov[..., None], 0, 1)
    big = np.asarray(Image.fromarray((img * 255).astype(np.uint8)).resize((W, H), Image.Resampling.BICUBIC))
    noisy = big.astype(np.int16) + rng.integers(-4, 5, size=big.shape, dtype=np.int16) * (big > 8)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=8, help="distinct synthetic photographs")
    ap.add_argument("--images", type=int, default=200, help="dataset rows (hard links to the files)")
    ap.add_argument("--plain", type=int, default=4, help="images decoded by the plain path (about 2 s each)")
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        files = []
        for i in range(args.files):
            files.append(tmp / f"src{i}.jpeg")
            synthetic_fundus(i).save(files[-1], quality=90)
        (tmp / "images").mkdir()
        rows = []
        for i in range(args.images):
            name = f"{i:05d}_left.jpeg"
            os.link(files[i % len(files)], tmp / "images" / name)
            rows.append([name, i % len(files)])   # the copies of one photograph are one person's
        with open(tmp / "labels.csv", "w", newline="") as f:
            csv.writer(f).writerows([["image", "patient"], *rows])
        generic = GenericOptions(labels_csv=tmp / "labels.csv", image_col="image", patient_col="patient",
                                 images_dir=tmp / "images")
        cfg = DataConfig(size=args.size, modality="fundus")

        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(min(args.plain, len(files))):
            with Image.open(files[i]) as im:
                im.convert("RGB").resize((args.size, args.size), Image.Resampling.LANCZOS)
        pil_wall, pil_cpu = time.perf_counter() - t0, time.process_time() - c0

        t0, c0 = time.perf_counter(), time.process_time()
        plain = [preprocess(imageio.read(files[i]), size=args.size, channels=3, crop="fov")
                 for i in range(min(args.plain, len(files)))]
        plain_wall, plain_cpu = time.perf_counter() - t0, time.process_time() - c0

        ds = open_dataset(tmp, cfg, generic=generic)
        t0, c0 = time.perf_counter(), time.process_time()
        images, _ = ds.tensors(workers=2, progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        one = open_dataset(tmp, cfg, generic=generic)          # a fresh dataset: nothing decoded yet
        t0 = time.perf_counter()
        one.tensors(workers=1, progress=False)
        wall_one = time.perf_counter() - t0

        by_file = {}
        for i, rec in enumerate(ds.records):
            by_file.setdefault(int(rec.patient_id) % len(files), i)
        diffs, interior = [], []
        for k, ref in enumerate(plain):
            new = images[by_file[k]].numpy()
            dd = np.abs(new - ref.image).max(axis=0) / 2 * 255          # [-1, 1] -> [0, 1] x 255
            diffs.append(dd)
            interior.append(dd[ndimage.binary_erosion(ref.fov, iterations=2)])
    n = len(plain)
    print(json.dumps({
        "benchmark": "decode", "source": f"{W}x{H} JPEG q90", "size": args.size, "cores": cpu_count(),
        "load_average": round(os.getloadavg()[0], 2),
        "pil_images_per_s": round(n / pil_wall, 2),
        "pil_cpu_ms_per_image": round(1000 * pil_cpu / n, 1),
        "plain_images_per_s": round(n / plain_wall, 2),
        "plain_cpu_ms_per_image": round(1000 * plain_cpu / n, 1),
        "images_per_s": round(len(ds) / wall, 1),
        "images_per_s_1_thread": round(len(ds) / wall_one, 1),
        "thread_speedup": round(wall_one / wall, 2),
        "cpu_ms_per_image": round(1000 * cpu / len(ds), 1),
        "images_per_s_2_free_cores": round(2000 / (1000 * cpu / len(ds)), 1),
        "speedup_cpu": round((plain_cpu / n) / (cpu / len(ds)), 1),
        "max_abs_diff_255": round(float(max(x.max() for x in diffs)), 2),
        "max_abs_diff_255_inside_fov_border": round(float(max(x.max() for x in interior)), 2),
        "mean_abs_diff_255": round(float(np.mean([x.mean() for x in diffs])), 3),
        "target_met": len(ds) / wall >= 50,
    }))


if __name__ == "__main__":
    main()
