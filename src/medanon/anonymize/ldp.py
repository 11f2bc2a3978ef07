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
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from medanon.anonymize.discrete_laplace import MAX_SCALE, discrete_laplace
from medanon.anonymize.privacy import CalibrationOverlap, DataDependentRelease, NoFormalGuarantee, WeakBudget
from medanon.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_ALPHA = 0.4                             # paper §3.3: "we empirically set α = 0.4"
WEAK_EPSILON = 10.0                             # above this image budget the guarantee is vacuous (warned)
PUBLIC_LATENT_BOUND = 4.0                       # public box of eps: [-4, 4]; P(|N(0, 1)| > 4) = 6.3e-5
PUBLIC_BOXES = {"pixel": (-1.0, 1.0), "glow-eps": (-PUBLIC_LATENT_BOUND, PUBLIC_LATENT_BOUND)}
CLIP_BOXES = ("public", "calibrated")
EXACT_CLAUSE = ("The noise is exact: each clipped element is snapped to a grid of 4096 steps across its box and "
                "discrete Laplace noise is drawn with integer arithmetic from operating-system random bits (Canonne, "
                "Kamath & Steinke 2020), so no floating-point sampling is involved and the bound holds for this "
                "implementation, given uniformly random bits from the operating system.")
FLOAT_CLAUSE = ("The bound is proven for exact real-valued Laplace noise; the noise is sampled in 64-bit floating "
                "point (difference of two exponentials of 53-bit uniforms), whose outputs lie on a finite grid with "
                "tails cut at about 37 noise scales, and this sampler is not hardened against Mironov's (2012) "
                "least-significant-bit attack, so for the implementation the pure epsilon claim holds only up to "
                "that floating-point gap.")
SPACES = ("glow-eps", "pixel")
SAMPLERS = ("exact", "float")
GRID_STEPS = 4096                               # exact sampler: grid steps across each element's clip box
CENTERS = ("midrange", "zero")                  # clip-box centre: Eq. 12, or 0 (the mean of a standardised latent)


# ------------------------------------------------------------------------------------------------ calibration


@dataclass(frozen=True)
class ClipCalibration:
    """Per-element minimum and maximum of the calibration (training) samples, in float64."""

    lo: torch.Tensor                            # (D,) minimum of each element over the calibration set
    hi: torch.Tensor                            # (D,) maximum of each element
    count: int                                  # number of calibration samples (0 for a public box)
    space: str                                  # "glow-eps" (standardised flow latent) or "pixel"
    public: bool = False                        # a data-independent box (public_box), not computed from images

    def __post_init__(self) -> None:
        if self.lo.shape != self.hi.shape or self.lo.ndim != 1:
            raise ValueError(f"calibration lo/hi must be two (D,) tensors, got {tuple(self.lo.shape)} and "
                             f"{tuple(self.hi.shape)}")
        if not (torch.isfinite(self.lo).all() and torch.isfinite(self.hi).all()) or bool((self.hi < self.lo).any()):
            raise ValueError("calibration statistics must be finite with hi >= lo everywhere")
        if self.space not in SPACES:
            raise ValueError(f"calibration space {self.space!r} must be one of {SPACES}")

    @classmethod
    def public_box(cls, space: str, dims: int) -> ClipCalibration:
        """The data-independent range of ``space``: pixels [-1, 1]; the standardised flow latent [-4, 4]."""
        if space not in PUBLIC_BOXES:
            raise ValueError(f"no public box for space {space!r}")
        lo, hi = PUBLIC_BOXES[space]
        return cls(lo=torch.full((dims,), lo, dtype=torch.float64), hi=torch.full((dims,), hi, dtype=torch.float64),
                   count=0, space=space, public=True)

    @property
    def dims(self) -> int:
        return self.lo.numel()

    @property
    def sensitivity(self) -> torch.Tensor:
        """Δ_k = max - min over the calibration set (Eq. 8)."""
        return self.hi - self.lo

    @property
    def center(self) -> torch.Tensor:
        """c_k (Eq. 12)."""
        return (self.hi + self.lo) / 2

    def checksum(self) -> str:
        """SHA-256 over the space, the count and the float64 bytes of lo and hi."""
        h = hashlib.sha256(f"medanon-clip-calibration:{self.space}:{self.count}:{self.dims}:"
                           f"{'public:' if self.public else ''}".encode())
        h.update(self.lo.detach().cpu().double().contiguous().numpy().tobytes())
        h.update(self.hi.detach().cpu().double().contiguous().numpy().tobytes())
        return h.hexdigest()

    def to_state(self) -> dict[str, Any]:
        """Plain tensors and numbers (for a ``weights_only`` checkpoint)."""
        return {"lo": self.lo.cpu(), "hi": self.hi.cpu(), "count": self.count, "space": self.space,
                "public": self.public}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ClipCalibration:
        return cls(lo=state["lo"].double(), hi=state["hi"].double(), count=int(state["count"]),
                   space=str(state["space"]), public=bool(state.get("public", False)))

    def describe(self) -> dict[str, Any]:
        return {"box": "public" if self.public else "calibrated",
                "space": self.space, "samples": self.count, "dims": self.dims, "sha256": self.checksum(),
                "sensitivity_mean": float(self.sensitivity.mean()), "sensitivity_max": float(self.sensitivity.max())}


def calibrate(batches: Iterable[torch.Tensor], *, space: str) -> ClipCalibration:
    """Running per-element min and max over batches of (N, D) samples (Eqs. 8, 11, 12)."""
    lo = hi = None
    count = 0
    for b in batches:
        b = b.detach().reshape(b.shape[0], -1).double().cpu()
        if not torch.isfinite(b).all():
            raise ValueError("a calibration sample has non-finite values (is the flow diverged?)")
        bl, bh = b.min(0).values, b.max(0).values
        lo = bl if lo is None else torch.minimum(lo, bl)
        hi = bh if hi is None else torch.maximum(hi, bh)
        count += b.shape[0]
    if lo is None or hi is None or count < 2:
        raise ValueError("calibration needs at least two samples")
    return ClipCalibration(lo=lo, hi=hi, count=count, space=space)


# ------------------------------------------------------------------------------------------------ noise


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
        if not (isinstance(epsilon, (int, float)) and epsilon > 0) or math.isnan(epsilon):
            raise ConfigError(f"epsilon={epsilon!r} must be a positive number (or inf for no noise)",
                              fix="e.g. epsilon=100, per_element=True")
        if alpha is None:
            alpha = 1.0 if (calibration.public and calibration.space == "pixel") else DEFAULT_ALPHA
        if not (isinstance(alpha, (int, float)) and 0 < alpha < math.inf):
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
        # exact sampler: the box of element k is a grid of GRID_STEPS steps of width w_k / GRID_STEPS, and the
        # noise is discrete Laplace with the integer scale t >= b_k / step (the same t for every live element,
        # since b_k / w_k = max(1, 1/alpha) * D / epsilon), rounded up: at least the noise the bound needs
        self.grid_scale = (math.ceil(GRID_STEPS * max(1.0, 1.0 / self.alpha) * self.dims / self.epsilon_image)
                           if math.isfinite(self.epsilon_image) else 0)
        if sampler == "exact" and self.grid_scale >= MAX_SCALE:
            raise ConfigError(f"epsilon={self.epsilon_image:g} per image is too small for the exact sampler's "
                              "integer range", fix="use a larger epsilon, or sampler='float'")
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
                          "output carries NO differential-privacy guarantee", NoFormalGuarantee, stacklevel=3)
            return
        if self.alpha > 1:
            warnings.warn(f"alpha={self.alpha} > 1: the clip box is wider than the calibration range, so the "
                          "noise is scaled to the box width instead of Δ_k (Eq. 7 alone would not be ε-LDP)",
                          UserWarning, stacklevel=3)
        if self.epsilon_image > WEAK_EPSILON:
            warnings.warn(
                f"epsilon = {self.epsilon_image:.4g} per image ({self.epsilon_element:.4g} per element, D = "
                f"{self.dims}): the guarantee bounds the log-likelihood ratio between any two images' outputs "
                f"by {self.epsilon_image:.4g} nats, i.e. a factor e^{self.epsilon_image:.4g}; that is no formal "
                "protection for a whole image. Any obfuscation at this budget is empirical (see docs/dpglow.md).",
                WeakBudget, stacklevel=3)
        if not self.calibration.public:
            warnings.warn(f"the clip box is calibrated on {self.calibration.count} private images (per-element min "
                          "and max): what it reveals about them is outside the guarantee; clip_box='public' avoids it",
                          DataDependentRelease, stacklevel=3)

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
        box = (f"public: every element clipped within the data-independent range [{float(cal.lo[0]):g}, "
               f"{float(cal.hi[0]):g}], computed from no image" if cal.public else
               f"calibrated: per-element min and max of {cal.count} private training images (sha256 "
               f"{cal.checksum()[:12]}); NOT covered by the bound")
        out = {
            "mechanism": "laplace" if finite else ("none" if not self.clip else "clip only"),
            "guarantee": "epsilon-LDP" if finite else "none",
            "unit": "one image (all its elements); a patient with n released images: n * epsilon",
            "space": space_description,
            "epsilon_image": self.epsilon_image if finite else "inf",
            "epsilon_element": self.epsilon_element if finite else "inf",
            "epsilon_image_tight": self.epsilon_image_tight if finite else "inf",
            "epsilon_patient": "n * epsilon_image for a patient with n released images (basic composition)",
            "distinguishing_bound": distinguishing_bound(self.epsilon_image) if finite else 1.0,
            "vacuous": (self.epsilon_image > WEAK_EPSILON) if finite else True,
            "D": self.dims,
            "alpha": self.alpha,
            "clip_box": box,
            "clip_center": ("c_k = (max_k + min_k) / 2 (Eq. 12)" if self.center == "midrange"
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
            "assumptions": [
                "the noise is secret: drawn from os.urandom for this release and recorded nowhere",
                ("the clip box is public and fixed" if cal.public else
                 "the calibrated clip box is treated as a public constant")
                + (" and the flow's weights are a fixed public function" if flow else ""),
            ],
            "not_protected": [
                "a patient's other released images: n images of one patient are protected at n * epsilon",
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


def distinguishing_bound(epsilon: float) -> float:
    """The most an ε-LDP output lets anyone tell which of two given inputs it came from (equal priors):
    success probability e^ε / (1 + e^ε)."""
    return 1.0 / (1.0 + math.exp(-epsilon)) if epsilon < 700 else 1.0


def statement(mech: LaplaceMechanism, *, space_description: str, flow: str | None = None) -> str:
    """The privacy claim in words, with this mechanism's numbers."""
    if not math.isfinite(mech.epsilon_image):
        return (f"No differential privacy: epsilon = inf, no noise is added to the {space_description}"
                f"{' (clipped only)' if mech.clip else ''}. Released images are reconstructions of the inputs.")
    e = mech.epsilon_image
    cal = mech.calibration
    fixed = ("the public clip box" if cal.public else "the calibration statistics (recorded by checksum)") \
        + (" and the flow's weights" if flow else "")
    per_element = ("per latent element" if flow else "per pixel value")
    parts = [
        f"Each released image is the output of a Laplace mechanism M that is epsilon-locally differentially private "
        f"with epsilon = {e:.6g} PER IMAGE (D = {mech.dims} elements; written per element it is "
        f"{mech.epsilon_element:.6g} {per_element} x D, which is a way to state the image budget, not a guarantee "
        f"for single pixels{': one pixel can move every latent element' if flow else ''}; the mechanism also "
        f"satisfies the tighter epsilon = {mech.epsilon_image_tight:.6g}) with respect to the "
        f"{space_description}: for ANY two inputs and any set S of outputs, P[M(v) in S] <= exp(epsilon) "
        "P[M(v') in S].",
        f"A patient with n released images is protected at n * epsilon = n * {e:.6g} (budgets add up).",
        "It holds for every input, not only training-like ones: each element is first clipped to "
        f"[c_k - w_k/2, c_k + w_k/2] with w_k = alpha * Delta_k (alpha = {mech.alpha:g}; Delta_k "
        + ("the width of the public range, computed from no image; " if cal.public else
           "from the calibration set's per-element min and max; ")
        + ("c_k the range's midpoint" if mech.center == "midrange" else "c_k = 0")
        + "), so two clipped inputs differ in element k by at most w_k, and the noise scale is "
        "max(Delta_k, w_k) * D / epsilon.",
    ]
    if flow:
        parts.append(f"The image-to-latent map of the flow ({flow}) is a fixed deterministic function, so the same "
                     "bound holds between any two input images.")
    parts.append("The second clip, " + ("the inverse flow, " if flow else "")
                 + "clamping to [-1, 1] and 8-bit rounding are post-processing and keep the guarantee.")
    parts.append(f"The bound is conditional on a fixed mechanism: {fixed} are treated as public constants. It does "
                 "NOT cover what " + ("the flow's weights reveal" if cal.public and flow else
                                      "they reveal" if not cal.public else "anything outside the mechanism reveals")
                 + " about the images they were computed from (if released images were among them, that leakage "
                 "is outside this bound), nor labels released with the images.")
    p = distinguishing_bound(e)
    if e > WEAK_EPSILON:
        parts.append(f"At this budget the bound is VACUOUS: it lets an observer tell which of two given images an "
                     f"output came from with probability up to e^eps / (1 + e^eps) = {p:.6f} (likelihood ratio "
                     f"exp({e:.6g})); no meaningful formal protection for a whole image; any obfuscation seen is "
                     "empirical.")
    else:
        parts.append(f"An observer tells which of two given images an output came from with probability at most "
                     f"e^eps / (1 + e^eps) = {p:.4f}.")
    parts.append(EXACT_CLAUSE if mech.sampler == "exact" else FLOAT_CLAUSE)
    return " ".join(parts)


# ------------------------------------------------------------------------------------------------ releasing


SEEDED = "no formal guarantee (reproducible noise, testing only)"


def calibration_overlap(released, calibration, *, stacklevel: int = 2) -> int:
    """Warn (:class:`~medanon.anonymize.privacy.CalibrationOverlap`) when images being released are among the
    images a clip box is calibrated on; returns how many are. ``released`` and ``calibration``: datasets (their
    records' files are compared, by resolved path) or sequences of paths."""
    def paths(x) -> set[str]:
        items = getattr(x, "records", x)
        return {str(Path(getattr(r, "path", r)).resolve()) for r in items}

    both = paths(released) & paths(calibration)
    if both:
        warnings.warn(f"{len(both)} of the images being released are among the {len(paths(calibration))} images the "
                      "clip box is calibrated on: their own per-element extremes shape the box, which the epsilon "
                      "bound does not cover; calibrate on other images (the training split) or use the public box",
                      CalibrationOverlap, stacklevel=stacklevel)
    return len(both)


def seeded_privacy(privacy: dict[str, Any]) -> dict[str, Any]:
    """The statement of an ε-LDP release whose noise came from a seed: the ε numbers are kept for reference
    (what the mechanism would give with secret noise), the guarantee is withdrawn."""
    return {**privacy, "guarantee": f"none: {SEEDED}",
            "noise_source": "seeded per-record torch generators (Mersenne Twister): TESTING ONLY",
            "why_no_guarantee": ["the noise is a deterministic function of the seed and the record; whoever knows "
                                 "or guesses the seed regenerates it and subtracts it, recovering the clipped input"],
            "statement": f"NO FORMAL GUARANTEE ({SEEDED}): the epsilon below assumes secret noise, which this "
                         "release does not have. " + str(privacy.get("statement", ""))}


def record_generator(seed: int, record_id: str) -> torch.Generator:
    """A generator for one record's noise, derived from (seed, record id): the same with any batching or resume."""
    digest = hashlib.sha256(f"medanon-ldp-noise:{seed}:{record_id}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def release_dataset(dataset, privatise, writer, *, batch: int = 32, device: torch.device | str = "cpu",
                    noise_seed: int | None = None, progress: bool = True) -> int:
    """Privatise every record of ``dataset`` not yet in ``writer`` (resumable); returns the number written.

    ``privatise(images, generator=...)`` maps (N, C, H, W) images to released images. Each record
    stands for itself (LDP releases one image per input image). ``noise_seed`` (experiments only)
    gives every record its own seeded generator; without it the noise is secret. With a seed the
    noise can be regenerated and subtracted by whoever knows or guesses it: the writer's privacy
    statement is replaced by "no formal guarantee (reproducible noise, testing only)" and
    :class:`~medanon.anonymize.privacy.NoFormalGuarantee` is warned.
    """
    from tqdm.auto import tqdm

    if noise_seed is not None and writer.privacy.get("guarantee") == "epsilon-LDP":
        warnings.warn(f"noise seed {noise_seed}: the noise is reproducible, so the release states '{SEEDED}'. "
                      "Leave the seed out for a release", NoFormalGuarantee, stacklevel=2)
        writer.privacy.update(seeded_privacy(writer.privacy))
    todo = [i for i, r in enumerate(dataset.records) if not writer.done(r.record_id)]
    for start in tqdm(range(0, len(todo), batch), desc=f"releasing ({writer.settings['method']})", unit="batch",
                      disable=not progress):
        chunk = todo[start:start + batch]
        recs = [dataset.records[i] for i in chunk]
        images = torch.stack([dataset.load(i)["image"] for i in chunk]).to(device)
        gens = None if noise_seed is None else [record_generator(noise_seed, r.record_id) for r in recs]
        out = privatise(images, generator=gens)
        for r, img in zip(recs, out, strict=True):
            writer.add(r.record_id, img.cpu(), [r])
    return len(todo)
