"""CPU seconds of the known-answer calibration's attacks, with and without the verification tables.

The calibration scores the known-answer releases (one record per source image) through every attack; its table
reads the residual risks only, so it runs the attacks with ``tables=False`` (no inner / outer verification tables
and their pair bootstraps). This script times both ways on the same context, alternating, one torch and BLAS
thread, process CPU seconds, and checks that every residual-risk entry is identical. It reuses the networks a
``benchmarks/known_answers.py --work DIR`` run cached (same phantom arguments), so it trains nothing:

    OMP_NUM_THREADS=1 python benchmarks/evaluation_calibration.py --work DIR [--patients 200 --per-patient 4] \
        [--rounds 2]

Prints one JSON line per round and arm, then a summary line (median seconds per arm and their ratio).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from medanon.evaluate.attack_suite import run_attacks
from medanon.evaluate.cache import Cache
from medanon.evaluate.calibration import KNOWN, known_answer_release, risk_rows
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.context import RealContext
from medanon.evaluate.inputs import load_real


def _dump(rows: dict) -> str:
    return json.dumps(rows, sort_keys=True, default=float)              # NaN-safe equality


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="a benchmarks/known_answers.py work folder")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = EvalConfig.fast(size=args.size)
    cfg = replace(cfg, fidelity=replace(cfg.fidelity, inception=False)).resolved(torch.device("cpu"))
    real = load_real(args.work / "fundus", size=cfg.size, stratify=cfg.split.stratify, val=cfg.split.val,
                     test=cfg.split.test, seed=cfg.split.seed, progress=False)
    ctx = RealContext(real, cfg, Cache(args.work / "report" / "cache"), torch.device("cpu"), False)
    kinds = [k for k in KNOWN if k != "others" or ctx.attacker_from != cfg.source_split]
    rels = {k: known_answer_release(ctx, k) for k in kinds}
    embs = {k: ctx.embed(r.images) for k, r in rels.items()}       # computed once: both arms embed alike
    run_attacks(ctx, rels[kinds[0]], embs[kinds[0]], tables=False)   # networks and real embeddings loaded
    seconds: dict[str, list[float]] = {"tables": [], "risks only": []}
    same = True
    for rnd in range(args.rounds):
        got = {}
        for arm, tables in (("tables", True), ("risks only", False)) if rnd % 2 == 0 else \
                (("risks only", False), ("tables", True)):
            t0 = time.process_time()
            got[arm] = {k: run_attacks(ctx, r, embs[k], tables=tables) for k, r in rels.items()}
            seconds[arm].append(time.process_time() - t0)
            print(json.dumps({"round": rnd, "arm": arm, "cpu_seconds": round(seconds[arm][-1], 2)}), flush=True)
        same &= all(_dump(risk_rows(got["tables"][k])) == _dump(risk_rows(got["risks only"][k])) for k in rels)
    a, b = (statistics.median(seconds[k]) for k in ("tables", "risks only"))
    print(json.dumps({"benchmark": "evaluation_calibration", "releases": len(rels), "source_images": len(ctx.src),
                      "tables_cpu_s": round(a, 2), "risks_only_cpu_s": round(b, 2), "ratio": round(a / b, 2),
                      "risk_entries_identical": bool(same), "rounds": args.rounds}), flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
