"""Snow and VS-Snow (vs-snow.txt §2.3): replace a random fraction p of pixels.

**Snow** (Eq. 1). Per image, a subset S of exactly ``k = round(p·H·W)`` pixel positions is drawn
uniformly at random, and every channel ``c`` of those positions is set to the fill value ``μ_c``: by
default the mean of channel ``c`` over every pixel of every image of the dataset being released
(the paper's choice), or mid-grey (``0`` in [-1, 1], the constant 127 of the original Snow, which
depends on no data). One S for all channels, as in Eq. 1: a hidden position hides its whole colour,
which is what makes the per-pixel guarantee below hold for a pixel rather than for one channel.

**VS-Snow** (Eq. 2). Per image, a subset S of exactly ``round(p·|V|)`` of the vessel pixels V is drawn
uniformly at random, and each ``x_i ∈ S`` takes, in every channel, the mean over its neighbourhood
``n_i``: the vessel pixels among its 8 neighbours (3×3 window without the centre; positions outside
the image do not exist), with their values *in the input image* (all replacements are computed
from the input, so the result does not depend on an order of updates). A selected vessel pixel with
no vessel neighbour (an isolated one-pixel fragment) takes the mean of all its in-image 8
neighbours instead: it is painted over with its surroundings, never left as it was. Only vessel
pixels change.

Randomness: each image has its own generator, seeded from ``(seed, index of the image in the
dataset)``, so an image's output does not depend on the batch size, the device or the other
images. The random order of positions is drawn once and the subset for ``p`` is its first ``k``
positions, so for one seed the hidden sets are **nested** across p: the p = 0.1 set lies inside the
p = 0.3 set. Releasing several p of one seed therefore reveals what the smallest p reveals, no more.

Privacy: see :func:`snow_privacy` and :func:`vs_snow_privacy`, which write the exact statement into
every release manifest, and docs/snow.md.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from medanon.data.dataset import ImageDataset
from medanon.errors import ConfigError
from medanon.release import ReleaseWriter
from medanon.release.labels import release_labels
from medanon.runtime import files_digest
from medanon.segment.vessels import VesselSource

log = logging.getLogger(__name__)

METHODS = ("snow", "vs-snow")
FILLS = ("dataset", "grey")
Generators = torch.Generator | Sequence[torch.Generator]


# ------------------------------------------------------------------------------------------- mechanisms


def count_for(p: float, n: int) -> int:
    """``round(p·n)``, halves rounded up (not to even), as the number of pixels to replace."""
    return math.floor(p * n + 0.5)


def _check_p(p: float) -> None:
    if not 0 < p <= 1:
        raise ConfigError(f"p={p} must be in (0, 1]", fix="the fraction of pixels replaced, e.g. --p 0.1")


def image_generators(seed: int, indices: Sequence[int]) -> list[torch.Generator]:
    """One CPU generator per image, seeded from ``(seed, index)`` (independent streams)."""
    out = []
    for i in indices:
        state = np.random.SeedSequence([int(seed) % 2**63, int(i)]).generate_state(2, dtype=np.uint32)
        out.append(torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1])))
    return out


def random_order(n: int, h: int, w: int, *, generator: Generators, device: torch.device | str = "cpu"
                 ) -> torch.Tensor:
    """A uniformly random permutation of the H·W pixel positions of each of n images: (n, H·W) int64,
    drawn with ``torch.randperm`` from one generator for the batch or one per image (on the generators'
    device, then moved to ``device``)."""
    gens = [generator] * n if isinstance(generator, torch.Generator) else list(generator)
    if len(gens) != n:
        raise ValueError(f"{len(gens)} generators for {n} images")
    if n == 0:
        return torch.empty(0, h * w, dtype=torch.long, device=device)
    return torch.stack([torch.randperm(h * w, generator=g, device=g.device) for g in gens]).to(device)


def snow_selection(order: torch.Tensor, p: float, h: int, w: int) -> torch.Tensor:
    """The first ``round(p·H·W)`` positions of each image's random ``order`` as a (n, 1, H, W) bool mask."""
    _check_p(p)
    k = count_for(p, h * w)
    sel = torch.zeros(order.shape, dtype=torch.bool, device=order.device)
    sel.scatter_(1, order[:, :k], True)
    return sel.view(-1, 1, h, w)


def snow(images: torch.Tensor, *, p: float, means: torch.Tensor | Sequence[float], generator: Generators,
         order: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 1: exactly ``round(p·H·W)`` random positions per image set to ``means`` (C,) in every channel.

    ``order`` (from :func:`random_order`) can be passed to reuse one draw for several p (nested subsets).
    """
    n, c, h, w = images.shape
    means = torch.as_tensor(means, dtype=images.dtype, device=images.device).reshape(1, c, 1, 1)
    order = random_order(n, h, w, generator=generator, device=images.device) if order is None else order
    sel = snow_selection(order, p, h, w)
    return torch.where(sel, means.expand_as(images), images)


def neighbour_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the 8 neighbours of every pixel of (N, C, H, W), positions outside the image counting zero."""
    h, w = x.shape[-2:]
    padded = F.pad(x, (1, 1, 1, 1))
    out = torch.zeros_like(x)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            if (dy, dx) != (1, 1):
                out += padded[..., dy:dy + h, dx:dx + w]
    return out


def vessel_neighbour_mean(images: torch.Tensor, vessels: torch.Tensor) -> torch.Tensor:
    """Per pixel and channel, the mean of the input values of its vessel 8-neighbours; the mean of all
    its in-image 8-neighbours where it has no vessel neighbour. (N, C, H, W)."""
    v = vessels.to(images.dtype)
    vessel_sum, vessel_count = neighbour_sum(images * v), neighbour_sum(v)
    all_sum, all_count = neighbour_sum(images), neighbour_sum(torch.ones_like(v))
    return torch.where(vessel_count > 0, vessel_sum / vessel_count.clamp(min=1), all_sum / all_count)


def vs_snow_selection(vessels: torch.Tensor, p: float, *, generator: Generators,
                      order: torch.Tensor | None = None) -> torch.Tensor:
    """Exactly ``round(p·|V_i|)`` random vessel pixels of each image: (N, 1, H, W) bool inside ``vessels``:
    the first vessel pixels met along each image's random ``order`` (from :func:`random_order`; pass one
    to reuse a draw for several p, which nests the subsets)."""
    _check_p(p)
    n, _, h, w = vessels.shape
    v = vessels.reshape(n, h * w).bool()
    order = random_order(n, h, w, generator=generator, device=vessels.device) if order is None else order
    v_along = v.gather(1, order)                                        # vessel flags in the random order
    k = torch.floor(p * v.sum(dim=1, keepdim=True).double() + 0.5).long()
    take = v_along & (v_along.long().cumsum(dim=1) <= k)
    sel = torch.zeros_like(v)
    sel.scatter_(1, order, take)
    return sel.view(n, 1, h, w)


def vs_snow(images: torch.Tensor, vessels: torch.Tensor, *, p: float, generator: Generators,
            order: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 2: a random fraction p of each image's vessel pixels take the mean of their vessel neighbours."""
    if vessels.shape != (images.shape[0], 1, *images.shape[-2:]):
        raise ValueError(f"vessel masks {tuple(vessels.shape)} do not match images {tuple(images.shape)}")
    vessels = vessels.to(images.device).bool()
    sel = vs_snow_selection(vessels, p, generator=generator, order=order)
    return torch.where(sel, vessel_neighbour_mean(images, vessels), images)


class ChannelMean:
    """Running per-channel mean of images (float64), over every pixel: ``update(batch)``, ``compute()``."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total: torch.Tensor | None = None
        self.count = 0

    def update(self, images: torch.Tensor) -> None:
        s = images.detach().double().sum(dim=(0, 2, 3)).cpu()
        self.total = s if self.total is None else self.total + s
        self.count += images.shape[0] * images.shape[2] * images.shape[3]

    def compute(self) -> torch.Tensor:
        if self.total is None:
            raise ValueError("no images seen")
        return self.total / self.count


# ------------------------------------------------------------------------------------------- privacy


def snow_privacy(p: float, h: int, w: int, *, fill: str) -> dict[str, Any]:
    """The exact privacy statement of a Snow release (written into its manifest)."""
    k = count_for(p, h * w)
    q = k / (h * w)
    delta = 1 - q
    return {
        "mechanism": (f"Snow (John et al., ETRA 2020) as in vs-snow.txt Eq. 1: per image exactly k = round(p*H*W) "
                      f"= {k} of the {h * w} pixel positions, uniformly at random, are set in every channel to the "
                      f"fill value"),
        "fill": ("per-channel mean over all pixels of all images of the released dataset" if fill == "dataset"
                 else "mid-grey (0 in [-1, 1]; 127.5 of 255), independent of the data"),
        "guarantee": (f"(0, delta)-differential privacy for ONE PIXEL POSITION of one image, delta = 1 - k/(H*W) = "
                      f"{delta:.4f} (vs-snow.txt section 1.1): for two images that differ only at one pixel "
                      f"position, Pr[Snow(x) in S] <= Pr[Snow(x') in S] + delta for every set S of outputs, because "
                      f"that position is released as the fill value, whatever its input, with probability k/(H*W)"),
        "epsilon": 0.0, "delta": round(delta, 6), "unit": "one pixel position (all channels) of one image",
        "not_protected": [
            "images and patients: any two different images differ in many pixels; for a whole image the same "
            "argument gives delta = 1, i.e. no guarantee at all",
            f"delta = {delta:.2f} is not small: each pixel is released exactly as it was with probability "
            f"{delta:.2f}; by the usual standard (delta much smaller than 1 / number of records) this is no "
            "differential privacy",
            "structure survives: vessels, optic disc, lesions and anything spatially smooth can be read from or "
            "interpolated between the unchanged pixels (a median filter undoes much of it); each released image "
            "stands for exactly one source image and resembles it",
            "the fill value is computed from the private dataset and released (manifest and pixels); it is not "
            "covered" if fill == "dataset" else "the fill value is a constant and reveals nothing",
            "repeated releases: with one seed the hidden sets are nested across p (several p reveal what the "
            "smallest reveals); with different seeds the union of unchanged pixels reveals more than either",
            "the seed recorded here and the private order of the source images regenerate every hidden set",
            "labels released with the images are released as they are",
        ],
        "attack_measured": ("not by this command: the sex attacker's accuracy (privacy) and the DR classifier's F1 "
                            "(utility) are measured by the evaluation on this release (docs/snow.md)"),
    }


def vs_snow_privacy(p: float, vessels: dict[str, Any]) -> dict[str, Any]:
    """The exact privacy statement of a VS-Snow release: no formal guarantee is claimed."""
    return {
        "mechanism": ("VS-Snow (vs-snow.txt Eq. 2): per image exactly round(p*|V|) of the vessel pixels V, uniformly "
                      "at random, take in every channel the mean of their vessel 8-neighbours in the input image "
                      "(all in-image 8-neighbours when none is a vessel pixel); nothing else changes"),
        "vessel_masks": vessels,
        "guarantee": "none: no formal differential-privacy guarantee is claimed",
        "epsilon": None, "delta": None, "unit": None,
        "why_no_guarantee": [
            "pixels outside the vessel mask are released unchanged (for them delta = 1)",
            f"a vessel pixel is released unchanged with probability about {1 - p:.2f}, and when replaced its value "
            "still enters the released means of up to 8 neighbouring vessel pixels: nothing bounds what one "
            "pixel changes",
            "the vessel mask is computed from the image itself (or supplied with it), so which pixels are eligible "
            "depends on the private data",
        ],
        "not_protected": [
            "the vessel tree's course and calibre (a replaced pixel takes a mean along the vessel), the optic disc, "
            "fovea, lesions and pigmentation: identity-bearing structure survives; each released image stands for "
            "exactly one source image and resembles it",
            "repeated releases: with one seed the replaced sets are nested across p; with different seeds the union "
            "of unchanged vessel pixels reveals more than either",
            "the seed recorded here and the private order of the source images regenerate every replaced set",
            "labels released with the images are released as they are",
        ],
        "attack_measured": ("not by this command: the sex attacker's accuracy (privacy) and the DR classifier's F1 "
                            "(utility) are measured by the evaluation on this release (docs/snow.md)"),
    }


# ------------------------------------------------------------------------------------------- releases


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


def release_paths(out: str | Path, ps: Sequence[float]) -> dict[float, Path]:
    """``out`` for each p: ``{p}`` in it is replaced by the value (``--out rel/snow-p{p}``)."""
    text = str(out)
    if len(ps) > 1 and "{p}" not in text:
        raise ConfigError(f"several p values ({', '.join(f'{p:g}' for p in ps)}) need one release each, "
                          f"but --out {text} has no {{p}} in it", fix="e.g. --out releases/snow-p{p}")
    return {p: Path(text.replace("{p}", f"{p:g}")) for p in ps}


def snow_sweep(dataset: ImageDataset, out: str | Path, *,
               method: str = "snow",                      # snow | vs-snow
               ps: Sequence[float],                       # fractions p, one release each
               seed: int,                                 # seeds every image's generator
               vessels: VesselSource | None = None,       # vs-snow: where the vessel masks come from
               fill: str = "dataset",                     # snow: dataset (Eq. 1) | grey (original Snow)
               labels: Sequence[str] | None = None,       # released labels (default: the utility label)
               mapping: str | Path | None = None,         # private mapping file(s), {p} as in out
               device: torch.device | str = "cpu",
               batch_size: int = 32, workers: int = 2, overwrite: bool = False,
               progress: bool = True) -> dict[float, Path]:
    """Write one Snow or VS-Snow release of ``dataset`` per p; returns p -> release folder.

    Resumable: an interrupted sweep continues where it stopped when run again with the same
    settings (records already written are skipped). The vessel masks (VS-Snow) and the random
    order (both) are computed once per image and shared by every p.
    """
    if method not in METHODS:
        raise ConfigError(f"method {method!r} is not one of {METHODS}")
    ps = sorted({float(p) for p in ps})
    if not ps:
        raise ConfigError("no p given", fix="e.g. --p 0.1 --p 0.3 --p 0.5")
    for p in ps:
        _check_p(p)
    if method == "vs-snow" and vessels is None:
        raise ConfigError("vs-snow needs a vessel source", fix="pass --vessels unet|frangi|sato|dataset|files")
    if method == "vs-snow" and dataset.channels != 3:
        raise ConfigError(f"vs-snow segments retinal vessels in colour fundus images; {dataset.root} has "
                          f"{dataset.channels} channel(s)", fix="use snow for X-rays, or --channels 3")
    if fill not in FILLS:
        raise ConfigError(f"--fill {fill!r} is not one of {FILLS}")
    outs = release_paths(out, ps)
    maps = release_paths(mapping, ps) if mapping is not None else dict.fromkeys(ps)
    names = release_labels(dataset, labels)
    device = torch.device(device)
    h = w = dataset.size
    if len(ps) > 1:
        warnings.warn(f"{len(ps)} releases of the same images: publish at most one. With one seed their hidden sets "
                      "are nested, so together they reveal what the smallest p reveals", stacklevel=2)
    if method == "snow":
        if fill == "dataset":
            means = dataset_channel_means(dataset, batch_size=batch_size, workers=workers, progress=progress)
        else:
            means = torch.zeros(dataset.channels, dtype=torch.float64)
        privacy = {p: snow_privacy(p, h, w, fill=fill) for p in ps}
        for p in ps:
            log.warning("Snow p=%g: (0, %.3f)-DP per pixel position only; no guarantee for images or patients",
                        p, privacy[p]["delta"])
    else:
        means = None
        privacy = {p: vs_snow_privacy(p, vessels.describe()) for p in ps}
        log.warning("VS-Snow: no formal privacy guarantee; measure it with the evaluation's attacks")
    common: dict[str, Any] = {"size": dataset.size, "channels": dataset.channels, "crop": dataset.crop,
                              "batch_size": batch_size}
    if means is not None:
        common.update(fill=fill, fill_value=[round(float(m), 6) for m in means],
                      fill_value_255=[round((float(m) + 1) * 127.5, 3) for m in means])
    else:
        common.update(neighbourhood="8-connected vessel neighbours; all 8 neighbours when none",
                      vessels=vessels.describe())
    models = {"vessel-segmenter": vessels.describe()["checkpoint_sha256"]} \
        if vessels is not None and "checkpoint_sha256" in vessels.describe() else {}
    source = {"layout": dataset.layout, "modality": dataset.modality,
              **files_digest([r.path for r in dataset.records], root=dataset.root)}
    phantom = dataset.root is not None and (Path(dataset.root) / "phantom.json").is_file()
    records = dataset.records
    with contextlib.ExitStack() as stack:
        writers = {p: stack.enter_context(ReleaseWriter(
            outs[p], method=method, params={"p": p, **common}, privacy=privacy[p], labels=names,
            seeds={method: seed}, models=models, source=source, phantom=phantom, mapping=maps[p],
            overwrite=overwrite)) for p in ps}
        todo = [i for i in range(len(records)) if not all(wr.done(records[i].record_id) for wr in writers.values())]
        if len(todo) < len(records):
            log.info("resuming: %d of %d images already released", len(records) - len(todo), len(records))
        for b in _batches(dataset, todo, batch_size, workers=workers, want_masks=vessels is not None
                          and vessels.method == "dataset", desc=method, progress=progress):
            images, fov = b.images.to(device), b.fov.to(device)
            gens = image_generators(seed, b.indices)
            order = random_order(len(images), h, w, generator=gens, device=device)
            if method == "snow":
                results = {p: snow(images, p=p, means=means, generator=gens, order=order) for p in ps}
            else:
                recs = [records[i] for i in b.indices]
                v = vessels.masks(images, fov, records=recs, layout_masks=b.masks, size=dataset.size,
                                  crop=dataset.crop)
                results = {p: vs_snow(images, v, p=p, generator=gens, order=order) for p in ps}
            for p, out_images in results.items():
                for j, i in enumerate(b.indices):
                    if not writers[p].done(records[i].record_id):
                        writers[p].add(records[i].record_id, out_images[j], [records[i]])
    return outs
