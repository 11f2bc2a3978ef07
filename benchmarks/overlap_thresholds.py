"""How far a re-exported copy and another person's image are from an image, in the near-duplicate test of
``medanon.data.overlap`` (RMS difference of 8x8 grey thumbnails, 8-bit grey levels): one JSON line per modality,
copy kind and reading size, with the largest distance of a copy to its original and the smallest distance between
two different images of the phantom (every pair but an image and its own copy), and whether the test's threshold
(``NEAR_GREY_LEVELS``) tells them apart.

Copies of a ``--size`` px phantom: re-saved PNG, JPEG at quality 75, enlarged to 2x (bicubic), shrunk to 3/4 and
saved as JPEG at quality 75, and shrunk to 1/2 (a copy below the reading size: detail is lost).

    python benchmarks/overlap_thresholds.py --work /tmp/ov [--patients 8 --size 64]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from _scratch import fresh_work  # benchmarks/_scratch.py
from PIL import Image

import medanon
from medanon.data.overlap import NEAR_GREY_LEVELS, THUMBNAIL, thumbnail

KINDS = ("png", "jpeg75", "enlarged2x", "shrunk0.75-jpeg75", "shrunk0.5")


def _copy(src: Path, dst: Path, kind: str) -> Path:
    shutil.copytree(src, dst)
    lines = (dst / "labels.csv").read_text().splitlines()
    for f in sorted((dst / "images").iterdir()):
        im = Image.open(f)
        im.load()
        side = {"enlarged2x": 2.0, "shrunk0.75-jpeg75": 0.75, "shrunk0.5": 0.5}.get(kind, 1.0)
        if side != 1.0:
            im = im.resize((round(im.width * side), round(im.height * side)), Image.BICUBIC)
        if "jpeg" in kind:
            im.save(f.with_suffix(".jpg"), quality=75)
            f.unlink()
        else:
            im.save(f, compress_level=1)
    if "jpeg" in kind:
        rows = [lines[0]] + [ln.replace(".png,", ".jpg,", 1) for ln in lines[1:]]
        (dst / "labels.csv").write_text("\n".join(rows) + "\n")
    return dst


def _thumbs(folder: Path, size: int) -> torch.Tensor:
    ds = medanon.open_dataset(folder, size=size)
    return thumbnail(torch.stack([ds.load(i)["image"] for i in range(len(ds))]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the phantoms and their copies")
    ap.add_argument("--patients", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    work = fresh_work(args.work)
    for modality in ("fundus", "xray"):
        src = medanon.make_phantom(work / modality, modality=modality, patients=args.patients, per_patient=2,
                                   size=args.size, seed=0)
        for kind in KINDS:
            copy = _copy(src, work / f"{modality}-{kind}", kind)
            for size in (args.size // 2, args.size):
                a, b = _thumbs(src, size), _thumbs(copy, size)
                d = torch.cdist(a.double(), b.double()) / THUMBNAIL
                copy_max = float(d.diag().max())
                others_min = float(d[~torch.eye(len(a), dtype=torch.bool)].min())
                print(json.dumps({"bench": "overlap_thresholds", "modality": modality, "copy": kind,
                                  "read_at": size, "images": len(a), "copy_max": round(copy_max, 2),
                                  "others_min": round(others_min, 2), "threshold": NEAR_GREY_LEVELS,
                                  "copies_found": copy_max <= NEAR_GREY_LEVELS,
                                  "others_apart": others_min > NEAR_GREY_LEVELS}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
