"""Mixed precision (``amp``) against float32 on this machine: prints one JSON line.

The same phantom images through the shipped 64 px models twice, once in float32 and once with the
codec's forward passes under ``torch.autocast`` (``--amp bf16``; fp16 only on CUDA):

- inversion (``codec.reconstruct``: ReStyle encoder + generator): the largest and mean absolute
  pixel difference of the released 8-bit images, and images per second of each;
- k-SALSA averaging (``steps`` Adam steps per cluster, k = 5): the style loss at the start and the end
  (means over clusters) of each, and the largest pixel difference of the released averages of the
  clusters both runs formed (the clustering uses the inverted latents, which the precision changes);
- GMIA (co-trained codec, identity and grade networks, ``steps`` steps): the mean identity cosine
  after the optimisation of each and the largest pixel difference.

Pixel differences are in 8-bit levels of the released PNGs (a difference of 1 is one level of 255).

    python benchmarks/amp.py [--data DIR] [--images 40] [--steps 20] [--amp bf16]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import medanon
from medanon.codecs.stylegan import load_codec

CKPT = Path(__file__).resolve().parents[1] / "checkpoints"


def _records(out: Path, mapping: Path) -> dict[tuple[str, ...], np.ndarray]:
    m = json.loads(mapping.read_text())["records"]
    return {tuple(sorted(r["sources"])): np.asarray(Image.open(out / name), np.int16) for name, r in m.items()}


def _diff(a: dict, b: dict) -> dict[str, float]:
    """Pixel differences of the records that stand for the same sources in both (k-SALSA's clusters come from
    the latents, which the precision changes too: records of other clusters are counted, not compared)."""
    same = [k for k in a if k in b]
    d = np.concatenate([np.abs(a[k] - b[k]).ravel() for k in same])
    return {"records": len(a), "records_compared": len(same), "max_abs_levels": int(d.max()),
            "mean_abs_levels": round(float(d.mean()), 4), "fraction_differing": round(float((d > 0).mean()), 4)}


def _save(rel, out: Path) -> tuple[dict, dict, float]:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel.save(out, mapping=out.with_suffix(".json"), progress=False)
    return rel.summary, _records(out, out.with_suffix(".json")), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="a 64 px fundus dataset (default: a new phantom)")
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--amp", default="bf16")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="medanon-amp-") as tmp:     # the releases are only compared, then removed
        print(json.dumps(compare(args, Path(tmp))))


def compare(args: argparse.Namespace, tmp: Path) -> dict:
    data = args.data or medanon.make_phantom(tmp / "data", patients=args.images // 2, per_patient=2, size=64, seed=1)
    ds = medanon.open_dataset(data, size=64)
    ds.records = ds.records[:args.images]
    out: dict = {"device": args.device, "amp": args.amp, "images": len(ds), "steps": args.steps,
                 "threads": torch.get_num_threads(), "load_1min": os.getloadavg()[0]}
    res: dict = {}
    for amp in (None, args.amp):
        name = amp or "fp32"
        restyle = load_codec(CKPT / "restyle-fundus64.pt", map_location=args.device, amp=amp)
        cotrained = load_codec(CKPT / "cotrained-fundus64.pt", map_location=args.device, amp=amp)
        a = medanon.anonymize
        runs = {"inversion": a.inverted(ds, codec=restyle),
                "ksalsa": a.ksalsa(ds, k=5, codec=restyle, steps=args.steps),
                "gmia": a.gmia(ds, model=cotrained, identity=CKPT / "identity-fundus64.pt",
                               utility=CKPT / "classifier-grade-fundus64.pt", steps=args.steps)}
        res[name] = {k: _save(rel, tmp / f"{k}-{name}") for k, rel in runs.items()}
    fp32, low = res["fp32"], res[args.amp]
    for k in ("inversion", "ksalsa", "gmia"):
        entry = {**_diff(fp32[k][1], low[k][1]), "seconds_fp32": round(fp32[k][2], 2),
                 f"seconds_{args.amp}": round(low[k][2], 2)}
        if k == "ksalsa":
            for key in ("style_loss_start", "style_loss_end"):
                entry[key] = {"fp32": round(fp32[k][0][key], 5), args.amp: round(low[k][0][key], 5)}
        if k == "gmia":
            outcome = [json.loads((tmp / f"gmia-{n}" / "manifest.json").read_text())["privacy"]["optimisation_outcome"]
                       for n in ("fp32", args.amp)]
            entry["id_cos_after_mean"] = {"fp32": outcome[0]["id_cos_after"]["mean"],
                                          args.amp: outcome[1]["id_cos_after"]["mean"]}
        out[k] = entry
    return out


if __name__ == "__main__":
    main()
