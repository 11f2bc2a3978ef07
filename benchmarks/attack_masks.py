"""The attacks' pair bookkeeping at a large release: shared-patient masks and the seeded pair subsample, against
their dense definitions (which ``tests/test_linkability_pairs_masks.py`` also compares with). One JSON line per
implementation: CPU seconds and peak memory of the process.

    python benchmarks/attack_masks.py --records 11354 --impl sparse
    python benchmarks/attack_masks.py --records 11354 --impl dense

Each record stands for one patient with two records per patient (a Snow-like release), the sources are the
records' own images; ``_pairs`` draws 1,000,000 impostor pairs of the records × records matrix. Run each
implementation in its own process: the peak is the process's. On the 2-core VM (beside another job): sparse
masks 1.09 CPU-s, pairs 1.23, peak 1,025 MB; dense masks 650.3 CPU-s, pairs 2.56, peak 2,675 MB.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def dense_masks(record_patients, source_patients) -> tuple[np.ndarray, np.ndarray]:
    """The definition: records that share a patient; source images whose patient is in a record."""
    owners = sorted({p for ps in record_patients for p in ps})
    member = np.asarray([[p in ps for p in owners] for ps in record_patients], bool)
    same_rr = (member.astype(np.int32) @ member.T.astype(np.int32)) > 0
    same_sr = np.stack([[p in ps for ps in record_patients] for p in source_patients])
    return same_rr, same_sr


def pairs_reference(same, upper, rng, max_impostors, max_genuine):
    """The definition: every genuine and impostor cell enumerated, then each side subsampled (seeded)."""
    mask = np.triu(np.ones(same.shape, bool), 1) if upper else np.ones(same.shape, bool)
    gi, gj = np.nonzero(mask & same)
    ii, ij = np.nonzero(mask & ~same)
    sub = False
    if len(gi) > max_genuine:
        k = np.sort(rng.choice(len(gi), max_genuine, replace=False))
        gi, gj, sub = gi[k], gj[k], True
    if len(ii) > max_impostors:
        k = np.sort(rng.choice(len(ii), max_impostors, replace=False))
        ii, ij, sub = ii[k], ij[k], True
    return np.r_[gi, ii], np.r_[gj, ij], np.r_[np.ones(len(gi), bool), np.zeros(len(ii), bool)], sub


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=11354)
    ap.add_argument("--impl", choices=("sparse", "dense"), required=True)
    args = ap.parse_args()
    from medanon.evaluate.attacks.linkability import _pairs, shared_patients

    records = [(f"P{i // 2}",) for i in range(args.records)]
    sources = [ps[0] for ps in records]
    masks, pairs = (shared_patients, _pairs) if args.impl == "sparse" else (dense_masks, pairs_reference)
    c = time.process_time()
    same_rr, _ = masks(records, sources)
    t_masks = time.process_time() - c
    c = time.process_time()
    got = pairs(same_rr, True, np.random.default_rng(0), 1_000_000, 5000)
    print(json.dumps({"measure": "attack_masks", "impl": args.impl, "records": args.records,
                      "masks_cpu_s": round(t_masks, 2), "pairs_cpu_s": round(time.process_time() - c, 2),
                      "pairs": len(got[0]), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))


if __name__ == "__main__":
    main()
