"""Do the evaluation's attacks and controls say what they should? One JSON line (issue 15's "Show").

At the demo's scale (64 px fundus phantom, 200 patients x 4, the fast preset), three releases of the
same real data are evaluated: a **copy** (the sources under random names: maximal risk expected, controls
near zero), **unrelated** patients (another phantom seed: risk near zero expected), and k-Same-Pixel at
k = 5 (in between). The releases come from ``tests/fixtures_eval_releases.py``, the same builders the
tests use. Prints, per release, each attack's success with its interval, control, baseline and residual
risk as ``report.json`` holds them (schema in docs/evaluation.md), and the seconds of the run.

    python benchmarks/evaluation_controls.py --out DIR [--shipped-attacker]

``--shipped-attacker`` attacks with ``checkpoints/identity-attacker-fundus64.pt`` (trained on a phantom of
seed 1, patients disjoint from these; until 2026-11-23 it was trained on the demo's members and the report's
network check flagged it) instead of training one on the attacker split.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fixtures_eval_releases import write_copy, write_k_same_pixel, write_unrelated  # noqa: E402

from medanon.config import PhantomConfig  # noqa: E402
from medanon.evaluate.config import EvalConfig  # noqa: E402
from medanon.evaluate.harness import evaluate  # noqa: E402
from medanon.evaluate.inputs import load_real  # noqa: E402
from medanon.phantoms.generate import generate  # noqa: E402

KEEP = ("hits", "n", "chance", "ci", "interval", "p_value", "auc", "auc_ci", "reverse_auc", "outer", "control",
        "baseline", "risk", "residual_risk", "hidden_rate", "hidden_rate_ci", "hidden_rate_individual",
        "accuracy", "accuracy_ci", "leak_kept")


def summary(attacks: dict) -> dict:
    """The numbers of each attack (not its prose), as report.json holds them."""
    out = {}
    for name, res in attacks.items():
        if isinstance(res, dict):
            out[name] = {k: v for k, v in res.items() if k in KEEP}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="new folder for the phantoms, releases and report")
    ap.add_argument("--shipped-attacker", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = generate(PhantomConfig(patients=200, per_patient=4, size=64), args.out / "fundus", progress=False)
    other = generate(PhantomConfig(patients=200, per_patient=4, size=64, seed=99), args.out / "other",
                     progress=False)
    real = load_real(data, size=64)
    releases = [write_copy(args.out / "copy", real),
                write_unrelated(args.out / "unrelated", real, load_real(other, size=64).images),
                write_k_same_pixel(args.out / "kpixel-k5", real, k=5)]
    cfg = EvalConfig.fast(size=64)
    if args.shipped_attacker:
        ckpt = ROOT / "checkpoints" / "identity-attacker-fundus64.pt"
        cfg = replace(cfg, attacks=replace(cfg.attacks, identity_checkpoint=str(ckpt)))
    rep = evaluate(data, releases, args.out / "report", config=cfg, cache_dir=args.out / "cache", progress=False)
    print(json.dumps({"benchmark": "evaluation_controls", "attacker": "shipped" if args.shipped_attacker
                      else "trained on the attacker split",
                      "releases": {r["name"]: summary(r["attacks"]) for r in rep["releases"]},
                      "network_checks": rep["networks"].get("checks"),
                      "seconds": round(time.perf_counter() - t0, 1)}, default=float))


if __name__ == "__main__":
    main()
