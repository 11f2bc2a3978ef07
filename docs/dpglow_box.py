"""DP-GLOW with the public clip box (the default) against the box calibrated on the flow's training set.

    python docs/dpglow_box.py --data DIR [--flow checkpoints/glow-xray64.pt] [--images 128]

For ε = 10², 10³ per element (the paper's settings) and ε = 1 per image, prints one JSON line per box:
the share of images whose inverse flow diverged (decoded from a shrunk latent), and the PSNR of the
released image against its source (mean over images), with the exact sampler and secret noise.
"""

from __future__ import annotations

import argparse
import json
import warnings

import torch

from medanon.anonymize.dpglow import DPGlow
from medanon.config import DataConfig
from medanon.data.dataset import open_dataset
from medanon.train.flow import load_flow


def psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mse = ((a - b) ** 2).flatten(1).mean(1).clamp_min(1e-12)
    return 10 * torch.log10(4.0 / mse)                       # images in [-1, 1]: peak-to-peak 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--flow", default="checkpoints/glow-xray64.pt")
    ap.add_argument("--images", type=int, default=128)
    a = ap.parse_args()
    codec, stored, _ = load_flow(a.flow)
    ds = open_dataset(a.data, DataConfig(size=codec.flow.cfg.resolution, channels=codec.flow.cfg.channels))
    x = torch.stack([ds.load(i)["image"] for i in range(min(a.images, len(ds)))])
    for label, eps, per_element in (("1e2/element", 100.0, True), ("1e3/element", 1000.0, True),
                                    ("1/image", 1.0, False)):
        for box, cal in (("public", None), ("calibrated", stored)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dp = DPGlow(codec, cal, epsilon=eps, per_element=per_element)
            before = codec.diverged
            with torch.no_grad():
                out = torch.cat([dp(x[i:i + 32]) for i in range(0, len(x), 32)])
            print(json.dumps({"epsilon": label, "box": box, "images": len(x),
                              "diverged": round((codec.diverged - before) / len(x), 4),
                              "psnr_db": round(float(psnr(out, x).mean()), 2),
                              "epsilon_image_tight": dp.mechanism.epsilon_image_tight}))


if __name__ == "__main__":
    main()
