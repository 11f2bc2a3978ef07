"""Phantom generation speed: prints one JSON line.

Target (issue 2): 1,000 fundus phantoms at 64 px in under a minute on 2 cores, PNG writing
included. Also reports the X-ray rate and the speed-up of all cores over one worker, measured in
the same run (ratios are what to compare on a noisy machine, not absolute times).

    python benchmarks/phantoms.py [--images 1000] [--size 64]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from medanon.config import PhantomConfig
from medanon.phantoms.generate import generate
from medanon.runtime import cpu_count


def rate(modality: str, images: int, size: int, workers: int, tmp: Path) -> float:
    per = 4
    cfg = PhantomConfig(modality=modality, patients=max(1, images // per), per_patient=per, size=size, seed=0,
                        workers=workers)
    t0 = time.perf_counter()
    generate(cfg, tmp / f"{modality}-{workers}-{size}", progress=False)
    return cfg.patients * per / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    cores = cpu_count()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        fundus_all = rate("fundus", args.images, args.size, cores, tmp)
        fundus_one = rate("fundus", args.images // 4, args.size, 1, tmp)
        xray_all = rate("xray", args.images, args.size, cores, tmp)
        fundus_256 = rate("fundus", 100, 256, cores, tmp)
    print(json.dumps({
        "benchmark": "phantoms", "size": args.size, "cores": cores,
        "fundus_per_s": round(fundus_all, 1),
        "fundus_seconds_per_1000": round(1000 / fundus_all, 2),
        "fundus_target_met": 1000 / fundus_all < 60,
        "fundus_per_s_one_worker": round(fundus_one, 1),
        "parallel_speedup": round(fundus_all / fundus_one, 2),
        "xray_per_s": round(xray_all, 1),
        "fundus_256px_per_s": round(fundus_256, 1),
    }))


if __name__ == "__main__":
    main()
