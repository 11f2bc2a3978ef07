"""What an evaluation reads: the real dataset with its patient-level split, and release folders.

The real dataset is opened with the same loaders as everywhere (:func:`medanon.data.dataset.open_dataset`)
and split by patient, either from a splits CSV (``record_id,patient_id,split,bytes``, as written
by ``medanon data split`` and the demo; a CSV whose file sizes differ from the dataset's is another dataset's) or
recomputed with :func:`medanon.data.splits.split_patients` from the seed. The release's *source* split holds the
patients a release may contain; the *held-out* split holds patients no release may contain: the utility test set
and the controls of the attacks.

A release is read only through its folder (:func:`medanon.release.read_release`): images,
``labels.csv``, ``manifest.json``. The private mapping (record -> source record ids), which the
data custodian keeps outside the release, is the ground truth of the attacks that need it; it is
found at ``<release>.mapping.json`` next to the release folder unless given explicitly; a release evaluated without
one warns :class:`NoMapping` (the attacks that need it are not measured).
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from medanon.config import DataConfig
from medanon.data.dataset import ImageDataset, open_dataset
from medanon.data.records import Record
from medanon.data.splits import SPLITS, split_patients
from medanon.data.tensors import resize_to
from medanon.errors import ConfigError, DataError
from medanon.release.files import read_release
from medanon.release.mapping import mapping_source_mismatch, read_mapping
from medanon.release.writer_safety import MAPPING_SUFFIX
from medanon.runtime import files_digest


class NoMapping(UserWarning):
    """A release is evaluated without its private mapping: membership, linkability, singling out and differencing,
    which need to know whose images each record holds, are not measured for it."""

log = logging.getLogger(__name__)



@dataclass
class RealData:
    root: Path
    dataset: ImageDataset                       # the opened dataset (records, labels)
    images: torch.Tensor                        # (N, C, H, W) float32 in [-1, 1]
    patients: np.ndarray                        # (N,) patient ids (str)
    split: np.ndarray                           # (N,) "train" | "val" | "test"
    modality: str | None
    phantom: bool
    digest: str                                 # content digest of the image files
    split_source: str                           # where the split came from (file or seed)
    split_settings: dict | None = None          # the recomputed split's seed, val, test, stratify (None: a file)
    index: dict[str, int] = field(default_factory=dict)    # record_id -> row
    files_sha256: str | None = None             # runtime.files_digest of its files (a checkpoint's data.source)

    @property
    def records(self) -> list[Record]:
        return self.dataset.records

    def label(self, name: str) -> np.ndarray:
        return self.dataset.label_array(name)

    @property
    def label_names(self) -> list[str]:
        return self.dataset.label_names

    def rows(self, split: str) -> np.ndarray:
        return np.flatnonzero(self.split == split)


def _shown(path: Path, records: list[Record]) -> str:
    """A record's file as the dataset names it: relative to the folder of every record (CheXpert and MIMIC reuse a
    few file names in every study, so a bare name names nothing)."""
    import os

    try:
        top = os.path.commonpath([str(Path(r.path).parent) for r in records])
        return os.path.relpath(path, top)
    except ValueError:
        return str(path)


def _read_splits_csv(path: Path, records: list[Record]) -> np.ndarray:
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.DictReader(f))
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not a splits CSV: it is not UTF-8 text (byte {e.start}: {e.reason})",
                        files=[str(path)], fix="pass a file written by `medanon data split` or the demo "
                                               "(splits_<modality>.csv)") from None
    except csv.Error as e:
        raise DataError(f"{path} is not a splits CSV ({e})", files=[str(path)],
                        fix="pass a file written by `medanon data split` or the demo (splits_<modality>.csv)") from None
    if not rows or not {"record_id", "split"} <= set(rows[0]):
        raise DataError(f"{path} is not a splits CSV (columns record_id, patient_id, split)",
                        fix="pass a file written by `medanon data split` or the demo (splits_<modality>.csv)")
    by_id = {r["record_id"]: r for r in rows}
    absent = [r for r in records if r.record_id not in by_id]
    if absent:
        from medanon.data.views import LATERAL, view_name

        views = {view_name(r) for r in absent}
        fix = ("the splits CSV was written with xray_views='frontal' (or other views): read the data with the same "
               "views in every command" if views <= LATERAL else
               "pass the splits CSV written for this dataset (same folder, same layout, same views)")
        raise DataError(f"{len(absent)} image(s) of the dataset are not in {path}" +
                        (f" (all of them {', '.join(sorted(views))} views)" if views <= LATERAL else ""),
                        files=[_shown(r.path, records) for r in absent], fix=fix)
    extra = len(by_id.keys() - {r.record_id for r in records})
    if extra:
        import warnings

        from medanon.data.layouts.common import LayoutWarning
        from medanon.errors import user_stacklevel

        warnings.warn(f"{path} lists {extra} record(s) the dataset does not have (images left out as unreadable, or a "
                      "splits file of another version of the dataset): those rows are ignored; check "
                      "that it is this dataset's", LayoutWarning, stacklevel=user_stacklevel())
    fix = "write it again with `medanon data split` (one part per patient)"
    unknown = sorted({by_id[r.record_id]["split"] for r in records} - set(SPLITS))
    if unknown:
        raise DataError(f"{path} names split(s) {unknown}; a splits CSV holds only {', '.join(SPLITS)}", fix=fix)
    if "patient_id" in rows[0]:
        other = [_shown(r.path, records) for r in records if by_id[r.record_id]["patient_id"] != str(r.patient_id)]
        if other:
            raise DataError(f"{path} gives {len(other)} image(s) another patient than the dataset does", files=other,
                            fix="pass the splits CSV written for this dataset")
    if "bytes" in rows[0]:                                # files of the same names but other contents
        from medanon.data.splits import file_bytes

        other = [_shown(r.path, records) for r in records if by_id[r.record_id]["bytes"] not in ("", file_bytes(r))]
        if other:
            raise DataError(f"{path} was written for other files: {len(other)} of the {len(records)} image(s) of the "
                            "dataset have another size than it records (a splits CSV of another dataset whose file "
                            "names are the same, or images replaced since)", files=other,
                            fix="pass the splits CSV written for this dataset, or write one for it with "
                                "`medanon data split`")
    parts: dict[str, set[str]] = {}
    for r in records:
        parts.setdefault(str(r.patient_id), set()).add(by_id[r.record_id]["split"])
    split_up = sorted(p for p, s in parts.items() if len(s) > 1)
    if split_up:
        raise DataError(f"{path} puts {len(split_up)} patient(s) in more than one split (e.g. {split_up[0]} in "
                        f"{' and '.join(sorted(parts[split_up[0]]))}): held-out images of a released patient would "
                        "count as strangers", fix=fix)
    return np.array([by_id[r.record_id]["split"] for r in records])


def load_real(root: str | Path, *, size: int, splits_csv: str | Path | None = None, stratify: str = "auto",
              val: float = 0.15, test: float = 0.15, seed: int = 0, progress: bool = False,
              opened: Callable[[Any], None] | None = None) -> RealData:
    """Open, load and split the real dataset at ``size`` pixels. ``opened``: called with the opened dataset before
    any image is decoded (to check the outputs against every folder it reads)."""
    root = Path(root)
    ds = open_dataset(root, DataConfig(size=size), progress=progress)
    if opened is not None:
        opened(ds)
    images, _ = ds.tensors(progress=progress)
    settings = None
    if splits_csv is not None:
        split = _read_splits_csv(Path(splits_csv), ds.records)
        where = str(splits_csv)
    else:
        if stratify == "auto":
            stratify = "grade" if ds.modality == "fundus" else "pneumonia" if ds.modality == "xray" else ""
        assignment = split_patients(ds.records, val=val, test=test, stratify=stratify, seed=seed)
        split = np.array([assignment[r.patient_id] for r in ds.records])
        where = f"split_patients(val={val}, test={test}, stratify={stratify!r}, seed={seed})"
        settings = {"seed": int(seed), "val": float(val), "test": float(test),
                    "stratify": stratify if stratify in ds.label_names else ""}
    phantom = (root / "phantom.json").is_file()
    # the cache key of everything computed from the real data: its images and what labels.csv says of them (patient
    # ids and labels: an edited label must not reuse results computed with the old one)
    from medanon.data.records import records_digest
    from medanon.evaluate.cache import digest

    files = files_digest([r.path for r in ds.records], root=root)["sha256"]
    dig = digest(files, records_digest(ds.records))
    return RealData(root=root, dataset=ds, images=images,
                    patients=np.array([r.patient_id for r in ds.records]), split=split, modality=ds.modality,
                    phantom=phantom, digest=dig, split_source=where, split_settings=settings,
                    index={r.record_id: i for i, r in enumerate(ds.records)}, files_sha256=files)


@dataclass
class ReleaseData:
    path: Path
    name: str                                   # display name (folder name unless given)
    manifest: dict
    rows: list[dict[str, str]]
    images: torch.Tensor                        # (R, C, H, W) float32 in [-1, 1], at the evaluation size
    digest: str
    sources: list[list[int]] | None = None      # per record, rows of the real dataset it stands for (mapping)
    mapping_path: Path | None = None
    side: int | tuple[int, int] | None = None   # its image files' side ((h, w) if not square), before resizing

    @property
    def method(self) -> str:
        return str(self.manifest.get("method", "?"))

    @property
    def params(self) -> dict:
        return dict(self.manifest.get("params", {}))

    @property
    def setting(self) -> str:
        """Short parameter string for tables, e.g. ``k=5, epsilon=1000, per_element=yes`` (scalar parameters only;
        numbers as ``%g``, flags as yes / no, digests left out: a checksum is no setting a reader compares)."""
        def show(v) -> str:
            if isinstance(v, bool):
                return "yes" if v else "no"
            return f"{v:g}" if isinstance(v, float) else str(v)

        return ", ".join(f"{k}={show(v)}" for k, v in self.params.items()
                         if isinstance(v, (int, float, str, bool)) and not k.endswith(("sha256", "digest")))

    def label(self, name: str) -> np.ndarray:
        return np.array([float(r[name]) if r.get(name, "") not in ("", None) else math.nan for r in self.rows])

    @property
    def label_names(self) -> list[str]:
        return [c for c in (self.rows[0] if self.rows else {}) if c not in ("image", "n_sources", "n_people")
                and not c.endswith("_counts")]


def _read_png(path: Path) -> np.ndarray:
    from PIL import UnidentifiedImageError

    try:
        with Image.open(path) as im:
            a = np.asarray(im if im.mode in ("L", "RGB") else im.convert("RGB"))   # palette, RGBA, 16-bit: converted
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:   # PIL's errors for a damaged file
        raise DataError(f"release image {path} cannot be decoded ({e}): the release is damaged", files=[str(path)],
                        fix="run `medanon audit` on the release, and make it again") from None
    if a.ndim == 2:
        a = a[None]
    elif a.ndim == 3:
        a = a[..., :3].transpose(2, 0, 1)
    return a.astype(np.float32) / 127.5 - 1.0


def load_release(path: str | Path, real: RealData, *, size: int, mapping: str | Path | None = None,
                 name: str | None = None) -> ReleaseData:
    """Read a release folder (and its mapping, if present) and check it against the real data."""
    path = Path(path)
    manifest, rows = read_release(path)
    if not rows:
        raise DataError(f"release {path} has no records", fix="pass a release written by `medanon anonymize`")
    made_from = manifest.get("modality")
    if made_from and real.modality and made_from != real.modality:
        raise DataError(f"release {path} was made from {made_from} images (its manifest), the real dataset "
                        f"{real.root} holds {real.modality} images",
                        fix="evaluate against the dataset the release was made from")
    files = [path / r["image"] for r in rows]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise DataError(f"release {path} lists images that are missing", files=missing,
                        fix="re-run the anonymisation; a release folder must be complete")
    arrays = [_read_png(f) for f in files]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise DataError(f"release {path} mixes image shapes {sorted(shapes)}", files=[str(files[0])])
    images = torch.from_numpy(np.stack(arrays))
    c_real = real.images.shape[1]
    if images.shape[1] != c_real:
        if images.shape[1] == 3 and c_real == 1:
            images = images.mean(1, keepdim=True)
        elif images.shape[1] == 1 and c_real == 3:
            images = images.expand(-1, 3, -1, -1).contiguous()
        else:
            raise DataError(f"release {path} has {images.shape[1]}-channel images, the real data {c_real}")
        log.warning("release %s: converted %d-channel images to the real data's %d channels", path,
                    arrays[0].shape[0], c_real)
    h, w = int(images.shape[-2]), int(images.shape[-1])
    side = w if h == w else (h, w)
    images = resize_to(images, size)
    dig = files_digest([*files, path / "labels.csv", path / "manifest.json"], root=path)["sha256"]
    rel = ReleaseData(path=path, name=name or path.name, manifest=manifest, rows=rows, images=images, digest=dig,
                      side=side)
    mp = Path(mapping) if mapping is not None else path.with_name(path.name + MAPPING_SUFFIX)
    if mapping is not None and not mp.is_file():
        raise ConfigError(f"mapping file {mp} for release {path} does not exist",
                          fix="pass the mapping= file written when the release was made")
    if mp.is_file():
        rel.sources = _read_mapping(mp, rows, real, found=mapping is None)
        rel.mapping_path = mp
    return _in_content_order(rel, files)


def _in_content_order(rel: ReleaseData, files: list[Path]) -> ReleaseData:
    """The release's records in an order of their own: by their image's bytes, then their row, then their sources.
    ``labels.csv`` lists them by their secret random file names, so two runs of one release list them otherwise,
    and every seeded split or subsample over records (top-K membership's attacker and target records, linkability's
    pair subsample) drew other records: the same release evaluated twice read top-K 0.75 and 0.81."""
    from medanon.fsutil import sha256_file

    keys = [sha256_file(f) for f in files]
    rest = [sorted((k, str(v)) for k, v in row.items() if k != "image") for row in rel.rows]
    order = sorted(range(len(files)), key=lambda i: (keys[i], rest[i], rel.sources[i] if rel.sources else []))
    if order == list(range(len(files))):
        return rel
    rel.rows = [rel.rows[i] for i in order]
    rel.images = rel.images[torch.as_tensor(order)]
    if rel.sources is not None:
        rel.sources = [rel.sources[i] for i in order]
    return rel


class UnknownSources(DataError):
    """A release's mapping names source records that the real dataset does not hold."""


def _read_mapping(mp: Path, rows: list[dict[str, str]], real: RealData, *, found: bool = False) -> list[list[int]]:
    """The dataset rows each record stands for, from the mapping ``mp`` (``found``: not given, found beside the
    release under its default name)."""
    mapping = read_mapping(mp)
    recs = mapping["records"]
    listed = [r["image"] for r in rows]
    absent = [img for img in listed if img not in recs]
    if absent and found and len(absent) == len(listed):
        raise DataError(f"{mp}, found beside the release {mp.with_name(mp.name[:-len(MAPPING_SUFFIX)])} where its "
                        "mapping is looked for, names none of its records: it is the mapping of another release of "
                        "that name (one this release replaced)",
                        files=[str(mp)], fix="delete or move that file, or give the mapping= file written with this "
                                             "release")
    if absent:
        raise DataError(f"mapping {mp} does not cover {len(absent)} released record(s)", files=absent,
                        fix="pass the mapping written together with this release")
    unknown = sorted({s for img in listed for s in recs[img]["sources"] if s not in real.index})
    if unknown:
        raise UnknownSources(f"mapping {mp} names {len(unknown)} source record(s) that are not in the real dataset "
                        f"{real.root}", files=unknown[:20],
                        fix="evaluate against the dataset the release was made from (same folder and layout)")
    named = sorted({s for img in listed for s in recs[img]["sources"]}, key=real.index.__getitem__)  # dataset order
    why = mapping_source_mismatch(mapping, [real.dataset.records[real.index[s]] for s in named], root=real.root,
                                  modality=real.modality)
    if why:
        raise DataError(f"mapping {mp}: {why}", fix="evaluate against the dataset the release was made from")
    return [[real.index[s] for s in recs[img]["sources"]] for img in listed]
