"""Linkability (GMIA §3): identity verification on pairs, inner and outer risk, TAR at a fixed FAR.

A verification attacker scores a pair of images by the cosine similarity of their identity
embeddings (:mod:`medanon.models.identity`) and accepts the pair as "same patient" when the score
reaches a threshold. Standard definitions (ISO/IEC 19795-1), *not* the swapped ones of GMIA's code:

- FAR = impostor pairs accepted / impostor pairs;  TAR = genuine pairs accepted / genuine pairs;
- balanced accuracy ``(TAR + 1 - FAR) / 2`` and F1 at equal prevalence (precision ``TAR / (TAR + FAR)``),
  so the numbers do not depend on how many impostor pairs there are.

Protocol. The threshold is calibrated on **all** impostor pairs of a **control** set where the attack is
known to work, real images of held-out patients (genuine pairs: two acquisitions of one patient;
impostor pairs: two patients), at ``FAR = target_far``; the realised FAR on those pairs is reported with
its interval, and a warning when there are fewer than ``10 / target_far`` of them.
That threshold is then applied to all pairs of

- **inner risk**: pairs of released records, genuine when the two records stand for a common patient;
- **outer risk**: pairs (real source image, released record), genuine when the record stands for
  the image's patient (GMIA pairs a real image with its own anonymised version).

**Residual risk** (``risk``, ``risk_reverse``; anonymeter's sense, :func:`.risk.risk_entry`). The outer rows pair
a source image with every record of its patient, so on a copy release with three images per patient two of
every three genuine pairs are (image, *another* image of the patient) and the outer TAR reads like the real
pairs' (0.43-0.46 against 0.23-0.28 on a fundus phantom). The attack behind the residual is instead the
worst case GMIA measures: the attacker holds the **very source image** ``x`` of a record and accepts the pair
(``x``, the record made from it, ``source_record``) when its score reaches the threshold; an exact copy scores 1
(the same embedding). The attack rate is the share of source images whose own pair is accepted (patient cluster
bootstrap over records and source patients). The **control** is the same attack on people not in the release:
a real image of each held-out patient paired with the released records, scoring the share of records it
accepts (no record stands for it; patient bootstrap over held-out patients). A release that carries nothing of
its sources (noise, a constant image, other people) is accepted alike for both, whatever its images look like
to the network; a copy gives 1 against the FAR. The reverse attacker's row counts ``score <= low_threshold``.
The held-out real pairs (the ``control`` row, GMIA's name) calibrate the threshold and show the attacker's
strength on real images, but are not the residual's control: they never meet the release, so a release whose
images the network places next to everyone (or, reverse, away from everyone) would read as a leak against them.

Two-sided: a release optimised to push its images *away* from their sources (GMIA reaches negative
similarity) is re-identified by the reverse attacker, who accepts a pair when the score is at most the
lower threshold (FAR = target_far in the lower tail). Both are reported, with the AUC and the two-sided
AUC ``max(AUC, 1 - AUC)``. Pair sets larger than ``max_impostors`` are subsampled (seeded) and say so.
Which records stand for which patients comes from the release's private mapping file: the attacker does
not see it, the evaluator uses it as ground truth.

Intervals. One image is in many pairs and one patient has several images, so pairs are far from
independent: TAR, FAR, reverse TAR and AUC (and F1, balanced accuracy and the two-sided AUC, recomputed in each
resample) get **patient cluster bootstrap** intervals
(:func:`medanon.evaluate.attacks.bootstrap.cluster_bootstrap`): held-out patients are resampled for the control
pairs, clusters of records and their source patients (linked through the mapping) for inner and outer pairs;
a pair across two clusters counts as often as the product of their draws. :func:`verification_rates` called
without ``groups`` gives Wilson (rates) and DeLong (AUC) intervals over pairs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from medanon.evaluate.attacks.auc import (
    delong,
    pair_units,
    permutation_floor,
    two_sided_interval,
    widened_at_edges,
)
from medanon.evaluate.attacks.balance import Balance, control_rates
from medanon.evaluate.attacks.bootstrap import (
    BOOT_RESAMPLES,
    bootstrap_p,
    cluster_summaries,
    components,
    summarise_draws,
    weighted_auc,
)
from medanon.evaluate.attacks.pair_bootstrap import verification_draws
from medanon.evaluate.attacks.risk import MIN_PATIENTS, rate, risk_entry, success_rate, threshold_entry
from medanon.evaluate.attacks.stats import scores_without_nan, threshold_at_far, unit
from medanon.evaluate.attacks.views import assumptions, cosines, pair_cosines, pair_dots

__all__ = ["linkability", "threshold_at_far", "verification_rates"]

ASSUMPTIONS = ("attacker holds an identity network trained on real patients' repeated acquisitions and the real "
               "images it wants to link; threshold fixed at the target FAR on all impostor pairs of real held-out "
               "patients; outer pairs use the exact source image (worst case)")


def verification_rates(scores, genuine, threshold: float, *, confidence: float = 0.95,
                       low_threshold: float | None = None, groups=None, seed: int = 0,
                       n_resamples: int = BOOT_RESAMPLES) -> dict:
    """TAR, FAR (with Wilson intervals), FRR, F1 and balanced accuracy of ``score >= threshold``; the AUC with
    its DeLong interval and the two-sided AUC; with ``low_threshold``, the reverse attacker's TAR / FAR
    (accept ``score <= low_threshold``).

    ``groups`` (n, 2): the patient cluster of each side of each pair. Pairs share images, and images share
    patients, so where it is given TAR, FAR, reverse TAR and AUC get patient cluster bootstrap intervals instead
    (a pair across two clusters weighted by the product of their draws; ``interval`` says which)."""
    sc = scores_without_nan(scores, "pair scores")
    g = np.asarray(genuine, bool).ravel()
    if len(sc) != len(g) or g.sum() == 0 or (~g).sum() == 0:
        raise ValueError("need matching scores and labels with both genuine and impostor pairs")
    acc = sc >= threshold
    tp, fn = int((acc & g).sum()), int((~acc & g).sum())
    fp, tn = int((acc & ~g).sum()), int((~acc & ~g).sum())
    tar, far = success_rate(tp, tp + fn, confidence=confidence), success_rate(fp, fp + tn, confidence=confidence)
    t_, f_ = tp / (tp + fn), fp / (fp + tn)
    prec = t_ / (t_ + f_) if t_ + f_ > 0 else 0.0
    f1 = 2 * prec * t_ / (prec + t_) if prec + t_ > 0 else 0.0
    auc = delong(sc[g], sc[~g], confidence=confidence)
    out = {"TAR": t_, "FAR": f_, "FRR": 1 - t_, "TAR_ci": list(tar.ci), "FAR_ci": list(far.ci), "F1": f1,
           "accuracy": (t_ + 1 - f_) / 2, "AUC": auc["auc"], "AUC_ci": auc["ci"], "AUC_two_sided": auc["two_sided_auc"],
           "AUC_two_sided_ci": auc["two_sided_ci"], "AUC_p_value": auc["p_value"], "threshold": float(threshold),
           "genuine_pairs": int(g.sum()), "impostor_pairs": int((~g).sum()), "n": int(g.sum()),
           "interval": "Wilson over pairs; AUC: DeLong"}
    rev = sc <= low_threshold if low_threshold is not None else None
    if rev is not None:
        rt, rf = int((rev & g).sum()), int((rev & ~g).sum())
        out.update(reverse_TAR=rt / g.sum(), reverse_FAR=rf / (~g).sum(),
                   reverse_TAR_ci=list(success_rate(rt, int(g.sum()), confidence=confidence).ci),
                   low_threshold=float(low_threshold))
    if groups is not None:
        out.update(_pair_intervals(sc, g, acc, rev, groups, out, confidence=confidence, seed=seed,
                                   n_resamples=n_resamples))
    return out


def _pair_intervals(sc, g, acc, rev, groups, out: dict, *, confidence: float, seed: int, n_resamples: int) -> dict:
    """Patient cluster bootstrap intervals of TAR, FAR, AUC (and reverse TAR), in one pass of resamples: from
    clusters × clusters count matrices (:mod:`.pair_bootstrap`), else by weighting every pair in every resample."""
    est = {"TAR": (out["TAR"], True), "FAR": (out["FAR"], True), "AUC": (out["AUC"], False),
           "reverse_TAR": (out.get("reverse_TAR", out["TAR"]), True), "accuracy": (out["accuracy"], False),
           "F1": (out["F1"], False)}
    fast = verification_draws(sc, g, acc, rev if rev is not None else acc, groups, n_resamples=n_resamples,
                              seed=seed) if not GATHER else None
    if fast is not None:
        b = summarise_draws(_derived(fast[0]), fast[1], est, confidence=confidence, seed=seed,
                            n_resamples=n_resamples)
    else:
        stat = _gathered_stat(sc, g, acc, rev)
        b = cluster_summaries(lambda w: _derived(stat(w)), _sorted(sc, g, groups), est, confidence=confidence,
                              seed=seed, n_resamples=n_resamples)
    units = pair_units(groups)                  # the AUC at 0 or 1 widened, its p-value floored, as delong's
    auc_ci, how = widened_at_edges(b["AUC"]["ci"], out["AUC"], *units, confidence=confidence,
                                   how=b["AUC"]["interval"])
    floor = permutation_floor(*units)
    upd = {"TAR_ci": b["TAR"]["ci"], "FAR_ci": b["FAR"]["ci"], "AUC_delong_ci": out["AUC_ci"],
           "AUC_ci": auc_ci, "accuracy_ci": b["accuracy"]["ci"], "F1_ci": b["F1"]["ci"],
           "AUC_two_sided_ci": two_sided_interval(auc_ci), "interval": how,
           "patients": b["AUC"]["clusters"],
           "resamples": b["AUC"]["resamples"], "seed": seed,
           "AUC_p_value": max(bootstrap_p(b["AUC"]["draws"], 0.5), floor),
           "AUC_p_value_test": "patient cluster bootstrap, interval inversion (twice the smaller share of resampled "
                               f"AUCs on either side of 0.5), and at least {floor:.3g}, the smallest two-sided "
                               f"p-value of an exact permutation test of {units[0]} and {units[1]} patients"}
    if rev is not None:
        upd["reverse_TAR_ci"] = b["reverse_TAR"]["ci"]
    return upd


def _derived(draws: np.ndarray) -> np.ndarray:
    """Resampled TAR, FAR, AUC, reverse TAR (rows) and what follows from them in each resample: balanced accuracy
    and F1 at equal prevalence (the formulas of :func:`verification_rates`). The two-sided AUC's interval is the
    image of the AUC's (:func:`~medanon.evaluate.attacks.auc.two_sided_interval`)."""
    tar, far = draws[0], draws[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(tar + far > 0, tar / (tar + far), 0.0)
        f1 = np.where(prec + tar > 0, 2 * prec * tar / (prec + tar), 0.0)
    return np.concatenate([draws[:4], np.stack([(tar + 1 - far) / 2, f1])])


GATHER = False                  # True: always weight every pair (the reference the count matrices are tested against)


def _order(sc, g) -> np.ndarray:
    """Genuine pairs first, then impostors by score: the statistics read contiguous columns of the weights."""
    return np.r_[np.flatnonzero(g), np.flatnonzero(~g)[np.argsort(sc[~g], kind="stable")]]


def _sorted(sc, g, groups) -> np.ndarray:
    return np.asarray(groups)[_order(sc, g)]


def _gathered_stat(sc, g, acc, rev):
    """TAR, FAR, AUC and reverse TAR from per-pair weights (pairs in :func:`_order`)."""
    order = _order(sc, g)
    sc, g = sc[order], g[order]
    ng_ = int(g.sum())
    a, r = acc[order].astype(np.float32), (rev if rev is not None else acc)[order].astype(np.float32)   # as weights
    auc = weighted_auc(sc, g)

    def stat(w: np.ndarray) -> np.ndarray:
        wg, wi = w[:, :ng_], w[:, ng_:]
        n_g = wg.sum(1, dtype=np.float64)
        return np.stack([(wg @ a[:ng_]) / n_g, (wi @ a[ng_:]) / wi.sum(1, dtype=np.float64), auc(w),
                         (wg @ r[:ng_]) / n_g])
    return stat


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a * b).sum(1)


def _pairs(same: np.ndarray, upper: bool, rng: np.random.Generator, max_impostors: int,
           max_genuine: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """All (i, j) of a same-patient matrix (upper triangle only when ``upper``): genuine first, then
    impostors; each side subsampled (seeded) beyond its cap. Returns (i, j, genuine, subsampled)."""
    mask = np.triu(np.ones(same.shape, bool), 1) if upper else np.ones(same.shape, bool)
    gi, gj = np.nonzero(mask & same)
    impostor = mask & ~same
    del mask
    per_row = impostor.sum(1)
    sub = False
    if len(gi) > max_genuine:
        k = np.sort(rng.choice(len(gi), max_genuine, replace=False))
        gi, gj, sub = gi[k], gj[k], True
    ends = np.cumsum(per_row)
    if len(ends) and ends[-1] > max_impostors:
        # the k-th impostor cells in row-major order, found row by row: the same pairs as indexing np.nonzero's
        # arrays, without materialising every impostor's indices (gigabytes at 11,354 x 11,354)
        k = np.sort(rng.choice(int(ends[-1]), max_impostors, replace=False))
        start = ends - per_row
        ii = np.searchsorted(ends, k, side="right")
        ij = np.empty(len(k), np.int64)
        rows, first = np.unique(ii, return_index=True)                 # k is sorted, so each row's draws are a run
        for r, a, b in zip(rows, first, np.r_[first[1:], len(k)], strict=True):
            ij[a:b] = np.flatnonzero(impostor[r])[k[a:b] - start[r]]
        sub = True
    else:
        ii, ij = np.nonzero(impostor)
    return np.r_[gi, ii], np.r_[gj, ij], np.r_[np.ones(len(gi), bool), np.zeros(len(ii), bool)], sub



def record_clusters(record_patients: Sequence[frozenset], patients: Sequence = ()) -> tuple[np.ndarray, np.ndarray]:
    """Cluster labels, in one space, of released records and of ``patients``: records and the patients they stand
    for, linked through the mapping, form one cluster; a patient in no record is a cluster of its own."""
    rec, plab = components(record_patients)
    nxt = int(rec.max()) + 1 if len(rec) else 0
    extra: dict = {}
    lab = [plab[p] if p in plab else extra.setdefault(p, nxt + len(extra)) for p in patients]
    return rec, np.asarray(lab, np.int64)


def linkability(*, control_emb: np.ndarray, control_patients: Sequence[str], release_emb: np.ndarray,
                record_patients: Sequence[frozenset], source_emb: np.ndarray, source_patients: Sequence[str],
                source_record: Sequence[int], target_far: float = 0.01, seed: int = 0,
                max_pairs: int = 5000, max_impostors: int = 1_000_000, confidence: float = 0.95,
                balance: Balance | None = None, tables: bool = True, n_resamples: int = BOOT_RESAMPLES,
                release_emb_mirrored: np.ndarray | None = None) -> dict:
    """GMIA's table: control (all real held-out pairs), inner and outer risk, at the control's thresholds. Every
    TAR, FAR and AUC gets a patient cluster bootstrap interval (seeded by ``seed``): control pairs are resampled by
    held-out patient, inner and outer pairs by clusters of records and source patients linked by the mapping.
    ``risk`` / ``risk_reverse``: each source image linked to its own record (``source_record``) against held-out
    images paired with the records (:func:`own_record_risk`); ``balance``: the stratifying label of the source
    images (members) and the held-out images (controls), :mod:`.balance`. ``tables=False``: the residual risks
    only, without the inner and outer verification tables (and their pair bootstraps), as the known-answer
    calibration needs; the risk entries are the same. ``release_emb_mirrored``: the released images' embeddings
    mirrored left-right; every pair with a record is then scored in both orientations of the record, the higher kept
    (:mod:`.views`); the threshold stays set on real pairs, and the control, held-out images scored against the
    records the same way, carries any rise in the accept rate that the second orientation brings."""
    if len(source_record) != len(source_emb) or len(source_patients) != len(source_emb):
        raise ValueError(f"need one record and one patient per source image: {len(source_emb)} source images, "
                         f"{len(source_record)} records, {len(source_patients)} patients")
    rng = np.random.default_rng(seed)
    boot = {"seed": seed, "n_resamples": n_resamples}
    cp = np.asarray(control_patients)
    ce = unit(control_emb)
    ci, cj, cl, csub = _pairs(cp[:, None] == cp[None, :], True, rng, max_impostors, max_pairs)
    if cl.sum() == 0 or (~cl).sum() == 0:
        raise ValueError("the control set needs held-out patients with two or more images")
    c_scores = pair_dots(ce, ce, ci, cj)
    imp = c_scores[~cl]
    thr = threshold_at_far(imp, target_far)
    low = -threshold_at_far(-imp, target_far)                           # reverse attacker: accept score <= low
    n_imp, fa = len(imp), int((imp >= thr).sum())
    n_pat = len(np.unique(cp))
    out = {"target_far": target_far, "threshold": thr, "low_threshold": low,
           "assumptions": assumptions(ASSUMPTIONS, release_emb_mirrored),
           "calibration": {"impostor_pairs": n_imp, "accepted": fa, "realised_far": fa / n_imp, "patients": n_pat,
                           "enough": n_imp >= 10 / target_far and n_pat >= MIN_PATIENTS, "subsampled": bool(csub)},
           "control": verification_rates(c_scores, cl, thr, confidence=confidence, low_threshold=low,
                                         groups=np.unique(cp, return_inverse=True)[1][np.c_[ci, cj]], **boot)}
    cal = out["calibration"]                        # the control's FAR: the same impostor pairs, the same threshold
    cal.update(realised_far_ci=out["control"]["FAR_ci"], realised_far_interval=out["control"]["interval"])
    if n_imp < 10 / target_far or n_pat < MIN_PATIENTS:
        out["warning"] = (f"the threshold at FAR {target_far:g} is calibrated on {n_imp} impostor pairs of {n_pat} "
                          f"patients, fewer than 10 / FAR = {10 / target_far:.0f} pairs or {MIN_PATIENTS} patients: "
                          f"the realised FAR is {fa}/{n_imp}; read the AUC instead")
    rp = list(record_patients)
    re_ = unit(release_emb)
    rem = None if release_emb_mirrored is None else unit(release_emb_mirrored)
    sp = list(source_patients)
    rc, sc_ = record_clusters(rp, sp)
    se = unit(source_emb)
    out["risk"], out["risk_reverse"] = own_record_risk(
        own=pair_cosines(se, re_, np.arange(len(se)), np.asarray(source_record, np.int64), rem),
        control=cosines(ce, re_, rem),
        threshold=thr, low_threshold=low, groups=sc_, control_groups=cp, confidence=confidence, balance=balance,
        calibration={"patients": n_pat, "pairs": n_imp, "far": target_far,
                     "rates": (fa / n_imp, float((imp <= low).mean()))}, **boot)
    if not tables:
        out.update(inner=None, outer=None, n=len(se), tables="not computed (residual risks only)")
        return out
    same_rr, same_sr = shared_patients(rp, sp)
    ii, ij, il, isub = _pairs(same_rr, True, rng, max_impostors, max_pairs)
    if il.sum() and (~il).sum():
        out["inner"] = verification_rates(pair_cosines(re_, re_, ii, ij, rem), il, thr, confidence=confidence,
                                          low_threshold=low, groups=np.stack([rc[ii], rc[ij]], 1), **boot)
        out["inner"]["subsampled"] = bool(isub)
    else:
        out["inner"] = None
        out["inner_note"] = "no two released records stand for a common patient: inner risk is not defined"
    oi, oj, ol, osub = _pairs(same_sr, False, rng, max_impostors, max_pairs)
    if ol.sum() and (~ol).sum():
        out["outer"] = verification_rates(pair_cosines(se, re_, oi, oj, rem), ol, thr, confidence=confidence,
                                          low_threshold=low, groups=np.stack([sc_[oi], rc[oj]], 1), **boot)
        out["outer"]["subsampled"] = bool(osub)
    else:
        out["outer"] = None
    out["n"] = (out["outer"] or {}).get("genuine_pairs", 0)          # genuine outer pairs: the headline's N
    return out


def _members(record_patients: Sequence) -> tuple:
    """The sparse ``(records, patients)`` membership matrix and each patient's column."""
    from scipy import sparse

    owners = {p: n for n, p in enumerate(sorted({p for ps in record_patients for p in ps}))}
    rows = np.repeat(np.arange(len(record_patients)), [len(ps) for ps in record_patients])
    cols = np.fromiter((owners[p] for ps in record_patients for p in ps), np.int64, count=len(rows))
    member = sparse.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)),
                               shape=(len(record_patients), len(owners)))
    return member, owners


def _sources_in(member, owners: dict, source_patients: Sequence) -> np.ndarray:
    col = np.asarray([owners.get(p, -1) for p in source_patients], np.int64)
    same = np.zeros((len(col), member.shape[0]), bool)
    known = col >= 0
    if known.any():
        same[known] = member.T.tocsr()[col[known]].toarray() > 0
    return same


def sources_in_records(record_patients: Sequence, source_patients: Sequence) -> np.ndarray:
    """``(S, R)``: whether a source image's patient is among a record's (through the sparse membership matrix; a
    Python test per pair is 129 M tests at 11,354 × 11,354)."""
    return _sources_in(*_members(record_patients), source_patients)


def shared_patients(record_patients: Sequence, source_patients: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """``(R, R)``: whether two released records stand for a common patient, as a sparse product (a dense one grows
    as R²·patients); ``(S, R)``: :func:`sources_in_records`."""
    member, owners = _members(record_patients)
    return (member @ member.T).toarray() > 0, _sources_in(member, owners, source_patients)


def own_record_risk(*, own: np.ndarray, control: np.ndarray, threshold: float, low_threshold: float, groups,
                    control_groups, confidence: float = 0.95, seed: int = 0, balance: Balance | None = None,
                    calibration: dict | None = None, n_resamples: int = BOOT_RESAMPLES) -> tuple[dict, dict]:
    """Residual-risk entries (forward, reverse) of linking a source image to its own record.

    ``own``: the score of each source image with the record made from it; ``control``: ``(held-out images,
    records)`` scores; ``groups`` / ``control_groups``: the patient cluster of each source / held-out image.
    Attack: a source's own pair is accepted (``>= threshold``; reverse ``<= low_threshold``); control: the share
    of records a held-out image's pairs are accepted with, reweighted to the members' strata where ``balance`` is
    given. ``calibration`` (``patients``, ``pairs``, ``far``, ``rates``: the forward and reverse FAR on the
    calibration pairs): each entry's ``threshold``, whose realised rate is the plain control's."""
    own, control = np.asarray(own, np.float64), np.asarray(control, np.float64)
    if len(own) == 0 or control.size == 0:
        raise ValueError("the linkability risk needs source images with their records and held-out images")
    boot = {"confidence": confidence, "seed": seed, "n_resamples": n_resamples}
    ctl = "the same attack on real images of held-out patients (not in the release), each paired with every " \
          "released record: the share of its pairs accepted"
    entries = []
    for i, (t, accept, what) in enumerate((
            (threshold, lambda v: v >= threshold, "a source image and the record made from it are accepted as the "
             "same patient (score at least the threshold at the target FAR)"),
            (low_threshold, lambda v: v <= low_threshold, "a source image and the record made from it score at "
             "most the lower threshold (reverse attacker: a release pushed away from its sources)"))):
        mg = np.asarray(groups)
        a = rate(accept(own), groups=mg, stream=0, **boot)
        c, plain = control_rates(accept(control).mean(1), groups=np.asarray(control_groups), balance=balance,
                                 member_groups=mg, stream=1, **boot)
        thr = None if calibration is None else threshold_entry(
            value=t, nominal=calibration["far"], calibrated_on="all impostor pairs of held-out patients",
            patients=calibration["patients"], units=calibration["pairs"], unit="pairs",
            calibration_rate=calibration["rates"][i], realised=plain or c,
            what="accepts a pair " + ("at or above" if i == 0 else "at or below") + " the threshold; realised: the "
                 "share of (held-out image, released record) pairs accepted")
        entries.append(risk_entry(a, c, what=what, control_is=ctl + (f", reweighted to the members' {balance.label} "
                                                                      f"mix" if plain else ""),
                                  unweighted=plain, threshold=thr))
    return entries[0], entries[1]
