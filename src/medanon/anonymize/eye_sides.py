"""Eye sides in the k-Same averages of fundus photographs: every image is averaged as a right eye.

A left eye's photograph is close to the mirror image of a right eye's: its optic disc lies left of the image centre
instead of right of it. An average of left and right eyes shows two faint discs and two half-contrast vessel trees,
neither eye. Before clustering and averaging, the k-Same methods (k-Same-Pixel, k-Same-PCA, k-Centroid, k-SALSA)
therefore mirror every left eye left-right, so that every image they compare and average shows a right eye; each
record is rendered as a right eye and mirrored back when its members' side is left (the side most of its patients
have, as the ``laterality`` label is aggregated: each side a patient has counts once, so a patient photographed in
both eyes counts for both; a tie is a right eye).

Where an image's side comes from (``eye_sides=``):

========  ============================================================================================
auto      the record's ``laterality`` label where it has one, else :func:`disc_side` (the optic disc is
          the brightest blob of the field of view; an image whose brightest blob lies near the vertical
          midline keeps its orientation); the default
labels    the ``laterality`` label only: images without one keep their orientation
off       no image is mirrored (the k-SALSA paper's behaviour)
========  ============================================================================================

Only fundus datasets are aligned: a chest X-ray has one orientation (a mirrored one is situs inversus). GAN-Inverted
(one reconstruction per image) averages nothing and mirrors nothing.

Privacy: an image's side comes from its own label or its own pixels, and a record's side from its own members, so
every record is still computed from its cluster only (the k-anonymity statement is unchanged). A record's
orientation shows its members' majority side, as a released ``laterality`` label does.

The images are (C, H, W) with x along the last axis: mirroring is ``image.flip(-1)``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from medanon.errors import ConfigError

MODES = ("auto", "labels", "off")
LEFT, RIGHT, UNKNOWN = 0, 1, -1
DISC_SIGMA = 0.04            # blur of the disc finder, in image widths (a disc is about 0.1-0.2 of the field)
MIDLINE = 0.1                # a brightest blob within this fraction of the half-width of the centre: side unknown


def check_mode(mode: str, ds=None) -> None:
    """A known mode; with the dataset ``ds``, not ``labels`` for X-rays (asked for, and nothing would use it)."""
    if mode not in MODES:
        raise ConfigError(f"eye_sides={mode!r} must be one of {', '.join(MODES)}",
                          fix="auto (labels, else the optic disc), labels (labels only) or off")
    if mode == "labels" and getattr(ds, "modality", None) == "xray":
        raise ConfigError("eye_sides='labels' aligns the left and right eyes of fundus photographs; chest X-rays "
                          "have none, so it would change nothing", fix="leave eye_sides= out for X-rays")


def disc_side(images: torch.Tensor, fov: torch.Tensor | None = None, *, sigma: float = DISC_SIGMA,
              midline: float = MIDLINE) -> np.ndarray:
    """The eye side of fundus photographs ``images`` (N, C, H, W), from the position of the optic disc: the brightest
    blob of the field of view ``fov`` (N, 1, H, W) bool (default: every pixel) after a Gaussian blur of ``sigma``
    image widths. A right eye's disc lies right of the image centre (the examiner's view of the nasal side).

    Returns an int array: 1 right, 0 left, -1 where the blob lies within ``midline`` of the half-width of the centre
    (a disc-centred photograph, or no disc to find).

    >>> img = -torch.ones(2, 3, 32, 32)
    >>> img[0, :, 14:18, 24:28] = 1.0                  # a bright disc right of the centre
    >>> img[1, :, 14:18, 4:8] = 1.0                    # and left of it
    >>> disc_side(img).tolist()
    [1, 0]
    """
    if images.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got {tuple(images.shape)}")
    w = images.shape[-1]
    x = images.float().mean(1, keepdim=True)
    f = torch.ones_like(x, dtype=torch.bool) if fov is None else fov.to(torch.bool)
    inside = f.float()
    mean = (x * inside).flatten(1).sum(1) / inside.flatten(1).sum(1).clamp_min(1)
    x = (x - mean[:, None, None, None]) * inside
    s = max(sigma * w, 0.5)
    r = max(1, math.ceil(3 * s))
    t = torch.arange(-r, r + 1, dtype=torch.float32)
    g = torch.exp(-t ** 2 / (2 * s * s))
    g = g / g.sum()

    def blur(a: torch.Tensor) -> torch.Tensor:           # separable, zero outside the image
        a = F.conv2d(a, g.view(1, 1, 1, -1), padding=(0, r))
        return F.conv2d(a, g.view(1, 1, -1, 1), padding=(r, 0))

    # a blurred mean over the field of view only: the dark surround does not pull a disc at the edge inwards
    b = blur(x) / blur(inside).clamp_min(1e-3)
    b = b.masked_fill(~f, -math.inf).flatten(1)
    col = (b.argmax(1) % w).float()
    offset = (col - (w - 1) / 2) / (w / 2)
    side = np.where(offset.numpy() > 0, RIGHT, LEFT)
    return np.where(np.abs(offset.numpy()) < midline, UNKNOWN, side).astype(int)


@dataclass
class EyeSides:
    """Each image's side (1 right, 0 left, -1 unknown) and where it came from."""

    mode: str                                   # as applied: off for data that is not fundus
    sides: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    from_labels: int = 0
    estimated: int = 0
    asked: str = ""                             # the mode asked for (auto, labels, off)

    @property
    def aligned(self) -> bool:
        return self.mode != "off"

    @property
    def mirrored(self) -> np.ndarray:
        """Indices of the images shown mirrored (the left eyes)."""
        return np.flatnonzero(self.sides == LEFT)

    def record_side(self, members: Sequence[int], patient_ids: Sequence[str]) -> int:
        """The side a record of ``members`` is shown as: the side most of its patients have (as the laterality label
        is aggregated, :func:`~medanon.release.aggregate.aggregate_labels`: a patient with both eyes counts for
        both); right when none is known or on a tie."""
        from medanon.release.aggregate import aggregate_labels

        known = [i for i in members if self.sides[i] != UNKNOWN]
        if not known:
            return RIGHT
        agg = aggregate_labels([{"laterality": float(self.sides[i])} for i in known], ["laterality"],
                               patients=[patient_ids[i] for i in known])["laterality"]
        return int(agg)

    def describe(self, records_left: int | None = None) -> dict:
        """What the privacy statement and the run summary record."""
        n = len(self.sides)
        out = {"mode": self.mode, "images": n, "from_labels": self.from_labels, "estimated": self.estimated,
               "unknown": int((self.sides == UNKNOWN).sum()), "mirrored": int((self.sides == LEFT).sum())}
        if records_left is not None:
            out["records_shown_left"] = records_left
        return out


def label_sides(values) -> np.ndarray:
    """``laterality`` label values (0 left, 1 right, NaN unknown) as sides: 1 right, 0 left, -1 unknown."""
    lab = np.asarray(values, dtype=float)
    return np.where(np.isnan(lab), UNKNOWN, (lab >= 0.5).astype(int)).astype(int)


def image_sides(images: torch.Tensor, labels=None, *, batch: int = 256) -> np.ndarray:
    """Each image's side as an attacker (or evaluator) reads it: the ``laterality`` label where ``labels`` (one value
    per image, NaN unknown) gives one, else :func:`disc_side` of the image (black surround and all). 1 right, 0 left,
    -1 unknown."""
    out = np.full(len(images), UNKNOWN, dtype=int) if labels is None else label_sides(labels)
    todo = np.flatnonzero(out == UNKNOWN)
    for start in range(0, len(todo), batch):
        idx = todo[start:start + batch]
        out[idx] = disc_side(images[torch.from_numpy(idx)])
    return out


def find_sides(ds, mode: str, *, batch: int = 256) -> EyeSides:
    """The :class:`EyeSides` of dataset ``ds`` under ``mode`` (see the module docstring); ``off`` (or a dataset that
    is not fundus) gives an :class:`EyeSides` that mirrors nothing."""
    check_mode(mode, ds)
    n = len(ds)
    if mode == "off" or getattr(ds, "modality", None) != "fundus":
        return EyeSides("off", np.full(n, UNKNOWN, dtype=int), asked=mode)
    sides = label_sides([r.labels.get("laterality", math.nan) for r in ds.records])
    from_labels = int((sides != UNKNOWN).sum())
    estimated = 0
    todo = np.flatnonzero(sides == UNKNOWN)
    if mode == "auto" and len(todo):
        for start in range(0, len(todo), batch):
            idx = todo[start:start + batch]
            items = [ds.load(int(i)) for i in idx]
            found = disc_side(torch.stack([it["image"] for it in items]), torch.stack([it["fov"] for it in items]))
            sides[idx] = found
        estimated = int((sides[todo] != UNKNOWN).sum())
    return EyeSides(mode, sides, from_labels, estimated, asked=mode)


def align(ds, mode: str):
    """``ds`` as the k-Same methods average it: a view that loads every left eye mirrored (image, field of view and
    mask; the same records, labels and cache), with its :class:`EyeSides` as ``view.eye_sides``. A dataset that is
    already such a view is returned as it is."""
    made = getattr(ds, "eye_sides", None)
    if made is not None:
        if made.asked != mode:
            raise ValueError(f"the dataset is already a view aligned with eye_sides={made.asked!r}, not {mode!r}")
        return ds
    sides = find_sides(ds, mode)
    view = copy.copy(ds)
    view.mirrored = frozenset(int(i) for i in sides.mirrored)
    view.eye_sides = sides
    return view
