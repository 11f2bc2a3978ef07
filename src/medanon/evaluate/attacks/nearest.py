"""Membership by nearest released record: the identity attacks' *control* (anonymeter's sense).

The attacker holds a target's real image and the release, and claims "this person is in the release"
when the target's most similar released record (cosine of identity embeddings) reaches a threshold ``τ``.
Run on **members** (the real images the release was made from) and, unchanged, on **controls** (real
images of held-out patients, never released): the control's success is what the same attack "finds" in
people who are not there, and the residual risk ``(members - controls) / (1 - controls)`` is computed
against it. A copy release gives members similarity 1 and a residual near 1; a release of unrelated
people treats members and controls alike and gives a residual near 0.

``τ`` is the lowest threshold that accepts at most a share ``fpr`` of the scores of **calibration** images:
real images of other people, neither members nor the controls (the evaluation uses half of the held-out
patients, split by patient, and tests the other half as controls; not the attacker split, on which the
identity network was trained and whose images it therefore separates from everyone), or of the controls
themselves without them.
Scores tied at the threshold are accepted or refused together (:func:`.stats.threshold_at_far`), so ties
never push the realised rate above ``fpr``: a release whose every score is tied claims no one.
Two-sided: the reverse attacker claims membership when the *least* similar record is at most the lower
threshold (a share ``fpr`` in the lower tail; a release optimised away from its sources). Both come with the
threshold-free AUC of members vs controls (ties count 1/2) and the Mann-Whitney test.

Intervals: with ``member_groups`` and ``control_groups`` (the patient of each target image) the rates and
AUCs get patient cluster bootstrap intervals, seeded by ``seed`` (the rates: members and controls resampled
independently; the AUC: one multinomial over the members' and controls' patients together, so the two groups'
sizes vary between resamples), and the residual risk the percentile interval over the rates' resamples; without
them, Wilson and DeLong.
"""

from __future__ import annotations

import numpy as np

from medanon.evaluate.attacks.auc import delong
from medanon.evaluate.attacks.balance import Balance, control_rates, covered
from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES
from medanon.evaluate.attacks.risk import rate, risk_entry, threshold_entry
from medanon.evaluate.attacks.stats import threshold_at_far, unit
from medanon.evaluate.attacks.views import assumptions, cosines

ASSUMPTIONS = ("attacker holds a target's real image, an identity network and the release, and claims membership "
               "when the most (reverse: least) similar released record passes a threshold set on real images of "
               "other people")


def nearest_record_membership(*, member_emb: np.ndarray, control_emb: np.ndarray, release_emb: np.ndarray,
                              calib_emb: np.ndarray | None = None, fpr: float = 0.1, confidence: float = 0.95,
                              member_groups=None, control_groups=None, calib_groups=None, seed: int = 0,
                              balance: Balance | None = None, n_resamples: int = BOOT_RESAMPLES,
                              member_clusters=None, release_emb_mirrored: np.ndarray | None = None) -> dict:
    """Members vs held-out controls, one- and two-sided, with the residual risk against the control.
    ``release_emb_mirrored``: the released images' embeddings mirrored left-right; each target's score for a record
    is then the higher of the two orientations (:mod:`.views`)."""
    rel = unit(release_emb)
    if len(member_emb) == 0 or len(control_emb) == 0 or len(rel) == 0:
        raise ValueError("nearest-record membership needs member images, control images and released records")
    has_calib = calib_emb is not None and len(calib_emb) > 0
    rem = release_emb_mirrored
    return membership_from_scores(cosines(member_emb, rel, rem), cosines(control_emb, rel, rem),
                                  cosines(calib_emb, rel, rem) if has_calib else None, fpr=fpr, confidence=confidence,
                                  calibrated_on="half of the held-out patients" if has_calib else "the controls",
                                  member_groups=member_groups, control_groups=control_groups, seed=seed,
                                  member_clusters=member_clusters,
                                  calib_groups=calib_groups if has_calib else None, balance=balance,
                                  n_resamples=n_resamples, assumptions=assumptions(ASSUMPTIONS, rem))


def membership_from_scores(member_scores: np.ndarray, control_scores: np.ndarray, calib_scores: np.ndarray | None,
                           *, fpr: float = 0.1, confidence: float = 0.95, calibrated_on: str = "the controls",
                           score: str = "cosine", assumptions: str = ASSUMPTIONS, member_groups=None,
                           control_groups=None, calib_groups=None, seed: int = 0, balance: Balance | None = None,
                           n_resamples: int = BOOT_RESAMPLES, member_clusters=None) -> dict:
    """The attack on similarity matrices ``(targets, released records)`` of members, controls and calibration
    images (None: the controls calibrate): the most (reverse: least) similar record against the thresholds.
    ``member_groups`` / ``control_groups``: the patient of each member / control row (both, or neither);
    ``calib_groups``: of each calibration row (the number of calibration patients). ``balance``: the
    stratifying label of members and controls (:mod:`.balance`): the control rate is reweighted to the members'
    strata. Each risk entry carries its ``threshold`` with the realised (unweighted) rate on the controls.
    ``member_clusters``: the resampling unit of each member row where patients share released records (the
    connected components of patients linked by records): members' images are resampled by cluster."""
    if member_scores.size == 0 or control_scores.size == 0:
        raise ValueError("nearest-record membership needs member images, control images and released records")
    grouped = member_groups is not None and control_groups is not None
    mg, cg = (np.asarray(member_groups), np.asarray(control_groups)) if grouped else (None, None)
    patients_of_members = mg
    if grouped and member_clusters is not None:
        mg = np.asarray(member_clusters)
    uncovered = 0
    if balance is not None and (keep := covered(balance)).any() and not keep.all():
        # members in strata without a control target cannot be compared: the attack rate leaves them out too
        uncovered = int((~keep).sum())
        member_scores = member_scores[keep]
        mg = mg[keep] if mg is not None else None
        patients_of_members = patients_of_members[keep] if patients_of_members is not None else None
        balance = balance.keep_members(keep)
    m_hi, m_lo = member_scores.max(1), member_scores.min(1)
    c_hi, c_lo = control_scores.max(1), control_scores.min(1)
    own_calib = calib_scores is not None and calib_scores.size
    cal_hi, cal_lo = (calib_scores.max(1), calib_scores.min(1)) if own_calib else (c_hi, c_lo)
    cal_groups = calib_groups if own_calib else cg
    n_cal = len(np.unique(cal_groups)) if cal_groups is not None else len(cal_hi)
    tau, tau_lo = threshold_at_far(cal_hi, fpr), -threshold_at_far(-cal_lo, fpr)
    boot = {"confidence": confidence, "seed": seed, "n_resamples": n_resamples}
    entries = {}
    for name, m, c, cal, t, claim in (("forward", m_hi, c_hi, cal_hi, tau, lambda v: v >= tau),
                                      ("reverse", m_lo, c_lo, cal_lo, tau_lo, lambda v: v <= tau_lo)):
        a = rate(claim(m), groups=mg, stream=0, **boot)
        k, plain = control_rates(claim(c), groups=cg, balance=balance, member_groups=mg, stream=1, **boot)
        thr = threshold_entry(value=t, nominal=fpr, calibrated_on=calibrated_on, patients=n_cal, units=len(cal),
                              unit="images", calibration_rate=float(claim(cal).mean()), realised=plain or k,
                              what="claims a target whose " + ("most similar record scores at least" if name ==
                              "forward" else "least similar record scores at most") + " the threshold; realised: "
                              "the share of control targets claimed")
        entries[name] = risk_entry(a, k, what="a member's most similar released record passes the threshold"
                                   if name == "forward" else "a member's least similar released record falls "
                                                             "below the threshold",
                                   control_is="the same attack on real images of held-out patients" +
                                   (f", reweighted to the members' {balance.label} mix" if plain else ""),
                                   unweighted=plain, threshold=thr)
    if uncovered:                               # said where the rate is shown, and in the reweighting's record
        share = uncovered / (uncovered + len(m_hi))
        for e in entries.values():
            e["members_left_out"] = uncovered
            if (e.get("control") or {}).get("balanced") is not None:
                e["control"]["balanced"]["uncovered_member_share"] = share   # (computed after they left: 0)
    kw = {"pos_groups": mg, "neg_groups": cg, **boot}
    auc = delong(m_hi, c_hi, **kw)
    auc_rev = delong(-m_lo, -c_lo, **kw)
    out = {"auc": auc["auc"], "auc_ci": auc["ci"], "p_value": auc["p_value"], "two_sided_auc": auc["two_sided_auc"],
           "two_sided_auc_ci": auc["two_sided_ci"], "reverse_auc": auc_rev["auc"], "reverse_auc_ci": auc_rev["ci"],
           "interval": auc["interval"],
           "threshold": tau, "low_threshold": tau_lo, "fpr": fpr, "calibrated_on": calibrated_on,
           "n_members": len(m_hi), "n_controls": len(c_hi), "n": len(m_hi), "assumptions": assumptions,
           "members_left_out": uncovered, "members_left_out_why": ("in a stratum of the balancing label without a "
                                                                  "control target" if uncovered else None),
           "risk": entries["forward"], "risk_reverse": entries["reverse"]}
    if grouped:
        out.update(member_patients=len(np.unique(patients_of_members)), control_patients=len(np.unique(cg)),
                   member_clusters=len(np.unique(mg)))
    out["calibration"] = {k: entries["forward"]["threshold"][k] for k in ("calibration_patients",
                                                                          "calibration_images", "enough")}
    if not out["calibration"]["enough"]:
        out["warning"] = entries["forward"]["threshold"]["warning"]
    if score != "cosine":
        out["score"] = score
    return out
