"""How far a noisy copy and an honest k = 2 average are from their sources, in the audit's copy check
(``medanon.release.audit_source``: RMS difference of the released image and the source as the methods preprocess it,
8-bit grey levels): one JSON line per size, with the largest distance of a copy with +-2 levels of uniform integer
noise, JPEG copies at quality 75 and 90 (median and largest), the smallest distance of a k-Same-Pixel k = 2 record and
of a VS-Snow p = 0.1 image to their nearest source, and whether ``NEAR_COPY_RMSE`` separates the noisy copies from the
k = 2 averages.

    python benchmarks/audit_copy_threshold.py --work /tmp/act [--patients 12 --sizes 32,64]
"""

from __future__ import annotations

import argparse
import io
import json
import warnings
from pathlib import Path

import numpy as np
import torch
from _scratch import fresh_work  # benchmarks/_scratch.py
from PIL import Image

import medanon
from medanon.release.audit_source import NEAR_COPY_RMSE


def _rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b) ** 2).mean().sqrt())


def _jpeg(u8: torch.Tensor, quality: int) -> torch.Tensor:
    buf = io.BytesIO()
    Image.fromarray(u8.permute(1, 2, 0).byte().numpy()).save(buf, "JPEG", quality=quality)
    buf.seek(0)
    return torch.from_numpy(np.asarray(Image.open(buf).convert("RGB"))).permute(2, 0, 1).float()


def _nearest(release, sources_u8: torch.Tensor) -> float:
    y = ((torch.stack(list(release.images())) + 1) * 127.5).round()
    d = torch.cdist(y.flatten(1), sources_u8.flatten(1)) / np.sqrt(sources_u8[0].numel())
    return float(d.min())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patients", type=int, default=12)
    ap.add_argument("--sizes", default="32,64")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder (made fresh)")
    args = ap.parse_args()
    work = fresh_work(args.work)
    warnings.simplefilter("ignore")
    for size in map(int, args.sizes.split(",")):
        root = medanon.make_phantom(work / f"fundus{size}", modality="fundus", patients=args.patients, per_patient=2,
                                    size=size)
        ds = medanon.open_dataset(root, size=size)
        u8 = ((ds.tensors()[0] + 1) * 127.5).round()
        g = torch.Generator().manual_seed(0)
        noisy = (u8 + torch.randint(-2, 3, u8.shape, generator=g)).clamp(0, 255)
        out = {"size": size, "images": len(u8),
               "noise2_copy_max": max(_rms(noisy[i], u8[i]) for i in range(len(u8)))}
        for q in (75, 90):
            d = [_rms(_jpeg(u8[i], q), u8[i]) for i in range(len(u8))]
            out[f"jpeg{q}_copy_median"], out[f"jpeg{q}_copy_max"] = float(np.median(d)), max(d)
        out["kpixel_k2_nearest_min"] = _nearest(medanon.anonymize.kpixel(ds, k=2), u8)
        out["vs_snow_p0.1_nearest_min"] = _nearest(medanon.anonymize.vs_snow(ds, p=0.1), u8)
        out["near_copy_rms"] = NEAR_COPY_RMSE * 127.5
        out["separates_noisy_copies_from_k2"] = out["noise2_copy_max"] < out["near_copy_rms"] < \
            out["kpixel_k2_nearest_min"]
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
