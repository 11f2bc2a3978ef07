"""Membership by nearest released record: the identity attacks' *control* (anonymeter's sense).

The attacker holds a target's real image and the release, and claims "this person is in the release"
when the target's most similar released record (cosine of identity embeddings) reaches a threshold ``τ``.
Run on **members** (the real images the release was made from) and, unchanged, on **controls** (real
images of held-out patients, never released): the control's success is what the same attack "finds" in
people who are not there, and the residual risk ``(members - controls) / (1 - controls)`` is computed
against it. A copy release gives members similarity 1 and a residual near 1; a release of unrelated
people treats members and controls alike and gives a residual near 0.

``τ`` is fixed at ``1 - fpr`` of the scores of **calibration** images: real images of other people, neither
members nor the controls (the evaluation uses half of the held-out patients, split by patient, and tests
the other half as controls; not the attacker split, on which the identity network was trained and whose
images it therefore separates from everyone), or of the controls themselves without them.
Two-sided: the reverse attacker claims membership when the *least* similar record is below the
``fpr`` quantile (a release optimised away from its sources). Both come with the threshold-free AUC of
members vs controls, its DeLong interval and the Mann-Whitney test.
"""

from __future__ import annotations

import numpy as np

from medanon.evaluate.attacks.risk import risk_entry, success_rate
from medanon.evaluate.attacks.stats import delong, unit

ASSUMPTIONS = ("attacker holds a target's real image, an identity network and the release, and claims membership "
               "when the most (reverse: least) similar released record passes a threshold set on real images of "
               "other people")



def nearest_record_membership(*, member_emb: np.ndarray, control_emb: np.ndarray, release_emb: np.ndarray,
                              calib_emb: np.ndarray | None = None, fpr: float = 0.1,
                              confidence: float = 0.95) -> dict:
    """Members vs held-out controls, one- and two-sided, with the residual risk against the control."""
    rel = unit(release_emb)
    if len(member_emb) == 0 or len(control_emb) == 0 or len(rel) == 0:
        raise ValueError("nearest-record membership needs member images, control images and released records")
    has_calib = calib_emb is not None and len(calib_emb) > 0
    return membership_from_scores(unit(member_emb) @ rel.T, unit(control_emb) @ rel.T,
                                  unit(calib_emb) @ rel.T if has_calib else None, fpr=fpr, confidence=confidence,
                                  calibrated_on="half of the held-out patients" if has_calib else "the controls")


def membership_from_scores(member_scores: np.ndarray, control_scores: np.ndarray, calib_scores: np.ndarray | None,
                           *, fpr: float = 0.1, confidence: float = 0.95, calibrated_on: str = "the controls",
                           score: str = "cosine", assumptions: str = ASSUMPTIONS) -> dict:
    """The attack on similarity matrices ``(targets, released records)`` of members, controls and calibration
    images (None: the controls calibrate): the most (reverse: least) similar record against the thresholds."""
    if member_scores.size == 0 or control_scores.size == 0:
        raise ValueError("nearest-record membership needs member images, control images and released records")
    m_hi, m_lo = member_scores.max(1), member_scores.min(1)
    c_hi, c_lo = control_scores.max(1), control_scores.min(1)
    cal_hi, cal_lo = (calib_scores.max(1), calib_scores.min(1)) if calib_scores is not None and calib_scores.size \
        else (c_hi, c_lo)
    tau, tau_lo = float(np.quantile(cal_hi, 1 - fpr)), float(np.quantile(cal_lo, fpr))
    entries = {}
    for name, m, c, claim in (("forward", m_hi, c_hi, lambda v: v >= tau), ("reverse", m_lo, c_lo,
                                                                              lambda v: v <= tau_lo)):
        a = success_rate(int(claim(m).sum()), len(m), confidence=confidence)
        k = success_rate(int(claim(c).sum()), len(c), confidence=confidence)
        entries[name] = risk_entry(a, k, what="a member's most similar released record passes the threshold"
                                   if name == "forward" else "a member's least similar released record falls "
                                                             "below the threshold",
                                   control_is="the same attack on real images of held-out patients")
    auc = delong(m_hi, c_hi, confidence=confidence)
    auc_rev = delong(-m_lo, -c_lo, confidence=confidence)
    out = {"auc": auc["auc"], "auc_ci": auc["ci"], "p_value": auc["p_value"], "two_sided_auc": auc["two_sided_auc"],
           "reverse_auc": auc_rev["auc"], "reverse_auc_ci": auc_rev["ci"],
           "threshold": tau, "low_threshold": tau_lo, "fpr": fpr, "calibrated_on": calibrated_on,
           "n_members": len(m_hi), "n_controls": len(c_hi), "n": len(m_hi), "assumptions": assumptions,
           "risk": entries["forward"], "risk_reverse": entries["reverse"]}
    if score != "cosine":
        out["score"] = score
    return out
