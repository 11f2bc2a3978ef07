"""Write docs/img/fundus_phantoms.png: the real retina next to procedural fundus phantoms (128 px).

Run from the repository root:  python docs/fundus_figure.py

Row 1: ``skimage.data.retina()`` (real, CC0) resized to 128 px, then phantoms of DR grade 0 to 4.
Row 2: two acquisitions of one patient, the vessel mask of the first, a marker-block patient, a
young woman and an old man. Every tile is labelled; all but the first are phantoms.

Prints one JSON line: mean and standard deviation of R, G, B inside the field of view for the real
retina and for 60 phantoms (averaged per image statistics, and their spread over phantoms).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from skimage import data
from skimage.transform import resize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from medanon.phantoms.common import PhantomParams, acquisition_rng, patient_rng
from medanon.phantoms.fundus import render, sample_patient

SIZE = 128
SEED = 11


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


def fov_stats(img: np.ndarray) -> dict[str, list[float]]:
    """Mean and std of R, G, B over the field of view (pixels whose R+G+B exceeds 30)."""
    x = img.astype(np.float64)
    fov = x.sum(-1) > 30
    return {"mean": x[fov].mean(0).round(1).tolist(), "std": x[fov].std(0).round(1).tolist()}


def real_retina(size: int = SIZE) -> np.ndarray:
    return (resize(data.retina(), (size, size), anti_aliasing=True) * 255).round().astype(np.uint8)


def main() -> None:
    tiles = []
    real = real_retina()
    tiles.append(_tile(real, "REAL skimage retina"))
    for g in range(5):
        w = [0.0] * 5
        w[g] = 1.0
        i, p = _find(lambda q: True, PhantomParams(grade_weights=tuple(w), marker_rate=0.0), start=20 * g)
        r = render(p, acquisition_rng(SEED, i, 0), SIZE)
        n = int(r.labels["n_microaneurysms"] + r.labels["n_haemorrhages"] + r.labels["n_exudates"]
                + r.labels["n_cotton_wool"])
        tiles.append(_tile(r.image, f"grade {g} ({n} lesions)" + (" NV" if r.labels["neovascularisation"] else "")))

    plain = PhantomParams(marker_rate=0.0)
    i, p = _find(lambda q: q.grade == 0, plain, start=200)
    first = render(p, acquisition_rng(SEED, i, 0), SIZE)
    tiles.append(_tile(first.image, f"pt {i} acq 1"))
    tiles.append(_tile(render(p, acquisition_rng(SEED, i, 1), SIZE).image, f"pt {i} acq 2"))
    tiles.append(_tile(first.mask.astype(np.uint8) * 255, f"pt {i} vessel mask"))
    i, p = _find(lambda q: q.marker_block, PhantomParams(marker_rate=1.0), start=300)
    tiles.append(_tile(render(p, acquisition_rng(SEED, i, 0), SIZE).image, "marker block"))
    i, p = _find(lambda q: q.sex == 0 and q.age < 32 and q.grade == 0, plain, start=400)
    tiles.append(_tile(render(p, acquisition_rng(SEED, i, 0), SIZE).image, f"F {p.age:.0f}y"))
    i, p = _find(lambda q: q.sex == 1 and q.age > 78 and q.grade == 0, plain, start=600)
    tiles.append(_tile(render(p, acquisition_rng(SEED, i, 0), SIZE).image, f"M {p.age:.0f}y"))

    cols = 6
    rows = (len(tiles) + cols - 1) // cols
    w, h = tiles[0].size
    grid = Image.new("RGB", (cols * (w + 4), rows * (h + 4)), (255, 255, 255))
    for k, t in enumerate(tiles):
        grid.paste(t, ((k % cols) * (w + 4), (k // cols) * (h + 4)))
    out = Path(__file__).resolve().parent / "img" / "fundus_phantoms.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.save(out)

    stats = [fov_stats(render(sample_patient(patient_rng(SEED + 1, k)), acquisition_rng(SEED + 1, k, 0),
                              SIZE).image) for k in range(60)]
    means = np.array([s["mean"] for s in stats])
    stds = np.array([s["std"] for s in stats])
    print(json.dumps({
        "size": SIZE,
        "real": fov_stats(real),
        "phantoms": {"n": len(stats), "mean": means.mean(0).round(1).tolist(), "std": stds.mean(0).round(1).tolist(),
                     "mean_spread": means.std(0).round(1).tolist()},
        "figure": str(out),
    }))


if __name__ == "__main__":
    main()
