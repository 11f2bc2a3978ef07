"""Success rates, residual risk over a control set, and the nearest-record inference attack.

The estimator follows anonymeter (Giomi et al., "A Unified Framework for Quantifying Privacy Risk
in Synthetic Data", PoPETs 2023), written here for images:

- a success rate is a Wilson score estimate ``(s + z^2/2) / (n + z^2)`` with half-width
  ``z / (n + z^2) * sqrt(s (n - s) / n + z^2 / 4)`` (:func:`success_rate`); ``s`` may be fractional, a
  tie's credit (:mod:`.stats`);
- where the targets' patients are known, a rate over images is instead the raw fraction with the patient
  cluster bootstrap interval (:func:`rate`, :func:`medanon.evaluate.attacks.bootstrap.cluster_summary`): images
  of one patient are not independent;
- the residual risk of an attack is ``(attack - control) / (1 - control)``: the attacker's success
  on targets whose data went into the release, beyond its success on *control* targets whose data
  did not (so generic knowledge that the release teaches about everyone does not count as a leak),
  with the interval combined from both rates' intervals (MOVER, :func:`residual_risk`), or, where both rates come from
  patient bootstraps (or the reference is exact), the percentile interval of the residual over the
  independent resamples. Values are reported clipped to [0, 1], like anonymeter's ``to_risk()``.

:func:`inference_risk` is anonymeter's inference attack on images: the attacker holds a target's
image, finds the released record nearest to it in an embedding space and guesses the secret
attribute (e.g. sex) from that record's released label; records tied as nearest share the guess
(each gets an equal part of the credit). Members are targets from the release's source patients;
controls are held-out patients. It needs only the release, its labels and the split, no private mapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES, cluster_summary, no_spread, percentile_ci
from medanon.evaluate.attacks.stats import TIE_TOL, wilson_estimate
from medanon.evaluate.attacks.views import cosines

MIN_PATIENTS = 10               # fewer control / calibration patients: a rate near 10 % is not resolved


@dataclass(frozen=True)
class Rate:
    value: float                                # Wilson point estimate, or the raw fraction of a patient bootstrap
    error: float                                # half-width of the interval
    successes: float                            # s (fractional where ties share the credit)
    trials: int                                 # n
    confidence: float = 0.95
    exact: float | None = None                  # a rate known exactly (an expected chance), not estimated
    interval: tuple[float, float] | None = None  # an explicit interval (patient bootstrap); None: Wilson
    method: str = "Wilson"
    patients: int | None = None                 # clusters resampled
    resamples: int | None = None
    seed: int | None = None
    draws: np.ndarray | None = field(default=None, compare=False, repr=False)   # the bootstrap's rates
    balanced: dict | None = field(default=None, compare=False)  # a control reweighted to the members' strata

    @property
    def raw(self) -> float:
        if self.exact is not None:
            return self.exact
        return self.successes / self.trials if self.trials else float("nan")

    @property
    def ci(self) -> tuple[float, float]:
        if self.interval is not None:
            return self.interval
        return max(0.0, self.value - self.error), min(1.0, self.value + self.error)

    def to_dict(self) -> dict:
        s = self.successes
        out = {"rate": self.raw, "wilson": self.value if self.interval is None else None, "ci": list(self.ci),
               "successes": int(s) if float(s).is_integer() else float(s), "trials": self.trials,
               "confidence": self.confidence, "interval": "exact" if self.exact is not None else self.method}
        if self.exact is not None:
            out["exact"] = True
        if self.patients is not None:
            out.update(patients=self.patients, resamples=self.resamples, seed=self.seed)
        if self.balanced is not None:
            out["balanced"] = self.balanced
        return out


def exact_rate(value: float, trials: int, *, confidence: float = 0.95) -> Rate:
    """A rate known exactly (e.g. the expected success of random guessing): no sampling error."""
    return Rate(float(value), 0.0, round(value * trials), int(trials), confidence, exact=float(value))


def success_rate(successes: float, trials: int, *, confidence: float = 0.95) -> Rate:
    """Wilson score interval of a binomial success rate; ``successes`` may be fractional (tie credit)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must be in (0, 1)")
    s, n = float(successes), int(trials)
    if n <= 0 or not 0 <= s <= n:
        raise ValueError(f"need 0 <= successes ({s}) <= trials ({n}) and trials > 0")
    value, error = wilson_estimate(s, n, confidence=confidence)
    return Rate(value, error, int(s) if s.is_integer() else s, n, confidence)


def rate(outcomes, *, trials=None, groups=None, confidence: float = 0.95, seed: int = 0, stream: int = 0,
         n_resamples: int = BOOT_RESAMPLES) -> Rate:
    """The success rate ``sum(outcomes) / sum(trials)`` of per-target ``outcomes`` (successes, fractional where ties
    share the credit; ``trials`` per target, default 1): Wilson where ``groups`` is None (targets independent), else
    the raw rate with the patient cluster bootstrap interval over ``groups`` (the patient, or patient cluster, of
    each target). Resample two populations (attack and control) with different ``stream`` values."""
    o = np.asarray(outcomes, np.float64).ravel()
    t = np.ones_like(o) if trials is None else np.asarray(trials, np.float64).ravel()
    s, n = float(o.sum()), float(t.sum())
    if groups is None:
        return success_rate(s, round(n), confidence=confidence)
    if len(o) == 0 or len(groups) != len(o) or len(t) != len(o):
        raise ValueError(f"need one group and one trial count per outcome: {len(groups)} groups, {len(t)} trial "
                         f"counts, {len(o)} outcomes")
    est = s / n
    b = cluster_summary(lambda w: (w @ o) / (w @ t), groups, est, confidence=confidence, seed=seed, stream=stream,
                        n_resamples=n_resamples, rate=True)
    lo, hi = b["ci"]
    return Rate(est, (hi - lo) / 2, int(s) if s.is_integer() else s, round(n), confidence, interval=(lo, hi),
                method=b["interval"], patients=b["clusters"], resamples=b["resamples"], seed=seed, draws=b["draws"])


@dataclass(frozen=True)
class Risk:
    value: float                                # residual risk, clipped to [0, 1]
    ci: tuple[float, float]                     # clipped interval
    unclipped: float                            # (attack - control) / (1 - control), may be negative
    error: float                                # half-width of the unclipped interval
    method: str = "MOVER"
    unclipped_ci: tuple[float, float] | None = None   # the interval before clipping

    def to_dict(self) -> dict:
        return {"risk": self.value, "ci": list(self.ci), "unclipped": self.unclipped,
                "unclipped_ci": None if self.unclipped_ci is None else list(self.unclipped_ci), "interval": self.method}


def _observed(r: Rate) -> float:
    """A rate's observed value: its bootstrap estimate (the raw or reweighted fraction) or exact value as it stands,
    a Wilson rate's successes / trials rather than its interval's centre."""
    return r.value if r.interval is not None or r.exact is not None else r.raw


def residual_risk(attack: Rate, control: Rate) -> Risk:
    """``(a - c) / (1 - c)`` with the MOVER interval from the two rates' intervals (:func:`_mover`); where the attack
    has patient bootstrap draws and the control has its own (independent) draws or is exact, the percentile
    interval of the residual over the draws instead. The point estimate is always of the observed rates
    (:attr:`Rate.raw`): a Wilson rate's ``value`` is its interval's centre, pulled towards 1/2 (the more, the fewer
    the trials), which made 3 of 140 members recovered against 0 of 29 controls read 0.00 instead of 0.021."""
    a, c = _observed(attack), _observed(control)
    if c >= 1.0:                                    # nothing is left to attack beyond what the control gives
        return Risk(float("nan"), (float("nan"), float("nan")), float("nan"), float("nan"),
                    "undefined: the control succeeds on every target (rate 1), so no attack can show more than it")
    r = (a - c) / (1.0 - c)
    clip = lambda v: min(max(v, 0.0), 1.0)          # noqa: E731
    c_draws = control.draws if control.draws is not None else (np.array(c) if control.error == 0 else None)
    if attack.draws is not None and c_draws is not None and c_draws.size in (1, attack.draws.size):
        with np.errstate(invalid="ignore", divide="ignore"):
            d = (attack.draws - c_draws) / (1.0 - c_draws)
        d = np.where(np.broadcast_to(c_draws, d.shape) < 1.0, d, np.nan)
        lo, hi = percentile_ci(d, r, attack.confidence)
        how = "percentile over the patient bootstrap draws"
        if no_spread(attack.draws) and attack.interval is not None:
            # the attack's draws show no spread (e.g. no target found in any resample): its interval is the Wilson
            # fallback over patient clusters, and the residual can be no surer than that interval mapped through
            # (a - c) / (1 - c); a percentile over constant draws would collapse it to a point
            a_lo, a_hi = attack.interval
            lo, hi = min(lo, (a_lo - c) / (1.0 - c)), max(hi, (a_hi - c) / (1.0 - c))
            how = "the attack's interval (its draws show no spread) mapped through (a - c) / (1 - c)"
        if control.draws is not None and no_spread(control.draws) and control.interval is not None:
            # the control's draws show no spread (e.g. no control found in any resample: 0 of 4 patients): its
            # Wilson interval over patient clusters is wide, and the residual can be no surer than the two
            # intervals mapped through (a - c) / (1 - c), the control at its worst end for each bound
            a_lo, a_hi = attack.interval if attack.interval is not None else (a, a)
            c_lo, c_hi = control.interval
            lo = min(lo, (a_lo - c_hi) / (1.0 - c_hi) if c_hi < 1.0 else -1.0)
            hi = max(hi, (a_hi - c_lo) / (1.0 - c_lo))
            how += ("; the control's draws show no spread, so its interval and the attack's are mapped through "
                    "(a - c) / (1 - c), each bound at the control's other end")
        return Risk(clip(r), (clip(lo), clip(hi)), r, (hi - lo) / 2, how, (lo, hi))
    lo, hi = _mover(a, attack.ci, c, control.ci if control.exact is None else (c, c))
    how = ("the attack's interval mapped through (a - c) / (1 - c)" if control.exact is not None else
           "MOVER (Newcombe) from the attack's and the control's intervals, divided by 1 - c")
    return Risk(clip(r), (clip(lo), clip(hi)), r, (hi - lo) / 2, how, (lo, hi))


def _mover(a: float, a_ci: tuple[float, float], c: float, c_ci: tuple[float, float]) -> tuple[float, float]:
    """The interval of ``(a - c) / (1 - c)`` from the two rates' own intervals (Wilson's are lopsided near 0 and 1,
    so a half-width taken either side of the observed rate would cut the upper bound short: 0 of 20 against 0 of
    20 read [0, 0.11] where the attack alone allows 0.16). The difference's bounds are Newcombe's MOVER
    (Newcombe 1998, method 10; Zou & Donner 2008): lower ``d - sqrt((a - a_lo)^2 + (c_hi - c)^2)``, upper
    ``d + sqrt((a_hi - a)^2 + (c - c_lo)^2)``, ``d = a - c``; each divided by ``1 - c``. Against an exact control
    (``c_ci`` a point) this is the attack's interval mapped through the formula."""
    (a_lo, a_hi), (c_lo, c_hi) = a_ci, c_ci
    d = a - c
    lo = d - math.sqrt((a - a_lo) ** 2 + (c_hi - c) ** 2)
    hi = d + math.sqrt((a_hi - a) ** 2 + (c - c_lo) ** 2)
    return lo / (1.0 - c), hi / (1.0 - c)


def risk_entry(attack: Rate, control: Rate | None, *, what: str, control_is: str,
               baseline: Rate | None = None, baseline_is: str = "", unweighted: Rate | None = None,
               threshold: dict | None = None) -> dict:
    """One row of the report's residual-risk table, keeping anonymeter's distinction:

    - **control**: the same attack against people who are not in the release (held-out patients); the
      residual risk is computed against it;
    - **baseline**: random guessing, a sanity check. Where an attack has no control population (it reads the
      target's own released record), ``control`` is None, ``control_is`` says why, and the residual is
      computed against the baseline and named so (``against: "baseline"``).

    ``unweighted``: where ``control`` is reweighted to the members' strata (:mod:`.balance`), the plain control
    rate, kept with its residual (``control_unweighted``, ``residual_risk_unweighted``). ``threshold``: where the
    attack decides at a threshold set on calibration data, its value, the calibration set and the realised rate
    on the controls (:func:`threshold_entry`).
    """
    ref = control if control is not None else baseline
    if ref is None:
        raise ValueError("a risk entry needs a control or a baseline")
    rr = residual_risk(attack, ref).to_dict()
    out = {"attack": attack.to_dict(), "control": control.to_dict() if control is not None else None,
           "baseline": baseline.to_dict() if baseline is not None else None, "residual_risk": rr,
           "against": "control" if control is not None else "baseline", "n": attack.trials,
           "what": what, "control_is": control_is, "baseline_is": baseline_is}
    if unweighted is not None:
        out.update(control_unweighted=unweighted.to_dict(),
                   residual_risk_unweighted=residual_risk(attack, unweighted).to_dict())
    if threshold is not None:
        out["threshold"] = threshold
    return out


def threshold_entry(*, value: float, nominal: float, calibrated_on: str, patients: int, units: int,
                    unit: str, calibration_rate: float, realised: Rate | None, what: str) -> dict:
    """A threshold set at a nominal false-positive rate on calibration data, with what it gives: its rate on the
    calibration set itself and the **realised** rate on the controls (out of sample) with its interval. Fewer than
    ``MIN_PATIENTS`` calibration patients: ``enough`` false and a ``warning`` (the row is then invalid)."""
    out = {"value": float(value), "nominal_fpr": float(nominal), "calibrated_on": calibrated_on,
           "calibration_patients": int(patients), f"calibration_{unit}": int(units),
           "calibration_rate": float(calibration_rate), "minimum_patients": MIN_PATIENTS,
           "enough": int(patients) >= MIN_PATIENTS, "what": what}
    if realised is not None:
        out.update(realised_fpr=realised.raw, realised_fpr_ci=list(realised.ci), realised_fpr_interval=realised.method)
    if not out["enough"]:
        out["warning"] = (f"the threshold at a nominal rate of {nominal:g} is set on {patients} patients "
                          f"({units} {unit}), fewer than {MIN_PATIENTS}: each patient moves the rate by over "
                          f"{1 / max(patients, 1):.0%}, so the realised rate on new people is not resolved")
    return out


def nearest_share(query: np.ndarray, keys: np.ndarray, keys_mirrored: np.ndarray | None = None) -> np.ndarray:
    """(queries, keys) weights: ``1 / t`` on the ``t`` keys tied for the highest cosine similarity to each query,
    0 elsewhere (rows need not be unit length; each key in both orientations where ``keys_mirrored`` is given,
    :func:`~medanon.evaluate.attacks.views.cosines`). A guess read off "the nearest record" is then credited by the
    share of tied records that give it, its expected success under random tie breaking."""
    sim = cosines(query, keys, keys_mirrored)
    best = sim.max(1, keepdims=True)
    tied = np.abs(sim - best) <= TIE_TOL * np.maximum(1.0, np.abs(best))
    return tied / tied.sum(1, keepdims=True)


def inference_risk(*, member_emb: np.ndarray, member_secret: np.ndarray, control_emb: np.ndarray,
                   control_secret: np.ndarray, release_emb: np.ndarray, release_secret: np.ndarray,
                   confidence: float = 0.95, seed: int = 0, member_groups=None, control_groups=None,
                   secret_name: str = "secret", n_resamples: int = BOOT_RESAMPLES,
                   release_emb_mirrored: np.ndarray | None = None) -> dict:
    """Anonymeter's inference attack with nearest-record guessing, members vs controls.

    The guess for a target is the released secret of its nearest released record; records tied as nearest share
    the credit equally (a constant release scores the share of released labels that match, chance); a release
    record with a missing secret is never chosen. The naive baseline guesses a random released value, scored by
    its expected success (the share of released values equal to the target's). Success counts are per target
    image; with ``member_groups`` / ``control_groups`` (the patient of each target) the intervals are patient
    cluster bootstraps (seeded by ``seed``), else Wilson.

    The control rate is always reweighted to the members' mix of the secret (``secret_name``; post-stratification,
    :mod:`medanon.evaluate.attacks.balance`): a guess that ignores the image (a release of other people with the
    members' labels, a constant release) succeeds on a target of class ``s`` as often as the released labels say
    ``s``, so members and controls with different class mixes would differ without any leak. Members of a class no
    control has are left out of the attack rate (``uncovered_members``).

    ``release_emb_mirrored``: the released images' embeddings mirrored left-right; the nearest record is then found
    in both orientations (:mod:`.views`).
    """
    from medanon.evaluate.attacks.balance import Balance, control_rates, covered

    ok = ~np.isnan(release_secret)
    if ok.sum() == 0 or len(member_emb) == 0 or len(control_emb) == 0:
        raise ValueError("inference risk needs released secrets, member targets and control targets")
    balance = Balance(secret_name, np.asarray(member_secret, np.float64), np.asarray(control_secret, np.float64))
    keep = covered(balance)
    if not keep.any():
        raise ValueError(f"no member's {secret_name} value is held by a control target: nothing to compare with")
    uncovered = int((~keep).sum())
    if uncovered:                   # a class no control has: the attack rate leaves its members out too
        member_emb, member_secret = member_emb[keep], np.asarray(member_secret)[keep]
        balance = balance.keep_members(keep)
        member_groups = None if member_groups is None else np.asarray(member_groups)[keep]
    rel_emb, rel_sec = release_emb[ok], release_secret[ok]
    rel_m = None if release_emb_mirrored is None else release_emb_mirrored[ok]
    hit_m = (nearest_share(member_emb, rel_emb, rel_m) * (rel_sec[None, :] == member_secret[:, None])).sum(1)
    hit_c = (nearest_share(control_emb, rel_emb, rel_m) * (rel_sec[None, :] == control_secret[:, None])).sum(1)
    naive = (rel_sec[None, :] == member_secret[:, None]).mean(1)
    grouped = member_groups is not None and control_groups is not None
    kw = dict(confidence=confidence, seed=seed, n_resamples=n_resamples)
    a = rate(hit_m, groups=member_groups if grouped else None, stream=0, **kw)
    c, plain = control_rates(hit_c, groups=control_groups if grouped else None, balance=balance,
                             member_groups=member_groups if grouped else None, stream=1, **kw)
    b = rate(naive, groups=member_groups if grouped else None, stream=2, **kw)
    out = risk_entry(a, c, what="guess the secret of a target from the released label of its nearest record" +
                     (" (each record as released or mirrored left-right, the nearer)" if rel_m is not None else ""),
                     control_is="the same attack on held-out patients whose images are not in the release" +
                     (f", reweighted to the members' {balance.label} mix" if plain else ""),
                     baseline=b, baseline_is="a random released label (its expected success)", unweighted=plain)
    out["uncovered_members"] = uncovered
    out["naive_baseline"] = b.to_dict()
    out["attack_beats_naive"] = bool(a.value > b.value)
    return out
