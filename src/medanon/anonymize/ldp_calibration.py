"""The clip box of the ε-LDP mechanisms: per-element bounds, public or calibrated on training images.

The Laplace mechanism (:mod:`medanon.anonymize.ldp`) clips every element of a sample to a box: the
public box (:meth:`ClipCalibration.public_box`, computed from no image: pixels ``[-1, 1]``, the
standardised flow latent ``[-4, 4]``) or, as in the DP-GLOW paper, the per-element min and max of
private training images (:func:`calibrate`, Eqs. 8, 11, 12), whose leakage the ε bound does not
cover; :func:`calibration_overlap` warns when released images are among those (the release then
states no guarantee).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from medanon.anonymize.privacy import CalibrationOverlap
from medanon.data.overlap import as_records, images_in_common, same_people
from medanon.errors import ConfigError, user_stacklevel

PUBLIC_LATENT_BOUND = 4.0                       # public box of eps: [-4, 4]; P(|N(0, 1)| > 4) = 6.3e-5
PUBLIC_BOXES = {"pixel": (-1.0, 1.0), "glow-eps": (-PUBLIC_LATENT_BOUND, PUBLIC_LATENT_BOUND)}
CLIP_BOXES = ("public", "calibrated")
SPACES = ("glow-eps", "pixel")


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
        raise ConfigError(f"the clip box needs at least two calibration images; {count} given",
                          fix="calibrate on more images (the training split of another release), or use the "
                              "public box")
    return ClipCalibration(lo=lo, hi=hi, count=count, space=space)


def calibration_overlap(released, calibration) -> int:
    """Warn (:class:`~medanon.anonymize.privacy.CalibrationOverlap`) when images being released are among the
    images a clip box is calibrated on (:func:`~medanon.data.overlap.images_in_common`), or released patients are
    certainly among its people (:func:`~medanon.data.overlap.same_people`); returns how many images are."""
    return calibration_overlaps(released, calibration)[0]


def calibration_overlaps(released, calibration) -> tuple[int, int]:
    """:func:`calibration_overlap`'s warnings, and both counts: the released images among the calibration images,
    and (where no image is) the released patients certainly among its people."""
    released, calibration = as_records(released), as_records(calibration)
    both, people = images_in_common(released, calibration), 0
    fix = ("calibrate on other patients' images (the training split of another release) or use the public box")
    if both:
        warnings.warn(f"{both} of the {len(released.records)} images being released are among the "
                      f"{len(calibration.records)} images "
                      "the clip box is calibrated on: their own per-element extremes shape the box, so the release "
                      "states no formal guarantee; " + fix, CalibrationOverlap, stacklevel=user_stacklevel())
    elif people := same_people(released, calibration):
        warnings.warn(f"{people} released patients have other images among those the clip box is calibrated on "
                      "(the same folder or phantom, the same patient ids): the box depends on them, so the release "
                      "states no formal guarantee; " + fix, CalibrationOverlap, stacklevel=user_stacklevel())
    return both, people
