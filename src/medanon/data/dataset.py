"""The dataset: records from a layout reader, checked, then loaded and preprocessed on access.

``open_dataset`` is the one entry point: it scans the folder with the right layout reader,
checks every file's header (existence, readability, channel count) and looks for one image file under two
patient ids (:mod:`medanon.data.duplicates`), and either raises one
:class:`DataError` listing every bad file with the fix, or, with ``skip_bad``, leaves them out
and reports them in ``dataset.skipped``. With ``skip_bad`` it also decodes every image once, so a file
whose header is fine but whose pixels are corrupt is skipped too, not found halfway through a run.

Decoding is fast for large photographs (:mod:`medanon.data.decode`: JPEG draft mode, reduced decoding)
and done once per run: the preprocessed tensors are kept (up to :data:`CACHE_BYTES`), so a command that
reads the dataset twice (Snow's channel means, then the release) decodes each file once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from medanon.config import DataConfig, validate
from medanon.data import imageio
from medanon.data.channels import MixedChannels, resolve_channels  # noqa: F401  (re-exported)
from medanon.data.decode import decode, warn_colour_dropped
from medanon.data.duplicates import FIX as DUPLICATE_FIX
from medanon.data.duplicates import duplicate_problems
from medanon.data.imageio import DEFAULT_MAX_PIXELS, ImageInfo, TooLarge
from medanon.data.layouts import GenericOptions, scan
from medanon.data.records import Problem, Record, Scan
from medanon.data.views import canonical_views, select_views
from medanon.errors import DataError, a_type

log = logging.getLogger(__name__)

_FIXES = {
    "missing": "restore the file or delete its row from the labels CSV",
    "unlabelled": "add a row for it to the labels CSV or move it out of the image folder",
    "unreadable": "replace the corrupt file or delete it and its CSV row",
    "denied": "make the file readable by the user running medanon (e.g. chmod a+r), or leave it out",
    "label": "correct the value in the labels CSV",
    "size": "remove the image: it is too small to be useful",
    "large": "raise max_pixels if it is a genuine large scan; otherwise remove it (a decompression bomb)",
    "duplicate": DUPLICATE_FIX,
    "outside": "pass allow_outside=True if these files are meant to be read (e.g. a PACS export linked into the "
               "folder), or copy them into the dataset folder",
}


def _cache_budget() -> int:
    """Bytes of preprocessed tensors a dataset keeps: an eighth of the machine's memory, at most 4 GiB (64 px RGB
    float32 is 48 KB an image: 4 GiB holds 87 000 images, all of EyePACS)."""
    from medanon.runtime import physical_memory

    physical = physical_memory() or 8 << 30
    return int(min(4 << 30, physical // 8))


CACHE_BYTES = _cache_budget()

MIN_SOURCE_SIDE = 8


def decode_threads(workers: int | None = None) -> int:
    """Threads that decode images: ``workers``, or one per core up to 8 (decoding and resizing run in Pillow,
    NumPy and SciPy code that releases the GIL for most of an image's time)."""
    from medanon.runtime import cpu_count

    return max(1, workers) if workers is not None else min(8, cpu_count())


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How a dataset folder is read: every option of :func:`open_dataset` but the size, so that code which must
    read the folder again at another size (the evaluation) reads the same files the same way."""

    layout: str = "auto"
    generic: GenericOptions | None = None
    skip_bad: bool = False
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    allow_outside: bool = False
    channels: int = 0
    crop: str = "auto"
    modality: str = "auto"
    xray_views: str = ""                        # chest X-ray views read (medanon.data.views)


TRANSFORM_SLACK = 1.1          # a transform's output beyond ±this is refused; within it, clamped to [-1, 1]


class ImageDataset(Dataset):
    """Images of one dataset, preprocessed to ``size`` x ``size`` with ``channels`` channels.

    Items are dicts: ``image`` (C,H,W) float32 in [-1, 1], ``fov`` (1,H,W) bool, ``labels``
    (name -> float), ``patient_id``, ``record_id``, ``index``; plus ``mask`` (1,H,W) bool when the
    layout provides segmentation masks (phantom vessel or lung masks). ``read_options``: how the folder was
    read (:class:`ReadOptions`; :func:`reading` reads it again the same way). ``transform``: a function applied to
    every ``image`` when it is loaded ((C, H, W) in, the same shape out, values in [-1, 1]; e.g. a
    torchvision transform): the methods anonymise what it returns (the evaluation reads the folder without it).
    ``mirrored``: indices whose tensors are loaded mirrored left-right, after ``transform`` (empty, except in the
    aligned view the k-Same methods average fundus photographs through, :mod:`medanon.anonymize.eye_sides`).
    """

    def __init__(self, records: Sequence[Record], *, size: int, channels: int, crop: str,
                 modality: str | None = None, layout: str = "", root: Path | None = None,
                 skipped: Sequence[Problem] = (), infos: Sequence[ImageInfo] = (),
                 max_pixels: int | None = DEFAULT_MAX_PIXELS, cache_bytes: int = CACHE_BYTES,
                 read_options: ReadOptions | None = None,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None):
        if transform is not None and not callable(transform):
            raise DataError(f"transform= must be a function of a (C, H, W) tensor, not {a_type(transform)}",
                            fix="pass e.g. transform=lambda x: x.flip(-1), or leave it out")
        self.records = list(records)
        self.transform = transform
        self.size = size
        self.channels = channels
        self.crop = crop
        self.modality = modality
        self.layout = layout
        self.root = root
        self.skipped = list(skipped)
        self.infos = list(infos)
        self.max_pixels = max_pixels
        self.cache_bytes = cache_bytes
        self.read_options = read_options or ReadOptions(layout=layout or "auto", max_pixels=max_pixels)
        self.part_of: int | None = None                      # the folder's image count, when this is a part of it
        self.folder_records: list[Record] | None = None    # the whole folder's records, when this is a part of it
        self._cache: dict[Path, dict] = {}
        self._cache_used = [0]                               # bytes in the cache (shared with aligned views)
        self.mirrored: frozenset[int] = frozenset()          # indices loaded mirrored left-right (an aligned view)
        self._cache_lock = threading.Lock()                  # loads run in threads

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        part = f" (part of {self.part_of})" if self.part_of else ""
        return (f"ImageDataset({len(self)} images{part} {self.channels}x{self.size}x{self.size}, "
                f"{len({r.patient_id for r in self.records})} patients, modality {self.modality!r}, "
                f"layout {self.layout!r}, root {str(self.root) if self.root is not None else None!r})")

    @property
    def label_names(self) -> list[str]:
        names: dict[str, None] = {}
        for r in self.records:
            names.update(dict.fromkeys(r.labels))
        return list(names)

    @property
    def patients(self) -> list[str]:
        return sorted({r.patient_id for r in self.records})

    def _pixels(self, index: int) -> dict[str, torch.Tensor]:
        """The preprocessed tensors of record ``index`` (from the cache, else decoded)."""
        pixels = self._cache.get(self.records[index].path)
        return pixels if pixels is not None else self._decode(index)

    def load(self, index: int) -> dict:
        rec = self.records[index]
        item = {k: v.clone() for k, v in self._pixels(index).items()}      # callers may write into what they get
        if self.transform is not None:
            item["image"] = self._transformed(item["image"])
        if index in self.mirrored:                           # an aligned view's left eye, shown as a right eye
            item = {k: v.flip(-1) for k, v in item.items()}
        item.update(labels={k: float(v) for k, v in rec.labels.items()}, patient_id=rec.patient_id,
                    record_id=rec.record_id, index=index)
        return item

    def _decode(self, index: int) -> dict[str, torch.Tensor]:
        rec = self.records[index]
        info = self.infos[index] if index < len(self.infos) else None
        pre = decode(rec.path, size=self.size, channels=self.channels, crop=self.crop, max_pixels=self.max_pixels,
                     info=info)
        if pre.transparent:
            imageio.warn_transparent(rec.path, self.root)
        if pre.low_range:
            imageio.warn_low_range(rec.path, self.root, pre.low_range)
        if pre.colour_dropped:
            warn_colour_dropped(rec.path, self.root, self.modality)
        pixels = {"image": torch.from_numpy(pre.image), "fov": torch.from_numpy(pre.fov[None])}
        if rec.mask_path is not None:
            pixels["mask"] = torch.from_numpy(_load_mask(rec.mask_path, self.size, self.crop)[None])
        nbytes = sum(t.numel() * t.element_size() for t in pixels.values())
        with self._cache_lock:
            if rec.path not in self._cache and self._cache_used[0] + nbytes <= self.cache_bytes:
                self._cache[rec.path] = pixels
                self._cache_used[0] += nbytes
        return pixels

    __getitem__ = load

    def _transformed(self, image: torch.Tensor) -> torch.Tensor:
        out = self.transform(image)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(image.shape):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise DataError(f"transform= returned {got} for a {tuple(image.shape)} image",
                            fix="return a tensor of the shape it was given (C, H, W), values in [-1, 1]")
        out = out.float()
        if not torch.isfinite(out).all():
            raise DataError(f"transform= returned NaN or infinite values for a {tuple(image.shape)} image",
                            fix="return finite values in [-1, 1]")
        low, high = float(out.min()), float(out.max())
        if low < -TRANSFORM_SLACK or high > TRANSFORM_SLACK:    # another scale (0-255, ImageNet normalisation)
            raise DataError(f"transform= returned values from {low:.4g} to {high:.4g}; images are read in [-1, 1] "
                            "(clipping them would change the image without a word)",
                            fix="return the image in [-1, 1], as the transform receives it (e.g. x.flip(-1)); "
                                "undo any normalisation inside the transform")
        if low >= 0 and float(image.min()) < -0.5 and not getattr(self, "_range_warned", False):
            self._range_warned = True                       # (once per dataset)
            from medanon.data.memory import ValueRangeWarning
            from medanon.errors import user_stacklevel

            warnings.warn(f"transform= returned values from {low:.4g} to {high:.4g} for an image read from "
                          f"{float(image.min()):.4g}: only the upper half of [-1, 1], where images are read. If the "
                          "transform returns images in [0, 1] (e.g. (x + 1) / 2 or a ToTensor-style step), the "
                          "release is washed out (nothing is black): return the image in [-1, 1]",
                          ValueRangeWarning, stacklevel=user_stacklevel())
        return out.clamp(-1, 1)                             # an interpolation's small overshoot

    def tensors(self, *, workers: int | None = None, progress: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Load every image: returns ``images`` (N, C, H, W) float32 and ``fov`` (N, 1, H, W) bool."""
        n = len(self)
        images = torch.empty((n, self.channels, self.size, self.size), dtype=torch.float32)
        fov = torch.empty((n, 1, self.size, self.size), dtype=torch.bool)

        def work(i: int) -> int:
            item = self.load(i)
            images[i] = item["image"]
            fov[i] = item["fov"]
            return i

        with ThreadPoolExecutor(max_workers=decode_threads(workers)) as pool:
            it = pool.map(work, range(n))
            for _ in tqdm(it, total=n, desc="loading images", disable=not progress, unit="img"):
                pass
        return images, fov

    def label_array(self, name: str) -> np.ndarray:
        return np.array([r.labels.get(name, math.nan) for r in self.records], dtype=np.float64)


def _load_mask(path: Path, size: int, crop: str) -> np.ndarray:
    """Masks shipped with a layout are already square and aligned; resize only. An unreadable one (empty, truncated)
    is a DataError naming the mask, not an operating-system error taken for a failed write."""
    try:
        with Image.open(path) as im:
            m = np.asarray(im.convert("L"), dtype=np.float32) / 255.0
    except (OSError, ValueError, SyntaxError) as e:
        raise DataError(f"cannot read the image's mask from the dataset's layout: its file {path} is not a readable "
                        f"image ({e})",
                        files=[str(path)], fix="replace the mask file with a readable image (PNG)") from None
    if m.shape != (size, size):
        m = np.asarray(Image.fromarray(m, mode="F").resize((size, size), Image.Resampling.BOX))
    return m >= 0.5


def check_records(records: Sequence[Record], *, workers: int = 8, progress: bool = False,
                  max_pixels: int | None = DEFAULT_MAX_PIXELS) -> tuple[list[Record], list[ImageInfo], list[Problem]]:
    """Probe every record's header. Returns the good records, their infos, and the problems."""
    def one(rec: Record) -> ImageInfo | Problem:
        try:
            info = imageio.probe(rec.path, max_pixels=max_pixels)
        except TooLarge as e:
            return Problem(str(rec.path), "large", e.detail)
        except DataError as e:
            kind = ("missing" if not rec.path.exists() else
                    "denied" if e.message.endswith(": permission denied") else "unreadable")
            return Problem(str(rec.path), kind, e.message.split(": ", 1)[-1] if kind != "missing"
                           else "does not exist")
        if min(info.width, info.height) < MIN_SOURCE_SIDE:
            return Problem(str(rec.path), "size", f"{info.width}x{info.height} pixels")
        return info

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(tqdm(pool.map(one, records), total=len(records), desc="checking images",
                            disable=not progress, unit="img"))
    good, infos, problems = [], [], []
    for rec, res in zip(records, results, strict=True):
        if isinstance(res, Problem):
            problems.append(res)
        else:
            good.append(rec)
            infos.append(res)
    return good, infos, problems


def raise_for_problems(problems: Sequence[Problem], *, root: Path) -> None:
    """One DataError for all problems, grouped by kind, each with its fix."""
    if not problems:
        return
    by_kind = Counter(p.kind for p in problems)
    parts = ", ".join(f"{n} {k}" for k, n in by_kind.most_common())
    fixes = "; ".join(f"{k}: {_FIXES.get(k, 'fix the file')}" for k in by_kind)
    if any(p.kind == "missing" and "mask of" in p.detail for p in problems):   # (skip_bad would drop the image too)
        fixes += ("; a missing mask: restore it, or empty the image's mask cell in the CSV (only VS-Snow with "
                  "vessels from the dataset and the segmenter's training read masks)")
    raise DataError(f"{len(problems)} problem(s) in dataset {root} ({parts}):",
                    files=[str(p) for p in problems],
                    fix=f"{fixes}; or pass skip_bad=True to leave these files out and continue")


_DECLARED: dict[Path, ReadOptions] = {}
_DECLARED_LOCK = threading.Lock()


@contextlib.contextmanager
def reading(root: str | Path, *, layout: str = "auto", generic: GenericOptions | None = None,
            skip_bad: bool = False, max_pixels: int | None = DEFAULT_MAX_PIXELS,
            allow_outside: bool = False, channels: int = 0, crop: str = "auto",
            modality: str = "auto", xray_views: str = "") -> Iterator[None]:
    """Declare how the dataset folder ``root`` is read, for code that opens it by its path alone (the
    evaluation opens the real data itself): inside the block, :func:`open_dataset` of ``root`` without a layout
    or generic description of its own uses these (and ``channels``, ``crop``, ``modality`` where it leaves them
    at their defaults), so ``evaluate --real`` takes the same layout options as every other command, and
    ``medanon.evaluate(real=ds)`` reads ``ds``'s folder as ``ds`` was read (``reading(ds.root,
    **vars(ds.read_options))``)."""
    key = _real_folder(root)
    opts = ReadOptions(layout, generic, skip_bad, max_pixels, allow_outside, channels, crop, modality, xray_views)
    with _DECLARED_LOCK:
        before = _DECLARED.get(key)
        _DECLARED[key] = opts
    try:
        yield
    finally:
        with _DECLARED_LOCK:
            if before is None:
                _DECLARED.pop(key, None)
            else:
                _DECLARED[key] = before


def _real_folder(root: str | Path) -> Path:
    """The real path of the dataset folder ``root``; a loop of symbolic links is a :class:`DataError` naming it (Python
    raises a bare RuntimeError)."""
    try:
        return Path(root).resolve()
    except (RuntimeError, OSError) as e:
        raise DataError(f"dataset folder {root} leads through a loop of symbolic links (or a link that cannot be "
                        f"read): it names no folder ({e})", fix="fix or remove the link, or give the folder itself"
                        ) from None


def open_dataset(root: str | Path, cfg: DataConfig | None = None, *, generic: GenericOptions | None = None,
                 progress: bool = False, max_pixels: int | None = DEFAULT_MAX_PIXELS,
                 allow_outside: bool = False, check_pixels: bool | None = None,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> ImageDataset:
    """Scan, check and wrap a dataset folder. See the module docstring for error handling.

    ``max_pixels``: images claiming more are bad files (kind ``large``). ``allow_outside``: read files whose
    real path lies outside the dataset folder (see :func:`medanon.data.layouts.scan`). ``check_pixels``: decode
    every image now and skip those that fail (default: when ``cfg.skip_bad``; only with it)."""
    cfg = cfg or DataConfig()
    root = Path(root)
    declared = _DECLARED.get(_real_folder(root))
    if declared is not None and generic is None and cfg.layout == "auto":
        cfg = dataclasses.replace(cfg, layout=declared.layout, skip_bad=cfg.skip_bad or declared.skip_bad,
                                  channels=cfg.channels or declared.channels,
                                  crop=declared.crop if cfg.crop == "auto" else cfg.crop,
                                  modality=declared.modality if cfg.modality == "auto" else cfg.modality,
                                  xray_views=cfg.xray_views or declared.xray_views)
        generic, allow_outside = declared.generic, allow_outside or declared.allow_outside
        if max_pixels == DEFAULT_MAX_PIXELS:
            max_pixels = declared.max_pixels
    validate(cfg)
    if not root.is_dir():
        raise DataError(f"dataset folder {root} does not exist or is not a folder",
                        fix="pass the folder that holds the images and the labels CSV")
    from medanon.locks import refuse_while_written

    refuse_while_written(root, what="dataset")          # being made or replaced now (a phantom): its files change
    layout = "generic" if generic is not None and cfg.layout == "auto" else cfg.layout
    sc: Scan = scan(root, layout, generic=generic, allow_outside=allow_outside)
    if cfg.modality != "auto" and sc.modality is not None and cfg.modality != sc.modality:
        raise DataError(f"{root} holds {sc.modality} images (its {sc.layout} layout says so), and modality="
                        f"{cfg.modality!r} would read them as {cfg.modality} images (with the other modality's "
                        "channels and models)", fix="leave modality= out, or pass the folder of the modality you mean")
    modality = cfg.modality if cfg.modality != "auto" else sc.modality
    records = select_views(sc.records, cfg.xray_views, root=root, modality=modality)    # before any header is read
    good, infos, problems = check_records(records, progress=progress, max_pixels=max_pixels)
    copies = duplicate_problems(good)                   # one image under two patient ids: one person as two
    if copies:
        dropped = {p.path for p in copies}
        infos = [i for r, i in zip(good, infos, strict=True) if str(r.path) not in dropped]
        good = [r for r in good if str(r.path) not in dropped]
    problems = list(sc.problems) + problems + copies
    if problems and not cfg.skip_bad:
        raise_for_problems(problems, root=root)
    if problems:
        log.warning("skipping %d problem file(s) in %s, as skip_bad asks:\n%s", len(problems), root,
                    "\n".join(f"  - {p}" for p in problems[:20]) + (f"\n  ... and {len(problems) - 20} more"
                                                                     if len(problems) > 20 else ""))
    if not good:
        raise DataError(f"no usable images in {root} (layout {sc.layout})",
                        fix="check the folder and the layout= it is read with; the log lists what was left out and why")
    channels = resolve_channels(cfg.channels, modality, infos, good)
    crop = cfg.crop
    if crop == "auto":
        crop = "fov" if modality == "fundus" else "center"
    if cfg.modality == "auto" and modality is None and cfg.crop == "auto":
        log.info("modality unknown for %s: using a centre crop (modality='fundus' crops to the field of view)", root)
    ds = ImageDataset(good, size=cfg.size, channels=channels, crop=crop, modality=modality, layout=sc.layout,
                      root=root, skipped=problems, infos=infos, max_pixels=max_pixels,
                      read_options=ReadOptions(layout, generic, cfg.skip_bad, max_pixels, allow_outside, cfg.channels,
                                               cfg.crop, cfg.modality, canonical_views(cfg.xray_views)),
                      transform=transform)
    ds.source_files = list(sc.files)                     # labels and descriptor files (the output check's inputs)
    if cfg.skip_bad and check_pixels is not False:
        # Corrupt pixel data behind a good header: find it now (the tensors are kept, so this costs no
        # second decode) rather than failing halfway through a run that was told to skip bad files.
        bad = verify_decoding(ds, progress=progress)
        if bad:
            log.warning("skipping %d image(s) whose pixels cannot be decoded, as skip_bad asks:\n%s", len(bad),
                        "\n".join(f"  - {p}" for p in bad[:20]))
            ds = drop_records(ds, bad)
        if not len(ds):
            raise DataError(f"no image of {root} can be decoded", files=[p.path for p in bad],
                            fix="check the files listed; the log above says why each one failed")
    return ds


def verify_decoding(ds: ImageDataset, *, workers: int | None = None, progress: bool = False,
                    indices: Sequence[int] | None = None) -> list[Problem]:
    """Decode and preprocess every image (or those at ``indices``); return a problem for each one that fails.

    Header checks (``open_dataset``) catch missing and non-image files; this also catches
    truncated or corrupt pixel data, at the cost of reading every image once (the tensors stay in the dataset's
    cache, within its budget, so a run that reads them next does not decode them again).
    """
    read = getattr(ds, "_pixels", None) or ds.load      # the file's pixels: a transform= error is not the file's

    def one(i: int) -> Problem | None:
        try:
            read(i)
        except TooLarge as e:
            return Problem(str(ds.records[i].path), "large", e.detail)
        except DataError as e:
            return Problem(str(ds.records[i].path), "unreadable", e.message.split(": ", 1)[-1])
        return None

    todo = range(len(ds)) if indices is None else list(indices)
    with ThreadPoolExecutor(max_workers=decode_threads(workers)) as pool:
        res = list(tqdm(pool.map(one, todo), total=len(todo), desc="decoding images",
                        disable=not progress, unit="img"))
    return [p for p in res if p is not None]


def subset(ds: ImageDataset, indices: Sequence[int], *, skipped: Sequence[Problem] | None = None) -> ImageDataset:
    """The records ``indices`` of ``ds`` as a dataset of their own (e.g. one patient-level split); images already
    decoded stay decoded. ``skipped`` replaces the list of left-out files (default: ``ds``'s)."""
    keep = list(indices)
    if hasattr(ds, "take"):                              # images held in memory (medanon.data.memory)
        return ds.take(keep)
    out = ImageDataset([ds.records[i] for i in keep], size=ds.size, channels=ds.channels, crop=ds.crop,
                       modality=ds.modality, layout=ds.layout, root=ds.root,
                       skipped=list(ds.skipped if skipped is None else skipped),
                       infos=[ds.infos[i] for i in keep] if ds.infos else [],
                       max_pixels=ds.max_pixels, cache_bytes=ds.cache_bytes, read_options=ds.read_options,
                       transform=ds.transform)
    out.source_files = list(getattr(ds, "source_files", []))
    # a part of what the folder opens to (e.g. one split): code that reads whole folders refuses it (evaluate)
    out.part_of = ds.part_of or (len(ds.records) if len(keep) < len(ds.records) else None)
    out.folder_records = ds.folder_records or (list(ds.records) if len(keep) < len(ds.records) else None)
    paths = {ds.records[i].path for i in keep}
    out._cache = {p: t for p, t in ds._cache.items() if p in paths}          # decoded tensors carry over
    out._cache_used = [sum(v.numel() * v.element_size() for t in out._cache.values() for v in t.values())]
    return out


def drop_records(ds: ImageDataset, problems: Sequence[Problem]) -> ImageDataset:
    """A copy of ``ds`` without the records named in ``problems`` (which join ``skipped``)."""
    bad = {p.path for p in problems}
    out = subset(ds, [i for i, r in enumerate(ds.records) if str(r.path) not in bad],
                 skipped=list(ds.skipped) + list(problems))
    out.part_of = ds.part_of                            # the folder read again leaves the same files out
    out.folder_records = [r for r in ds.folder_records if str(r.path) not in bad] if ds.folder_records else None
    return out
