"""``medanon.open_dataset``: a dataset folder of any layout, as the command line reads it."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from medanon.data.imageio import DEFAULT_MAX_PIXELS

if TYPE_CHECKING:
    from medanon.data.dataset import ImageDataset


def open_dataset(path: str | Path, *,
                 layout: str = "auto",                         # auto | medanon | aptos | eyepacs | brset | rsna | ...
                 size: int = 64,                               # output side in pixels (a power of two)
                 channels: int = 0,                            # 0 = by modality (fundus 3, X-ray 1), else 1 or 3
                 crop: str = "auto",                           # auto | fov | center | pad | none
                 modality: str = "auto",                       # auto | fundus | xray
                 skip_bad: bool = False,                       # leave out bad files (listed in .skipped)
                 xray_views: str = "",                         # X-ray views: "" all, "frontal", or e.g. "PA,AP"
                 max_pixels: int | None = DEFAULT_MAX_PIXELS,  # refuse images claiming more (decompression bombs)
                 allow_outside: bool = False,                  # read files the labels name outside the folder
                 labels_csv: str | Path | None = None,         # generic layout: the labels CSV
                 image_col: str | None = None,                 # generic layout: column of image paths
                 label_cols: Sequence[str] | str = (),         # generic layout: NAME or NAME=COLUMN each
                 patient_col: str | None = None,               # generic layout: column of patient ids
                 images_dir: str | Path | None = None,         # generic layout: folder image paths are relative to
                 transform: Callable | None = None,            # applied to every (C, H, W) image as it is loaded
                 progress: bool = False) -> ImageDataset:
    """Open the dataset folder ``path`` (an :class:`~medanon.data.dataset.ImageDataset`).

    The options are those of ``medanon data summary`` (defaults in :class:`medanon.config.DataConfig`).
    Images load lazily as (C, H, W) float32 tensors in [-1, 1]: ``ds.load(i)["image"]``; every file's
    header is checked here, and a bad file raises a :class:`~medanon.errors.DataError` naming it
    (or is left out with ``skip_bad=True``). ``max_pixels``: an image whose header claims more pixels is a
    bad file (raise it for genuinely large scans). ``allow_outside``: read files that the labels name
    outside ``path`` (``../x.png``, absolute paths, links out of the folder); refused by default. ``xray_views``: the
    chest X-ray views to read, ``"frontal"`` (every view but the laterals) or a list such as ``"PA,AP"``; every
    image by default, with a warning where an X-ray folder holds laterals (:mod:`medanon.data.views`).
    ``transform``: a function of each loaded (C, H, W) image returning one of the same shape (e.g. a
    torchvision transform); the methods anonymise what it returns. Images held in memory (tensors, arrays,
    PIL images) need no folder: pass them to the methods directly (:func:`medanon.data.as_dataset`).

    Example:
        >>> import medanon
        >>> root = medanon.make_phantom(patients=3, per_patient=2)
        >>> ds = medanon.open_dataset(root, size=16)
        >>> len(ds), ds.modality, ds.channels, ds.label_names[:2]
        (6, 'fundus', 3, ['grade', 'sex'])
        >>> ds.load(0)["image"].shape
        torch.Size([3, 16, 16])
    """
    from medanon.config import DataConfig, check_type, validate
    from medanon.data.dataset import open_dataset as _open
    from medanon.data.layouts import GenericOptions
    from medanon.errors import ConfigError, a_type, check_path_arg

    cfg = DataConfig(layout=layout, size=size, channels=channels, crop=crop, modality=modality, skip_bad=skip_bad,
                     xray_views="" if xray_views is None else xray_views)
    validate(cfg)
    generic = None
    if isinstance(label_cols, str):
        label_cols = [c for c in label_cols.split(",")]
    cols = tuple(c.strip() for c in label_cols if c.strip())
    if labels_csv is not None or layout == "generic":
        if labels_csv is None or image_col is None:
            raise ConfigError("the generic layout needs labels_csv and image_col",
                              fix="pass labels_csv='labels.csv', image_col='file'")
        generic = GenericOptions(labels_csv=Path(labels_csv), image_col=image_col, label_cols=cols,
                                 patient_col=patient_col, images_dir=Path(images_dir) if images_dir else None)
    elif image_col is not None or cols or patient_col is not None or images_dir is not None:
        raise ConfigError("image_col, label_cols, patient_col and images_dir describe the generic layout",
                          fix="pass labels_csv as well")
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path= is {a_type(path)}; open_dataset takes a folder (str or os.PathLike)",
                          fix="pass the dataset folder; images held in memory go to the methods directly "
                              "(medanon.data.as_dataset)")
    check_type("progress", progress, "bool")
    check_path_arg("path", path, optional=False, what="a folder path")
    if max_pixels is not None:
        from medanon.api._inputs import number

        number("max_pixels", max_pixels, integer=True)
        if max_pixels < 1:
            raise ConfigError(f"max_pixels={max_pixels} must be at least 1 (or None: no limit)",
                              fix="leave max_pixels out (the default limit), or pass a larger one")
    return _open(path, cfg, generic=generic, progress=progress, max_pixels=max_pixels, allow_outside=allow_outside,
                 transform=transform)


def make_phantom(out: str | Path | None = None, *, modality: str = "fundus", patients: int = 4, per_patient: int = 1,
                 size: int = 16, seed: int = 0, both_eyes: float = 0.0, overwrite: bool = False,
                 progress: bool = False) -> Path:
    """Write a phantom dataset (synthetic patients, :mod:`medanon.phantoms`) and return its folder.

    ``both_eyes``: the share of fundus patients photographed in both eyes (1 for a dataset shaped like EyePACS;
    :mod:`medanon.phantoms.fundus_fellow`). ``out`` defaults to a new temporary folder; ``overwrite`` replaces a
    phantom there (only a phantom). The
    defaults make a tiny dataset for examples and tests; ``medanon phantom`` (and
    :class:`medanon.config.PhantomConfig`) make realistic ones. Same seed, same bytes.

    Example:
        >>> import medanon
        >>> ds = medanon.open_dataset(medanon.make_phantom(modality="xray", patients=2), size=16)
        >>> len(ds), ds.modality, ds.channels
        (2, 'xray', 1)
    """
    import tempfile

    from medanon.api._inputs import number
    from medanon.config import PhantomConfig, check_type
    from medanon.errors import check_path_arg
    from medanon.phantoms.generate import generate

    check_type("overwrite", overwrite, "bool")
    check_type("progress", progress, "bool")
    check_path_arg("out", out, what="a folder path")
    for name, value in (("patients", patients), ("per_patient", per_patient), ("size", size), ("seed", seed)):
        number(name, value, integer=True)
    number("both_eyes", both_eyes)
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="medanon-phantom-")) / modality
    return generate(PhantomConfig(modality=modality, patients=patients, per_patient=per_patient, size=size,
                                  seed=seed, both_eyes=both_eyes, workers=1), out, overwrite=overwrite,
                    progress=progress)


def split_dataset(ds: ImageDataset | str | Path, *, val: float = 0.15, test: float = 0.15, stratify: str = "auto",
                  seed: int = 0, patient_ids=None, labels=None, modality: str | None = None,
                  value_range=None) -> dict[str, ImageDataset]:
    """Patient-level ``train``/``val``/``test`` parts of ``ds`` (a dataset, its folder, or images in memory with
    ``patient_ids=``, required, and optional ``labels=``, ``modality=``, ``value_range=``; no patient in two
    parts), as datasets.

    ``stratify``: a label to balance (a patient's worst value); ``auto`` is the modality's utility
    label (``grade`` for fundus, ``pneumonia`` for X-rays), as :func:`medanon.evaluate` splits when it
    is given no splits file: a release of ``split_dataset(ds)["train"]`` is evaluated against the
    held-out ``test`` patients with the defaults of both.

    Example:
        >>> import medanon
        >>> ds = medanon.open_dataset(medanon.make_phantom(patients=20, per_patient=2), size=16)
        >>> parts = medanon.split_dataset(ds)
        >>> {name: len(part) for name, part in parts.items()}
        {'train': 26, 'val': 6, 'test': 8}
        >>> {r.patient_id for r in parts["train"].records} & {r.patient_id for r in parts["test"].records}
        set()
    """
    from medanon.api._inputs import dataset_arg, number
    from medanon.data.dataset import subset
    from medanon.data.splits import check_train_left, split_made, split_patients
    from medanon.errors import ConfigError, a_type

    ds = dataset_arg(ds, method="split_dataset", patient_ids=patient_ids, labels=labels, modality=modality,
                     value_range=value_range, require_patients=True,
                     why="without them each image would be a patient of its own, and images of one person could "
                         "land in both train and test")
    for name, value in (("val", val), ("test", test)):
        number(name, value)
    number("seed", seed, integer=True)
    if not (0 <= val < 1 and 0 <= test < 1 and val + test < 1):
        raise ConfigError(f"val={val}, test={test}: each part is a fraction of the patients, >= 0, and together "
                          "below 1", fix="e.g. val=0.15, test=0.15")
    if not isinstance(stratify, str):
        raise ConfigError(f"stratify={stratify!r} is {a_type(stratify)}; it takes a label name",
                          fix="pass stratify='grade', 'auto' or '' (none)")
    if stratify == "auto":
        stratify = {"fundus": "grade", "xray": "pneumonia"}.get(ds.modality or "", "")
        stratify = stratify if stratify in ds.label_names else ""
    elif stratify and stratify not in ds.label_names:
        raise ConfigError(f"stratify={stratify!r} is not a label of this dataset (labels: "
                          f"{', '.join(ds.label_names) or 'none'})",
                          fix="pass one of its labels, 'auto' (the modality's utility label) or '' (no strata)")
    assignment = split_patients(ds.records, val=val, test=test, stratify=stratify, seed=seed)
    check_train_left(assignment, val=val, test=test)
    parts = {name: subset(ds, [i for i, r in enumerate(ds.records) if assignment[r.patient_id] == name])
             for name in ("train", "val", "test")}
    for name, part in parts.items():                 # recorded by a release of it (params.split)
        part.split_made = split_made(name, seed=seed, val=val, test=test, stratify=stratify)
    return parts
