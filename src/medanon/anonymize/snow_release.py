"""Snow and VS-Snow releases: one release folder per p, written through the release writer.

:func:`snow_sweep` reads the dataset in batches, draws each image's random order once (from a
secret seed unless one is given), applies the mechanism for every p (:mod:`medanon.anonymize.snow_mechanism`)
and hands the images to one :class:`~medanon.release.ReleaseWriter` per p, with the statement of
:mod:`medanon.anonymize.snow_statement`. :class:`SnowConfig` and :class:`VSSnowConfig` are its settings
as the command line builds them (``--config FILE``, ``--set key=value``).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from medanon.anonymize.per_image import decode_before_release
from medanon.anonymize.privacy import NoFormalGuarantee, WeakSetting
from medanon.anonymize.snow_mechanism import (
    ChannelMean,
    check_p,
    count_for,
    count_for_each,
    image_generators,
    random_order,
    snow,
    vs_snow,
)
from medanon.anonymize.snow_statement import SEEDED, parse_fill, snow_privacy, vs_snow_privacy
from medanon.data.dataset import ImageDataset
from medanon.errors import ConfigError, user_stacklevel
from medanon.outputs import _resolve, dataset_inputs
from medanon.release import ReleaseWriter
from medanon.release.labels import release_labels
from medanon.release.release import is_phantom, reading_params, source_digest
from medanon.release.writer import check_release_outputs
from medanon.release.writer_safety import check_mapping_apart
from medanon.segment.vesselness import DEFAULT_FRACTION
from medanon.segment.vessels import VesselSource

log = logging.getLogger(__name__)

METHODS = ("snow", "vs-snow")


@dataclass
class SweepConfig:
    """What Snow and VS-Snow releases share; ``p`` (the privacy-critical fraction) has no default."""

    p: tuple[float, ...] = ()                   # fractions of pixels replaced, in (0, 1]: one release each (required)
    batch_size: int = 32                        # images per batch (speed only: outputs do not depend on it)
    workers: int = 2                            # threads reading images

    def validate(self) -> None:
        if not self.p:
            raise ConfigError("no p given: the fraction of pixels replaced has no default",
                              fix="give p=, e.g. p=0.1 (several releases: p=0.1,0.3)")
        for p in self.p:
            check_p(p)
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={self.batch_size} must be at least 1")
        if self.workers < 1:
            raise ConfigError(f"workers={self.workers} must be at least 1")


@dataclass
class SnowConfig(SweepConfig):
    """The settings of Snow releases (``medanon anonymize snow --config FILE --set key=value``)."""

    fill: str = "grey"                          # grey (data-independent) | value:R,G,B (0-255) | dataset (no guarantee)

    def validate(self) -> None:
        super().validate()
        given = len(self.fill[6:].split(",")) if self.fill.startswith("value:") else 1
        parse_fill(self.fill, given)             # the kind and the numbers; their count is checked per dataset


@dataclass
class VSSnowConfig(SweepConfig):
    """The settings of VS-Snow releases (``medanon anonymize vs-snow --config FILE --set key=value``)."""

    vessels: str = "unet"                       # where the masks come from: unet | frangi | sato | dataset | files
    checkpoint: str | None = None               # vessels=unet: segmenter checkpoint (None: the shipped one)
    masks_dir: str | None = None                # vessels=files: folder with one vessel mask per image
    vessel_fraction: float = DEFAULT_FRACTION   # vessels=frangi|sato: share of the field of view labelled vessel

    def validate(self) -> None:
        super().validate()
        from medanon.segment.vessels import SOURCES

        if self.vessels not in SOURCES:
            raise ConfigError(f"vessels={self.vessels!r} is not one of {', '.join(SOURCES)}")
        if not 0 < self.vessel_fraction < 1:
            raise ConfigError(f"vessel_fraction={self.vessel_fraction} must be in (0, 1)")

    def source(self) -> VesselSource:
        """The :class:`~medanon.segment.vessels.VesselSource` these settings name (loads a segmenter)."""
        return VesselSource(self.vessels, checkpoint=self.checkpoint, masks_dir=self.masks_dir,
                            fraction=self.vessel_fraction)


@dataclass
class _Batch:
    indices: list[int]
    images: torch.Tensor                        # (B, C, H, W)
    fov: torch.Tensor                           # (B, 1, H, W) bool
    masks: torch.Tensor | None                  # layout masks, when every record has one


def _batches(ds: ImageDataset, indices: Sequence[int], batch_size: int, *, workers: int, want_masks: bool,
             desc: str, progress: bool) -> Iterator[_Batch]:
    chunks = [list(indices[i:i + batch_size]) for i in range(0, len(indices), batch_size)]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        bar = tqdm(total=len(indices), desc=desc, disable=not progress, unit="img")
        for chunk in chunks:
            items = list(pool.map(ds.load, chunk))
            masks = None
            if want_masks and all("mask" in it for it in items):
                masks = torch.stack([it["mask"] for it in items])
            yield _Batch(chunk, torch.stack([it["image"] for it in items]), torch.stack([it["fov"] for it in items]),
                         masks)
            bar.update(len(chunk))
        bar.close()


def dataset_channel_means(ds: ImageDataset, *, batch_size: int = 64, workers: int = 2,
                          progress: bool = True) -> torch.Tensor:
    """Per-channel mean over every pixel of every image of ``ds`` (float64, in [-1, 1])."""
    acc = ChannelMean()
    for b in _batches(ds, range(len(ds)), batch_size, workers=workers, want_masks=False,
                      desc="channel means", progress=progress):
        acc.update(b.images)
    return acc.compute()


def release_paths(out: str | Path, ps: Sequence[float], *, name: str = "out") -> dict[float, Path]:
    """``out`` for each p: ``{p}`` in it is replaced by the value (``out="rel/snow-p{p}"``); ``name`` is the
    argument's name in the error."""
    text = str(out)
    if len(ps) > 1 and "{p}" not in text:
        example = "releases/snow-p{p}" if name == "out" else "private/snow-p{p}.json"
        raise ConfigError(f"several p values ({', '.join(f'{p:g}' for p in ps)}) need one {name} each, "
                          f"but {name}={text!r} has no {{p}} in it", fix=f"e.g. {name}='{example}'")
    paths = {p: Path(text.replace("{p}", f"{p:g}")) for p in ps}
    seen: dict[Path, float] = {}
    for p, path in paths.items():                   # as files: a link may lead two names to one folder
        real = _resolve(path)
        if real in seen:
            raise ConfigError(f"{name}={text!r} gives p={seen[real]:g} and p={p:g} one and the same "
                              + ("path" if paths[seen[real]] == path else f"file ({real})")
                              + ": each release would be written over the other's",
                              fix="give each p value a path of its own (p values that differ, and no link "
                                  "leading two of them to one folder)")
        seen[real] = p
    return paths


def snow_sweep(dataset: ImageDataset, out: str | Path, *,
               method: str = "snow",                      # snow | vs-snow
               ps: Sequence[float],                       # fractions p, one release each
               seed: int | None = None,                   # TESTING ONLY: reproducible subsets (None: secret seed)
               vessels: VesselSource | None = None,       # vs-snow: where the vessel masks come from
               fill: str | Sequence[float] = "grey",      # snow: grey | value:R,G,B (0-255) | dataset (Eq. 1)
               labels: Sequence[str] | None = None,       # released labels (default: the utility label)
               mapping: str | Path | None = None,         # private mapping file(s), {p} as in out
               device: torch.device | str = "cpu",
               batch_size: int = 32, workers: int = 2, overwrite: bool = False,
               progress: bool = True, extra_params: dict[str, Any] | None = None) -> dict[float, Path]:
    """Write one Snow or VS-Snow release of ``dataset`` per p; returns p -> release folder. ``extra_params`` go into
    each manifest's params (e.g. ``model_files``: which checkpoint was used and why).

    Resumable: an interrupted sweep continues where it stopped when run again with the same
    settings (records already written are skipped). The vessel masks (VS-Snow) and the random
    order (both) are computed once per image and shared by every p. Without ``seed`` the order comes
    from a secret seed that is held only in memory: a resumed run draws a new one for the images it
    still has to write (each image's subset stays uniformly random; only the nesting across p of an
    image written for some p before the interruption is lost).

    Warns :class:`~medanon.anonymize.privacy.NoFormalGuarantee` for ``fill="dataset"`` and for a
    given ``seed``: the release then states "no formal guarantee".
    """
    if method not in METHODS:
        raise ConfigError(f"method {method!r} is not one of {METHODS}")
    ps = sorted({float(p) for p in ps})
    if not ps:
        raise ConfigError("no p given", fix="e.g. ps=[0.1, 0.3, 0.5]")
    for p in ps:
        check_p(p)
    if method == "vs-snow" and vessels is None:
        raise ConfigError("vs-snow needs a vessel source",
                          fix="pass vessels= (a VesselSource: unet, frangi, sato, dataset or files)")
    if method == "vs-snow" and dataset.channels != 3:
        from medanon.data.inputs import data_name

        raise ConfigError(f"vs-snow segments retinal vessels in colour fundus images; the data "
                          f"({data_name(dataset)}) have {dataset.channels} channel(s)",
                          fix="use snow for X-rays (VS-Snow needs colour fundus photographs)")
    fill_kind, fill_value = parse_fill(fill, dataset.channels)
    seeded = seed is not None
    run_seed = int(seed) if seeded else secrets.randbits(63)
    outs = release_paths(out, ps)
    maps = release_paths(mapping, ps, name="mapping") if mapping is not None else dict.fromkeys(ps)
    reads = [*dataset_inputs(dataset), *(vessels.reads() if vessels is not None else [])]
    for p in ps:                                               # every output checked before any work
        check_release_outputs(outs[p], maps[p], inputs=reads, overwrite=overwrite)
        if maps[p] is not None:                                # nor inside another p's release
            check_mapping_apart(maps[p], list(outs.values()))
    if vessels is not None:
        vessels.bind(dataset.records)                          # every image's mask file found, before any work
        # and read, aligned as the images are read: a bad mask is named before any release
        vessels.check(dataset.records, size=dataset.size, crop=dataset.crop)
    names = release_labels(dataset, labels)
    device = torch.device(device)
    h = w = dataset.size
    if method == "snow":
        check_changes_pixels(ps, h * w, side=h)
    if len(ps) > 1:
        warnings.warn(f"{len(ps)} releases of the same images: publish at most one. With one seed their hidden sets "
                      "are nested, so together they reveal what the smallest p reveals", WeakSetting,
                      stacklevel=user_stacklevel())
    if seeded:
        warnings.warn(f"seed={seed}: the hidden sets can be regenerated by whoever knows or guesses the seed; the "
                      f"release states '{SEEDED}'. Leave the seed out for a release", NoFormalGuarantee,
                      stacklevel=user_stacklevel())
    if method == "snow":
        if fill_kind == "dataset":
            warnings.warn("fill=dataset: the fill is the mean of the images being released, so one source image "
                          "changes every released image; the release states 'no formal guarantee'. Use grey or a "
                          "mean of public data (value:R,G,B)", NoFormalGuarantee, stacklevel=user_stacklevel())
            means = dataset_channel_means(dataset, batch_size=batch_size, workers=workers, progress=progress)
        else:
            means = fill_value
        privacy = {p: snow_privacy(p, h, w, fill=fill_kind, seeded=seeded) for p in ps}
        for p in ps:
            if privacy[p]["delta"] is not None:
                # what the method guarantees, no setting that weakens it (not a PrivacyWarning): the statement
                log.info("Snow p=%g: (0, %.3f)-DP per pixel position only; no guarantee for images or patients "
                         "(the release's statement says so)", p, privacy[p]["delta"])
    else:
        means = None
        privacy = {p: vs_snow_privacy(p, vessels.describe(), seeded=seeded) for p in ps}
        warnings.warn("VS-Snow: no formal privacy guarantee; measure it with the evaluation's attacks",
                      NoFormalGuarantee, stacklevel=user_stacklevel())
    common: dict[str, Any] = reading_params(dataset)
    # batch_size is not a parameter of the release: outputs do not depend on it, so a resume may change it
    if means is not None:
        common.update(fill=fill_kind, fill_value=[round(float(m), 6) for m in means],
                      fill_value_255=[round((float(m) + 1) * 127.5, 3) for m in means])
    else:
        common.update(neighbourhood="8-connected vessel neighbours; all 8 neighbours when none",
                      vessels=vessels.describe())
    models = {"vessel-segmenter": vessels.describe()["checkpoint_sha256"]} \
        if vessels is not None and "checkpoint_sha256" in vessels.describe() else {}
    def source_now() -> dict[str, Any]:
        now = source_digest(dataset)
        masks = vessels.mask_digest(dataset.records, dataset.root) if vessels is not None else None
        if masks is not None:                                  # read files: a resume notices edited or other masks
            now["vessel_masks"] = masks
        return now

    source, phantom = source_now(), is_phantom(dataset)
    records = dataset.records
    unchanged = dict.fromkeys(ps, 0)
    with contextlib.ExitStack() as stack:
        writers = {p: stack.enter_context(ReleaseWriter(
            outs[p], method=method, params={"p": p, **common, **(extra_params or {})}, privacy=privacy[p], labels=names,
            seeds={method: seed} if seeded else {}, models=models, source=source, phantom=phantom, mapping=maps[p],
            overwrite=overwrite, source_now=source_now)) for p in ps}
        todo = [i for i in range(len(records)) if not all(wr.done(records[i].record_id) for wr in writers.values())]
        if len(todo) < len(records):
            log.info("resuming: %d of %d images already released", len(records) - len(todo), len(records))
        decode_before_release(dataset, todo, progress=progress)
        for b in _batches(dataset, todo, batch_size, workers=workers, want_masks=vessels is not None
                          and vessels.method == "dataset", desc=method, progress=progress):
            images, fov = b.images.to(device), b.fov.to(device)
            gens = image_generators(run_seed, b.indices)
            order = random_order(len(images), h, w, generator=gens, device=device)
            if method == "snow":
                results = {p: snow(images, p=p, means=means, generator=gens, order=order) for p in ps}
            else:
                recs = [records[i] for i in b.indices]
                v = vessels.masks(images, fov, records=recs, layout_masks=b.masks, size=dataset.size,
                                  crop=dataset.crop)
                results = {p: vs_snow(images, v, p=p, generator=gens, order=order) for p in ps}
                n_vessel = v.flatten(1).sum(1)
                for p in ps:                            # images none of whose vessel pixels p reaches: unchanged
                    unchanged[p] += int((count_for_each(p, n_vessel) == 0).sum())
            for p, out_images in results.items():
                for j, i in enumerate(b.indices):
                    if not writers[p].done(records[i].record_id):
                        writers[p].add(records[i].record_id, out_images[j], [records[i]])
    for p, n in unchanged.items():
        if n:
            warnings.warn(f"VS-Snow p={p:g}: {n} image(s) have fewer than {0.5 / p:.4g} vessel pixels, so "
                          "round(p*|V|) = 0 of them were changed: they are released as they were read. Use a larger "
                          "p, or a larger size", WeakSetting, stacklevel=user_stacklevel())
    return outs


def check_changes_pixels(ps, pixels: int, *, side: int) -> None:
    """Refuse a Snow p that replaces no pixel of a ``side`` px image (round(p*H*W) = 0: its "release" would be the
    images as they were read), or every pixel (each released image would be the fill value, and the statement's
    per-pixel account would not describe it)."""
    for p in ps:
        k = count_for(p, pixels)
        if k == 0:
            raise ConfigError(f"p={p:g} replaces round(p*H*W) = 0 of the {pixels} pixels of a {side} px image: the "
                              "images would be released unchanged",
                              fix=f"use p of at least {1 / pixels:.3g} (one pixel), or a larger size")
        if k == pixels:
            raise ConfigError(f"p={p:g} replaces all {pixels} pixels of a {side} px image: every released image would "
                              "be the fill value, nothing of its source", fix="use p below 1")
