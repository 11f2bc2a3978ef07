"""Cost of top-K membership's two-way interval (records' patient clusters and held-out patients, 400 resamples):
one pool of ``--records`` one-image records ranked against ``--heldout`` held-out images of 4 images per patient,
random scores. Prints one JSON line: CPU seconds and the peak memory the bootstrap allocates (tracemalloc).

    OMP_NUM_THREADS=1 python benchmarks/topk_bootstrap.py [--records 2000 --heldout 4000]
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

import numpy as np

from medanon.evaluate.attacks.membership import _two_way_bootstrap


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--heldout", type=int, default=4000)
    ap.add_argument("--resamples", type=int, default=400)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    r, h = args.records, args.heldout
    scored = [(rng.normal(1, 1, 1), np.empty(0), rng.normal(0, 1, h)) for _ in range(r)]
    tracemalloc.start()
    t = time.process_time()
    rate = _two_way_bootstrap(scored, np.ones(r), np.arange(r), np.zeros(r, int), [2 * r], np.arange(h) // 4,
                              estimate=0.5, hits=r / 2, confidence=0.95, seed=0, n_resamples=args.resamples)
    cpu = time.process_time() - t
    peak = tracemalloc.get_traced_memory()[1]
    print(json.dumps({"benchmark": "topk_bootstrap", "records": r, "heldout": h, "resamples": args.resamples,
                      "cpu_s": round(cpu, 2), "peak_mib": round(peak / 2 ** 20, 1),
                      "ci": [round(v, 4) for v in rate.ci]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
