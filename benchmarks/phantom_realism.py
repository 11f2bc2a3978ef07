"""The fundus phantoms' lesion counts by grade and their colour against the real retina: prints one JSON line.

``lesions``: mean number of lesions inside the field of view (microaneurysms, haemorrhages, exudates, cotton-wool
spots) over ``--patients`` phantom patients of each DR grade, rendered at 64 px (counts do not depend on the size).
``colour``: at each size, the mean and standard deviation of R, G and B inside the field of view (0-255), for the
real retina of scikit-image (``skimage.data.retina``, resized) and for ``--images`` phantoms (mean of per-image
statistics), as ``tests/test_phantom_fundus.py::test_colour_statistics_match_the_real_retina`` compares them, and
the phantoms' vessel share of the field of view (mean and range over the images: VS-Snow's ``vessel_fraction``).

    python benchmarks/phantom_realism.py [--patients 12] [--images 40] [--sizes 64,128,256]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from medanon.phantoms.common import PhantomParams, acquisition_rng, patient_rng
from medanon.phantoms.fundus import render, sample_patient

SEED = 20240611
LESIONS = ("n_microaneurysms", "n_haemorrhages", "n_exudates", "n_cotton_wool")


def _fov(img: np.ndarray) -> np.ndarray:
    return img.astype(np.int64).sum(-1) > 30


def _stats(images: list[np.ndarray]) -> dict:
    per = [(x[_fov(x)].astype(float).mean(0), x[_fov(x)].astype(float).std(0)) for x in images]
    return {"mean_rgb": [round(float(v), 1) for v in np.mean([m for m, _ in per], 0)],
            "std_rgb": [round(float(v), 1) for v in np.mean([s for _, s in per], 0)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patients", type=int, default=12, help="phantom patients per grade")
    ap.add_argument("--images", type=int, default=40, help="phantoms per size for the colour statistics")
    ap.add_argument("--sizes", default="64,128,256")
    args = ap.parse_args()
    t0 = time.perf_counter()
    lesions = []
    for g in range(5):
        weights = tuple(1.0 if j == g else 0.0 for j in range(5))
        counts = []
        for i in range(args.patients):
            p = sample_patient(patient_rng(SEED, 100 * g + i), PhantomParams(grade_weights=weights))
            lab = render(p, acquisition_rng(SEED, 100 * g + i, 0), 64).labels
            counts.append(sum(lab[k] for k in LESIONS))
        lesions.append(round(float(np.mean(counts)), 1))
    from skimage import data
    from skimage.transform import resize

    colour = {}
    for size in (int(s) for s in args.sizes.split(",")):
        real = (resize(data.retina(), (size, size), anti_aliasing=True) * 255).round().astype(np.uint8)
        made = [render(sample_patient(patient_rng(SEED, i), PhantomParams()), acquisition_rng(SEED, i, 0), size)
                for i in range(args.images)]
        share = [float(r.mask[_fov(r.image)].astype(bool).mean()) for r in made]
        colour[str(size)] = {"real": _stats([real]), "phantom": _stats([r.image for r in made]),
                             "phantoms": args.images, "vessel_share": [round(float(np.mean(share)), 3),
                                                                       round(min(share), 3), round(max(share), 3)]}
    print(json.dumps({"lesions_by_grade": lesions, "patients_per_grade": args.patients, "colour": colour,
                      "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
