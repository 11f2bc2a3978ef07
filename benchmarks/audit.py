"""How long the release audit takes on a large release: ``audit_release`` with the source records (every check,
the identifier search included), one JSON line with CPU seconds.

    python benchmarks/audit.py --release REL --data SOURCE [--mapping REL.mapping.json]

On the VS-Snow paper-scale phantom (16,216 source records, a Snow release of its 11,354 training images), the
identifier search once compared every text of the release with every identifier (a regular expression per pair):
259.9 CPU-s; it now matches only identifiers that are not one token as substrings: 6.6-8.4 CPU-s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", required=True)
    ap.add_argument("--data", required=True, help="the dataset the release was made from")
    ap.add_argument("--mapping", help="its private mapping (default: RELEASE.mapping.json if present)")
    args = ap.parse_args()
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset
    from medanon.release.audit import audit_release

    mapping = args.mapping or args.release.rstrip("/") + ".mapping.json"
    records = open_dataset(args.data, DataConfig(size=64)).records
    t, c = time.perf_counter(), time.process_time()
    rep = audit_release(args.release, mapping=mapping if Path(mapping).exists() else None, source_records=records)
    print(json.dumps({"measure": "audit", "passed": rep.passed, "source_records": len(records),
                      "cpu_s": round(time.process_time() - c, 1), "wall_s": round(time.perf_counter() - t, 1)}))


if __name__ == "__main__":
    main()
