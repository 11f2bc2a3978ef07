"""Singling out (GMIA §3): hidden rate and local cloaking on identity embeddings.

For every real source image ``x`` and the released record ``r(x)`` that stands for it (from the
release's private mapping), with cosine similarities of identity embeddings:

- ``N_A(x)``: released records other than ``r(x)`` more similar to ``x`` than ``r(x)`` is;
- ``N_R(x)``: real source images, other than the sources of ``r(x)``, more similar to ``r(x)``
  than ``x`` is;
- hidden rate HR = fraction of source images whose own record is *not* the most similar record
  (``N_A > 0``); local cloaking LC = the medians of ``N_R`` and ``N_A`` (GMIA Table 4 reports both).

Control: an attacker who picks a record at random finds the own record first with probability
``1 / R`` (so HR = 1 - 1/R), and its ``N_A`` is uniform on 0..R-1 (median about (R-1)/2). The
residual risk of singling out compares the attack's top-1 success with that random guess.
Counted per source image (per patient when each patient has one image).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from medanon.evaluate.attacks.risk import risk_entry, success_rate

ASSUMPTIONS = ("attacker holds the real image of a target and an identity network trained on real patients; "
               "success = the target's own released record is the most similar one")


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def singling_out(*, source_emb: np.ndarray, source_record: Sequence[int], release_emb: np.ndarray,
                 confidence: float = 0.95, seed: int = 0) -> dict:
    """HR, LC (N_R, N_A medians) and the residual risk of top-1 singling out against random guessing."""
    src, rel = _unit(np.asarray(source_emb, np.float64)), _unit(np.asarray(release_emb, np.float64))
    own = np.asarray(source_record, np.int64)
    if len(src) == 0 or len(rel) < 2:
        raise ValueError("singling out needs source images and at least two released records")
    sim = src @ rel.T                                               # (n_sources, R)
    own_sim = sim[np.arange(len(src)), own]
    n_a = (sim > own_sim[:, None]).sum(1)                           # own record excluded: not > itself
    # N_R: for the own record of x, real sources (not among that record's sources) closer than x
    n_r = np.empty(len(src), np.int64)
    by_record: dict[int, np.ndarray] = {}
    for r in np.unique(own):
        by_record[int(r)] = np.flatnonzero(own == r)
    for r, members in by_record.items():
        col = sim[:, r]
        outsiders = np.ones(len(src), bool)
        outsiders[members] = False
        for i in members:
            n_r[i] = int((col[outsiders] > col[i]).sum())
    n = len(src)
    top1 = int((n_a == 0).sum())
    rng = np.random.default_rng(seed)
    guess = rng.integers(0, len(rel), n)                            # the random-guess control
    attack, control = success_rate(top1, n, confidence=confidence), success_rate(int((guess == own).sum()), n,
                                                                                    confidence=confidence)
    return {"hidden_rate": float((n_a > 0).mean()), "LC_N_R": float(np.median(n_r)), "LC_N_A": float(np.median(n_a)),
            "chance_hidden_rate": 1.0 - 1.0 / len(rel), "chance_LC_N_A": (len(rel) - 1) / 2.0,
            "n_sources": n, "n_records": len(rel), "assumptions": ASSUMPTIONS,
            "risk": risk_entry(attack, control, what="the own released record of a real image is its most similar",
                               control_is="a record picked at random")}
