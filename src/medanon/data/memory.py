"""Images held in memory as a dataset: what ``medanon.anonymize.<method>(tensor, patient_ids=...)`` reads.

:class:`InMemoryDataset` is an :class:`~medanon.data.dataset.ImageDataset` whose records have no file
(``record.path is None``): each image is a row of one ``(N, C, H, W)`` float32 tensor in ``[-1, 1]``,
with its patient id and labels. Every method reads it as it reads a folder (``ds.load(i)``); nothing
is written to disk. An image's record id comes from its content (its 8-bit pixels), as the id of
``images/<sha256>.png`` in a folder written by :func:`write_dataset_folder`: a release made from some
of the images (``x[train]``) and :func:`medanon.evaluate` of all of them (``real=x``, which reads the
real data from such a folder in a private temporary directory, removed afterwards) agree on every
record.

Example:
    >>> import torch
    >>> from medanon.data.memory import InMemoryDataset
    >>> ds = InMemoryDataset(torch.zeros(4, 1, 8, 8), patient_ids=["a", "a", "b", "c"], modality="xray")
    >>> len(ds), ds.size, ds.channels, ds.patients, ds.records[0].path is None
    (4, 8, 1, ['a', 'b', 'c'], True)
    >>> ds.load(2)["image"].shape, ds.load(2)["patient_id"]
    (torch.Size([1, 8, 8]), 'b')
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medanon.data.dataset import ImageDataset, ReadOptions
from medanon.data.imageio import image_to_uint8
from medanon.data.records import Record, make_record_id
from medanon.errors import DataError, user_stacklevel

MEMORY_LAYOUT = "memory"


def image_names(images: torch.Tensor) -> list[str]:
    """The relative path each image has in a folder written by :func:`write_dataset_folder`: ``images/`` and the
    sha256 of its 8-bit pixels (and shape); the n-th copy of one image gets ``-n``."""
    seen: dict[str, int] = {}
    out = []
    for img in images:
        h = hashlib.sha256(str(tuple(img.shape)).encode())
        h.update(image_to_uint8(img).tobytes())
        key = h.hexdigest()[:24]
        n = seen[key] = seen.get(key, -1) + 1
        out.append(f"images/{key}{f'-{n}' if n else ''}.png")
    return out


class InMemoryDataset(ImageDataset):
    """``images`` (N, C, H, W) float32 in [-1, 1] with one patient id per image, as a dataset (no files).

    ``labels``: label name -> N canonical floats (``nan`` = missing; :mod:`medanon.data.labels`).
    ``modality``: ``fundus`` or ``xray``. ``transform``: as for folders (applied on every ``load``).
    """

    def __init__(self, images: torch.Tensor, *, patient_ids: Sequence[str],
                 labels: Mapping[str, Sequence[float]] | None = None, modality: str | None = None,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 indices: Sequence[int] | None = None, names: Sequence[str] | None = None,
                 patients_known: bool = True):        # False: the ids were made up, one per image
        n, c, h, _ = images.shape
        keep = list(range(n)) if indices is None else list(indices)
        labels = dict(labels or {})
        names = list(names) if names is not None else image_names(images)
        records = [Record(path=None, patient_id=str(patient_ids[i]),              # type: ignore[arg-type]
                          labels={k: float(v[i]) for k, v in labels.items()}, record_id=make_record_id(names[i]),
                          patient_known=patients_known)
                   for i in keep]
        super().__init__(records, size=h, channels=c, crop="none", modality=modality, layout=MEMORY_LAYOUT,
                         root=None, transform=transform,
                         read_options=ReadOptions(layout="medanon", channels=c, crop="none",
                                                  modality=modality or "auto"))
        self.images = images
        self._rows = keep                       # row of ``images`` of each record
        self._labels, self._pids, self._names = labels, list(patient_ids), names
        self._patients_known = patients_known
        self.source_files = []

    def _pixels(self, index: int) -> dict[str, torch.Tensor]:
        return {"image": self.images[self._rows[index]], "fov": torch.ones(1, self.size, self.size, dtype=torch.bool)}

    def rows_of(self, record_ids: Sequence[str]) -> list[int]:
        """The row of the images given (``images[row]``) of each record id, as a release's mapping names its sources
        (``mapping["records"][image]["sources"]``): which of your images went into a released record.

        >>> import torch
        >>> ds = InMemoryDataset(torch.rand(3, 3, 8, 8) * 2 - 1, patient_ids=["a", "b", "c"])
        >>> ds.rows_of([ds.records[2].record_id, ds.records[0].record_id])
        [2, 0]
        """
        row = {r.record_id: self._rows[i] for i, r in enumerate(self.records)}
        missing = [i for i in record_ids if i not in row]
        if missing:
            raise KeyError(f"record id(s) {missing[:3]} are not images of this dataset")
        return [row[i] for i in record_ids]

    def take(self, indices: Sequence[int]) -> InMemoryDataset:
        """The records ``indices`` as a dataset of their own (no copy of the images)."""
        return InMemoryDataset(self.images, patient_ids=self._pids, labels=self._labels, modality=self.modality,
                               transform=self.transform, indices=[self._rows[i] for i in indices], names=self._names,
                               patients_known=self._patients_known)

    def content_digest(self) -> dict[str, Any]:
        """One sha256 over the images' bytes (what a folder's ``files_digest`` is for files)."""
        h = hashlib.sha256()
        for row in self._rows:
            h.update(self.images[row].contiguous().numpy().tobytes())
        return {"files": 0, "images": len(self._rows), "bytes": len(self._rows) * self.images[0].numel() * 4,
                "mode": "memory", "sha256": h.hexdigest()}

    def __repr__(self) -> str:
        return (f"InMemoryDataset({len(self)} images {self.channels}x{self.size}x{self.size}, "
                f"{len(self.patients)} patients, modality {self.modality!r}, labels {self.label_names})")


def is_in_memory(ds: Any) -> bool:
    """Whether ``ds`` holds its images in memory (its records have no files)."""
    return isinstance(ds, InMemoryDataset)


def write_dataset_folder(ds: InMemoryDataset, out: str | Path) -> Path:
    """Write ``ds`` as a folder of medanon's layout (``dataset.yaml``, ``labels.csv``, ``images/NNNNNN.png``)
    whose record ids are ``ds``'s: for code that reads the real data from a folder (the evaluation).

    The PNGs are 8-bit (the images are quantised as a saved release's are). ``out`` must not exist.
    """
    import yaml
    from PIL import Image

    from medanon.fsutil import atomic_dir

    if ds.modality not in ("fundus", "xray"):
        raise DataError(f"the images' modality is {ds.modality!r}; a dataset folder needs fundus or xray",
                        fix="pass modality='fundus' or modality='xray'")
    names = list(ds.label_names)
    with atomic_dir(Path(out), overwrite=False, marker="dataset") as tmp:
        (tmp / "images").mkdir()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["image", "patient_id", *names])
        for i, row in enumerate(ds._rows):
            Image.fromarray(image_to_uint8(ds.images[row])).save(tmp / ds._names[row])
            rec = ds.records[i]
            w.writerow([ds._names[row], rec.patient_id,
                        *("" if math.isnan(rec.labels.get(n, math.nan)) else _cell(rec.labels[n]) for n in names)])
        (tmp / "labels.csv").write_text(buf.getvalue(), encoding="utf-8")
        descriptor = {"format": "medanon-dataset", "version": 1, "modality": ds.modality, "labels": "labels.csv",
                      "image_col": "image", "patient_col": "patient_id", "label_cols": names,
                      "description": "images held in memory, written for an evaluation"}
        (tmp / "dataset.yaml").write_text(yaml.safe_dump(descriptor, sort_keys=False), encoding="utf-8")
        (tmp / "memory.json").write_text(json.dumps({"images": len(ds)}) + "\n", encoding="utf-8")
    return Path(out)


def _cell(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


class ValueRangeWarning(UserWarning):
    """Images held in memory use only a corner of their declared ``value_range`` (e.g. [0, 1] images declared as
    (-1, 1), which would be released washed out)."""


def _range_pair(value_range) -> tuple[float, float]:
    if isinstance(value_range, (str, bytes)) or not isinstance(value_range, (tuple, list)) or len(value_range) != 2:
        raise DataError(f"value_range={value_range!r} is not a (low, high) pair",
                        fix="pass value_range=(low, high): the values that mean black and white, e.g. (0, 1)")
    if any(isinstance(v, (str, bytes, bool)) for v in value_range):
        raise DataError(f"value_range={value_range!r} holds something that is not a number",
                        fix="pass value_range=(low, high) of two numbers, e.g. (0, 255)")
    try:
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise DataError(f"value_range={value_range!r} holds something that is not a number",
                        fix="pass value_range=(low, high) of two numbers, e.g. (0, 255)") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise DataError(f"value_range={value_range!r} is not two finite numbers: every value would be read as "
                        "black or as NaN", fix="pass the finite values that mean black and white, e.g. (0, 1)")
    return lo, hi


def to_float_images(array: np.ndarray | torch.Tensor, *, value_range: tuple[float, float] | None,
                    name: str) -> torch.Tensor:
    """``array`` (N, C, H, W) as float32 in [-1, 1]. ``value_range``: the range the values span; 0-255 by default
    for 8-bit integers (uint8) only. Floats and wider integers need it: a range guessed from the values would let one
    image's pixels change how every other image is read (and released). Values that all lie in the upper half of
    the range, or within 1/128 of its low end, raise a :class:`ValueRangeWarning`: the range is likely not theirs."""
    try:
        t = torch.as_tensor(array).detach().cpu()
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as e:   # object arrays, meta tensors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{name} cannot be read as numbers ({first})",
                        fix="pass images as a numeric array or tensor with data (floats or 8-bit integers)") from None
    if t.dtype == torch.bool or t.is_complex():
        raise DataError(f"{name} holds {t.dtype} values", fix="pass images as floats or 8-bit integers")
    if value_range is None:
        if t.is_floating_point():
            span = f"spans [{float(t.min()):.4g}, {float(t.max()):.4g}]" if t.numel() else "is empty"
            raise DataError(f"{name} holds floating-point images ({span}) and no value_range: medanon does not "
                            "guess what black and white are from the values, since one image's pixels would then "
                            "change how every other image is read",
                            fix="pass value_range=(0, 1) or value_range=(-1, 1), or a dataset made with "
                                "medanon.data.as_dataset(images, value_range=...) (8-bit integers need none)"
                            if name in ("ds=", "real=") else
                            f"pass {name}medanon.data.as_dataset(images, value_range=(0, 1)) (or (-1, 1)); the "
                            f"call's value_range= reaches {name} only when the images released are floating-point "
                            "images held in memory too")
        if t.dtype != torch.uint8:
            wide = t.to(torch.int64)                    # (min() has no kernel for every integer type)
            span = f" spanning [{int(wide.min())}, {int(wide.max())}]" if t.numel() else ""
            raise DataError(f"{name} holds {str(t.dtype).removeprefix('torch.')} integers{span} and no value_range: "
                            "only 8-bit images (uint8) are read as 0-255 without one",
                            fix="pass value_range=(0, 65535) for 16-bit images, (0, 4095) for 12-bit ones, (0, 255) "
                                "for 8-bit values held in a wider type")
        value_range = (0.0, 255.0)
    lo, hi = _range_pair(value_range)
    if not hi > lo:
        raise DataError(f"value_range={value_range!r} is empty", fix="pass (low, high) with high > low, e.g. (0, 255)")
    t = t.float()
    if not bool(torch.isfinite(t).all()):
        raise DataError(f"{name} holds NaN or infinite values", fix="replace them before anonymising")
    if not t.numel():
        return t.contiguous()
    low, high = float(t.min()), float(t.max())
    tol = 1e-3 * (hi - lo)
    if low < lo - tol or high > hi + tol:
        raise DataError(f"{name} spans [{low:.4g}, {high:.4g}], outside value_range ({lo:g}, {hi:g})",
                        fix="pass value_range=(low, high): the values that mean black and white, e.g. (0, 255)")
    if low >= (lo + hi) / 2 or high <= lo + (hi - lo) / 128:
        warnings.warn(f"{name} spans [{low:.4g}, {high:.4g}], only "
                      f"{'the upper half' if low >= (lo + hi) / 2 else 'the lowest 1/128'} of "
                      f"value_range ({lo:g}, {hi:g}): if that is not the images' range (e.g. images in [0, 1] "
                      "declared as (-1, 1) or (0, 255)), they are read washed out or black; pass their own range",
                      ValueRangeWarning, stacklevel=user_stacklevel())
    return ((t - lo) / (hi - lo) * 2 - 1).clamp(-1, 1).contiguous()
