"""The utility protocol's two learners on a demo's real data: the linear probe (fast preset) and the CNN.

Trains each learner on the real source split, subsampled to each size in ``--sizes`` (the sizes releases
have: k-Same-style releases hold one record per cluster), tests on the held-out split, and prints one JSON
line per (learner, size): the headline metric (quadratic kappa for DR grade, AUROC for pneumonia) per
subsample seed, its mean, and the CPU seconds per fit (features included once for the probe).

    python benchmarks/utility_learners.py --demo DEMO_OUT --modality fundus [--sizes 28,56,280,560] [--seeds 4]

``DEMO_OUT`` needs ``data/<modality>`` and ``splits_<modality>.csv`` (``medanon demo --out DEMO_OUT``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from medanon.evaluate import utility as util
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.inputs import load_real
from medanon.evaluate.learners import make_learner


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True)
    ap.add_argument("--modality", choices=["fundus", "xray"], default="fundus")
    ap.add_argument("--sizes", default="28,56,280,0", help="training-set sizes (0: the whole source split)")
    ap.add_argument("--seeds", type=int, default=4, help="subsample seeds per size (and CNN seeds)")
    ap.add_argument("--learners", default="probe,cnn")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    real = load_real(args.demo / "data" / args.modality, size=64, splits_csv=args.demo / f"splits_{args.modality}.csv")
    task = util.KNOWN_TASKS["grade" if real.modality == "fundus" else "pneumonia"]
    metric = util.HEADLINE[task.kind]
    src, held = real.rows("train"), real.rows("test")
    ok_s, y_s = task.targets(real.label(task.label)[src])
    ok_h, y_h = task.targets(real.label(task.label)[held])
    src, held = src[ok_s], held[ok_h]
    fast = EvalConfig.fast().utility
    out = []
    for name in args.learners.split(","):
        learner = make_learner(fast if name == "probe" else type(fast)(learner="cnn", classifier=fast.classifier),
                               device=torch.device("cpu"))
        t = time.process_time()
        inputs = learner.encode(real.images)
        encode_s = time.process_time() - t
        for size in (int(s) for s in args.sizes.split(",")):
            n = size or len(src)
            vals, fit_s = [], []
            for seed in range(args.seeds if n < len(src) or name == "cnn" else 1):
                pick = util.subsample(len(src), n, seed)
                t = time.process_time()
                model = learner.fit(inputs[src[pick]], y_s[pick], num_classes=task.num_classes, seed=seed)
                vals.append(util.score(task, y_h, learner.proba(model, inputs[held]))[metric])
                fit_s.append(time.process_time() - t)
            row = {"benchmark": "utility_learners", "modality": args.modality, "learner": name, "n_train": n,
                   "n_test": len(held), "metric": metric, "values": [round(v, 3) for v in vals],
                   "mean": round(float(np.nanmean(vals)), 3),
                   "sd": round(float(np.nanstd(vals, ddof=1)), 3) if len(vals) > 1 else 0.0,
                   "cpu_s_per_fit": round(float(np.mean(fit_s)), 2), "cpu_s_encode_all": round(encode_s, 1),
                   "threads": args.threads}
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


if __name__ == "__main__":
    main()
