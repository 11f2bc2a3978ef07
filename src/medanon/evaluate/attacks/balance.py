"""Members and controls on equal footing: the control rate reweighted to the members' mix of the label that drives
similarity (post-stratification).

A residual risk compares an attack's rate on members (patients in the release) with its rate on controls (held-out
patients). Where the attack's score depends on a label that also differs between the two groups (a fundus
phantom's cosine to a grey image correlates with grade, and 5-11 control patients need not have the members' mix of
grades), the control rate measures the label mix as well as the release, and a null release gets a residual above 0.
The **balanced control rate** is the control's rate within each stratum of the label, averaged with the members'
shares of the strata::

    control = sum_s p_members(s) * rate_controls(s) / sum_s p_members(s)      (strata s that have controls)

i.e. each control target weighted by ``p_members(s) / p_controls(s)``. Strata with members but no control cannot be
compared and are left out (their member share is reported as ``uncovered_member_share``). Missing label values are
a stratum of their own; a numeric label with more than ``MAX_STRATA`` values is cut at the quintiles of members and
controls together.

The interval stays patient-level and the reweighting is **inside** the bootstrap: each resample draws member
patients (the same resamples as the attack rate's, seed and stream) and control patients (their own stream), and
recomputes the members' shares and the control's per-stratum rates from what it drew. The residual risk's
percentile interval then pairs the attack's draw ``b`` with the balanced control's draw ``b``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES, cluster_bootstrap, no_spread, percentile_ci
from medanon.evaluate.attacks.stats import wilson

MAX_STRATA = 10


@dataclass(frozen=True)
class Balance:
    """The stratifying label's value for each member target and each control target (NaN: missing). ``strata``:
    the strata already fixed (from :meth:`codes` of the balance this one keeps some members of), so that dropping
    members does not move a numeric label's quintile bins."""
    label: str
    member: np.ndarray
    control: np.ndarray
    strata: tuple[np.ndarray, np.ndarray, list[str]] | None = None

    def keep_members(self, keep: np.ndarray) -> Balance:
        """The same strata with only the members ``keep`` (a boolean mask over the members)."""
        m, c, names = self.codes()
        return Balance(self.label, np.asarray(self.member)[keep], self.control, strata=(m[keep], c, names))

    def codes(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Stratum index of each member and control target, and the strata's names."""
        if self.strata is not None:
            return self.strata
        m, c = np.asarray(self.member, np.float64), np.asarray(self.control, np.float64)
        both = np.r_[m, c]
        known = both[~np.isnan(both)]
        values = np.unique(known)
        if len(values) > MAX_STRATA:                             # a numeric label: quintile bins
            edges = np.unique(np.quantile(known, [0.2, 0.4, 0.6, 0.8]))
            code = np.where(np.isnan(both), len(edges) + 1, np.searchsorted(edges, both, side="right"))
            lo = np.r_[-np.inf, edges]
            hi = np.r_[edges, np.inf]
            names = [f"[{a:g}, {b:g})" for a, b in zip(lo, hi, strict=True)] + ["missing"]
        else:
            code = np.where(np.isnan(both), len(values), np.searchsorted(values, np.nan_to_num(both)))
            names = [f"{v:g}" for v in values] + ["missing"]
        used = np.unique(code)
        remap = np.full(len(names), -1)
        remap[used] = np.arange(len(used))
        code = remap[code]
        return code[:len(m)], code[len(m):], [names[i] for i in used]


def covered(balance: Balance) -> np.ndarray:
    """Which member targets are in a stratum that has a control target: the attack rate is read on these only, so
    that it and the balanced control describe the same strata (the others have nothing to be compared with)."""
    m, c, _ = balance.codes()
    return np.isin(m, c)


def _onehot(codes: np.ndarray, s: int) -> np.ndarray:
    out = np.zeros((len(codes), s))
    out[np.arange(len(codes)), codes] = 1.0
    return out


def _combine(member_counts: np.ndarray, control_hits: np.ndarray, control_counts: np.ndarray) -> np.ndarray:
    """Balanced rate(s) from member counts, control successes and control counts per stratum (strata first)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = control_counts > 0
        r = np.where(cov, control_hits / np.where(cov, control_counts, 1.0), 0.0)
        p = np.where(cov, member_counts, 0.0)
        return (p * r).sum(0) / p.sum(0)


def balanced_rate(outcomes, balance: Balance, *, control_groups=None, member_groups=None, confidence: float = 0.95,
                  seed: int = 0, member_stream: int = 0, stream: int = 1, n_resamples: int = BOOT_RESAMPLES):
    """The control's success rate reweighted to the members' strata of ``balance.label``, with its patient cluster
    bootstrap interval (members resampled as the attack rate is: ``member_groups``, ``seed``, ``member_stream``;
    controls by ``control_groups`` with ``stream``; None: each target its own cluster). Returns a
    :class:`medanon.evaluate.attacks.risk.Rate` whose ``balanced`` says which label and weights were used, or None
    when no member stratum has a control (nothing to compare)."""
    from medanon.evaluate.attacks.risk import Rate

    o = np.asarray(outcomes, np.float64).ravel()
    mc, cc, names = balance.codes()
    if len(cc) != len(o):
        raise ValueError(f"balance: {len(cc)} control label values for {len(o)} control outcomes")
    s = len(names)
    om, oc = _onehot(mc, s), _onehot(cc, s)
    m_n, c_n, c_x = om.sum(0), oc.sum(0), o @ oc
    est = float(_combine(m_n[:, None], c_x[:, None], c_n[:, None])[0])
    if not np.isfinite(est):
        return None
    mg = np.arange(len(mc)) if member_groups is None else np.asarray(member_groups)
    cg = np.arange(len(cc)) if control_groups is None else np.asarray(control_groups)
    md, _ = cluster_bootstrap(lambda w: (w @ om).T, mg, n_resamples=n_resamples, seed=seed, stream=member_stream)
    both = np.concatenate([oc * o[:, None], oc], 1)
    cd, g = cluster_bootstrap(lambda w: (w @ both).T, cg, n_resamples=n_resamples, seed=seed, stream=stream)
    draws = _combine(md, cd[:s], cd[s:])
    ci = percentile_ci(draws, est, confidence)
    ok = draws[np.isfinite(draws)]
    how = (f"patient cluster bootstrap (percentile, {n_resamples} resamples, seed {seed}), control reweighted to the "
           f"members' {balance.label} strata in every resample")
    if no_spread(ok):
        lo, hi = wilson(est * g, g, confidence=confidence)
        ci = [min(lo, est), max(hi, est)]
        how = f"Wilson with one trial per patient cluster ({g}): the bootstrap resamples show no spread"
    cov = c_n > 0
    pm, pc = m_n / max(m_n.sum(), 1), c_n / max(c_n.sum(), 1)
    info = {"label": balance.label, "method": "post-stratification: control rate per stratum, averaged with the "
                                              "members' shares (weight member share / control share per target)",
            "uncovered_member_share": float(pm[~cov].sum()), "unweighted_rate": float(o.mean()),
            "strata": [{"value": names[i], "members": int(m_n[i]), "controls": int(c_n[i]),
                        "member_share": float(pm[i]), "control_share": float(pc[i]),
                        "control_rate": float(c_x[i] / c_n[i]) if cov[i] else None,
                        "weight": float(pm[i] / pc[i] / pm[cov].sum()) if cov[i] and pm[cov].sum() else None}
                       for i in range(s)]}
    n = len(o)
    return Rate(est, (ci[1] - ci[0]) / 2, est * n, n, confidence, interval=(ci[0], ci[1]), method=how,
                patients=g, resamples=len(ok), seed=seed, draws=draws, balanced=info)


def control_rates(outcomes, *, groups, balance: Balance | None, member_groups, confidence: float = 0.95,
                  seed: int = 0, stream: int = 1, n_resamples: int = BOOT_RESAMPLES):
    """(control rate, plain control rate or None): the control reweighted to the members' strata where ``balance``
    is given (and some member stratum has controls), else the plain rate and None."""
    from medanon.evaluate.attacks.risk import rate

    kw = {"confidence": confidence, "seed": seed, "n_resamples": n_resamples}
    plain = rate(outcomes, groups=groups, stream=stream, **kw)
    if balance is None:
        return plain, None
    bal = balanced_rate(outcomes, balance, control_groups=groups, member_groups=member_groups, stream=stream, **kw)
    return (plain, None) if bal is None else (bal, plain)
