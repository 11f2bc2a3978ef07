"""The demo's evaluation alone, timed: the releases of a finished ``medanon demo`` folder evaluated again with
the demo's own protocol (``medanon.demo.eval_config``) into a fresh report and cache. Prints one JSON line (wall
and CPU seconds, releases, the code measured), so that two versions of medanon can be compared back to back on
the same data (``PYTHONPATH=OTHER/src python benchmarks/evaluation_demo.py --demo DIR``).

    python benchmarks/evaluation_demo.py --demo demo-output [--modality fundus|xray] [--no-inception]
        [--device cpu|cuda] [--profile R]

``--no-inception`` leaves FID and KID out whatever the demo ran with (the Inception network's time then does not
hide the rest's). ``--device cuda`` evaluates on the GPU: run it beside ``--device cpu`` on the same machine to
compare the two (the line's ``seconds_per_release`` says where each release's time went). ``--profile R`` writes
the R functions of most cumulative time (cProfile) to stderr. A demo stopped before its evaluation finished has no
``report.json``: its releases are then those its ``metrics.jsonl`` says it made.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path


def releases_of(demo: Path, modality: str) -> list[Path]:
    """The release folders the demo evaluated for ``modality`` (its report), or made (its metrics)."""
    report = demo / f"report-{modality}" / "report.json"
    if report.exists():
        return [Path(r["path"]) for r in json.loads(report.read_text())["releases"]]
    rows = [json.loads(line) for line in (demo / "metrics.jsonl").read_text().splitlines() if line.strip()]
    made = [name for r in rows if r.get("step") == "anonymise" and r.get("modality") == modality
            for name in r.get("release_seconds", {})]
    if not made:
        raise SystemExit(f"{demo} has neither {report} nor releases of {modality} in its metrics.jsonl")
    return [demo / "releases" / name for name in made]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True, help="a finished `medanon demo --out` folder")
    ap.add_argument("--modality", choices=["fundus", "xray"], default="fundus")
    ap.add_argument("--no-inception", action="store_true", help="leave FID/KID out (no Inception network)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--profile", type=int, default=0, metavar="R", help="cProfile: R functions to stderr")
    ap.add_argument("--checkpoints", type=Path, default=Path(__file__).resolve().parents[1] / "checkpoints")
    args = ap.parse_args(argv)

    import medanon
    from medanon.demo import eval_config
    from medanon.evaluate.harness import evaluate

    releases = releases_of(args.demo, args.modality)
    import yaml

    cfg_file = yaml.safe_load((args.demo / "config.yaml").read_text()) or {}
    patients, per_patient = int(cfg_file.get("patients", 200)), int(cfg_file.get("per_patient", 4))
    cfg = eval_config(args.modality, 64, args.checkpoints, patients, per_patient, int(cfg_file.get("seed", 0)),
                      inception=bool(cfg_file.get("inception", True)) and not args.no_inception)
    with tempfile.TemporaryDirectory(prefix="medanon-evaluation-demo-") as tmp:
        profiler = cProfile.Profile() if args.profile else None
        t0, c0 = time.perf_counter(), time.process_time()
        if profiler:
            profiler.enable()
        report = evaluate(args.demo / "data" / args.modality, releases, Path(tmp) / "report", config=cfg,
                          splits=args.demo / f"splits_{args.modality}.csv", device=args.device,
                          cache_dir=Path(tmp) / "cache", progress=False)
        if profiler:
            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
        out = {"benchmark": "evaluation_demo", "modality": args.modality, "releases": len(releases),
               "inception": cfg.fidelity.inception, "device": args.device, "profiled": bool(args.profile),
               "seconds_per_release": {r["name"]: r["seconds"] for r in report["releases"]},
               "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
               "code": str(Path(medanon.__file__).parent)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
