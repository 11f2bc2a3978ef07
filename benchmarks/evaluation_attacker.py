"""The shipped attacker identity networks' network check on the demo's data (issue 15, item 2).

Loads ``checkpoints/identity-attacker-<modality>64.pt`` (or ``--checkpoint``) and the demo's phantom with its
split (``medanon demo``'s ``data/<modality>`` and ``splits_<modality>.csv``), and prints one JSON line per
modality: the network's verification AUC on pairs of members (the demo's ``train`` split) and on pairs of
controls (``test``), with DeLong intervals and whether they differ (``networks.checks`` of the report), and
what the checkpoint says it was trained on.

    python benchmarks/evaluation_attacker.py --demo DEMO_OUT [--modality fundus xray]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import torch

from medanon.demo import attacker_checkpoint, default_checkpoints
from medanon.evaluate.cache import Cache
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.context import RealContext
from medanon.evaluate.inputs import load_real
from medanon.evaluate.network_checks import network_checks
from medanon.fsutil import sha256_file


def check(demo: Path, modality: str, checkpoint: Path) -> dict:
    cfg = EvalConfig.fast(size=64)
    cfg = replace(cfg, attacks=replace(cfg.attacks, identity_checkpoint=str(checkpoint), independent_attacker=False))
    real = load_real(demo / "data" / modality, size=64, splits_csv=demo / f"splits_{modality}.csv", progress=False)
    ctx = RealContext(real, cfg, Cache(None), torch.device("cpu"), False)
    out = network_checks(ctx)["identity"]
    return {"modality": modality, "checkpoint": str(checkpoint), "sha256": sha256_file(checkpoint),
            "trained_on": ctx.identity_info["trained_on"], **out}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True, help="a `medanon demo` output folder")
    ap.add_argument("--modality", nargs="+", default=["fundus", "xray"])
    ap.add_argument("--checkpoints", type=Path, default=None, help="folder of identity-attacker-*64.pt")
    args = ap.parse_args(argv)
    rows = [check(args.demo, m, attacker_checkpoint(m, args.checkpoints or default_checkpoints()))
            for m in args.modality]
    for r in rows:
        print(json.dumps(r))
    return rows


if __name__ == "__main__":
    main()
