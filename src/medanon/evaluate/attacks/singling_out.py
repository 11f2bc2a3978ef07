"""Singling out (GMIA §3): hidden rate and local cloaking on identity embeddings.

For every real source image ``x`` and the released record ``r(x)`` that stands for it (from the
release's private mapping), with cosine similarities of identity embeddings:

- ``N_A(x)``: released records other than ``r(x)`` more similar to ``x`` than ``r(x)`` is;
- hidden rate HR = fraction of source images whose own record is *not* the most similar record
  (``N_A > 0``), per image (``hidden_rate``) and **per individual** (``hidden_rate_individual``: a patient
  is hidden when none of their images finds its own record first; GMIA counts individuals);
- **ties never count for the attacker**: an image whose own record is tied with ``t`` other records at the
  top counts ``1 / (t + 1)`` found (its expected success under random tie breaking), so a constant release
  (every record identical) is found at chance, ``1 / R``, not 100 %; a patient is found with probability
  ``1 - prod(1 - credit)`` over their images; ``N_A`` and both ``N_R`` count a tied competitor as half;
- local cloaking, both definitions, named: **centred on r(x)** (``LC_N_R``: real source images other than
  the sources of ``r(x)`` more similar to ``r(x)`` than ``x`` is; GMIA's paper) and **centred on x**
  (``LC_N_R_x``: real source images of other patients more similar to ``x`` than ``r(x)`` is; GMIA's
  official code). Medians over source images.

Intervals: with ``source_patients``, the per-image rates and the medians get patient cluster bootstrap
intervals (:func:`medanon.evaluate.attacks.bootstrap.cluster_summary`, seeded by ``seed``), the per-individual
rate one over the same clusters (individuals who share a released record are one unit); without, Wilson's and an
image bootstrap.

Two-sided: the **reverse** attacker takes the *least* similar record (a release optimised away from its
sources, as GMIA's, sits at negative similarity to them); both success rates are reported.

Baseline (random guessing, not a control): a record picked at random is the own record with probability
``1 / R`` (HR = 1 - 1/R; ``N_A`` uniform on 0..R-1). Singling out reads the target's own record, so it
has no population of non-members to run on, so it has no control; the nearest-record membership attack
(:mod:`.nearest`) asks a like question, with the same similarity, against held-out patients.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES, cluster_summary, weighted_median
from medanon.evaluate.attacks.risk import exact_rate, rate, risk_entry, success_rate
from medanon.evaluate.attacks.stats import mid_rank, tie_counts, top1_credit, unit
from medanon.evaluate.attacks.views import assumptions, cosines

ASSUMPTIONS = ("attacker holds the real image of a target and an identity network trained on real patients; "
               "success = the target's own released record is the most similar one (reverse: the least similar); "
               "a record tied with t others counts 1/(t+1)")


def _found(credit: np.ndarray, codes: np.ndarray, n_patients: int) -> np.ndarray:
    """Per patient: the chance that at least one of their images finds its own record first, ``1 - prod(1 - c)``
    (tie breaks independent per image)."""
    with np.errstate(divide="ignore"):
        miss = np.bincount(codes, weights=np.log1p(-np.minimum(credit, 1.0)), minlength=n_patients)
    return 1.0 - np.exp(miss)


def singling_out(*, source_emb: np.ndarray, source_record: Sequence[int], release_emb: np.ndarray,
                 source_patients: Sequence[str] | None = None, confidence: float = 0.95, seed: int = 0,
                 source_clusters: Sequence[object] | None = None, n_resamples: int = BOOT_RESAMPLES,
                 release_emb_mirrored: np.ndarray | None = None) -> dict:
    """HR per image and per individual, LC (both centres, and N_A), the reverse attacker, and the residual
    risk of top-1 singling out against random guessing. ``release_emb_mirrored``: the released images' embeddings
    mirrored left-right; each source then meets each record in the record's better orientation (:mod:`.views`)."""
    src, rel = unit(source_emb), unit(release_emb)
    own = np.asarray(source_record, np.int64)
    if len(src) == 0 or len(rel) < 2:
        raise ValueError("singling out needs source images and at least two released records")
    grouped = source_patients is not None
    pats = np.asarray(source_patients if grouped else np.arange(len(src)).astype(str))
    uniq, codes = np.unique(pats, return_inverse=True)
    sim = cosines(src, rel, release_emb_mirrored)                   # (n_sources, R)
    own_sim = sim[np.arange(len(src)), own]
    top1, rev1 = top1_credit(sim, own), top1_credit(-sim, own)      # ties: 1 / (tied records)
    n_a = mid_rank(sim, own)                                        # records before the own one, ties half
    # N_R centred on r(x): real sources, not among r(x)'s sources, closer to r(x) than x is (ties half)
    n_r = np.zeros(len(src))
    for r in np.unique(own):
        members = np.flatnonzero(own == r)
        col = sim[:, r]
        outsiders = np.ones(len(src), bool)
        outsiders[members] = False
        above, tied = tie_counts(np.broadcast_to(col[outsiders], (len(members), int(outsiders.sum()))), col[members])
        n_r[members] = above + 0.5 * tied
    # N_R centred on x: real sources of other patients closer to x than r(x) is (ties half)
    ss = np.where(pats[:, None] != pats[None, :], src @ src.T, -np.inf)
    above, tied = tie_counts(ss, own_sim)
    n_r_x = above + 0.5 * tied
    n, big_r = len(src), len(rel)
    exposed, exposed_rev = _found(top1, codes, len(uniq)), _found(rev1, codes, len(uniq))
    boot = dict(confidence=confidence, seed=seed, n_resamples=n_resamples)
    # resampled by patient cluster: patients who share released records are one unit
    unit_of = np.asarray(source_clusters) if grouped and source_clusters is not None else pats
    med_ci = {f"{k}_ci": cluster_summary(weighted_median(v), unit_of, float(np.median(v)), **boot)["ci"]
              for k, v in (("LC_N_R", n_r), ("LC_N_R_x", n_r_x), ("LC_N_A", n_a))}
    groups = unit_of if grouped else None
    attack = rate(top1, groups=groups, **boot)
    reverse = rate(rev1, groups=groups, **boot)
    base = exact_rate(1.0 / big_r, n, confidence=confidence)
    # either attacker, whichever does better: its rate and interval from the same resamples as a whole
    two = cluster_summary(lambda w: np.maximum(w @ top1, w @ rev1) / w.sum(1), unit_of,
                          float(max(top1.mean(), rev1.mean())), rate=True, **boot)
    if grouped:                                     # individuals who share released records are one unit too
        first = np.zeros(len(uniq), np.int64)
        first[codes[::-1]] = np.arange(len(codes))[::-1]            # each individual's first source image
        ind = rate(exposed, groups=np.asarray(unit_of)[first], stream=1, **boot)
    else:
        ind = success_rate(float(exposed.sum()), len(uniq), confidence=confidence)
    return {"hidden_rate": float(1 - top1.mean()), "hidden_rate_ci": [1 - attack.ci[1], 1 - attack.ci[0]],
            "hidden_rate_individual": float(1 - exposed.mean()),
            "hidden_rate_individual_ci": [1 - ind.ci[1], 1 - ind.ci[0]], "n_individuals": len(uniq),
            "reverse_top1": float(rev1.mean()), "reverse_top1_ci": list(reverse.ci),
            "reverse_hidden_rate_individual": float(1 - exposed_rev.mean()),
            "two_sided_top1": float(max(top1.mean(), rev1.mean())), "two_sided_top1_ci": two["ci"],
            "LC_N_R": float(np.median(n_r)), "LC_N_R_x": float(np.median(n_r_x)), "LC_N_A": float(np.median(n_a)),
            **med_ci, "interval": attack.method, "ties": "a record tied with t others counts 1/(t+1); in N_A and "
                                                        "N_R a tied competitor counts 1/2",
            "chance_hidden_rate": 1.0 - 1.0 / big_r, "chance_LC_N_A": (big_r - 1) / 2.0,
            "n_sources": n, "n_records": big_r, "n": n,
            "assumptions": assumptions(ASSUMPTIONS, release_emb_mirrored),
            "risk": risk_entry(attack, None, what="the own released record of a real image is its most similar",
                               control_is="none: a held-out patient has no record of its own (nearest-record "
                                          "membership asks a like question against a control)",
                               baseline=base, baseline_is="a record picked at random (1/R)"),
            "risk_reverse": risk_entry(reverse, None, what="the own released record of a real image is its least "
                                                           "similar", control_is="none (as above)",
                                       baseline=base, baseline_is="a record picked at random (1/R)")}
