"""Utility intervals over held-out patients against intervals over images, and one release-vs-release comparison,
on a demo's real data.

Evaluates the releases named in ``--releases`` (utility only: the fast preset with every attack off) with
``utility.compare`` set to the first two, then re-scores the same per-seed test probabilities (kept in the
evaluation's cache) with the image bootstrap. Prints one JSON line per release and metric: the 95 % interval of the
release's seed-averaged metric and of its difference from the same-N real classifier, resampling images and
resampling patients, and their widths; then the comparison as report.json holds it.

    python benchmarks/utility_intervals.py --demo DEMO_OUT --work DIR [--modality fundus]
        [--releases ksalsa-k5,kpixel-k5,gmia] [--cache DEMO_OUT/cache/fundus]

``--cache`` is copied into ``DIR`` first (the demo's identity network and probe features are reused; the demo's
folder is only read).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from medanon.evaluate import utility as util
from medanon.evaluate.cache import Cache
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.context import RealContext
from medanon.evaluate.harness import evaluate
from medanon.evaluate.inputs import load_real, load_release
from medanon.evaluate.utility_run import distinct_sources, probs_name


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--modality", choices=["fundus", "xray"], default="fundus")
    ap.add_argument("--releases", default="ksalsa-k5,kpixel-k5,gmia")
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    names = args.releases.split(",")
    cache_dir = args.work / "cache"
    if args.cache is not None and not cache_dir.exists():
        shutil.copytree(args.cache, cache_dir)
    cfg = EvalConfig.fast()
    off = dict(membership=False, attribute="", linkability=False, singling_out=False, inference=False,
               nearest=False, independent_attacker=False, siamese=False, screening=False)
    cfg = replace(cfg, fidelity=replace(cfg.fidelity, inception=False, in_domain=False),
                  utility=replace(cfg.utility, compare=((names[0], names[1]),)), attacks=replace(cfg.attacks, **off))
    data, splits = args.demo / "data" / args.modality, args.demo / f"splits_{args.modality}.csv"
    t = time.perf_counter()
    rep = evaluate(data, [args.demo / "releases" / n for n in names], args.work / "report", config=cfg,
                   splits=splits, cache_dir=cache_dir, progress=False)
    seconds = time.perf_counter() - t
    real = load_real(data, size=cfg.size, splits_csv=splits)
    ctx = RealContext(real, replace(cfg, utility=replace(cfg.utility, compare=())), Cache(cache_dir),
                      torch.device("cpu"), False)
    out = []
    for task in (util.KNOWN_TASKS[t] for t in rep["tasks"]):
        rows, y = ctx.test_set(task)
        groups = real.patients[rows]
        for name in names:
            rel = load_release(args.demo / "releases" / name, real, size=cfg.size)
            entry = next(r for r in rep["releases"] if r["name"] == name)["utility"][task.label]
            ok, _ = task.targets(rel.label(task.label))
            n_real = distinct_sources(rel, ok) or int(ok.sum())
            rel_p = list(ctx.cache.load_array(probs_name(ctx, rel.digest, task)))
            base_p = [ctx.real_same_n_probs(task, n_real, s) for s in cfg.utility.seeds]
            kw = dict(n_resamples=cfg.utility.bootstrap, confidence=cfg.attacks.confidence, seed=cfg.seed)
            img = util.paired_intervals(task, y, rel_p, base_p, **kw)
            pat = util.paired_intervals(task, y, rel_p, base_p, groups=groups, **kw)
            for metric in (util.HEADLINE[task.kind],):
                line = {"task": task.label, "release": name, "metric": metric, "n_test": len(y),
                        "n_patients": pat[metric]["n_patients"], "n_train": entry["n_train"],
                        "n_same_n_real": entry["n_same_n_real"], "resamples": cfg.utility.bootstrap}
                for what in ("release", "difference"):
                    ci_i, ci_p = img[metric][what]["ci"], pat[metric][what]["ci"]
                    line[what] = {"value": round(pat[metric][what]["value"], 4),
                                  "ci_images": [round(v, 4) for v in ci_i], "ci_patients": [round(v, 4) for v in ci_p],
                                  "width_ratio": round(float(np.diff(ci_p)[0] / np.diff(ci_i)[0]), 3)}
                assert pat[metric]["release"]["ci"] == entry["paired_bootstrap"][metric]["release"]["ci"]
                out.append(line)
                print(json.dumps(line))
    for c in rep["comparisons"]:
        m = c["metrics"][c["headline"]]
        line = {"comparison": f"{c['a']} - {c['b']}", "task": c["task"], "metric": c["headline"], "n": c["n"],
                "n_patients": c["n_patients"], "a": m["a"], "b": m["b"], "difference": m["difference"]}
        out.append(line)
        print(json.dumps(line))
    print(json.dumps({"evaluation_seconds": round(seconds, 1)}))
    return out


if __name__ == "__main__":
    main()
