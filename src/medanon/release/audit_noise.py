"""The audit's measurement of an image-domain LDP release's noise against the ε its statement gives.

LDP-image with the public clip box (the default: every pixel value in [-1, 1] is its own box, α = 1) releases
``y = clip(x + L, -1, 1)`` for each of an image's D values ``x``, with ``L`` Laplace of scale ``b = 2 D / ε``, and
writes ``y`` as an 8-bit level. The larger the noise, the more values land on black or white (levels 0 and 255): a
value strictly between them has probability ``P(-1 + h <= x + L < 1 - h)`` (``h`` half a level), which falls as
``b`` grows. Read with each record's source (the mapping, and the source dataset decoded as the method read it), the
number of such values is at most about their expected number under the stated ε; many more mean less noise than
that ε needs: the statement claims more protection than the images have. The test is one-sided (Poisson tail at
:data:`P_VALUE`, conservative for a sum of independent Bernoulli values) and has power only where the stated noise
is large against the image's range (small ε per element); where the noise is below one grey level (ε per element
of the paper's 10³) nearly every value is between black and white whatever ε, and the check passes without
telling anything (its detail says how many values it expected).

It reads nothing of its own: it is the ``each_record`` of :func:`.audit_source.check_preprocessed_copies`.
DP-GLOW's noise is added in its flow's latent, which the audit does not compute (it runs no model).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.uniform(-1, 1, (1, 32, 32))
>>> noise = LdpNoise(epsilon=1e4)                    # b = 2 * 1024 / 1e4 = 0.2
>>> noise.add("a", np.rint((np.clip(x + rng.laplace(0, 0.2, x.shape), -1, 1) + 1) * 127.5) / 127.5 - 1, [None],
...           [(x, None)])
>>> noise.pvalue() > 1e-6                            # the noise it states
True
>>> noise = LdpNoise(epsilon=1e3)                    # states ten times the noise it has
>>> noise.add("a", np.rint((np.clip(x + rng.laplace(0, 0.2, x.shape), -1, 1) + 1) * 127.5) / 127.5 - 1, [None],
...           [(x, None)])
>>> noise.pvalue() < 1e-6
True
"""

from __future__ import annotations

import math

import numpy as np

P_VALUE = 1e-6                  # a release with the stated noise fails about once in a million audits
HALF_LEVEL = 1 / 255            # half an 8-bit level in [-1, 1] units: level 0 is y < -1 + HALF_LEVEL


def measured(manifest: dict) -> tuple[LdpNoise | None, str | None]:
    """The collector for ``manifest``'s release, or None and why its noise is not measured (None: not a DP
    release)."""
    privacy, params = manifest.get("privacy") or {}, manifest.get("params") or {}
    eps = privacy.get("epsilon_image")
    if not (isinstance(eps, int | float) and not isinstance(eps, bool)) or manifest.get("method") not in (
            "ldp-image", "dpglow"):
        return None, None
    if manifest.get("method") == "dpglow":
        return None, ("DP-GLOW's noise was not measured: it is added in the flow's latent, which the audit does not "
                      "compute")
    public = str(privacy.get("clip_box", "")).startswith("public") and privacy.get("alpha") == 1
    if not (public and params.get("clip", True) and math.isfinite(eps) and eps > 0):
        return None, ("the noise was not measured: the audit measures LDP-image's noise with the public clip box "
                      "(alpha = 1) and a finite epsilon only")
    return LdpNoise(epsilon=float(eps)), None


class LdpNoise:
    """Counts, record by record, the released values strictly between black and white and their expected number
    under Laplace noise of the scale ε per image gives (:meth:`add`), then adds the check (:meth:`report`)."""

    def __init__(self, *, epsilon: float) -> None:
        self.epsilon = epsilon
        self.observed = 0
        self.expected = 0.0
        self.values = self.checked = self.skipped = 0

    def add(self, img: str, got, sources: list, decoded: list | None) -> None:
        """Released image ``img`` (pixels ``got``, (C, H, W) in [-1, 1]) and its one source decoded as the method
        read it (None where it could not be read, or the copy check stopped at a copy)."""
        from scipy.stats import laplace

        if decoded is None or len(decoded) != 1:
            self.skipped += 1
            return
        x = np.clip(np.asarray(decoded[0][0], np.float64), -1, 1)
        got = np.asarray(got, np.float64)
        if x.shape != got.shape:
            self.skipped += 1
            return
        b = 2.0 * x.size / self.epsilon                 # Delta = 2 (the range [-1, 1]) x D / epsilon per image
        levels = np.rint((got + 1) * 127.5)
        self.observed += int(((levels > 0) & (levels < 255)).sum())
        self.expected += float((laplace.cdf(1 - HALF_LEVEL - x, scale=b)
                                - laplace.cdf(-1 + HALF_LEVEL - x, scale=b)).sum())
        self.values += x.size
        self.checked += 1

    def pvalue(self) -> float:
        """P(at least the observed count) under the stated noise (Poisson tail: conservative)."""
        from scipy.stats import poisson

        return float(poisson.sf(self.observed - 1, self.expected)) if self.observed else 1.0

    def report(self, rep, *, records: int) -> None:
        if self.skipped:
            rep.notes.append(f"{self.skipped} LDP records' noise not measured: their source is not a readable file "
                             "of the source given, or the record is a copy of it (the copy check names it)")
        if not self.checked:
            return
        p = self.pvalue()
        sample = f" ({self.checked} of {records} records)" if self.checked < records else ""
        what = (f"{self.observed:,} of {self.values:,} released values lie strictly between black and white; the "
                f"noise of epsilon = {self.epsilon:g} per image gives about {self.expected:,.1f}")
        rep.add("the images hold the noise the stated epsilon needs (LDP-image: values between black and white, "
                "measured against their sources)", p >= P_VALUE,
                f"{what} (p = {p:.2g}): the images hold less noise than the statement's epsilon needs{sample}"
                if p < P_VALUE else f"{what}{sample}")

