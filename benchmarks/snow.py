"""Snow and VS-Snow speed: prints one JSON line.

Images per second at 64 and 256 px, on in-memory phantom batches (loading and PNG writing
excluded, measured separately as the end-to-end release rate at 64 px):

- ``snow``: drawing each image's random order and replacing round(p·H·W) positions;
- ``vs_snow_<seg>``: VS-Snow with its vessel segmentation included (``frangi``, ``unet`` — the shipped
  64 px checkpoint, which resizes larger images to 64 px and back — and ``given`` masks, i.e. the
  mechanism alone).

Ratios (``vs_snow_*_over_snow``) are measured in the same run; compare those on a shared machine.

    python benchmarks/snow.py [--images 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import torch

from medanon.anonymize.snow import image_generators, snow, snow_sweep, vs_snow
from medanon.config import DataConfig, PhantomConfig
from medanon.data.dataset import open_dataset
from medanon.models_registry import SOURCE_CHECKPOINTS
from medanon.phantoms.generate import generate
from medanon.segment.learned import SHIPPED
from medanon.segment.vessels import get_segmenter, segment_vessels


def per_second(fn, n: int, repeats: int = 3) -> float:
    fn()                                                  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def rates(ds, unet) -> dict[str, float]:
    """Images per second of each variant on the images of ``ds`` held in memory."""
    x, fov = ds.tensors(progress=False)
    n = len(x)
    masks = torch.stack([ds[i]["mask"] for i in range(n)])
    means = x.double().mean((0, 2, 3))

    def gens():
        return image_generators(0, range(n))

    r = {"snow": per_second(lambda: snow(x, p=0.3, means=means, generator=gens()), n),
         "vs_snow_given": per_second(lambda: vs_snow(x, masks, p=0.3, generator=gens()), n),
         "vs_snow_frangi": per_second(lambda: vs_snow(x, segment_vessels(x, method="frangi", fov=fov), p=0.3,
                                                      generator=gens()), n, repeats=1)}
    if unet is not None:
        r["vs_snow_unet"] = per_second(lambda: vs_snow(x, segment_vessels(x, fov=fov, segmenter=unet), p=0.3,
                                                       generator=gens()), n, repeats=1)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=64, help="images per batch at 64 px (a quarter at 256 px)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")                       # the resize warning of the 64 px U-Net at 256 px
    result: dict = {"benchmark": "snow", "threads": args.threads, "p": 0.3}
    unet = get_segmenter("unet") if (SOURCE_CHECKPOINTS / SHIPPED).is_file() else None
    with tempfile.TemporaryDirectory() as d:
        for size in (64, 256):
            n = args.images if size == 64 else max(4, args.images // 4)
            root = generate(PhantomConfig(patients=max(1, n // 2), per_patient=2, size=size, workers=1, seed=1),
                            Path(d) / f"f{size}", progress=False)
            r = rates(open_dataset(root, DataConfig(size=size)), unet)
            for k, v in r.items():
                result[f"{k}_{size}px_per_s"] = round(v, 1)
            for k in r:
                if k != "snow":
                    result[f"{k}_over_snow_{size}px"] = round(r[k] / r["snow"], 4)
        ds = open_dataset(Path(d) / "f64", DataConfig(size=64))
        t0 = time.perf_counter()
        snow_sweep(ds, Path(d) / "rel", ps=[0.3], seed=0, progress=False, workers=1)
        result["snow_release_64px_per_s"] = round(len(ds) / (time.perf_counter() - t0), 1)
    result["unet_checkpoint"] = SHIPPED if unet is not None else None
    print(json.dumps(result))


if __name__ == "__main__":
    main()
