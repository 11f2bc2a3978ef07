"""Does the identity network treat members and controls alike? Its verification AUC on pairs of
members and on pairs of controls, with patient cluster bootstrap intervals, and how alike the two attacker networks
are."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import norm

from medanon.evaluate.attacks.stats import unit
from medanon.train.identity import verification_ids

if TYPE_CHECKING:
    from medanon.evaluate.context import RealContext


def _pair_scores(emb: np.ndarray, patients: np.ndarray, rng: np.random.Generator, cap: int = 200_000):
    e = unit(emb)
    i, j = np.triu_indices(len(e), 1)
    if len(i) > cap:
        k = rng.choice(len(i), cap, replace=False)
        i, j = i[k], j[k]
    return (e[i] * e[j]).sum(1), patients[i] == patients[j], (i, j)


CHECK_PAIRS = 50_000            # pairs per network check (seeded subsample): the patient bootstrap reads each


def network_checks(ctx: RealContext) -> dict:
    """Does the identity network treat members and controls alike? Its verification AUC
    on pairs of real source images (the members) and on pairs of held-out images (the controls), with patient
    cluster bootstrap intervals (a pair weighted by the draws of its two patients; DeLong's, which treats pairs
    as independent, kept in ``delong_ci``); and how alike the two attacker networks are (Pearson r of their
    cosines on held-out pairs)."""
    from medanon.evaluate.attacks.auc import delong

    conf = ctx.cfg.attacks.confidence
    out: dict[str, Any] = {}
    nets = [("identity", ctx.real_emb)]
    if ctx.real_emb_independent is not None:
        nets.append(("independent", ctx.real_emb_independent))
    for name, emb in nets:
        unit_name = ctx.unit_of(name)
        groups, fell_back = {}, []
        for group, rows in (("members", ctx.src), ("controls", ctx.held)):
            # no eye photographed twice there: the patient's pairs (its two eyes)
            groups[group], fell = verification_ids(ctx.identity_ids(rows, unit_name), ctx.real.patients[rows])
            if fell and unit_name == "eye":
                fell_back.append(group)
        row: dict[str, Any] = {"identity_unit": unit_name}
        if fell_back:
            row["verified_on_patients"] = fell_back
        for group, rows in (("members", ctx.src), ("controls", ctx.held)):
            pats = ctx.real.patients[rows]          # clusters: a patient's pairs are not independent, whatever the unit
            ids = groups[group]                      # genuine pairs: two images of one identity as it was learned
            sc, same, (i, j) = _pair_scores(emb[rows], ids, np.random.default_rng(ctx.cfg.seed), cap=CHECK_PAIRS)
            code = np.unique(pats, return_inverse=True)[1]
            pg = np.c_[code[i], code[j]]
            d = delong(sc[same], sc[~same], confidence=conf, pos_groups=pg[same], neg_groups=pg[~same],
                       seed=ctx.cfg.seed)
            row[group] = {"auc": d["auc"], "ci": d["ci"], "interval": d["interval"], "delong_ci": d["delong_ci"],
                          "patients": d.get("patients"), "genuine_pairs": int(same.sum()),
                          "impostor_pairs": int((~same).sum())}
        m, c = row["members"], row["controls"]
        # members and controls are other patients, resampled independently: the difference's interval from the
        # two intervals' standard errors (non-overlap of the two intervals would be a much weaker test)
        z = float(norm.ppf(0.5 + conf / 2))
        se = math.hypot((m["ci"][1] - m["ci"][0]) / (2 * z), (c["ci"][1] - c["ci"][0]) / (2 * z))
        diff = m["auc"] - c["auc"]
        row["difference"] = {"value": diff, "ci": [diff - z * se, diff + z * se],
                             "interval": "normal, from the two intervals' standard errors"}
        one_fell_back = len(fell_back) == 1             # then the two groups answer different questions
        row["differs"] = bool(abs(diff) > z * se) and not one_fell_back
        if one_fell_back:
            row["not_compared"] = (f"the {' and '.join(fell_back)} have no eye photographed twice, so they were "
                                   "verified on their patients' two eyes, which this network learned to tell apart: "
                                   "members and controls are not compared")
        if row["differs"]:
            ctx.note(f"the {name} network verifies members (AUC {m['auc']:.3f}) and controls (AUC {c['auc']:.3f}) "
                     f"differently (difference {diff:.3f} [{diff - z * se:.3f}, {diff + z * se:.3f}]): members and "
                     f"controls differ for reasons "
                     f"unrelated to the release (was it trained on the members?), so residual risks against the "
                     f"control are biased")
        out[name] = row
    if len(nets) == 2:
        rng = np.random.default_rng(ctx.cfg.seed)
        a, _, ij = _pair_scores(ctx.real_emb[ctx.held], ctx.real.patients[ctx.held], rng)
        e = unit(ctx.real_emb_independent[ctx.held])
        b = (e[ij[0]] * e[ij[1]]).sum(1)
        pats = ctx.real.patients[ctx.held]
        out["cosine_correlation"] = pair_correlation(a, b, np.c_[pats[ij[0]], pats[ij[1]]], confidence=conf,
                                                     seed=ctx.cfg.seed)
    return out


def pair_correlation(a: np.ndarray, b: np.ndarray, groups: np.ndarray, *, confidence: float = 0.95,
                     seed: int = 0) -> dict:
    """Pearson r of two networks' cosines on the same held-out pairs, with a patient cluster bootstrap interval:
    pairs that share a patient are not independent, so whole patients are resampled (a pair weighted by the draws
    of its two patients, :func:`.attacks.bootstrap.cluster_bootstrap`). Fewer than two pairs, or a constant score: no
    correlation to speak of (NaN, with no interval).

    >>> x = np.arange(6.0)
    >>> round(pair_correlation(x, 2 * x + 1, np.c_[[0, 0, 1, 1, 2, 2], [1, 2, 2, 3, 3, 0]])["pearson_r"], 6)
    1.0
    """
    from medanon.evaluate.attacks.bootstrap import cluster_summary

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    out: dict[str, Any] = {"pearson_r": float("nan"), "ci": None, "pairs": len(a),
                           "patients": len(np.unique(groups)) if len(a) else 0, "on": "held-out image pairs"}
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return out
    a, b = a - a.mean(), b - b.mean()                    # centred: the weighted sums below lose no precision
    cols = np.stack([np.ones_like(a), a, b, a * a, b * b, a * b], 1)

    def stat(w: np.ndarray) -> np.ndarray:
        sw, sa, sb, saa, sbb, sab = (np.asarray(w, np.float64) @ cols).T
        with np.errstate(invalid="ignore", divide="ignore"):
            return (sw * sab - sa * sb) / np.sqrt((sw * saa - sa * sa) * (sw * sbb - sb * sb))

    r = float(np.corrcoef(a, b)[0, 1])
    boot = cluster_summary(stat, groups, r, confidence=confidence, seed=seed, stream=7)
    out.update(pearson_r=r, ci=[float(v) for v in boot["ci"]], interval=boot["interval"])
    return out
