"""Singling out (GMIA §3): hidden rate and local cloaking on identity embeddings.

For every real source image ``x`` and the released record ``r(x)`` that stands for it (from the
release's private mapping), with cosine similarities of identity embeddings:

- ``N_A(x)``: released records other than ``r(x)`` more similar to ``x`` than ``r(x)`` is;
- hidden rate HR = fraction of source images whose own record is *not* the most similar record
  (``N_A > 0``), per image (``hidden_rate``) and **per individual** (``hidden_rate_individual``: a patient
  is hidden when none of their images finds its own record first; GMIA counts individuals);
- local cloaking, both definitions, named: **centred on r(x)** (``LC_N_R``: real source images other than
  the sources of ``r(x)`` more similar to ``r(x)`` than ``x`` is; GMIA's paper) and **centred on x**
  (``LC_N_R_x``: real source images of other patients more similar to ``x`` than ``r(x)`` is; GMIA's
  official code). Medians over source images, with percentile bootstrap intervals.

Two-sided: the **reverse** attacker takes the *least* similar record (a release optimised away from its
sources, as GMIA's, sits at negative similarity to them); both success rates are reported.

Baseline (random guessing, not a control): a record picked at random is the own record with probability
``1 / R`` (HR = 1 - 1/R; ``N_A`` uniform on 0..R-1). Singling out reads the target's own record, so it
has no population of non-members to run on; its control is the nearest-record membership attack
(:mod:`.nearest`), the same similarity run on held-out patients.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from medanon.evaluate.attacks.risk import exact_rate, risk_entry, success_rate
from medanon.evaluate.attacks.stats import unit

ASSUMPTIONS = ("attacker holds the real image of a target and an identity network trained on real patients; "
               "success = the target's own released record is the most similar one (reverse: the least similar)")



def _median_ci(v: np.ndarray, confidence: float) -> list[float]:
    """Percentile bootstrap interval of a median over source images (``scipy.stats.bootstrap``)."""
    from scipy.stats import bootstrap

    if len(v) < 2 or np.all(v == v[0]):
        return [float(np.median(v))] * 2
    r = bootstrap((np.asarray(v, np.float64),), np.median, n_resamples=200, confidence_level=confidence,
                  method="percentile", random_state=0)
    return [float(r.confidence_interval.low), float(r.confidence_interval.high)]


def singling_out(*, source_emb: np.ndarray, source_record: Sequence[int], release_emb: np.ndarray,
                 source_patients: Sequence[str] | None = None, confidence: float = 0.95, seed: int = 0) -> dict:
    """HR per image and per individual, LC (both centres, and N_A), the reverse attacker, and the residual
    risk of top-1 singling out against random guessing."""
    del seed                                                        # the baseline is exact, nothing is drawn
    src, rel = unit(source_emb), unit(release_emb)
    own = np.asarray(source_record, np.int64)
    if len(src) == 0 or len(rel) < 2:
        raise ValueError("singling out needs source images and at least two released records")
    pats = np.asarray(source_patients if source_patients is not None else np.arange(len(src)).astype(str))
    sim = src @ rel.T                                               # (n_sources, R)
    own_sim = sim[np.arange(len(src)), own]
    n_a = (sim > own_sim[:, None]).sum(1)                           # own record excluded: not > itself
    n_a_rev = (sim < own_sim[:, None]).sum(1)
    # N_R centred on r(x): real sources, not among r(x)'s sources, closer to r(x) than x is
    n_r = np.empty(len(src), np.int64)
    for r in np.unique(own):
        members = np.flatnonzero(own == r)
        col = sim[:, r]
        outsiders = np.ones(len(src), bool)
        outsiders[members] = False
        n_r[members] = (col[outsiders][None, :] > col[members][:, None]).sum(1)
    # N_R centred on x: real sources of other patients closer to x than r(x) is
    ss = src @ src.T
    other = pats[:, None] != pats[None, :]
    n_r_x = ((ss > own_sim[:, None]) & other).sum(1)
    n, big_r = len(src), len(rel)
    top1, rev1 = n_a == 0, n_a_rev == 0
    uniq = np.unique(pats)
    exposed = {p: bool(top1[pats == p].any()) for p in uniq}
    exposed_rev = {p: bool(rev1[pats == p].any()) for p in uniq}
    med_ci = {k: _median_ci(v, confidence) for k, v in (("LC_N_R_ci", n_r), ("LC_N_R_x_ci", n_r_x),
                                                         ("LC_N_A_ci", n_a))}
    attack = success_rate(int(top1.sum()), n, confidence=confidence)
    base = exact_rate(1.0 / big_r, n, confidence=confidence)
    ind = success_rate(sum(exposed.values()), len(uniq), confidence=confidence)
    reverse = success_rate(int(rev1.sum()), n, confidence=confidence)
    return {"hidden_rate": float(1 - top1.mean()), "hidden_rate_ci": [1 - attack.ci[1], 1 - attack.ci[0]],
            "hidden_rate_individual": float(1 - np.mean(list(exposed.values()))),
            "hidden_rate_individual_ci": [1 - ind.ci[1], 1 - ind.ci[0]], "n_individuals": len(uniq),
            "reverse_top1": float(rev1.mean()), "reverse_top1_ci": list(reverse.ci),
            "reverse_hidden_rate_individual": float(1 - np.mean(list(exposed_rev.values()))),
            "two_sided_top1": float(max(top1.mean(), rev1.mean())),
            "LC_N_R": float(np.median(n_r)), "LC_N_R_x": float(np.median(n_r_x)), "LC_N_A": float(np.median(n_a)),
            **med_ci,
            "chance_hidden_rate": 1.0 - 1.0 / big_r, "chance_LC_N_A": (big_r - 1) / 2.0,
            "n_sources": n, "n_records": big_r, "n": n, "assumptions": ASSUMPTIONS,
            "risk": risk_entry(attack, None, what="the own released record of a real image is its most similar",
                               control_is="none: a held-out patient has no own record; see the nearest-record "
                                          "membership attack for the control",
                               baseline=base, baseline_is="a record picked at random (1/R)"),
            "risk_reverse": risk_entry(reverse, None, what="the own released record of a real image is its least "
                                                           "similar", control_is="none (as above)",
                                       baseline=base, baseline_is="a record picked at random (1/R)")}
