"""The demo's evaluation stage alone, timed: ``medanon.evaluate`` on a finished demo folder's releases, with the
demo's evaluation settings and an empty cache, as the demo would run it.

Prints one JSON line: wall seconds, CPU seconds (user + sys of this process, all threads), the number of releases
and the load average before and after (on a shared machine, read CPU seconds with the load: two torch threads
spinning on a loaded 2-core machine cost CPU without doing work). ``--profile FILE`` writes a cProfile of it.

    python benchmarks/evaluation_stage.py --demo DEMO_OUT --modality fundus --tag mine [--profile out.pstats]

The report goes to ``DEMO_OUT/report-<modality>-<tag>`` and the cache to ``DEMO_OUT/cache-<modality>-<tag>``
(both replaced). ``DEMO_OUT`` needs ``data/<modality>``, ``splits_<modality>.csv`` and ``releases/`` (e.g.
``python benchmarks/demo.py --out DEMO_OUT --keep``, or ``medanon demo --out DEMO_OUT --skip-evaluation``).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import resource
import shutil
import time
from pathlib import Path

import torch

from medanon.demo import default_checkpoints, eval_config
from medanon.demo_releases import GMIA_RELEASE
from medanon.evaluate.harness import evaluate

XRAY_METHODS = ("dpglow", "ldp")


def is_xray(release: Path) -> bool:
    """Whether the demo made ``release`` from its X-ray phantom (DP-GLOW, the image-domain baseline, GMIA on X-rays)."""
    return release.name.startswith(XRAY_METHODS) or release.name == GMIA_RELEASE["xray"]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True)
    ap.add_argument("--modality", choices=["fundus", "xray"], default="fundus")
    ap.add_argument("--tag", default="bench")
    ap.add_argument("--profile", type=Path, default=None)
    args = ap.parse_args(argv)
    demo, modality = args.demo, args.modality
    out, cache = demo / f"report-{modality}-{args.tag}", demo / f"cache-{modality}-{args.tag}"
    for p in (out, cache):
        shutil.rmtree(p, ignore_errors=True)
    rels = sorted(p for p in (demo / "releases").iterdir()
                  if p.is_dir() and is_xray(p) == (modality == "xray"))
    cfg = eval_config(modality, 64, default_checkpoints(), 200, 4, 0)
    r0, t0, load0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), os.getloadavg()
    prof = cProfile.Profile() if args.profile else None
    if prof:
        prof.enable()
    evaluate(demo / "data" / modality, rels, out, config=cfg, splits=demo / f"splits_{modality}.csv",
             device="cpu", cache_dir=cache, progress=False)
    if prof:
        prof.disable()
        prof.dump_stats(str(args.profile))
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    result = {"benchmark": "evaluation_stage", "modality": modality, "tag": args.tag, "releases": len(rels),
              "wall_s": round(time.perf_counter() - t0, 1),
              "cpu_s": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 1),
              "torch_threads": torch.get_num_threads(), "loadavg_before": [round(x, 2) for x in load0],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
