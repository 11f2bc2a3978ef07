"""DP-GLOW (Shibata et al. 2023, §3.3): the Laplace mechanism in the standardised latent of a GLOW flow.

Steps 1–9 of the paper: a trained flow (step 1) maps an image to its latent; the latent is
standardised by the flow's learned prior, ``eps = (z - mean) / scale`` per element, because a GLOW
latent is N(mean, scale) per level and only ``eps`` is i.i.d. N(0, 1) under the model; the
per-element sensitivity and clip bounds come from the training set (steps 3–4,
:func:`calibrate_latent`); the sample's own latent is clipped, noised with scale Δ_k·D/ε, clipped
again (steps 5–8, :class:`~medanon.anonymize.ldp.LaplaceMechanism`) and decoded (step 9).

The clip box is by default the public ``[-4, 4]`` per element of ``eps`` (a constant of the N(0, 1)
prior; :meth:`~medanon.anonymize.ldp.ClipCalibration.public_box`), so no private image enters the
mechanism except through the flow's weights; a box calibrated on training images (the paper's
steps 3–4) is an option whose leakage the bound does not cover. :func:`training_overlap` warns
when the images being released are the flow's own training data (flows record a data digest).

A calibrated clip box is centred at 0 by default (``center="zero"``), not at the paper's midpoint of the
training extremes (Eq. 12, ``center="midrange"``): ``eps`` is standardised, so 0 is its mean under
the model, while the midpoint of the extremes follows single outlying training images (up to
|c_k| = 5 on the fundus flow) and pushes every released latent to where the inverse flow diverges
(25 % of fundus test images at ε = 10²·D with the midpoint, 7 % centred at 0; X-ray: none either
way, same AUROC; docs/dpglow.md). The ε bound is the same for any fixed centre, and a centre that
is not computed from the data reveals nothing about it.

Example (an untrained tiny flow, shapes only):
    >>> import torch, warnings
    >>> from medanon.models.glow import Glow, GlowCodec, GlowConfig
    >>> codec = GlowCodec(Glow(GlowConfig(resolution=8, channels=1, levels=2, depth=1, hidden=8)))
    >>> cal = calibrate_latent(codec, torch.rand(16, 1, 8, 8) * 2 - 1)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     dp = DPGlow(codec, cal, epsilon=100.0, per_element=True)
    ...     public = DPGlow(codec, epsilon=100.0, per_element=True)        # the default: a public clip box
    >>> public.privacy()["clip_box"].split(":")[0]
    'public'

    >>> dp(torch.zeros(2, 1, 8, 8), generator=torch.Generator().manual_seed(0)).shape
    torch.Size([2, 1, 8, 8])
    >>> dp.mechanism.epsilon_image, dp.mechanism.dims
    (6400.0, 64)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from medanon.anonymize.ldp import ClipCalibration, LaplaceMechanism, calibrate
from medanon.anonymize.privacy import CalibrationOverlap
from medanon.errors import ConfigError, user_stacklevel
from medanon.models.glow.codec import GlowCodec

DPGLOW_CENTER = "zero"                          # default clip-box centre (see the module docstring)
SPACE = "standardised GLOW latent eps (D = C*H*W elements, N(0, I) under the flow's learned prior)"


def calibrate_latent(codec: GlowCodec, images: torch.Tensor, *, batch: int = 64) -> ClipCalibration:
    """Per-element min and max of ``eps`` over calibration images (N, C, H, W) (paper steps 3–4)."""
    dev = next(codec.parameters()).device
    return calibrate((codec.encode(images[i:i + batch].to(dev)) for i in range(0, len(images), batch)),
                     space="glow-eps")


class DPGlow:
    """Images -> ε-LDP images through a flow's standardised latent."""

    def __init__(self, codec: GlowCodec, calibration: ClipCalibration | None = None, *,
                 epsilon: float,                # privacy budget (per image, or per element with per_element)
                 alpha: float | None = None,    # clip width as a fraction of the box's range (Eq. 11; None: 0.4)
                 per_element: bool = False,     # epsilon is per latent element (image budget = epsilon * D)
                 clip: bool = True,             # clip before and after the noise (off only with epsilon=inf)
                 center: str = DPGLOW_CENTER,   # clip-box centre: "midrange" (paper Eq. 12) or "zero" (eps mean)
                 sampler: str = "exact"):       # secret noise: exact discrete Laplace | float (see ldp.py)
        if calibration is None:                 # the default: data-independent [-4, 4] per element
            calibration = ClipCalibration.public_box("glow-eps", codec.dims)
        if calibration.space != "glow-eps":
            raise ConfigError(f"DP-GLOW needs calibration statistics of the flow latent, got {calibration.space!r}")
        if calibration.dims != codec.dims:
            raise ConfigError(f"the calibration statistics have {calibration.dims} elements but the flow's latent "
                              f"has {codec.dims}", fix="calibrate with this flow (or use the one stored in it)")
        self.codec = codec
        self.mechanism = LaplaceMechanism(calibration, epsilon=epsilon, alpha=alpha, per_element=per_element,
                                          clip=clip, center=center, sampler=sampler)

    def __call__(self, images: torch.Tensor, *,
                 generator: torch.Generator | Sequence[torch.Generator] | None = None) -> torch.Tensor:
        return self.privatise(images, generator=generator)[0]

    def privatise(self, images: torch.Tensor, *,
                  generator: torch.Generator | Sequence[torch.Generator] | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """The released images and which of them the inverse flow diverged on (N bools: decoded from their
        privatised latent shrunk towards the prior's mode, :meth:`GlowCodec.decode_checked`; post-processing)."""
        eps = self.codec.encode(images)
        return self.codec.decode_checked(self.mechanism(eps, generator=generator).to(eps.dtype))

    def privacy(self) -> dict[str, Any]:
        return self.mechanism.privacy(space_description=SPACE, flow=f"GLOW, checkpoint sha256 {self.codec.sha256}")


def folder_overlap(flow_data: dict[str, Any] | None, training, released) -> tuple[str, str] | None:
    """The withdrawal ``(reason, why)`` of a release some of whose images are in the folder the flow was trained
    on, else None; ``training`` is that folder as a dataset, checked against the digest the flow recorded (a
    :class:`~medanon.errors.ConfigError` if it is another folder). Images are compared by file content, 8-bit
    pixels and as resized or re-encoded copies (:func:`~medanon.data.overlap.images_in_common`); the whole
    folder counts, its held-out part included, which errs on the safe side. Warns
    :class:`~medanon.anonymize.privacy.CalibrationOverlap` when any is found."""
    from medanon.data.overlap import images_in_common, same_people
    from medanon.runtime import files_digest

    src = (flow_data or {}).get("source") or {}
    if not src.get("sha256"):
        raise ConfigError("the flow records no training folder to check flow_training= against",
                          fix="leave flow_training= out (the statement then assumes the flow never saw these "
                              "people), or use a flow trained by `medanon train flow`")
    got = files_digest([r.path for r in training.records], root=training.root)["sha256"]
    if got != src["sha256"]:
        raise ConfigError(f"flow_training= {training.root} is not the folder the flow was trained on (its sha256 "
                          f"{got[:12]} differs from the recorded {src['sha256'][:12]})",
                          fix="pass the folder `medanon train flow` read, unchanged")
    n = images_in_common(released, training)
    people = same_people(released, training) if not n else 0
    if not n and not people:
        return None
    reason = (f"{n} released images are in the folder the flow was trained on" if n else
              f"{people} released patients have images in the folder the flow was trained on")
    warnings.warn(reason + ": what the flow's weights memorised about them is outside the epsilon bound, so the "
                  "release states no formal guarantee; release people the flow never saw",
                  CalibrationOverlap, stacklevel=user_stacklevel())
    return reason, ("the flow's weights are a function of its training images, which the noise does not protect, "
                    "and every released image passes through them")


def training_overlap(flow_data: dict[str, Any] | None, source_digest: dict[str, Any] | None) -> str | None:
    """Warn (:class:`~medanon.anonymize.privacy.CalibrationOverlap`) and return a note when the dataset being
    released is the one the flow was trained (and its stored box calibrated) on.

    ``flow_data`` is the ``data`` record of a flow checkpoint (``blob["extra"]["data"]``: the source folder's
    digest, the subset and split it trained on); ``source_digest`` is :func:`medanon.runtime.files_digest` of the
    records being released. The digests cover whole folders, so a match means the released images include the
    flow's training subset (unless the caller released only the held-out split of that folder); a mismatch
    proves nothing about individual images of another folder.
    """
    src = (flow_data or {}).get("source") or {}
    if not src.get("sha256") or not source_digest or source_digest.get("sha256") != src["sha256"]:
        return None
    note = (f"the released images are the flow's own training data (dataset sha256 {src['sha256'][:12]}, subset "
            f"{flow_data.get('subset', 'all')!r}): what the flow's weights (and a clip box calibrated on them) "
            "memorised about these images is outside the epsilon bound")
    warnings.warn(note + "; release images the flow never saw (its held-out split, or train the flow on other data)",
                  CalibrationOverlap, stacklevel=user_stacklevel())
    return note


def phantom_overlap(flow_data: dict[str, Any] | None, flow_sha256: str | None, released) -> tuple[str, str] | None:
    """The withdrawal ``(reason, why)`` of a phantom release whose synthetic people the flow was trained on (the same
    phantom seed and settings, patients within its count: :mod:`medanon.phantoms.provenance`), else None. The
    training phantom is the one the flow's run recorded, or, for a shipped flow, the one it was trained on. Warns
    :class:`~medanon.anonymize.privacy.CalibrationOverlap` when any released patient is one of them."""
    from medanon.models_shipped import shipped_name
    from medanon.phantoms.provenance import shared_people, training_phantom

    trained = training_phantom(flow_data, shipped_name(flow_sha256) if flow_sha256 else None)
    shared = shared_people(trained, getattr(released, "root", None), [r.patient_id for r in released.records])
    if not shared:
        return None
    # a count, never the ids: the reason goes into the public manifest
    reason = (f"{len(shared)} released patients are people of the phantom the flow was trained on (seed "
              f"{trained['seed']}, {trained['patients']} patients)")
    warnings.warn(reason + ": what the flow's weights memorised about them is outside the epsilon bound, so the "
                  "release states no formal guarantee; make the phantom with another seed",
                  CalibrationOverlap, stacklevel=user_stacklevel())
    return reason, ("a phantom's patients are fixed by its seed and settings, so these are the flow's training "
                    "people, and the noise does not cover what the flow's weights hold of them")


def split_overlap(flow_data: dict[str, Any] | None, released) -> tuple[tuple[str, str] | None, str | None]:
    """Whether a release that is a *part* of a folder (one split of it) holds people the flow was trained on, when
    that folder is the one the flow's run read: ``(withdrawal or None, what was compared or None)``.

    A flow records the digest of its whole folder and, by id, patient and labels, of the training records its
    split chose (``records.train``; :mod:`medanon.cli.train_flow`). The split is recomputed from the recorded
    settings on the released part's folder; when it reproduces the recorded digest, the released records are
    compared with the flow's training records by patient. When it does not (the folder was read with other
    options), medanon cannot tell which of the folder's images trained the flow and withdraws the guarantee. A
    release that is not part of the flow's folder: ``(None, None)`` (nothing compared). Warns
    :class:`~medanon.anonymize.privacy.CalibrationOverlap` with a withdrawal."""
    from medanon.data.records import records_digest
    from medanon.data.splits import split_records
    from medanon.runtime import files_digest

    src = (flow_data or {}).get("source") or {}
    folder = getattr(released, "folder_records", None)
    if not src.get("sha256") or not folder or getattr(released, "root", None) is None:
        return None, None
    if files_digest([r.path for r in folder], root=released.root)["sha256"] != src["sha256"]:
        return None, None
    split = flow_data.get("split") or {}
    train = folder
    if flow_data.get("subset", "all") == "train":
        train = split_records(folder, val=split.get("val", 0.15), test=split.get("test", 0.15),
                              seed=split.get("seed", 0), stratify=split.get("stratify", ""))["train"]
    where = flow_data.get("where") or {}
    train = [r for r in train if all(r.labels.get(n) == v for n, v in where.items())]
    recorded = (flow_data.get("records") or {}).get("train")
    if recorded and records_digest(train) == recorded:
        trained = {r.patient_id for r in train}
        people = len({r.patient_id for r in released.records} & trained)
        checked = (f"compared by patient with the flow's training split, recomputed from its recorded settings "
                   f"({len(train)} images, matching the recorded digest)")
        if not people:
            return None, checked
        reason = f"{people} released patients are among the flow's training patients (the same folder and split)"
    else:
        checked = "its training split could not be recomputed"
        reason = ("the released images are part of the folder the flow was trained on, and its training split could "
                  "not be recomputed (the folder was read with other options), so medanon cannot rule out that they "
                  "trained it")
    warnings.warn(reason + ": what the flow's weights memorised about them is outside the epsilon bound, so the "
                  "release states no formal guarantee; release patients the flow never saw (its held-out split)",
                  CalibrationOverlap, stacklevel=user_stacklevel())
    return (reason, "the flow's weights are a function of its training images, which the noise does not protect, "
                    "and every released image passes through them"), checked
