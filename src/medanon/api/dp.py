"""ε-LDP releases as Python functions: ``dpglow`` (in a GLOW latent) and ``ldp_image`` (on pixels).

Both build a privatiser (:class:`~medanon.anonymize.dpglow.DPGlow`,
:class:`~medanon.anonymize.ldp_image.ImageLDP`) and hand it to :func:`ldp_release`, the one function
the command line calls too. ``epsilon`` is keyword-only and has no default. The clip box is public
(data-independent) by default. Settings that weaken or void the guarantee warn with a
:class:`~medanon.anonymize.privacy.PrivacyWarning` (a budget too large to protect an image, seeded
noise, a box calibrated on the released images, releasing a flow's own training data) or are refused
(noise without clipping).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medanon.anonymize.privacy import DataDependentRelease, NoFormalGuarantee
from medanon.api._inputs import at_model_size, dataset_arg, device_arg, memory_range, model_arg, number
from medanon.config import validate
from medanon.data.overlap import COMPARED
from medanon.errors import ConfigError, user_stacklevel

if TYPE_CHECKING:
    from medanon.data.dataset import ImageDataset
    from medanon.data.inputs import DataLike
    from medanon.release.release import Release

CLIP_BOXES = ("public", "calibrated")
CENTERS = ("zero", "midrange")


@dataclass
class LDPConfig:
    """The settings of an ε-LDP release (``medanon anonymize dpglow|ldp-image --config FILE --set key=value``)."""

    epsilon: float | None = None                # privacy budget per image (per element with per_element): required
    per_element: bool = False                   # epsilon is per element; the image budget is epsilon * D
    clip_box: str = "public"                    # public (data-independent) | calibrated (training min/max, leaks)
    alpha: float | None = None                  # clip width / box range (Eq. 11); None: 0.4, or 1 for the pixel box
    clip: bool = True                           # clip before and after the noise (off only with epsilon=inf)
    center: str = "zero"                        # DP-GLOW's clip-box centre: zero (prior mean) | midrange (Eq. 12)
    batch: int = 32                             # images per batch (speed only)

    def validate(self) -> None:
        if self.epsilon is None:
            raise ConfigError("no epsilon given: the privacy budget has no default",
                              fix="give epsilon=, e.g. epsilon=1 (per image)")
        check_budget(self.epsilon, self.clip)
        number("alpha", self.alpha, allow_none=True)
        if not self.clip and self.alpha is not None:
            raise ConfigError("alpha= sets the width of the clip box, and clip=False clips nothing: it would change "
                              "nothing", fix="leave alpha= out with clip=False")
        if self.clip_box not in CLIP_BOXES:
            raise ConfigError(f"clip_box={self.clip_box!r} is not one of {', '.join(CLIP_BOXES)}")
        if self.center not in CENTERS:
            raise ConfigError(f"center={self.center!r} is not one of {', '.join(CENTERS)}")
        if self.batch < 1:
            raise ConfigError(f"batch={self.batch} must be at least 1")


_L = LDPConfig


def check_budget(epsilon: float, clip: bool) -> None:
    """A positive budget; clipping off only without noise (epsilon = inf)."""
    number("epsilon", epsilon)
    if not epsilon > 0:
        raise ConfigError(f"epsilon={epsilon!r} is not a positive budget", fix="e.g. epsilon=100, per_element=True")
    if not clip and math.isfinite(epsilon):
        raise ConfigError("clip=False is only allowed with epsilon=inf (noise without clipping has unbounded "
                          "sensitivity)", fix="keep clip=True, or use epsilon=math.inf for the no-noise baseline")


def _batches(source, *, batch: int = 64):
    """A dataset's images in batches (N, C, H, W), read batch by batch (the calibration's min and max are running
    statistics, so no more than one batch is ever in memory)."""
    import torch

    for start in range(0, len(source), batch):
        yield torch.stack([source.load(i)["image"] for i in range(start, min(start + batch, len(source)))])


def _calibration_set(source, ds, value_range=None, *, like=None):
    """``calibrate_on`` as a dataset (a folder, images in memory, ...: :func:`medanon.data.as_dataset`), its values
    read as the released images' are (``value_range`` where both are images in memory of one kind, ``like`` being
    the released images as given) and of their size and channels."""
    from medanon.data.inputs import as_dataset

    cal = as_dataset(source, argument="calibrate_on", size=ds.size,
                     value_range=memory_range(source, value_range, like=like))
    theirs, ours = getattr(cal, "modality", None), getattr(ds, "modality", None)
    on_disk = getattr(cal, "root", None) is not None and getattr(ds, "root", None) is not None   # read, not guessed
    if on_disk and theirs and ours and theirs != ours:
        raise ConfigError(f"the calibrate_on images are {theirs} images, the released data {ours} images: the clip "
                          "box would be fitted on another kind of image",
                          fix=f"calibrate on {ours} images (normally the training set of the released data)")
    if (cal.size, cal.channels) != (ds.size, ds.channels):
        raise ConfigError(f"the calibrate_on images are {cal.channels}x{cal.size}px, the released data "
                          f"{ds.channels}x{ds.size}px", fix="calibrate on images of the released data's size and "
                                                             "channels (normally the training set)")
    return cal


def _calibrate(batches, *, codec=None):
    """Per-element min and max of the pixels, or with ``codec`` of the flow latents ``eps`` (paper steps 3–4)."""
    from medanon.anonymize.ldp import calibrate

    if codec is None:
        return calibrate((b.flatten(1) for b in batches), space="pixel")
    dev = next(codec.parameters()).device
    return calibrate((codec.encode(b.to(dev)) for b in batches), space="glow-eps")


CALIBRATED_ON_RELEASE = ("the clip box was calibrated on the released images",
                         "each released image's own extremes shape the clip box every image is clipped to, so one "
                         "image changes how all the others are released; the bound holds only for a box fixed "
                         "before the released images are seen")


def _overlap(ds, cal_set) -> list[tuple[str, str]]:
    """The withdrawal of a release some of whose images are among the calibration images (none: empty)."""
    from medanon.anonymize.ldp_calibration import calibration_overlaps

    n, people = calibration_overlaps(ds, cal_set)
    if n:
        return [(f"{n} released images are among the images the clip box was calibrated on",
                 "those images' own extremes shape the clip box, so the bound does not hold for them")]
    return [] if not people else [
        (f"{people} released patients have other images among those the clip box was calibrated on",
         "their other images' extremes shape the clip box, so the bound does not hold for them (per patient)")]


def patient_budget(ds, epsilon_image: float) -> dict[str, Any]:
    """The most images one patient has in ``ds`` and the budget that patient is protected at (basic composition);
    unknown where the source has no patient ids (one person may have several images there)."""
    from collections import Counter

    from medanon.data.inputs import patients_known

    if not patients_known(ds):
        return {"max_images_per_patient": "unknown: the source has no patient ids",
                "epsilon_patient_max": "unknown: the source has no patient ids, so one person may have several "
                                       "released images, each adding epsilon_image"}
    n = max(Counter(r.patient_id for r in ds.records).values())
    return {"max_images_per_patient": n, "epsilon_patient_max": n * epsilon_image}


def per_patient(privacy: dict[str, Any], ds) -> dict[str, Any]:
    """An ε-LDP statement completed for the patients of ``ds``: the most images one patient has and the budget that
    patient is protected at (the mechanism's statement gives the assumptions it rests on: correct patient ids, this
    the only release of these people; the first is dropped where the source has none) and, where that budget is
    above :data:`~medanon.anonymize.ldp.WEAK_EPSILON` although the per-image one is not, a
    :class:`~medanon.anonymize.privacy.WeakBudget` warning and ``vacuous_patient``."""
    from medanon.anonymize.ldp import PATIENT_IDS, WEAK_EPSILON
    from medanon.anonymize.privacy import WeakBudget
    from medanon.data.inputs import patients_known

    out = {**privacy, **patient_budget(ds, privacy["epsilon_image"])}
    if not patients_known(ds):                      # no ids: nothing is assumed of them (the budget is unknown)
        out["assumptions"] = [a for a in privacy.get("assumptions", []) if a != PATIENT_IDS]
    most = out.get("epsilon_patient_max")
    if isinstance(most, float) and most > WEAK_EPSILON and not privacy.get("vacuous"):
        out["vacuous_patient"] = True
        warnings.warn(f"epsilon = {privacy['epsilon_image']:.4g} per image, but a patient with "
                      f"{out['max_images_per_patient']} images is protected at {most:.4g}: above "
                      f"{WEAK_EPSILON:g}, the bound protects that patient's images together in name only; release "
                      "fewer images per patient or lower epsilon", WeakBudget, stacklevel=user_stacklevel())
    return out


def ldp_release(ds: ImageDataset, privatiser, *, method: str, params: dict[str, Any], models: dict[str, str],
                noise_seed: int | None = None, batch: int = 32, release_labels: str | Sequence[str] | None = None,
                device=None, notes: Sequence[str] = (), reads: Sequence[Any] = (),
                withdrawn: Sequence[tuple[str, str]] = ()) -> Release:
    """A :class:`~medanon.release.release.Release` of ``ds`` in which every image goes through ``privatiser``.
    ``reads``: other data the method read (a calibration dataset), never to be written over. ``withdrawn``:
    ``(reason, why)`` pairs, one for each way the mechanism depends on the released images themselves (a clip box
    calibrated on them, a flow trained on them): the release then states no guarantee, with every reason.

    One record per image (local DP: each record stands for its own source). ``noise_seed`` (testing
    only) makes the noise reproducible from the seed: the release then states "no formal guarantee"
    and :class:`~medanon.anonymize.privacy.NoFormalGuarantee` is warned (the seed is not recorded).
    """
    import torch

    from medanon.anonymize.ldp import SEEDED, release_dataset, seeded_privacy
    from medanon.anonymize.ldp_statement import withdrawn_privacy
    from medanon.release.labels import release_labels as choose_labels
    from medanon.release.release import Release, reading_params

    labels = choose_labels(ds, release_labels)
    params = {**params, **reading_params(ds)}
    privacy = privatiser.privacy()
    if privacy.get("guarantee") == "epsilon-LDP":        # the per-patient budget of this release, not only the rule
        privacy = per_patient(privacy, ds)
    if noise_seed is not None and privacy.get("guarantee") == "epsilon-LDP":
        warnings.warn(f"noise_seed={noise_seed}: the noise is reproducible, so the release states '{SEEDED}' (the "
                      "seed is not recorded). Use this for testing only; leave the seed out for a release",
                      NoFormalGuarantee, stacklevel=user_stacklevel())
        privacy = seeded_privacy(privacy)
    if withdrawn and privacy.get("guarantee") == "epsilon-LDP":
        privacy = withdrawn_privacy(privacy, reason="; ".join(r for r, _ in withdrawn),
                                    why="; ".join(w for _, w in withdrawn))
    elif withdrawn:                              # already without a guarantee: more reasons
        privacy = {**privacy, "why_no_guarantee": [*privacy.get("why_no_guarantee", []), *(w for _, w in withdrawn)]}
    dev = torch.device(device) if device is not None else torch.device("cpu")
    codec = getattr(privatiser, "codec", None)

    def privatise(images, generator=None):
        """DP-GLOW's images, each with whether the inverse flow diverged on it (kept per record: the manifest's
        ``quality`` counts resumed records too); other privatisers' images alone."""
        if not hasattr(privatiser, "privatise"):
            return privatiser(images, generator=generator)
        out, diverged = privatiser.privatise(images, generator=generator)
        return out, [{"diverged": bool(d)} for d in diverged.tolist()]

    def produce(writer, progress: bool) -> dict[str, Any]:
        before = getattr(codec, "diverged", 0)
        written = release_dataset(ds, privatise, writer, batch=batch, device=dev, noise_seed=noise_seed,
                                  progress=progress)
        diverged = getattr(codec, "diverged", 0) - before
        if diverged:
            holds = ("post-processing: the guarantee holds" if privacy.get("guarantee") == "epsilon-LDP"
                     else "post-processing")
            zero = str(privacy.get("clip_center", "")).startswith("c_k = 0")
            warnings.warn(f"the inverse flow diverged on {diverged} images released in this run (decoded values "
                          "beyond ±4 or not finite); each was decoded from its privatised latent shrunk towards "
                          f"the prior's mode ({holds}) and may look averaged (the manifest's quality records "
                          "the release's total). " + _divergence_advice(privacy.get("epsilon_element"), zero),
                          UserWarning, stacklevel=user_stacklevel())
        return {"records": len(writer), "written": written, "diverged": diverged,
                "epsilon_image": privacy["epsilon_image"], "epsilon_element": privacy.get("epsilon_element"),
                "D": privacy["D"]}

    from medanon.outputs import dataset_inputs

    return Release(method=method, dataset=ds, params=params, privacy=privacy, labels=labels, produce=produce,
                   seeds={}, models=models, notes=list(notes), reproducible=noise_seed is not None,
                   # a testing seed, in the private journal and mapping only: a resume with another is refused
                   private={} if noise_seed is None else {"noise_seed": int(noise_seed)},
                   inputs=[p for r in reads for p in dataset_inputs(r)])


def _divergence_advice(epsilon_element: float | None, zero: bool) -> str:
    """What to do about latents the inverse flow diverged on: nothing a flow can change where the noise (Laplace
    scale: the clip box's width / epsilon per element) dwarfs the box; else the zero centre or a better flow.

    >>> _divergence_advice(1 / 4096, True)[:46]
    'Expected at this epsilon: the noise is 4,096 c'
    """
    if epsilon_element is not None and 0 < epsilon_element < 1:
        return (f"Expected at this epsilon: the noise is {1 / epsilon_element:,.0f} clip-box widths per latent element "
                "(Laplace scale: the box's width / epsilon per element), far outside anything a flow is trained on, "
                "whatever the flow; the images then carry almost nothing of their sources (docs/dpglow.md)")
    return "Try " + ("" if zero else "center='zero', or ") + "a better-trained flow (docs/dpglow.md)."


def _flow_people(trained_on: dict | None, name: str | None) -> dict[str, Any]:
    """The flow's training patients as digests (``medanon train flow`` records them), for an evaluation to tell
    whether the flow saw its controls (:mod:`medanon.evaluate.model_people`); empty where none are recorded."""
    from medanon.data.training_people import public_people

    people = public_people([{"model": name or "the flow", **(trained_on or {}),
                             "images": (trained_on or {}).get("train_images")}])   # keyed: the manifest is public
    return {"flow_trained_people": {"trained_people": people}} if people else {}


def _flow_checksum(codec) -> dict[str, str]:
    """The flow's checkpoint sha256, or for a flow given in memory its weights' (``glow:weights``)."""
    from medanon.checkpoint import weights_sha256

    if codec.sha256:
        return {"glow": codec.sha256}
    weights = weights_sha256(codec)
    return {"glow:weights": weights} if weights else {}


def _params(epsilon: float, per_element: bool, alpha: float | None, clip: bool, calibration) -> dict[str, Any]:
    return {"epsilon": epsilon if math.isfinite(epsilon) else "inf", "per_element": per_element, "alpha": alpha,
            "clip": clip, "clip_box": "public" if calibration.public else "calibrated",
            "calibration_sha256": calibration.checksum()}


def _check_box(clip_box: str, calibrate_on, center: str = "zero") -> None:
    """Refuse a calibrate_on the public box would not use (the user would believe the box calibrated), and a
    midrange centre, which on the public box (symmetric about 0) is the zero centre under another name."""
    if clip_box == "public" and calibrate_on is not None:
        raise ConfigError("calibrate_on is not used with clip_box='public' (the box depends on no data)",
                          fix="pass clip_box='calibrated' to calibrate the box on it, or leave calibrate_on out")
    if clip_box == "public" and center == "midrange":
        raise ConfigError("center='midrange' changes nothing with clip_box='public': the public box is symmetric "
                          "about 0, so its midpoint is the zero centre",
                          fix="leave center= out, or pass clip_box='calibrated' for the paper's Eq. 12 midpoint of a "
                              "box calibrated on training latents")


def load_flow_for(flow, device=None):
    """``flow`` as ``(GlowCodec, stored calibration or None, training-data record or None)``: a checkpoint path
    is loaded onto ``device``; a loaded codec brings what its checkpoint stored (``load_flow`` keeps both on it;
    a flow built in memory has neither); a triple (this function's result) is kept."""
    if isinstance(flow, tuple):
        return flow
    if isinstance(flow, (str, Path)):
        from medanon.train.flow import load_flow

        codec, stored, blob = load_flow(flow, map_location=device or "cpu")
        return codec, stored, (blob.get("extra") or {}).get("data")
    return flow, getattr(flow, "calibration", None), getattr(flow, "trained_on", None)


def dpglow(ds: DataLike, *, epsilon: float, flow=None, per_element: bool = _L.per_element, clip_box: str = _L.clip_box,
           alpha: float | None = _L.alpha, clip: bool = _L.clip, center: str = _L.center, calibrate_on=None,
           noise_seed: int | None = None, batch: int = _L.batch, release_labels: str | Sequence[str] | None = None,
           patient_ids=None, labels=None, modality: str | None = None, value_range=None, device=None,
           flow_training=None) -> Release:
    """DP-GLOW: the Laplace mechanism in a GLOW flow's standardised latent, ε-LDP per image.

    ``epsilon``: the privacy budget per image, or per latent element with ``per_element=True`` (the
    image budget is then ``epsilon * D``, D = C*H*W: the paper's "ε = 10² · H · W"); ``math.inf``
    adds no noise (a reconstruction baseline, no privacy). ``ds``: an opened dataset, a folder, or images in
    memory with optional ``patient_ids=``, ``labels=``, ``modality=`` (:func:`medanon.data.as_dataset`).
    ``flow``: a flow checkpoint by name on ``medanon models`` or path, or a loaded
    :class:`~medanon.models.glow.GlowCodec`; default: the shipped flow for the modality (X-ray
    ``glow-xray64.pt``, fundus ``glow-fundus64.pt``). The images must have its size. ``clip_box``:
    ``public`` (default: the data-independent [-4, 4] per element) or ``calibrated`` (the paper: per-element
    min and max of training latents, whose leakage the bound does not cover), from ``calibrate_on`` (a
    dataset, folder or images: the flow's training set), else the statistics stored in the flow, else the
    released images themselves (a :class:`~medanon.anonymize.privacy.DataDependentRelease` warning).
    ``alpha``: clip width as a fraction of the box's range (Eq. 11; default 0.4).
    ``clip=False`` only with ``epsilon=inf``. ``center``: ``zero`` (default) or ``midrange`` (Eq. 12).
    ``noise_seed``: testing only (see :func:`ldp_release`). Releasing the flow's own training data warns
    (:class:`~medanon.anonymize.privacy.CalibrationOverlap`) and states no guarantee; ``flow_training``: the
    folder the flow was trained on (checked against its recorded digest), whose images are compared with the
    released ones one by one, so that released people among the flow's training people withdraw the guarantee
    too (without it, the statement assumes there are none). Returns a
    :class:`~medanon.release.release.Release`.

    Example (a tiny untrained flow; the shipped one is ``glow-xray64``):
        >>> import warnings, medanon
        >>> from medanon.models.glow import Glow, GlowCodec, GlowConfig
        >>> flow = GlowCodec(Glow(GlowConfig(resolution=16, channels=1, levels=2, depth=1, hidden=8)))
        >>> root = medanon.make_phantom(modality="xray", patients=3)
        >>> ds = medanon.open_dataset(root, size=16)
        >>> rel = medanon.anonymize.dpglow(ds, epsilon=5.0, flow=flow)
        >>> rel.privacy["epsilon_image"], rel.privacy["D"], rel.params["clip_box"]
        (5.0, 256, 'public')
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     rel = medanon.anonymize.dpglow(ds, epsilon=100.0, per_element=True, flow=flow, clip_box="calibrated")
        >>> sorted({w.category.__name__ for w in caught})
        ['DataDependentRelease', 'WeakBudget']
    """
    from medanon.anonymize.dpglow import DPGlow, training_overlap
    from medanon.anonymize.ldp import ClipCalibration
    from medanon.runtime import files_digest

    validate(LDPConfig(epsilon=epsilon, per_element=per_element, clip_box=clip_box, alpha=alpha, clip=clip,
                       center=center, batch=batch))
    _check_box(clip_box, calibrate_on, center)
    epsilon, alpha = float(epsilon), None if alpha is None else float(alpha)   # numpy scalars: plain floats
    number("noise_seed", noise_seed, integer=True, allow_none=True)   # before the flow or the calibration set
    device = device_arg(device)
    given, kw = ds, {"method": "dpglow", "patient_ids": patient_ids, "labels": labels, "modality": modality,
                     "value_range": value_range}
    ds = dataset_arg(ds, **kw)
    used: dict[str, Any] = {}
    if isinstance(flow, tuple) and len(flow) == 3 and {"sha256", "config"} <= set(flow[2] or ()):
        flow = flow[0]          # load_flow(path)'s triple: its codec carries the calibration and the data record
    if not isinstance(flow, tuple):
        flow = model_arg(flow, role="dpglow-flow", ds=ds, argument="flow", method="dpglow", used=used)
    codec, stored, trained_on = load_flow_for(flow, device)
    cfg = codec.flow.cfg
    ds = at_model_size(given, ds, cfg.resolution, **kw)
    from medanon.codecs.stylegan import check_model_fits

    modality = (trained_on or {}).get("modality")            # recorded by `medanon train flow`
    check_model_fits(flow if isinstance(flow, (str, Path)) else None,
                     {"modality": modality, "modality_recorded": modality is not None, "channels": cfg.channels,
                      "resolution": cfg.resolution}, ds)
    notes = []
    withdrawn: list[tuple[str, str]] = []
    reads: list[Any] = []                       # other data read: never to be written over
    if trained_on is not None and ds.root is not None:             # images in memory: no files to compare
        note = training_overlap(trained_on, files_digest([r.path for r in ds.records], root=ds.root))
        notes += [note] if note else []
        if note:
            withdrawn.append(("the released images are the flow's own training data",
                              "the flow's weights are a function of its training images, which the noise does not "
                              "protect, and every released image passes through them"))
    from medanon.anonymize.dpglow import phantom_overlap, split_overlap

    same_people = phantom_overlap(trained_on, codec.sha256, ds)
    withdrawn += [same_people] if same_people else []
    in_split, split_checked = split_overlap(trained_on, ds)        # one split of the folder the flow trained on
    withdrawn += [in_split] if in_split else []
    notes += [f"flow training data: the released images are part of the folder the flow was trained on; "
              f"{split_checked}"] if split_checked else []
    box_checked = split_checked if split_checked and not in_split else None
    if flow_training is not None:
        from medanon.anonymize.dpglow import folder_overlap
        from medanon.data.inputs import as_dataset

        training = as_dataset(flow_training, argument="flow_training", size=ds.size)
        reads.append(training)
        seen = folder_overlap(trained_on, training, ds)
        withdrawn += [seen] if seen else []
        notes.append(f"flow_training: {training.root} (the flow's recorded training folder) compared image by image "
                     "with the released images" + (f": {seen[0]}" if seen else ": none of them is in it"))
        box_checked = None if seen else f"the flow's training folder given as flow_training, {COMPARED}"
    if clip_box == "public":
        calibration = ClipCalibration.public_box("glow-eps", codec.dims)
    elif calibrate_on is not None:
        cal_set = _calibration_set(calibrate_on, ds, value_range, like=given)
        reads.append(cal_set)
        withdrawn += _overlap(ds, cal_set)
        calibration = _calibrate(_batches(cal_set), codec=codec)
        box_checked = COMPARED
    elif stored is not None:
        calibration = stored
        notes.append(f"calibration: the flow's training set ({stored.count} images, sha256 "
                     f"{stored.checksum()[:12]})")
    else:
        warnings.warn("the flow holds no calibration statistics and no calibrate_on was given: calibrating on the "
                      "images being released, so the release states no formal guarantee (each image's extremes "
                      "shape the box every image is clipped to)", DataDependentRelease, stacklevel=user_stacklevel())
        calibration = _calibrate(_batches(ds), codec=codec)
        withdrawn.append(CALIBRATED_ON_RELEASE)
    dp = DPGlow(codec, calibration, epsilon=epsilon, alpha=alpha, per_element=per_element, clip=clip, center=center)
    dp.mechanism.calibration_checked = box_checked
    return ldp_release(ds, dp, method="dpglow",
                       params={**_params(epsilon, per_element, alpha, clip, calibration), "center": center,
                               **({"model_files": used} if used else {}),
                               **_flow_people(trained_on, (used.get("flow") or {}).get("file"))},
                       models=_flow_checksum(codec), noise_seed=noise_seed, batch=batch,
                       release_labels=release_labels, device=device, notes=notes,
                       reads=reads, withdrawn=withdrawn)


def ldp_image(ds: DataLike, *, epsilon: float, per_element: bool = _L.per_element, clip_box: str = _L.clip_box,
              alpha: float | None = _L.alpha, clip: bool = _L.clip, calibrate_on=None, noise_seed: int | None = None,
              batch: int = _L.batch, release_labels: str | Sequence[str] | None = None, patient_ids=None,
              labels=None, modality: str | None = None, value_range=None, device=None) -> Release:
    """Image-domain LDP (DP-GLOW's baseline): the Laplace mechanism on clipped pixels, ε-LDP per image.

    Arguments as in :func:`dpglow`, on pixel values (D = C*H*W) instead of a flow latent. The public
    box is [-1, 1] (``alpha`` default 1); ``clip_box="calibrated"`` takes per-pixel bounds from
    ``calibrate_on`` (a dataset or image tensor, normally the training set), else from the released
    images (a :class:`~medanon.anonymize.privacy.DataDependentRelease` warning; ``alpha`` default 0.4).

    Example:
        >>> import warnings, medanon
        >>> root = medanon.make_phantom(modality="xray", patients=3)
        >>> ds = medanon.open_dataset(root, size=16)
        >>> rel = medanon.anonymize.ldp_image(ds, epsilon=8.0)
        >>> rel.method, rel.privacy["guarantee"], len(list(rel.images()))
        ('ldp-image', 'epsilon-LDP', 3)
    """
    from medanon.anonymize.ldp import ClipCalibration
    from medanon.anonymize.ldp_image import ImageLDP

    validate(LDPConfig(epsilon=epsilon, per_element=per_element, clip_box=clip_box, alpha=alpha, clip=clip,
                       batch=batch))
    epsilon, alpha = float(epsilon), None if alpha is None else float(alpha)   # numpy scalars: plain floats
    number("noise_seed", noise_seed, integer=True, allow_none=True)   # before the calibration set is read
    device = device_arg(device)
    given = ds
    ds = dataset_arg(ds, method="ldp_image", patient_ids=patient_ids, labels=labels, modality=modality,
                     value_range=value_range)
    withdrawn: list[tuple[str, str]] = []
    _check_box(clip_box, calibrate_on)
    reads: list[Any] = []
    if clip_box == "public":
        calibration = ClipCalibration.public_box("pixel", ds.channels * ds.size * ds.size)
    elif calibrate_on is None:
        warnings.warn("no calibrate_on: the clip bounds come from the images being released, so the release states "
                      "no formal guarantee (each image's extremes shape the box every image is clipped to). Pass "
                      "other patients' images, or use the public box.", DataDependentRelease,
                      stacklevel=user_stacklevel())
        calibration = _calibrate(_batches(ds))
        withdrawn.append(CALIBRATED_ON_RELEASE)
    else:
        cal_set = _calibration_set(calibrate_on, ds, value_range, like=given)
        reads.append(cal_set)
        withdrawn += _overlap(ds, cal_set)
        calibration = _calibrate(_batches(cal_set))
    ldp = ImageLDP(calibration, epsilon=epsilon, alpha=alpha, per_element=per_element, clip=clip)
    ldp.mechanism.calibration_checked = COMPARED if calibrate_on is not None and clip_box != "public" else None
    return ldp_release(ds, ldp, method="ldp-image", params=_params(epsilon, per_element, alpha, clip, calibration),
                       models={}, noise_seed=noise_seed, batch=batch, release_labels=release_labels, device=device,
                       reads=reads, withdrawn=withdrawn)
