"""The evaluation's utility classifier in bfloat16 autocast against float32: speed and the metrics it reports.

Prints one JSON line. On a finished demo folder (``python benchmarks/demo.py --out DIR --keep``) it trains the
fast preset's classifier (``EvalConfig.fast``: small ResNet, 64 px, 150 steps of 32) on the real source split,
all of it and a same-size subsample of a k = 2 release, for ``--seeds`` seeds in each precision, one torch thread
each (as the evaluation trains them, see ``map_in_parallel``), and tests every model on the held-out split:
quadratic κ and normal-vs-DR AUROC (fundus), AUROC (chest X-ray). It reports, per modality and training size,
the CPU seconds per training of each precision and their ratio, the metric's mean and sd over seeds in each,
and the paired difference bf16 − fp32 over seeds with its 95 % t interval (``scipy.stats.t``), so that a
difference the seeds alone explain is not mistaken for a cost of the precision.

bf16 is fast only where the CPU computes it natively (AVX512-BF16 or AMX; ``medanon.runtime.native_bf16``);
elsewhere autocast emulates it and is slower than float32. The line says which this machine is.

    python benchmarks/classifier_precision.py --demo DEMO_OUT [--seeds 4] [--modality fundus,xray]

``--variant arch=tiny --variant steps=75`` (any ``ClassifierTrainConfig`` fields) compares the fast preset with
cheaper classifiers instead, in the precision the preset picks here: what a shorter evaluation would cost the
report (issue 15's demo time).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from medanon.config import apply_overrides, from_dict, to_dict
from medanon.evaluate import utility as util
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.inputs import load_real
from medanon.models.classifier import predict_proba
from medanon.runtime import native_bf16
from medanon.train.classifier import ClassifierTrainConfig, train_classifier

TASK = {"fundus": util.KNOWN_TASKS["grade"], "xray": util.KNOWN_TASKS["pneumonia"]}
METRICS = {"fundus": ("kappa", "binary_auroc"), "xray": ("auroc", "ap")}


def _interval(d: np.ndarray) -> list[float]:
    if len(d) < 2 or float(d.std(ddof=1)) == 0.0:
        return [float(d.mean())] * 2
    lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=d.std(ddof=1) / np.sqrt(len(d)))
    return [round(float(lo), 4), round(float(hi), 4)]


def run_modality(demo: Path, modality: str, seeds: int, arms: dict[str, dict]) -> dict:
    real = load_real(demo / "data" / modality, size=64, splits_csv=demo / f"splits_{modality}.csv")
    task = TASK[modality]
    src, held = np.flatnonzero(real.split == "train"), np.flatnonzero(real.split == "test")
    ok, y = task.targets(real.label(task.label)[src])
    rows = src[ok]
    okt, y_test = task.targets(real.label(task.label)[held])
    x_test = real.images[held[okt]]
    base = EvalConfig.fast(size=64).utility.classifier
    out: dict = {}
    for n in (len(rows), len(rows) // 8):
        pick = util.subsample(len(rows), n, 0)
        res: dict = {}
        for arm, changes in arms.items():
            scores, cpu = [], []
            for seed in range(seeds):
                cfg = from_dict(ClassifierTrainConfig, {**to_dict(base), **changes, "seed": seed})   # typed
                c0 = time.process_time()
                model = train_classifier(real.images[rows[pick]], y[pick], num_classes=task.num_classes, cfg=cfg)
                cpu.append(time.process_time() - c0)
                scores.append(util.score(task, y_test, predict_proba(model, x_test).double().numpy()))
            res[arm] = {"cpu_s_per_training": round(float(np.mean(cpu)), 2), "scores": scores}
        first, *others = list(arms)
        entry = {"n_train": int(n), "n_test": len(y_test),
                 "cpu_s_per_training": {a: res[a]["cpu_s_per_training"] for a in res},
                 "speedup": {a: round(res[first]["cpu_s_per_training"] / res[a]["cpu_s_per_training"], 2)
                             for a in others}}
        for metric in METRICS[modality]:
            ref = np.array([s[metric] for s in res[first]["scores"]])
            entry[metric] = {a: [round(float(v.mean()), 4), round(float(v.std(ddof=1)), 4)]
                             for a in res for v in [np.array([s[metric] for s in res[a]["scores"]])]}
            for a in others:                    # paired over seeds: the same seed draws the same batches
                d = np.array([s[metric] for s in res[a]["scores"]]) - ref
                entry[metric][f"{a}_minus_{first}"] = {"mean": round(float(d.mean()), 4), "ci95": _interval(d)}
        out[f"n{n}"] = entry
    return out


def parse_arms(variants: list[str]) -> dict[str, dict]:
    """fp32 against bf16 by default; with ``--variant``, the fast preset against each variant (``KEY=VALUE,...`` of
    ClassifierTrainConfig, e.g. ``arch=tiny`` or ``steps=75``), all in the precision the preset resolves to here."""
    if not variants:
        return {"fp32": {"precision": "fp32"}, "bf16": {"precision": "bf16"}}
    precision = "bf16" if native_bf16("cpu") else "fp32"
    arms = {"fast": {"precision": precision}}
    for v in variants:                          # values parsed as YAML scalars, as `--set` parses them
        arms[v] = apply_overrides({"precision": precision}, v.split(","))
    return arms


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True, help="a finished demo folder (data/, splits_*.csv)")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--modality", default="fundus,xray")
    ap.add_argument("--variant", action="append", default=[],
                    help="compare the fast preset with this change instead of fp32 with bf16, e.g. arch=tiny")
    args = ap.parse_args(argv)
    arms = parse_arms(args.variant)
    torch.set_num_threads(1)
    result = {"benchmark": "classifier_precision", "native_bf16": native_bf16("cpu"), "seeds": args.seeds, "arms": arms,
              "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    for modality in args.modality.split(","):
        result[modality] = run_modality(args.demo, modality, args.seeds, arms)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
