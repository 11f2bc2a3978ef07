"""Every attack on the seven known-answer releases (``medanon.evaluate.known_answers``): one JSON line per release and
residual-risk row, with the residual risk, its interval, its validity and whether a valid row gave the right answer;
then a summary line: valid rows right or wrong, and rows with no answer (invalid, or a reverse attacker on a copy).

A fundus phantom (``--patients`` x ``--per-patient`` at ``--size`` px; ``--both-eyes 1``: both eyes of every
patient, ``--per-patient`` photographs of each) split by the evaluation's own split; the
``others`` release takes images of a second phantom (another seed: people in no split). ``medanon evaluate``'s
fast preset without Inception.

    python benchmarks/known_answers.py --work /tmp/ka [--patients 80 --per-patient 3 --size 32 --both-eyes 0]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from _scratch import fresh_work  # benchmarks/_scratch.py

from medanon.config import PhantomConfig
from medanon.evaluate.calibration import risk_rows, row_label
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.harness import evaluate
from medanon.evaluate.inputs import load_real
from medanon.evaluate.known_answers import KINDS, copy_ceiling, judge, write_known_answer
from medanon.phantoms.generate import generate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the phantoms, releases and report")
    ap.add_argument("--patients", type=int, default=80)
    ap.add_argument("--per-patient", type=int, default=3)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--both-eyes", type=float, default=0.0, help="share of patients photographed in both eyes")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    t0 = time.perf_counter()
    fresh_work(args.work)
    cfg = EvalConfig.fast(size=args.size)
    cfg = replace(cfg, fidelity=replace(cfg.fidelity, inception=False))
    pc = PhantomConfig(modality="fundus", patients=args.patients, per_patient=args.per_patient, size=args.size,
                       **({"both_eyes": args.both_eyes} if args.both_eyes else {}))
    data = generate(pc, args.work / "fundus", progress=False)
    other = generate(replace(pc, seed=1), args.work / "others-phantom", progress=False)
    real = load_real(data, size=args.size, stratify=cfg.split.stratify, val=cfg.split.val, test=cfg.split.test,
                     seed=cfg.split.seed)
    others = load_real(other, size=args.size)
    rels = [write_known_answer(k, args.work / k, real, other=others.images, other_values=others.label("grade"),
                               match="grade") for k in KINDS]
    rep = evaluate(data, rels, args.work / "report", config=cfg, device=args.device, progress=False)
    counts = {"right": 0, "wrong": 0, "no answer": 0}
    valid_rows = {}
    for r, kind in zip(rep["releases"], KINDS, strict=True):
        for row, risk in risk_rows(r["attacks"]).items():
            rr, check = risk["residual_risk"], r["validity"][row]
            right = judge(kind, row, rr, check["valid"], copy_ceiling(row, r["attacks"]))
            counts["no answer" if right is None else "right" if right else "wrong"] += 1
            valid_rows[row] = valid_rows.get(row, True) and check["valid"]      # valid on every release
            print(json.dumps({"release": kind, "attack": row, "label": row_label(row), "risk": round(rr["risk"], 3),
                              "ci": [round(v, 3) for v in rr["ci"]], "valid": check["valid"],
                              "reason": check["reason"], "right": right}), flush=True)
    print(json.dumps({"benchmark": "known_answers", **counts, "patients": args.patients,
                      "per_patient": args.per_patient, "size": args.size, "both_eyes": args.both_eyes,
                      "identity_unit": rep["networks"]["identity"].get("identity_unit"),
                      "rows_valid_on_every_release": f"{sum(valid_rows.values())} of {len(valid_rows)}",
                      "device": args.device,
                      "calibration_seconds": rep["calibration"]["seconds"],
                      "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
    return 1 if counts["wrong"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
