"""Seconds and counts of the evaluation's differencing step on a demo's fundus releases: one JSON line.

Runs :func:`medanon.evaluate.cautions.differencing_results` (every two releases of the same people, in pixels, and
in the latent space of the shipped codec where both were made with it) on ``DEMO/releases`` against
``DEMO/data/fundus`` with the demo's splits and the fast preset, the attacker split ``val`` as in the demo; prints
the pairs measured per space, the patients recovered in all, and the wall seconds (codec loading and inversion
included). ``--pixels-only`` treats every codec as private, which leaves the pixel pairs alone: their cost.

    python benchmarks/evaluation_differencing.py --demo DEMO_OUT [--pixels-only]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from medanon.evaluate import cautions
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.inputs import load_real, load_release


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", type=Path, required=True, help="a `medanon demo` output folder")
    ap.add_argument("--pixels-only", action="store_true", help="no latent pairs (every codec taken as private)")
    args = ap.parse_args()
    if args.pixels_only:
        cautions.public_codec = lambda rel: None
    root = args.demo
    real = load_real(root / "data" / "fundus", size=64, splits_csv=root / "splits_fundus.csv")
    rels = [load_release(p, real, size=64) for p in sorted((root / "releases").iterdir())
            if p.is_dir() and not p.name.startswith(("dpglow", "ldp", "gmia-xray"))]
    rels = [r for r in rels if r.manifest.get("modality") in (None, "fundus")]
    notes: list[str] = []
    ctx = SimpleNamespace(real=real, cfg=EvalConfig.fast(size=64), held=real.rows("test"),
                          attacker_rows=real.rows("val"), attacker_from="val", device=torch.device("cpu"),
                          split_name=lambda rows: f"{len(rows)} images", note=notes.append)
    t0 = time.perf_counter()
    out = cautions.differencing_results(ctx, rels)
    seconds = time.perf_counter() - t0
    spaces = sorted({d.get("space", "pixels") for d in out})
    print(json.dumps({"releases": len(rels),
                      "pairs": {s: sum(d.get("space", "pixels") == s for d in out) for s in spaces},
                      "members_recovered": sum(d["members"]["recovered_beyond"] for d in out),
                      "controls_recovered": sum(d["controls"]["recovered_beyond"] for d in out),
                      "notes": len(notes), "seconds": round(seconds, 1)}))


if __name__ == "__main__":
    main()
