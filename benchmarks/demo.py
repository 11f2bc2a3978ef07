"""The main job's time: ``medanon demo`` from nothing (phantoms, every method, audits, evaluation, reports).

Prints one JSON line: total wall seconds, the seconds of each stage (from the demo's own
``metrics.jsonl``), CPU seconds, peak RSS and the load average before and after, so that a time
measured on a shared machine can be read with its load. The issue's target is <= 10 minutes on
2 cores for the default 200-patient demo.

    python benchmarks/demo.py [--patients 200] [--out DIR] [--keep]

Without ``--out`` the demo runs in a temporary folder that is removed afterwards (``--keep`` keeps it).
The demo resumes finished steps, so always point ``--out`` at a new folder to time a full run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patients", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None, help="run folder (must not exist); default: a temporary one")
    ap.add_argument("--keep", action="store_true", help="keep the temporary run folder")
    ap.add_argument("--skip-evaluation", action="store_true")
    args = ap.parse_args(argv)
    if args.out is not None and args.out.exists():
        ap.error(f"--out {args.out} exists: the demo would resume from it instead of running in full")
    out = args.out or Path(tempfile.mkdtemp(prefix="medanon-demo-bench-")) / "demo"
    cmd = [sys.executable, "-m", "medanon", "--device", "cpu", "demo", "--out", str(out),
           "--patients", str(args.patients)] + (["--skip-evaluation"] if args.skip_evaluation else [])
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"medanon demo failed with exit code {proc.returncode}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    stages: dict[str, float] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if "seconds" in m and "step" in m:
            key = f"{m['step']}:{m['modality']}" if "modality" in m else str(m["step"])
            stages[key] = stages.get(key, 0.0) + float(m["seconds"])
    result = {
        "benchmark": "demo", "patients_per_modality": args.patients, "evaluation": not args.skip_evaluation,
        "wall_s": round(wall, 1), "target_s": 600, "within_target": wall <= 600,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "stages_s": {k: round(v, 1) for k, v in stages.items()},
        "cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))
    if args.out is None and not args.keep:
        shutil.rmtree(out.parent, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
