"""Eye sides in the k-Same averages (:mod:`medanon.anonymize.eye_sides`): prints one JSON line.

On a fundus phantom of ``--patients`` patients (one eye each, left or right, or with ``--both-eyes 1`` both eyes of
every patient as in EyePACS; ``--per-patient`` images of each eye, 64 px, seed ``--seed``):

``disc_finder``: how often :func:`~medanon.anonymize.eye_sides.disc_side` gives the phantom's laterality label (and
how many images it leaves unknown), at 64 and 32 px.

``ghost``: per method (k-Same-Pixel; k-Centroid with the shipped ``restyle-map-fundus64`` codec) and ``eye_sides``
mode (``off``, the paper's, and ``auto``, the default), the records' *ghost disc*: the brightness (above the field of
view's mean, blurred as the disc finder blurs) at the mirror position of the brightest blob, as a share of the blob's
own; a second disc from the other side's eyes raises it. ``mixed`` counts the records whose patients have both sides.
The same share for the source images is the floor a single eye has.

    python benchmarks/eye_sides.py [--patients 100] [--per-patient 2] [--k 5] [--seed 3] [--both-eyes 0]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import medanon
from medanon.anonymize.eye_sides import DISC_SIGMA, UNKNOWN, disc_side


def ghost_share(images: torch.Tensor, fov: torch.Tensor | None = None) -> float:
    """Mean over ``images`` (N, C, H, W) of the blurred brightness at the mirror position of the brightest blob, as a
    share of the blob's (both above the field of view's mean)."""
    from scipy.ndimage import gaussian_filter

    out = []
    for i, img in enumerate(images):
        g = img.float().mean(0).numpy()
        f = (g > -0.92) if fov is None else fov[i, 0].numpy()          # released images: black outside the field
        w = g.shape[1]
        g = np.where(f, g - g[f].mean(), 0.0)
        b = gaussian_filter(g, DISC_SIGMA * w) / np.maximum(gaussian_filter(f.astype(float), DISC_SIGMA * w), 1e-3)
        b = np.where(f, b, -np.inf)
        y, x = np.unravel_index(np.argmax(b), b.shape)
        out.append(b[y, w - 1 - x] / b[y, x])
    return round(float(np.mean(out)), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patients", type=int, default=100)
    ap.add_argument("--per-patient", type=int, default=2)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--both-eyes", type=float, default=0.0, help="share of patients photographed in both eyes")
    args = ap.parse_args()
    t0 = time.perf_counter()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        root = medanon.make_phantom(Path(tmp) / "ph", patients=args.patients, per_patient=args.per_patient, size=64,
                                    seed=args.seed, both_eyes=args.both_eyes)
        finder = {}
        for size in (64, 32):
            ds = medanon.open_dataset(root, size=size)
            images, fov = ds.tensors(progress=False)
            found, truth = disc_side(images, fov), ds.label_array("laterality").astype(int)
            known = found != UNKNOWN
            finder[f"{size}px"] = {"images": len(ds), "agree": round(float((found[known] == truth[known]).mean()), 4),
                                   "unknown": int((~known).sum())}
        ds = medanon.open_dataset(root, size=64)
        images, fov = ds.tensors(progress=False)
        ghost = {"sources": ghost_share(images, fov)}
        for method in ("kpixel", "kcentroid"):
            for mode in ("off", "auto"):
                rel = getattr(medanon.anonymize, method)(ds, k=args.k, eye_sides=mode,
                                                         release_labels=["laterality"])
                records = list(rel)
                mixed = sum(";" in str(r.labels.get("laterality_counts", "")) for r in records)
                ghost[f"{method}/{mode}"] = {"records": len(records), "mixed": mixed,
                                             "ghost": ghost_share(torch.stack([r.image for r in records]))}
    print(json.dumps({"benchmark": "eye_sides", "patients": args.patients, "per_patient": args.per_patient,
                      "k": args.k, "seed": args.seed, "both_eyes": args.both_eyes,
                      "disc_finder": finder, "ghost": ghost,
                      "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
