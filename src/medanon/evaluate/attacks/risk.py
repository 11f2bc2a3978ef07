"""Success rates, residual risk over a control set, and the nearest-record inference attack.

The estimator follows anonymeter (Giomi et al., "A Unified Framework for Quantifying Privacy Risk
in Synthetic Data", PoPETs 2023), written here for images:

- a success rate is a Wilson score estimate ``(s + z^2/2) / (n + z^2)`` with half-width
  ``z / (n + z^2) * sqrt(s (n - s) / n + z^2 / 4)`` (:func:`success_rate`);
- the residual risk of an attack is ``(attack - control) / (1 - control)``: the attacker's success
  on targets whose data went into the release, beyond its success on *control* targets whose data
  did not (so generic knowledge that the release teaches about everyone does not count as a leak),
  with the error propagated from both rates (:func:`residual_risk`). Values are reported clipped
  to [0, 1], like anonymeter's ``to_risk()``.

:func:`inference_risk` is anonymeter's inference attack on images: the attacker holds a target's
image, finds the released record nearest to it in an embedding space and guesses the secret
attribute (e.g. sex) from that record's released label. Members are targets from the release's
source patients; controls are held-out patients. It needs only the release, its labels and the
split, no private mapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm


@dataclass(frozen=True)
class Rate:
    value: float                                # Wilson point estimate (not the raw fraction)
    error: float                                # half-width of the interval
    successes: int                              # s
    trials: int                                 # n
    confidence: float = 0.95
    exact: float | None = None                  # a rate known exactly (an expected chance), not estimated

    @property
    def raw(self) -> float:
        if self.exact is not None:
            return self.exact
        return self.successes / self.trials if self.trials else float("nan")

    @property
    def ci(self) -> tuple[float, float]:
        return max(0.0, self.value - self.error), min(1.0, self.value + self.error)

    def to_dict(self) -> dict:
        out = {"rate": self.raw, "wilson": self.value, "ci": list(self.ci), "successes": self.successes,
               "trials": self.trials, "confidence": self.confidence}
        if self.exact is not None:
            out["exact"] = True
        return out


def exact_rate(value: float, trials: int, *, confidence: float = 0.95) -> Rate:
    """A rate known exactly (e.g. the expected success of random guessing): no sampling error."""
    return Rate(float(value), 0.0, round(value * trials), int(trials), confidence, exact=float(value))


def success_rate(successes: int, trials: int, *, confidence: float = 0.95) -> Rate:
    """Wilson score interval of a binomial success rate."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must be in (0, 1)")
    s, n = int(successes), int(trials)
    if n <= 0 or not 0 <= s <= n:
        raise ValueError(f"need 0 <= successes ({s}) <= trials ({n}) and trials > 0")
    z = float(norm.ppf(0.5 * (1.0 + confidence)))
    z2 = z * z
    den = n + z2
    value = (s + 0.5 * z2) / den
    error = (z / den) * math.sqrt(s * (n - s) / n + 0.25 * z2)
    return Rate(value, error, s, n, confidence)


@dataclass(frozen=True)
class Risk:
    value: float                                # residual risk, clipped to [0, 1]
    ci: tuple[float, float]                     # clipped interval
    unclipped: float                            # (attack - control) / (1 - control), may be negative
    error: float                                # propagated half-width

    def to_dict(self) -> dict:
        return {"risk": self.value, "ci": list(self.ci), "unclipped": self.unclipped}


def residual_risk(attack: Rate, control: Rate) -> Risk:
    """``(a - c) / (1 - c)`` with error ``sqrt((da / (1 - c))^2 + (dc (a - 1) / (1 - c)^2)^2)``."""
    a, c = attack.value, control.value
    if c >= 1.0:
        return Risk(float("nan"), (float("nan"), float("nan")), float("nan"), float("nan"))
    r = (a - c) / (1.0 - c)
    err = math.sqrt((attack.error / abs(1.0 - c)) ** 2 + (control.error * (a - 1.0) / (1.0 - c) ** 2) ** 2)
    clip = lambda v: min(max(v, 0.0), 1.0)          # noqa: E731
    return Risk(clip(r), (clip(r - err), clip(r + err)), r, err)


def risk_entry(attack: Rate, control: Rate | None, *, what: str, control_is: str,
               baseline: Rate | None = None, baseline_is: str = "") -> dict:
    """One row of the report's residual-risk table, keeping anonymeter's distinction:

    - **control**: the same attack against people who are not in the release (held-out patients); the
      residual risk is computed against it;
    - **baseline**: random guessing, a sanity check. Where an attack has no control population (it reads the
      target's own released record), ``control`` is None, ``control_is`` says why, and the residual is
      computed against the baseline and named so (``against: "baseline"``).
    """
    ref = control if control is not None else baseline
    if ref is None:
        raise ValueError("a risk entry needs a control or a baseline")
    rr = residual_risk(attack, ref).to_dict()
    return {"attack": attack.to_dict(), "control": control.to_dict() if control is not None else None,
            "baseline": baseline.to_dict() if baseline is not None else None, "residual_risk": rr,
            "against": "control" if control is not None else "baseline", "n": attack.trials,
            "what": what, "control_is": control_is, "baseline_is": baseline_is}


def nearest(query: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Index of the key with the highest cosine similarity to each query (rows need not be unit length)."""
    q = query / np.maximum(np.linalg.norm(query, axis=1, keepdims=True), 1e-12)
    k = keys / np.maximum(np.linalg.norm(keys, axis=1, keepdims=True), 1e-12)
    return (q @ k.T).argmax(axis=1)


def inference_risk(*, member_emb: np.ndarray, member_secret: np.ndarray, control_emb: np.ndarray,
                   control_secret: np.ndarray, release_emb: np.ndarray, release_secret: np.ndarray,
                   confidence: float = 0.95, seed: int = 0) -> dict:
    """Anonymeter's inference attack with nearest-record guessing, members vs controls.

    The guess for a target is the released secret of its nearest released record; a release
    record with a missing secret is never chosen. The naive baseline guesses a random released
    value. Success counts are per target image.
    """
    ok = ~np.isnan(release_secret)
    if ok.sum() == 0 or len(member_emb) == 0 or len(control_emb) == 0:
        raise ValueError("inference risk needs released secrets, member targets and control targets")
    rel_emb, rel_sec = release_emb[ok], release_secret[ok]
    guess_m = rel_sec[nearest(member_emb, rel_emb)]
    guess_c = rel_sec[nearest(control_emb, rel_emb)]
    rng = np.random.default_rng(seed)
    naive = rng.choice(rel_sec, size=len(member_secret))
    a = success_rate(int((guess_m == member_secret).sum()), len(member_secret), confidence=confidence)
    c = success_rate(int((guess_c == control_secret).sum()), len(control_secret), confidence=confidence)
    b = success_rate(int((naive == member_secret).sum()), len(member_secret), confidence=confidence)
    out = risk_entry(a, c, what="guess the secret of a target from the released label of its nearest record",
                     control_is="the same attack on held-out patients whose images are not in the release",
                     baseline=b, baseline_is="a random released label")
    out["naive_baseline"] = b.to_dict()
    out["attack_beats_naive"] = bool(a.value > b.value)
    return out
