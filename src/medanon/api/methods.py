"""GMIA, Snow and VS-Snow as Python functions: ``gmia``, ``snow``, ``vs_snow``.

Their modules write releases themselves (:func:`medanon.anonymize.gmia_release.gmia_release`,
:func:`medanon.anonymize.snow.snow_sweep`, both through the release writer); these functions plan the
release and hand it to them on :meth:`~medanon.release.release.Release.save`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medanon.anonymize.gmia import GMIAConfig as _G
from medanon.anonymize.snow_release import SnowConfig, VSSnowConfig
from medanon.api._inputs import at_model_size, dataset_arg, device_arg, model_arg, number
from medanon.errors import ConfigError

if TYPE_CHECKING:
    from medanon.data.dataset import ImageDataset
    from medanon.data.inputs import DataLike
    from medanon.release.release import Release


def _gmia_config(config, given: dict[str, Any]):
    """``config=`` (a GMIAConfig or a mapping of its fields) when no field is also given as a keyword: which of
    the two was meant would be a guess."""
    from dataclasses import fields

    from medanon.anonymize.gmia import GMIAConfig
    from medanon.config import from_dict
    from medanon.errors import a_type

    if isinstance(config, Mapping):
        config = from_dict(GMIAConfig, dict(config), where="config")
    elif not isinstance(config, GMIAConfig):
        raise ConfigError(f"config= is {a_type(config)}; it takes a GMIAConfig or a mapping of its fields",
                          fix="pass config=medanon.anonymize.gmia.GMIAConfig(steps=...) or config={'steps': ...}")
    defaults = {f.name: f.default for f in fields(GMIAConfig)}
    twice = sorted(k for k, v in given.items() if v != defaults[k] and v != getattr(config, k))
    if twice:
        raise ConfigError(f"{', '.join(f'{k}=' for k in twice)} given both as keyword and in config= "
                          f"({', '.join(f'{k}={getattr(config, k)!r}' for k in twice)})",
                          fix="set each setting once: in config= (dataclasses.replace(config, ...)) or as a keyword")
    return config


def _renamed_batch(batch: int | None, batch_size: int | None, *, default: int, function: str) -> int:
    """``batch=`` (None: ``default``), or the former name ``batch_size=`` with a :class:`FutureWarning` (refused
    when both are given and differ)."""
    if batch_size is None:
        return default if batch is None else batch
    if batch is not None and batch != batch_size:
        raise ConfigError(f"{function}: batch={batch!r} and batch_size={batch_size!r} name one setting",
                          fix="pass batch= alone")
    warnings.warn(f"{function}: batch_size= is now batch=, as in every medanon.anonymize function; batch_size= "
                  "will be removed", FutureWarning, stacklevel=3)
    return batch_size


def gmia(ds: DataLike, *, model=None, identity=None, utility=None, losses: str = _G.losses, steps: int = _G.steps,
         lr: float = _G.lr, margin: float = _G.margin, lambda_id: float = _G.lambda_id, lambda_ut: float = _G.lambda_ut,
         latent_space: str = _G.latent_space, batch: int | None = None, config=None,
         release_labels: str | Sequence[str] | None = None, patient_ids=None, labels=None,
         modality: str | None = None, value_range=None, device=None, batch_size: int | None = None) -> Release:
    """GMIA: each image's latent is optimised away from its identity while its utility features stay close.

    NO formal privacy guarantee: measure it with :func:`medanon.evaluate` (linkability, singling out).
    ``ds``: an opened dataset, a folder, or images in memory with optional ``patient_ids=``, ``labels=``,
    ``modality=`` (:func:`medanon.data.as_dataset`). ``model``: a co-trained codec or a ReStyle codec;
    ``identity`` (E_id, for the identity loss) and ``utility`` (E_ut, a classifier on the utility label, for
    the utility loss): each a name on ``medanon models`` (with or without ``.pt``), a path, or a loaded
    network (:class:`~medanon.anonymize.gmia.IdentityEncoder` / :class:`~medanon.anonymize.gmia.UtilityEncoder`);
    left out, the shipped default for the data's modality (fundus: ``cotrained-map-fundus64.pt``,
    ``identity-fundus64.pt``, ``classifier-grade-fundus64.pt``; X-ray: ``cotrained-map-xray64.pt``,
    ``identity-xray64.pt``, ``classifier-pneumonia-xray64.pt``; E_id and E_ut only where ``losses`` uses them).
    The images must have the codec's size. ``losses`` (``id+ut``, ``id``, ``ut``: GMIA Table 2), ``steps``, ``lr``,
    ``margin``, ``lambda_id``, ``lambda_ut``, ``latent_space`` (``w``, the paper's, or ``w+``), ``batch`` (the field
    ``batch_size``, default 16; ``batch_size=`` is its former name): the fields of
    :class:`~medanon.anonymize.gmia.GMIAConfig` and their defaults (or pass a whole ``config=``: a GMIAConfig or a
    mapping of its fields; a setting given both there and as a keyword is refused). Settings that remove little
    identity warn when the release is saved.

    Example (see tests/test_api.py for a run with tiny networks):
        >>> import inspect, medanon
        >>> inspect.signature(medanon.anonymize.gmia).parameters["steps"].default
        10
    """
    from medanon.anonymize.gmia import GMIA, GMIAConfig, IdentityEncoder, UtilityEncoder
    from medanon.anonymize.gmia_release import gmia_statement
    from medanon.anonymize.ldp import release_dataset
    from medanon.api.ksame import check_codec_matches, load_codec_for
    from medanon.config import validate
    from medanon.release.labels import release_labels as choose_labels
    from medanon.release.release import Release

    settings = {"losses": losses, "steps": steps, "lr": lr, "margin": margin, "lambda_id": lambda_id,
                "lambda_ut": lambda_ut, "latent_space": latent_space,
                "batch_size": _renamed_batch(batch, batch_size, default=_G.batch_size, function="gmia")}
    cfg = GMIAConfig(**settings) if config is None else _gmia_config(config, settings)
    validate(cfg)
    used_losses = cfg.losses.split("+")
    idle = [name for name, given, loss in (("identity", identity is not None, "id"),
                                            ("margin", margin != _G.margin, "id"),
                                            ("lambda_id", lambda_id != _G.lambda_id, "id"),
                                            ("utility", utility is not None, "ut"),
                                            ("lambda_ut", lambda_ut != _G.lambda_ut, "ut"))
            if given and loss not in used_losses]
    if idle:
        raise ConfigError(f"losses={cfg.losses!r} does not optimise the loss of {', '.join(f'{n}=' for n in idle)}: "
                          "it would change nothing", fix=f"leave {', '.join(f'{n}=' for n in idle)} out, or use "
                                                         "losses='id+ut'")
    given, kw = ds, {"method": "gmia", "patient_ids": patient_ids, "labels": labels, "modality": modality,
                     "value_range": value_range}
    ds = dataset_arg(ds, **kw)
    used: dict[str, Any] = {}
    model = model_arg(model, role="gmia-codec", ds=ds, argument="model", method="gmia", used=used)
    if identity is not None or "id" in cfg.losses.split("+"):
        identity = model_arg(identity, role="gmia-identity", ds=ds, argument="identity", method="gmia", used=used)
    if utility is not None or "ut" in cfg.losses.split("+"):
        utility = model_arg(utility, role="gmia-utility", ds=ds, argument="utility", method="gmia", used=used)
    device = device_arg(device)
    codec = load_codec_for(model, device)
    ds = at_model_size(given, ds, getattr(getattr(codec, "generator", None), "img_resolution", None), **kw)
    dev = device if device is not None else getattr(codec, "device", "cpu")
    if isinstance(identity, (str, Path)):
        identity = IdentityEncoder.from_checkpoint(identity, map_location=dev)
    if isinstance(utility, (str, Path)):
        utility = UtilityEncoder.from_checkpoint(utility, map_location=dev)
    opt = GMIA(codec, identity=identity, utility=utility, cfg=cfg)
    check_codec_matches(ds, codec)
    from medanon.anonymize.gmia_release import check_networks

    check_networks(opt, ds)          # a network of the other modality is refused now; its doubts warn on save
    labels = choose_labels(ds, release_labels)

    def saver(out: Path, mapping: Path | None, overwrite: bool, progress: bool) -> dict[str, Any]:
        from medanon.anonymize.gmia_release import gmia_release

        _, outcome = gmia_release(ds, out, gmia=opt, labels=labels, mapping=mapping, overwrite=overwrite,
                                  progress=progress, extra_params={"model_files": used} if used else None)
        return {"records": len(ds), "optimisation_outcome": outcome}

    def produce(writer, progress: bool) -> dict[str, Any]:
        n = release_dataset(ds, lambda images, generator=None: opt.anonymise(images).images, writer,
                            batch=cfg.batch_size, device=opt.device, progress=progress)
        return {"records": n}

    params = {**cfg.params(), **({"model_files": used} if used else {})}
    # saved through gmia_release (its warnings, checksums and optimisation outcome); produce() only previews images
    # the statement as saved (its warning comes when the release is saved, through gmia_release)
    return Release(method="gmia", dataset=ds, params=params, privacy=gmia_statement(opt, ds, warn=False),
                   labels=labels, produce=produce, saver=saver)


def _snow_release(ds: ImageDataset, *, method: str, p: float, seed: int | None, release_labels, device, batch: int,
                  workers: int, model_files: dict[str, Any] | None = None, **kw) -> Release:
    import torch

    from medanon.anonymize.snow import parse_fill, snow_privacy, vs_snow_privacy
    from medanon.release.labels import release_labels as choose_labels
    from medanon.release.release import Release

    number("seed", seed, integer=True, allow_none=True)
    number("p", p)
    for name, value in (("batch", batch), ("workers", workers)):
        number(name, value, integer=True)
        if value < 1:
            raise ConfigError(f"{name}={value} must be at least 1", fix=f"leave {name}= out, or pass e.g. {name}=2")
    if not 0 < p <= 1:
        raise ConfigError(f"p={p!r} must be in (0, 1]", fix="the fraction of pixels replaced, e.g. p=0.1")
    if method == "vs-snow" and ds.channels != 3:
        raise ConfigError(f"vs_snow segments retinal vessels in colour fundus images; the dataset has {ds.channels} "
                          "channel(s)", fix="use snow for X-rays")
    labels = choose_labels(ds, release_labels)
    dev = device_arg(device) or torch.device("cpu")
    seeded = seed is not None
    if method == "snow":
        from medanon.anonymize.snow_release import check_changes_pixels

        check_changes_pixels([p], ds.size * ds.size, side=ds.size)
        privacy = snow_privacy(p, ds.size, ds.size, fill=parse_fill(kw["fill"], ds.channels)[0], seeded=seeded)
    else:
        privacy = vs_snow_privacy(p, kw["vessels"].describe(), seeded=seeded)

    def saver(out: Path, mapping: Path | None, overwrite: bool, progress: bool) -> dict[str, Any]:
        from medanon.anonymize.snow import snow_sweep

        snow_sweep(ds, out, method=method, ps=[p], seed=seed, labels=labels, mapping=mapping, device=dev,
                   batch_size=batch, workers=workers, overwrite=overwrite, progress=progress,
                   extra_params={"model_files": model_files} if model_files else None, **kw)
        return {"records": len(ds), "p": p}

    return Release(method=method, dataset=ds, params={"p": p, **({"model_files": model_files} if model_files else {})},
                   privacy=privacy, labels=labels, produce=None, seeds={method: seed} if seeded else {}, saver=saver,
                   reproducible=seeded)


_S, _V = SnowConfig(), VSSnowConfig()         # defaults are read from the configs the CLI also uses


def snow(ds: DataLike, *, p: float, seed: int | None = None, fill: str | Sequence[float] = _S.fill,
         release_labels: str | Sequence[str] | None = None, batch: int | None = None, workers: int = _S.workers,
         patient_ids=None, labels=None, modality: str | None = None, value_range=None, device=None,
         batch_size: int | None = None) -> Release:
    """Snow: in each image a random fraction ``p`` of the pixel positions takes the fill value.

    It protects no image and no patient. With the defaults the paper's bound holds for single pixel positions
    only: (0, δ)-differential privacy with δ = 1 - round(p·H·W)/(H·W), about 1 - p, the probability that a pixel
    is released unchanged (the manifest gives both). ``p`` in (0, 1], keyword-only, no default.
    ``seed``: TESTING ONLY, reproducible hidden sets (the release then states no formal guarantee);
    by default a secret seed is drawn and recorded nowhere. ``fill``: ``grey`` (default, depends on
    no data), ``value:R,G,B`` (0-255, e.g. a public dataset's mean) or C values in [-1, 1], or
    ``dataset`` (the paper's mean of the released images: no formal guarantee). Settings that void
    the guarantee warn (:class:`~medanon.anonymize.privacy.NoFormalGuarantee`) when saving. ``ds``: an opened
    dataset, a folder, or images in memory with optional ``patient_ids=``, ``labels=``, ``modality=``
    (:func:`medanon.data.as_dataset`). ``batch``: images per batch (speed only; default 32; ``batch_size=`` is
    its former name).

    Example:
        >>> import medanon
        >>> root = medanon.make_phantom(patients=2)
        >>> rel = medanon.anonymize.snow(medanon.open_dataset(root, size=16), p=0.25)
        >>> out = rel.save(root.parent / "snow", progress=False)
        >>> rel.params["p"], rel.seeds, medanon.audit(out).passed
        (0.25, {}, True)
    """
    ds = dataset_arg(ds, method="snow", patient_ids=patient_ids, labels=labels, modality=modality,
                     value_range=value_range)
    batch = _renamed_batch(batch, batch_size, default=_S.batch_size, function="snow")
    return _snow_release(ds, method="snow", p=p, seed=seed, release_labels=release_labels, device=device,
                         batch=batch, workers=workers, fill=fill)


def vs_snow(ds: DataLike, *, p: float, seed: int | None = None, vessels: str = _V.vessels,
            checkpoint: str | Path | None = _V.checkpoint, masks_dir: str | Path | None = _V.masks_dir,
            vessel_fraction: float = _V.vessel_fraction, release_labels: str | Sequence[str] | None = None,
            batch: int | None = None, workers: int = _V.workers, patient_ids=None, labels=None,
            modality: str | None = None, value_range=None, device=None, batch_size: int | None = None) -> Release:
    """VS-Snow: in each image a random fraction ``p`` of the vessel pixels take the mean of their vessel neighbours.

    No formal privacy guarantee is claimed: measure it with :func:`medanon.evaluate`. ``vessels``:
    where the masks come from: ``unet`` (``checkpoint``: a name on ``medanon models``, a path or a loaded
    :class:`~medanon.segment.learned.LearnedSegmenter`, default the shipped ``unet-vessels64.pt``), ``frangi`` /
    ``sato`` (``vessel_fraction`` of the field of view), ``dataset`` (the layout's masks) or ``files``
    (``masks_dir``). Colour fundus images only.
    ``seed``, ``ds``, ``batch``: as in :func:`snow`.

    Example:
        >>> import medanon
        >>> root = medanon.make_phantom(patients=2)
        >>> rel = medanon.anonymize.vs_snow(medanon.open_dataset(root, size=16), p=0.5, vessels="dataset")
        >>> rel.privacy["guarantee"].startswith("none"), len(list(rel.images()))
        (True, 2)
    """
    from medanon.segment.vessels import VesselSource

    batch = _renamed_batch(batch, batch_size, default=_V.batch_size, function="vs_snow")
    ds = dataset_arg(ds, method="vs_snow", patient_ids=patient_ids, labels=labels, modality=modality,
                     value_range=value_range)
    used: dict[str, Any] = {}
    if vessels == "unet":
        checkpoint = model_arg(checkpoint, role="vessel-segmenter", ds=ds, argument="checkpoint", method="vs_snow",
                               used=used)
    source = VesselSource(vessels, checkpoint=checkpoint, masks_dir=masks_dir, fraction=vessel_fraction)
    source.bind(ds.records)                      # every image's mask found now, not when the release is saved
    return _snow_release(ds, method="vs-snow", p=p, seed=seed, release_labels=release_labels, device=device,
                         batch=batch, workers=workers, vessels=source, model_files=used)
