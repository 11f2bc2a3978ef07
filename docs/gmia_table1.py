"""GMIA Table 1 on our data: reconstruction quality of a codec on held-out images, and of releases vs their sources.

Prints one JSON line: for ``--codec`` on the first ``--n`` images of ``--heldout`` (patients the codec never saw),
and for every ``--release`` (with its private mapping ``<release>.mapping.json`` next to it; read as the evaluation
reads it) on the records of the first ``--n`` source images (dataset order, the same for every release) against
their own source image in ``--real``: PSNR, SSIM, IW-SSIM (3 scales: 5 need 176 px images) and the
EfficientNet-Lite0 feature distance (not LPIPS), each as mean and sd over images
(``medanon.evaluate.reconstruction``; SSIM matches scikit-image, tested).

    python docs/gmia_table1.py --codec checkpoints/cotrained-xray64.pt --heldout PH2X \\
        --real DEMO/data/xray --release REL/recon --release REL/gmia --n 200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from medanon.codecs.stylegan import load_codec
from medanon.config import DataConfig
from medanon.data.dataset import open_dataset
from medanon.evaluate.inputs import load_real, load_release
from medanon.evaluate.reconstruction import iw_ssim, perceptual_distance, psnr, ssim


def scores(recon: torch.Tensor, source: torch.Tensor) -> dict:
    values = {"psnr": psnr(recon, source), "ssim": ssim(recon, source), "iw_ssim": iw_ssim(recon, source, scales=3),
              "feature_distance": perceptual_distance(recon, source)}
    return {k: [round(float(v.mean()), 4), round(float(v.std()), 4)] for k, v in values.items()} | {"n": len(recon)}


def release_pairs(release: Path, real, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` records of ``release`` (as the evaluation reads it, with its mapping) and their source image."""
    rel = load_release(release, real, size=real.images.shape[-1])
    if rel.sources is None:
        raise SystemExit(f"{release}: no mapping next to it ({release.name}.mapping.json)")
    # the records of the first n source images in the dataset's order: every release is measured on the same
    # sources (GMIA: one source per record), whatever order it lists its records in
    order = sorted(range(len(rel.sources)), key=lambda i: rel.sources[i])[:n]
    return rel.images[order], real.images[[rel.sources[i][0] for i in order]]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codec", type=Path)
    ap.add_argument("--heldout", type=Path, help="images the codec never saw")
    ap.add_argument("--real", type=Path, help="the dataset the releases were made from")
    ap.add_argument("--release", type=Path, action="append", default=[])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out: dict = {"benchmark": "gmia_table1"}
    with torch.no_grad():
        if args.codec and args.heldout:
            codec = load_codec(args.codec)
            ds = open_dataset(args.heldout, DataConfig(size=codec.describe().get("resolution", 64)))
            x = torch.stack([ds.load(i)["image"] for i in range(min(args.n, len(ds)))])
            recon = torch.cat([codec.decode(codec.encode(x[i:i + 50])) for i in range(0, len(x), 50)])
            recon = torch.round((recon.clamp(-1, 1) + 1) * 127.5) / 127.5 - 1      # 8 bits, as a release is saved
            out[f"heldout:{args.codec.name}"] = scores(recon, x)
        if args.release:
            real = load_real(args.real, size=64)
            for rel in args.release:
                out[f"release:{rel.name}"] = scores(*release_pairs(rel, real, args.n))
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
