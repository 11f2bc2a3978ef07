"""The demo's evaluation alone, timed: the releases of a finished ``medanon demo`` folder evaluated again with
the demo's own protocol (``medanon.demo.eval_config``) into a fresh report and cache. Prints one JSON line (wall
and CPU seconds, releases, the code measured), so that two versions of medanon can be compared back to back on
the same data (``PYTHONPATH=OTHER/src python benchmarks/evaluation_demo.py --demo DIR``).

    python benchmarks/evaluation_demo.py --demo demo-output [--modality fundus|xray]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True, help="a finished `medanon demo --out` folder")
    ap.add_argument("--modality", choices=["fundus", "xray"], default="fundus")
    ap.add_argument("--checkpoints", type=Path, default=Path(__file__).resolve().parents[1] / "checkpoints")
    args = ap.parse_args(argv)

    import medanon
    from medanon.demo import eval_config
    from medanon.evaluate.harness import evaluate

    done = json.loads((args.demo / f"report-{args.modality}" / "report.json").read_text())
    releases = [Path(r["path"]) for r in done["releases"]]
    import yaml

    cfg_file = yaml.safe_load((args.demo / "config.yaml").read_text()) or {}
    patients, per_patient = int(cfg_file.get("patients", 200)), int(cfg_file.get("per_patient", 4))
    cfg = eval_config(args.modality, 64, args.checkpoints, patients, per_patient, int(cfg_file.get("seed", 0)),
                      inception=bool(cfg_file.get("inception", True)))
    with tempfile.TemporaryDirectory(prefix="medanon-evaluation-demo-") as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        evaluate(args.demo / "data" / args.modality, releases, Path(tmp) / "report", config=cfg,
                 splits=args.demo / f"splits_{args.modality}.csv", device="cpu", cache_dir=Path(tmp) / "cache",
                 progress=False)
        out = {"benchmark": "evaluation_demo", "modality": args.modality, "releases": len(releases),
               "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
               "code": str(Path(medanon.__file__).parent)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
