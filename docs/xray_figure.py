"""Write docs/img/xray_phantoms.png: a grid of procedural chest X-ray phantoms (128 px).

Run from the repository root:  python docs/xray_figure.py

Row 1: five different patients.  Row 2: two acquisitions of one patient, a pneumonia case, a situs
inversus case, a marker-block case.  Row 3: a lung mask overlay, its mask, an older and a younger
patient of each sex.  Every tile is labelled; all images are phantoms.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from medanon.phantoms.common import PhantomParams, acquisition_rng, patient_rng
from medanon.phantoms.xray import render, sample_patient

SIZE = 128
SEED = 7


def _find(pred, params=None, start=0):
    params = params or PhantomParams()
    for i in range(start, start + 5000):
        p = sample_patient(patient_rng(SEED, i), params)
        if pred(p):
            return i, p
    raise RuntimeError("no patient found")


def _tile(img: np.ndarray, text: str) -> Image.Image:
    rgb = np.repeat(img[..., None], 3, axis=2) if img.ndim == 2 else img
    tile = Image.fromarray(rgb.astype(np.uint8), "RGB")
    canvas = Image.new("RGB", (SIZE, SIZE + 14), (255, 255, 255))
    canvas.paste(tile, (0, 14))
    ImageDraw.Draw(canvas).text((2, 1), text, fill=(0, 0, 0))
    return canvas


def main() -> None:
    tiles = []
    plain = PhantomParams(pneumonia_rate=0.0, marker_rate=0.0, situs_inversus_rate=0.0)
    for k in range(5):   # alternate sexes, spread of ages
        i, p = _find(lambda q, k=k: q.sex == k % 2 and abs(q.age - (30 + 12 * k)) < 6, plain, start=10 * k)
        tiles.append(_tile(render(p, acquisition_rng(SEED, i, 0), SIZE).image,
                           f"pt {i} {'MF'[1 - p.sex]} {p.age:.0f}y"))
    i, p = _find(lambda q: True, plain, start=3)
    for a in (0, 1):
        tiles.append(_tile(render(p, acquisition_rng(SEED, i, a), SIZE).image, f"pt {i} acq {a}"))
    i, p = _find(lambda q: q.pneumonia and q.n_opacities >= 2)
    r = render(p, acquisition_rng(SEED, i, 0), SIZE)
    tiles.append(_tile(r.image, f"pneumonia n={int(r.labels['n_opacities'])}"))
    i, p = _find(lambda q: q.situs_inversus)
    tiles.append(_tile(render(p, acquisition_rng(SEED, i, 0), SIZE).image, "situs inversus"))
    i, p = _find(lambda q: q.marker_block)
    tiles.append(_tile(render(p, acquisition_rng(SEED, i, 0), SIZE).image, "marker block"))

    i, p = _find(lambda q: True, plain, start=60)
    r = render(p, acquisition_rng(SEED, i, 0), SIZE)
    over = np.repeat(r.image[..., None], 3, axis=2).astype(float)
    over[r.mask, 0] = 0.5 * over[r.mask, 0] + 127
    tiles.append(_tile(over, "lung mask overlay"))
    tiles.append(_tile(r.mask.astype(np.uint8) * 255, "lung mask"))
    for sex in (0, 1):
        for old in (False, True):
            i, p = _find(lambda q, s=sex, o=old: q.sex == s and (q.age > 75 if o else q.age < 35), plain,
                         start=100 + 200 * sex + 100 * old)
            tiles.append(_tile(render(p, acquisition_rng(SEED, i, 0), SIZE).image,
                               f"{'FM'[sex]} {p.age:.0f}y"))
    tiles = tiles[:15]

    cols = 5
    rows = (len(tiles) + cols - 1) // cols
    w, h = tiles[0].size
    grid = Image.new("RGB", (cols * (w + 4), rows * (h + 4)), (255, 255, 255))
    for k, t in enumerate(tiles):
        grid.paste(t, ((k % cols) * (w + 4), (k // cols) * (h + 4)))
    out = Path(__file__).resolve().parent / "img" / "xray_phantoms.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.save(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
