"""The Laplace mechanism with per-element clipping, as DP-GLOW uses it (paper §3.3, Eqs. 6–12).

Shared by DP-GLOW (:mod:`medanon.anonymize.dpglow`, on the standardised flow latent ``eps``) and
the image-domain baseline (:mod:`medanon.anonymize.ldp_image`, on pixels). Each sample is a vector
``v`` of D elements (D = C*H*W for both). Calibration statistics from a training set give, per
element k, the minimum ``lo_k`` and maximum ``hi_k`` (Eq. 8: sensitivity ``Δ_k = hi_k - lo_k``;
Eqs. 11–12: centre ``c_k`` and clip width ``w_k = α Δ_k``). The mechanism then

1. clips ``v_k`` to ``[c_k - w_k/2, c_k + w_k/2]`` (Eq. 9),
2. adds ``Lap(0, b_k)`` with ``b_k = Δ_k * D / ε`` (Eq. 7, ε the budget of the whole image),
3. clips again (Eq. 10).

Why it is ε-LDP for *any* input, not only training-like ones: after step 1 every input lies in the
box, so two inputs differ in element k by at most ``w_k``; with ``α <= 1`` that is at most ``Δ_k``,
and the log-ratio of the output densities is at most ``Σ_k w_k / b_k = (ε / D) Σ_k w_k / Δ_k
<= α ε <= ε``. Step 3 and anything after it (decoding, 8-bit rounding) are post-processing.
With ``α > 1`` the clip box is wider than ``Δ_k`` and Eq. 7 would not hold: this module then
uses ``w_k`` as the sensitivity (and warns). Elements with ``Δ_k = 0`` (constant in every
calibration sample, e.g. pixels outside a fundus field of view) are set to their constant and
carry no information.

Clipping uses the fixed calibration bounds, element by element, so it is per sample: one
extreme image in a batch never changes another image's output (the CADP code clips the batch).

The clip box is either **public** (:meth:`ClipCalibration.public_box`, the default of both
mechanisms: pixels ``[-1, 1]``; the standardised flow latent ``[-4, 4]`` per element, a fixed
constant of the N(0, 1) prior, not of any image) or **calibrated** on private training images as in
the paper. A calibrated box is a per-element min and max of private images, released implicitly
through the clipping: one extreme calibration image shifts every other patient's output, which the
ε bound does not cover. The manifest says which box a release used.

Floating point: the ε bound is proven for real-valued Laplace noise, and 64-bit floating-point
samples (the difference of two exponentials of 53-bit uniforms) lie on a finite grid with tails cut
at about 37 b_k; Mironov (2012) showed that the low-order bits of such samples can reveal the
input. Secret noise is therefore drawn **exactly** by default (``sampler="exact"``,
:mod:`medanon.anonymize.discrete_laplace`): the clipped element is snapped to a grid of
``GRID_STEPS`` steps across its box (a function of the input alone), integer discrete Laplace noise
of scale ``t = ceil(GRID_STEPS · max(1, 1/α) · D / ε)`` is added with integer arithmetic on
``os.urandom`` bits, the sum is clipped to the grid's ends and mapped back to values. Two clipped
inputs are at most ``GRID_STEPS`` steps apart per element, so the log-ratio is at most
``GRID_STEPS / t`` per element and ``D · GRID_STEPS / t <= min(1, α) ε`` in all: the statement then holds
for the implementation. ``sampler="float"`` (and any seeded generator, for experiments) uses the
floating-point sampler, and its statement carries the floating-point clause.

The noise is secret by default: drawn from the operating system's CSPRNG (``os.urandom``),
never from a seeded generator, and no seed is written anywhere. Anyone who knows the seed can
regenerate the noise and subtract it, which removes the privacy. A ``torch.Generator`` may be
passed for experiments (evaluation, tests), never for a release.

This module is the mechanism (:class:`LaplaceMechanism`, :func:`laplace_noise`); the clip box is
:mod:`medanon.anonymize.ldp_calibration`, the claim in words :mod:`medanon.anonymize.ldp_statement`,
and the per-image release loop :mod:`medanon.anonymize.per_image`. Their public names are
importable from here too.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from medanon.anonymize.discrete_laplace import MAX_SCALE, discrete_laplace
from medanon.anonymize.ldp_calibration import (
    CLIP_BOXES,
    PUBLIC_BOXES,
    PUBLIC_LATENT_BOUND,
    SPACES,
    ClipCalibration,
    calibrate,
    calibration_overlap,
)
from medanon.anonymize.ldp_statement import (
    EXACT_CLAUSE,
    FLOAT_CLAUSE,
    SEEDED,
    WEAK_EPSILON,
    distinguishing_bound,
    seeded_privacy,
    statement,
)
from medanon.anonymize.per_image import record_generator, release_dataset
from medanon.anonymize.privacy import DataDependentRelease, NoFormalGuarantee, WeakBudget
from medanon.errors import ConfigError, user_stacklevel

__all__ = ["CENTERS", "CLIP_BOXES", "DEFAULT_ALPHA", "EXACT_CLAUSE", "FLOAT_CLAUSE", "GRID_STEPS", "PUBLIC_BOXES",
           "PUBLIC_LATENT_BOUND", "SAMPLERS", "SEEDED", "SPACES", "WEAK_EPSILON", "ClipCalibration",
           "LaplaceMechanism", "calibrate", "calibration_overlap", "distinguishing_bound", "laplace_noise",
           "record_generator", "release_dataset", "seeded_privacy", "statement"]

log = logging.getLogger(__name__)

DEFAULT_ALPHA = 0.4                             # paper §3.3: "we empirically set α = 0.4"
SAMPLERS = ("exact", "float")
GRID_STEPS = 4096                               # exact sampler: grid steps across each element's clip box
CENTERS = ("midrange", "zero")                  # clip-box centre: Eq. 12, or 0 (the mean of a standardised latent)


# ------------------------------------------------------------------------------------------------ noise


def _real(value: Any) -> bool:
    """A real number (numpy scalars included), not a bool."""
    import numbers

    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def laplace_noise(shape: tuple[int, ...], scale: torch.Tensor, *, generator: torch.Generator | None = None
                  ) -> torch.Tensor:
    """Lap(0, scale) in float64, as the difference of two Exp(1) variates times the scale.

    Without ``generator`` the uniforms come from ``os.urandom`` (a CSPRNG; secret, not reproducible);
    with one they come from it (reproducible: for experiments only). ``scale`` broadcasts to ``shape``.
    """
    n = math.prod(shape)
    if generator is None:
        raw = torch.frombuffer(bytearray(os.urandom(16 * n)), dtype=torch.int64).reshape(2, n)
        u = ((raw & ((1 << 53) - 1)).double() + 1.0) * 2.0**-53    # uniform on (0, 1], 53 random bits
        e = -torch.log(u)
    else:
        e = torch.empty(2, n, dtype=torch.float64, device=generator.device).exponential_(generator=generator)
    return (e[0] - e[1]).reshape(shape) * scale.double().to(e.device).expand(shape)

# ------------------------------------------------------------------------------------------------ mechanism


#: Assumptions of every ε-LDP statement's per-patient budget (dropped where the source has no patient ids).
PATIENT_IDS = ("the source's patient ids are correct: one id per person, one person per id (the per-patient budget "
               "counts a person's images by id)")
ONLY_RELEASE = ("this is the only release of these patients' images: the budgets of other releases of them (another "
                "epsilon, method or run) add to this one (basic composition)")


class LaplaceMechanism:
    """ε-LDP Laplace mechanism on (N, D) vectors with the clipping of DP-GLOW, per sample.

    ``epsilon`` is the budget of one whole sample (image); with ``per_element=True`` it is the budget
    per element and the image budget is ``epsilon * D`` (the paper's "ε = 10² · H · W" is
    ``epsilon=1e2, per_element=True`` for a grayscale image). ``epsilon=math.inf`` adds no noise;
    with ``clip=False`` as well the mechanism is the identity (the paper's "∞ without clip" row).
    """

    def __init__(self, calibration: ClipCalibration, *,
                 epsilon: float,                # privacy budget (per image, or per element with per_element)
                 alpha: float | None = None,    # clip width / range (Eq. 11); None: 0.4, or 1 for the public pixel box
                 per_element: bool = False,     # epsilon is per element (image budget = epsilon * D)
                 clip: bool = True,             # clip before and after the noise (Eqs. 9, 10)
                 center: str = "midrange",      # clip-box centre: "midrange" (Eq. 12) or "zero"
                 sampler: str = "exact"):       # secret noise: exact discrete Laplace on a grid | float (64-bit)
        if sampler not in SAMPLERS:
            raise ConfigError(f"sampler={sampler!r} must be one of {SAMPLERS}")
        if center not in CENTERS:
            raise ConfigError(f"center={center!r} must be one of {CENTERS}",
                              fix="midrange: (max + min) / 2 as in the paper; zero: the standardised prior's mean")
        if not (_real(epsilon) and epsilon > 0) or math.isnan(epsilon):
            raise ConfigError(f"epsilon={epsilon!r} must be a positive number (or inf for no noise)",
                              fix="e.g. epsilon=100, per_element=True")
        if alpha is None:
            alpha = 1.0 if (calibration.public and calibration.space == "pixel") else DEFAULT_ALPHA
        if not (_real(alpha) and 0 < alpha < math.inf):
            raise ConfigError(f"alpha={alpha!r} must be a positive number", fix="use the paper's 0.4")
        if math.isfinite(epsilon) and not clip:
            raise ConfigError("noise without clipping is not ε-LDP: the sensitivity of an unclipped input "
                              "is unbounded", fix="keep clipping on, or use epsilon=inf for the no-noise baseline")
        self.calibration = calibration
        self.alpha = float(alpha)
        self.clip = clip
        self.dims = calibration.dims
        self.epsilon_image = float(epsilon) * self.dims if per_element else float(epsilon)
        self.epsilon_element = self.epsilon_image / self.dims
        delta = calibration.sensitivity
        self.center = center
        c = calibration.center if center == "midrange" else torch.zeros_like(delta)
        self.width = self.alpha * delta                            # w_k (Eq. 11)
        self.lower = c - self.width / 2                            # Eq. 9 bounds
        self.upper = c + self.width / 2
        # sensitivity actually used: Δ_k (Eq. 7) when the clip box fits inside it, else the box width
        self.sensitivity = torch.maximum(delta, self.width)
        if math.isfinite(self.epsilon_image):
            self.scale = self.sensitivity * (self.dims / self.epsilon_image)    # b_k = Δ_k D / ε (Eq. 7)
        else:
            self.scale = torch.zeros_like(delta)
        self.sampler = sampler
        # what medanon compared a calibrated box's images with the released ones by (set by the caller that ran the
        # comparison); None: nothing was compared, and the statement says so instead of claiming a check
        self.calibration_checked: str | None = None
        # exact sampler: the box of element k is a grid of GRID_STEPS steps of width w_k / GRID_STEPS, and the
        # noise is discrete Laplace with the integer scale t >= b_k / step (the same t for every live element,
        # since b_k / w_k = max(1, 1/alpha) * D / epsilon), rounded up: at least the noise the bound needs
        self.grid_scale = (math.ceil(GRID_STEPS * max(1.0, 1.0 / self.alpha) * self.dims / self.epsilon_image)
                           if math.isfinite(self.epsilon_image) else 0)
        if sampler == "exact" and self.grid_scale >= MAX_SCALE:
            smallest = GRID_STEPS * max(1.0, 1.0 / self.alpha) * self.dims / (MAX_SCALE - 1)
            raise ConfigError(f"epsilon={self.epsilon_image:g} per image is too small for the exact sampler's "
                              f"integer range (the smallest it draws for: about {smallest:.3g} per image here); at "
                              "such an epsilon the released images are noise",
                              fix=f"use an epsilon of at least {smallest:.3g} per image (the mechanism classes, e.g. "
                                  "medanon.anonymize.ldp_image.ImageLDP, also take sampler='float', floating-point "
                                  "noise without the exact guarantee)")
        self._warn()

    # -------------------------------------------------------------------------------------------- numbers

    @property
    def epsilon_image_tight(self) -> float:
        """The smallest ε this mechanism is ε-LDP for: Σ_k w_k / b_k (= α ε when α <= 1 and all Δ_k > 0); for the
        exact sampler Σ_k GRID_STEPS / t over the live elements (t rounded up, so at most that)."""
        if not math.isfinite(self.epsilon_image):
            return math.inf
        live = self.scale > 0
        if self.sampler == "exact":
            return int((self.width > 0).sum()) * GRID_STEPS / self.grid_scale
        return float((self.width[live] / self.scale[live]).sum())

    def _warn(self) -> None:
        if not math.isfinite(self.epsilon_image):
            warnings.warn(f"epsilon=inf: no noise is added{'' if self.clip else ' and nothing is clipped'}; the "
                          "output carries NO differential-privacy guarantee", NoFormalGuarantee,
                          stacklevel=user_stacklevel())
            return
        if self.alpha > 1:
            warnings.warn(f"alpha={self.alpha} > 1: the clip box is wider than the calibration range, so the "
                          "noise is scaled to the box width instead of Δ_k (Eq. 7 alone would not be ε-LDP)",
                          UserWarning, stacklevel=user_stacklevel())
        if self.epsilon_image > WEAK_EPSILON:
            warnings.warn(
                f"epsilon = {self.epsilon_image:.4g} per image ({self.epsilon_element:.4g} per element, D = "
                f"{self.dims}): the guarantee bounds the log-likelihood ratio between any two images' outputs "
                f"by {self.epsilon_image:.4g} nats, i.e. a factor e^{self.epsilon_image:.4g}; that is no formal "
                "protection for a whole image. Any obfuscation at this budget is empirical (see docs/dpglow.md).",
                WeakBudget, stacklevel=user_stacklevel())
        if not self.calibration.public:
            warnings.warn(f"the clip box is calibrated on {self.calibration.count} private images (per-element min "
                          "and max): what it reveals about them is outside the guarantee; clip_box='public' avoids it",
                          DataDependentRelease, stacklevel=user_stacklevel())

    # -------------------------------------------------------------------------------------------- apply

    def _check(self, v: torch.Tensor) -> None:
        if v.ndim != 2 or v.shape[1] != self.dims:
            raise ValueError(f"the mechanism takes (N, {self.dims}) samples, got {tuple(v.shape)}")
        if not torch.isfinite(v).all():
            raise ValueError("an input sample has non-finite values")

    def clip_samples(self, v: torch.Tensor) -> torch.Tensor:
        """Eq. 9 for each sample independently (element-wise bounds fixed by the calibration)."""
        lo, hi = self.lower.to(v.device, v.dtype), self.upper.to(v.device, v.dtype)
        return torch.clamp(v, lo, hi)

    def __call__(self, v: torch.Tensor, *, generator: torch.Generator | Sequence[torch.Generator] | None = None
                 ) -> torch.Tensor:
        """Privatise (N, D) samples. Noise is secret (OS CSPRNG) unless a generator is passed: one for the
        batch (rows drawn in order), or one per row (the output of a row is then independent of the batch)."""
        self._check(v)
        if not self.clip:
            return v.clone()
        out = self.clip_samples(v.double())
        if math.isfinite(self.epsilon_image):
            if generator is None and self.sampler == "exact":
                return self._exact(out).to(v.device, v.dtype)
            out = out + self.noise(v.shape[0], generator=generator).to(v.device)
            out = self.clip_samples(out)
        return out.to(v.dtype)

    def _exact(self, clipped: torch.Tensor) -> torch.Tensor:
        """The mechanism with exact discrete noise: the clipped input snapped to its element's grid of
        GRID_STEPS steps (a function of the input alone), integer discrete Laplace noise of scale
        ``grid_scale`` from OS random bits, clipped to the grid's ends, mapped back to values (post-processing).
        Two inputs differ by at most GRID_STEPS grid steps per element, so the log-ratio is at most
        GRID_STEPS / grid_scale per element: the bound holds exactly, for this implementation."""
        lower = self.lower.to(clipped.device)
        step = (self.width / GRID_STEPS).to(clipped.device)
        live = step > 0
        safe = torch.where(live, step, torch.ones_like(step))
        q = torch.round((clipped - lower) / safe).clamp_(0, GRID_STEPS).to(torch.int64)
        noise = torch.from_numpy(discrete_laplace(self.grid_scale, q.numel())).reshape(q.shape).to(q.device)
        y = (q + noise).clamp_(0, GRID_STEPS)
        return torch.where(live, lower + y.double() * step, clipped)

    def noise(self, n: int, *, generator: torch.Generator | Sequence[torch.Generator] | None = None
              ) -> torch.Tensor:
        """(n, D) Laplace noise with the per-element scales b_k (Eq. 7), float64."""
        if generator is None or isinstance(generator, torch.Generator):
            return laplace_noise((n, self.dims), self.scale, generator=generator)
        if len(generator) != n:
            raise ValueError(f"{len(generator)} generators for {n} samples")
        return torch.cat([laplace_noise((1, self.dims), self.scale, generator=g).cpu() for g in generator])

    def log_prob(self, out: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """log density of the output ``out`` given the input ``v`` (N,), in float64.

        The output of an element with a clip box is Laplace inside the box plus point masses on its
        two ends, so the density is taken with respect to Lebesgue measure inside plus counting
        measure on the ends (and elements with Δ_k = 0 are a point mass); this is what the ε bound
        is about. Requires a finite epsilon and clipping.
        """
        if not (self.clip and math.isfinite(self.epsilon_image)):
            raise ValueError("log_prob needs a mechanism with noise and clipping")
        v = self.clip_samples(v.double())
        out = out.double()
        lo, hi, b = (t.to(v.device) for t in (self.lower, self.upper, self.scale))
        live = b > 0
        bs = torch.where(live, b, torch.ones_like(b))
        inside = -torch.log(2 * bs) - (out - v).abs() / bs
        at_lo = math.log(0.5) - (v - lo) / bs
        at_hi = math.log(0.5) - (hi - v) / bs
        lp = torch.where(out <= lo, at_lo, torch.where(out >= hi, at_hi, inside))
        lp = torch.where(live, lp, torch.zeros_like(lp))
        if bool((out < lo - 1e-12).any() or (out > hi + 1e-12).any()):
            raise ValueError("output lies outside the clip box: it cannot come from this mechanism")
        return lp.sum(1)

    # -------------------------------------------------------------------------------------------- claim

    def privacy(self, *, space_description: str, flow: str | None = None) -> dict[str, Any]:
        """The manifest's privacy field: numbers and the exact statement."""
        finite = math.isfinite(self.epsilon_image)
        cal = self.calibration
        box = (f"public: the data-independent range [{float(cal.lo[0]):g}, {float(cal.hi[0]):g}], computed from no "
               f"image; each element is clipped to alpha = {self.alpha:g} of its width about c_k"
               + (f": [{float(self.lower.min()):g}, {float(self.upper.max()):g}]" if self.clip else "")
               if cal.public else
               f"calibrated: per-element min and max of {cal.count} private training images (sha256 "
               f"{cal.checksum()[:12]}); NOT covered by the bound")
        out = {
            "mechanism": "laplace" if finite else ("none" if not self.clip else "clip only"),
            "guarantee": "epsilon-LDP" if finite else "none",
            "delta": 0 if finite else None,          # pure epsilon-DP: the Laplace mechanism has no failure probability
            "unit": "one image (all its elements); a patient with n released images: n * epsilon" if finite
                    else "none: no noise is added",
            "space": space_description,
            "epsilon_image": self.epsilon_image if finite else "inf",
            "epsilon_element": self.epsilon_element if finite else "inf",
            "epsilon_image_tight": self.epsilon_image_tight if finite else "inf",
            "epsilon_patient": "n * epsilon_image for a patient with n released images (basic composition)"
                               if finite else "inf",
            "distinguishing_bound": distinguishing_bound(self.epsilon_image) if finite else 1.0,
            "vacuous": (self.epsilon_image > WEAK_EPSILON) if finite else True,
            "D": self.dims,
            "alpha": self.alpha,
            "clip_box": box,
            "clip_center": (("c_k = (max_k + min_k) / 2 of the public range: its midpoint, computed from no image"
                             if cal.public else "c_k = (max_k + min_k) / 2 of the calibration set (Eq. 12)")
                            if self.center == "midrange"
                            else "c_k = 0 (the standardised latent's prior mean; not data-derived)"),
            "clip": "per sample, element-wise, before and after the noise" if self.clip else "off",
            "noise_scale": ("b_k = max(Delta_k, w_k) * D / epsilon_image (Eq. 7; equals Delta_k * D / epsilon "
                            "for alpha <= 1)") if finite else "none",
            "noise_scale_mean": float(self.scale.mean()),
            "noise_source": (("os.urandom (CSPRNG); exact discrete Laplace with integer scale "
                              f"{self.grid_scale} on a grid of {GRID_STEPS} steps across each element's clip box "
                              "(Canonne, Kamath & Steinke 2020, integer arithmetic only); no seed exists or is "
                              "recorded") if self.sampler == "exact" else
                             "os.urandom (CSPRNG), 64-bit floating-point Laplace; no seed exists or is recorded")
                            if finite else "none",
            "sampler": self.sampler if finite else None,
            "calibration": cal.describe(),
            "assumptions": [] if not finite else [
                "the noise is secret: drawn from os.urandom for this release and recorded nowhere",
                ("the clip box is public and fixed" if cal.public else
                 "the calibrated clip box is treated as a public constant: it was calibrated on images of people "
                 "who are not in this release " + (
                     f"(medanon found none of the released images or patients among them, {self.calibration_checked})"
                     if self.calibration_checked else
                     "(an assumption medanon did not check: it did not compare the calibration images with the "
                     "released ones)"))
                + (" and the flow's weights are a fixed public function" if flow else ""),
                *(["the flow was trained on people who are not in this release: its weights are a function of its "
                   "training images that the noise does not cover, so for a released person who trained it the "
                   "bound does not hold (medanon detects a release of the flow's training folder, of its training "
                   "split's patients in a split of that folder, of people of the phantom it was trained on, and, "
                   "given that folder as flow_training, any of its images; other data is unchecked)"]
                  if flow else []),
                PATIENT_IDS,
                ONLY_RELEASE,
            ],
            "not_protected": ["everything: no noise is added; the released images are the inputs"
                              + (" passed through the flow" if flow else "")
                              + (", clipped" if self.clip else "")] if not finite else [
                "a patient's other released images: n images of one patient are protected at n * epsilon",
                "other releases of the same images or patients: each adds its epsilon to a patient's budget",
                *(["what the flow's weights memorised about their training images"] if flow else []),
                *([] if cal.public else ["what the calibrated clip box (per-element min and max of private images) "
                                         "reveals about them"]),
                "labels released with the images (released as they are)",
                *(["the floating-point gap: the bound is proven for exact Laplace noise, not for the 64-bit sampler"]
                  if self.sampler == "float" else []),
            ] + (["anything: at this epsilon the bound is vacuous"] if finite and self.epsilon_image > WEAK_EPSILON
                 else []),
            "statement": statement(self, space_description=space_description, flow=flow),
        }
        return out
