"""Inputs as users hold them: :func:`as_dataset` turns a dataset, a folder or images in memory into a dataset.

Every ``medanon.anonymize.<method>`` and :func:`medanon.evaluate` call it on their data argument, so each
accepts:

* an opened dataset (:func:`medanon.open_dataset`, :func:`medanon.split_dataset`), kept as it is;
* a dataset folder, as ``str`` or any ``os.PathLike`` (opened with its detected layout);
* images in memory: a ``torch.Tensor`` or ``numpy`` array ``(N, C, H, W)`` (or ``(N, H, W)``; a numpy array
  may be ``(N, H, W, C)``), or a list of PIL images or of ``(C, H, W)`` tensors / arrays. They need
  ``patient_ids=`` (one per image) for the k-Same family; ``labels=`` (name -> one value per image) and
  ``modality=`` (``fundus`` / ``xray``; default: fundus for 3 channels, X-ray for 1; 3 equal channels, grey images
  repeated into RGB, are refused without it) are optional.

Images in memory stay in memory (:class:`~medanon.data.memory.InMemoryDataset`): nothing is written to
disk. Values: 8-bit integers span 0-255; floats need ``value_range=(low, high)`` (every method,
:func:`medanon.evaluate` and :func:`medanon.split_dataset` take it), since a range guessed from the values would
let one image's pixels change how every other image is read. A 3-D array with 3 in its first dimension (one RGB
image, or three grey ones?) is refused unless ``modality="xray"``.

Example:
    >>> import torch
    >>> from medanon.data.inputs import as_dataset
    >>> ds = as_dataset(torch.rand(6, 3, 16, 16), patient_ids=[0, 0, 1, 1, 2, 2], labels={"grade": [0, 1, 2, 0, 1, 4]},
    ...                 value_range=(0, 1))
    >>> len(ds), ds.modality, ds.label_names, ds.patients
    (6, 'fundus', ['grade'], ['0', '1', '2'])
    >>> as_dataset(3.0)                      # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    medanon.errors.DataError: ds= is a float; ...
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medanon.errors import ConfigError, DataError, a_type, user_stacklevel

DataLike = Any
"""What a method's ``ds`` (and :func:`medanon.evaluate`'s ``real``) may be: an ``ImageDataset``, a folder (``str`` or
``os.PathLike``), a ``torch.Tensor`` or ``numpy.ndarray`` of images, or a list of PIL images or (C, H, W) tensors."""

ACCEPTED = ("an opened dataset (medanon.open_dataset), a dataset folder (str or os.PathLike), a torch.Tensor or "
            "numpy array (N, C, H, W), or a list of PIL images or of (C, H, W) tensors")
MODALITIES = ("fundus", "xray")
MODALITY_CHANNELS = {"fundus": 3, "xray": 1}             # what the layouts decode each modality to


def _is_dataset(obj: Any) -> bool:
    return hasattr(obj, "records") and hasattr(obj, "load") and hasattr(obj, "modality")


def as_dataset(obj: Any, *, patient_ids: Sequence[Any] | None = None,
               labels: Mapping[str, Sequence[float]] | None = None, modality: str | None = None,
               transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
               value_range: tuple[float, float] | None = None, size: int = 64,
               require_patients: bool = False, argument: str = "ds", method: str | None = None,
               why: str | None = None):
    """``obj`` as an :class:`~medanon.data.dataset.ImageDataset` (see the module docstring for what it may be).

    ``patient_ids``, ``labels``, ``modality``, ``value_range``: for images in memory only (a dataset or a folder
    has its own). ``require_patients``: images in memory without ``patient_ids`` are refused (the k-Same
    family: its guarantee counts people; ``why`` says why, if for another reason), else each image is its own
    patient. ``transform``: a function applied
    to every image as it is loaded (see :class:`~medanon.data.dataset.ImageDataset`). ``size``: the side a
    folder is opened at. ``argument`` / ``method`` name the caller's argument in errors.
    """
    if _is_dataset(obj):
        _only_for_memory(argument, patient_ids=patient_ids, labels=labels, modality=modality, value_range=value_range)
        if transform is not None:
            import copy

            obj = copy.copy(obj)                 # the caller's dataset keeps its own transform
            obj.transform = transform
        return obj
    if isinstance(obj, (str, os.PathLike)):
        _only_for_memory(argument, patient_ids=patient_ids, labels=labels, value_range=value_range)
        from medanon.api.data import open_dataset

        return open_dataset(Path(obj), size=size, modality=modality or "auto", transform=transform)
    images = _images(obj, argument=argument, value_range=value_range, modality=modality)
    if images is None:
        raise DataError(f"{argument}= is {a_type(obj)}; {argument}= takes {ACCEPTED}",
                        fix=f"pass one of those as {argument}=")
    return from_images(images, patient_ids=patient_ids, labels=labels, modality=modality, transform=transform,
                       require_patients=require_patients, argument=argument, method=method, why=why)


def data_name(ds) -> str:
    """How messages name ``ds``: its folder, or "the images held in memory" (a dataset without a folder)."""
    root = getattr(ds, "root", None)
    return str(root) if root is not None else "the images held in memory"


def patients_known(ds) -> bool:
    """Whether ``ds``'s patient ids come from its source (False for APTOS, a labels CSV without a patient column,
    or images in memory without ``patient_ids``: each image then has an id of its own)."""
    return all(getattr(r, "patient_known", True) for r in ds.records)


def require_patient_ids(ds, method: str | None) -> None:
    """Refuse ``ds`` when its source has no patient ids (APTOS; a labels CSV without a patient column): a
    guarantee that counts people cannot be stated when each image merely counts as one."""
    if patients_known(ds):
        return
    where = f"{ds.root} ({ds.layout} layout)" if getattr(ds, "root", None) is not None else "the dataset"
    raise DataError(f"{method or 'this method'} needs patient ids, and {where} has none: each image would count as "
                    "a patient of its own, so a record of k images could show fewer than k people (both eyes, or "
                    "repeat visits, of one person)",
                    fix="describe the data with a labels CSV that has a patient column (layout='generic', "
                        "patient_col=COLUMN); if every image really is a different person, a column holding the "
                        "image name states exactly that")


def from_images(images: torch.Tensor, *, patient_ids=None, labels=None, modality=None, transform=None,
                require_patients: bool = False, argument: str = "ds", method: str | None = None,
                why: str | None = None):
    """An :class:`~medanon.data.memory.InMemoryDataset` of ``images`` (N, C, H, W) float32 in [-1, 1]."""
    from medanon.data.memory import InMemoryDataset

    n, c, h, w = images.shape
    if n == 0:
        raise DataError(f"{argument}= holds no image", fix="pass at least one image")
    if h != w:
        raise DataError(f"{argument}= holds {h}x{w} images; medanon's methods work on square images",
                        fix="crop or resize them to a square side (a power of two, e.g. 64) first")
    if c not in (1, 3):
        raise DataError(f"{argument}= has {c} channels; images have 1 (grayscale) or 3 (RGB)",
                        fix="pass (N, C, H, W) with C = 1 or 3 (a numpy array may be (N, H, W, C))")
    if patient_ids is None:
        if require_patients:
            why = why or "its guarantee counts people, and several images may show one person"
            raise ConfigError(f"{method or 'this method'} needs patient_ids= with images held in memory: {why}",
                              fix=f"pass patient_ids= one id per image ({n} ids), e.g. patient_ids=df['patient']")
    known = patient_ids is not None
    if not known:
        patient_ids = [f"image{i:06d}" for i in range(n)]
    patient_ids = _sequence(patient_ids, "patient_ids")
    if len(patient_ids) != n:
        raise ConfigError(f"patient_ids= has {len(patient_ids)} ids for {n} images", fix="pass one id per image")
    pids = [_patient_id(p) for p in patient_ids]
    labelled = _labels(labels, n)
    if known:
        _check_ids(pids, labelled.get("sex"))
    _refuse_copies(images, pids, argument=argument, known=known)
    if modality is None and c == 3 and _grey(images):
        raise DataError(f"{argument}= holds 3-channel images whose three channels are equal: grey images (e.g. chest "
                        "X-rays repeated into RGB, or blank images), which would be read as colour fundus photographs "
                        "(fundus models, optic-disc eye sides)",
                        fix="pass images[:, :1] with modality='xray' (X-rays have one channel), or modality='fundus' "
                            "if they are fundus photographs")
    if modality is None:
        modality = "fundus" if c == 3 else "xray"
    if modality not in MODALITIES:
        raise ConfigError(f"modality={modality!r} is not one of {', '.join(MODALITIES)}")
    want = MODALITY_CHANNELS[modality]
    if c != want:                                # a grey "fundus" or an RGB "X-ray": the models expect the other
        how = ("images.expand(-1, 3, -1, -1) repeats the grey channel" if want == 3 else
               "images.mean(1, keepdim=True) gives one grey channel")
        raise DataError(f"{argument}= has {c} channel{'s' if c > 1 else ''} and modality={modality!r}; {modality} "
                        f"images have {want}", fix=f"convert them ({how}) or pass the other modality")
    return InMemoryDataset(images, patient_ids=pids, labels=labelled, modality=modality,
                           transform=transform, patients_known=known)


def _grey(images: torch.Tensor) -> bool:
    """Whether every image's three channels are equal."""
    return bool(torch.equal(images[:, 0], images[:, 1]) and torch.equal(images[:, 0], images[:, 2]))


def _refuse_copies(images: torch.Tensor, pids: list[str], *, argument: str, known: bool) -> None:
    """A DataError where one image is held under two patient ids (:mod:`medanon.data.duplicates`)."""
    from medanon.data.duplicates import duplicate_images

    pairs = duplicate_images(images, pids)
    if not pairs:
        return
    shown = ", ".join(f"image {j} repeats image {i}" + (f" (patients {pids[i]!r} and {pids[j]!r})" if known else "")
                      for i, j in pairs[:5]) + (" ..." if len(pairs) > 5 else "")
    why = "one person counted as two: a k-Same group of k 'people' would hold the image twice"
    if known:
        raise DataError(f"{argument}= holds {len(pairs)} image(s) identical to an earlier image of another patient id: "
                        f"{shown}", fix=f"leave the copy out, or give both images the patient id of the person they "
                                        f"show ({why})")
    raise DataError(f"{argument}= holds {len(pairs)} image(s) identical to an earlier image, and without patient_ids= "
                    f"each image counts as its own person: {shown}",
                    fix=f"leave the copy out, or pass patient_ids= with one id per person ({why})")


def _check_ids(pids: list[str], sexes: list[float] | None) -> None:
    """The checks a dataset's patient column gets (:mod:`medanon.data.layouts.patient_ids`), on ``patient_ids=``:
    k, per-patient ε and patient-level splits count people by these ids."""
    from medanon.data.layouts.collect import is_blank
    from medanon.data.layouts.common import LayoutWarning
    from medanon.data.layouts.patient_ids import both_sexes, spelled_apart

    blank = [i for i, p in enumerate(pids) if is_blank(p)]
    if blank:
        raise ConfigError(f"patient_ids= holds {pids[blank[0]]!r} (image {blank[0]}"
                          + (f" and {len(blank) - 1} more" if len(blank) > 1 else "") + "), a missing-value "
                          "placeholder: it would make unrelated people one patient",
                          fix="give every image its patient's id, or leave the images without one out")
    clashes = spelled_apart(pids)
    if clashes:
        shown = "; ".join(" / ".join(repr(i) for i in sorted(c)) for c in clashes[:3])
        raise ConfigError(f"patient_ids= spells {len(clashes)} id(s) two ways ({shown}"
                          + (", ..." if len(clashes) > 3 else "") + "): one person or several? Ids that differ only "
                          "in case, surrounding spaces or leading zeros are not told apart",
                          fix="write each person's id one way (e.g. [str(p).strip().upper() for p in ids] if they "
                              "are one person), or make the ids of different people differ otherwise")
    mixed = both_sexes(zip(pids, sexes, strict=True)) if sexes is not None else []
    if mixed:
        warnings.warn(f"{len(mixed)} patient id(s) of patient_ids= hold images of both sexes (e.g. {mixed[0]!r}, "
                      "labels['sex']): two people's ids may collide; every per-patient guarantee counts them as one "
                      "person. Check the ids", LayoutWarning, stacklevel=user_stacklevel())


def _only_for_memory(argument: str, **given) -> None:
    named = [k for k, v in given.items() if v is not None]
    if named:
        raise ConfigError(f"{', '.join(n + '=' for n in named)} describe images held in memory; {argument}= is a "
                          "dataset or folder, which has its own",
                          fix="leave them out (open the folder with medanon.open_dataset(..., modality=) to choose "
                              "how it is read)")



def _images(obj: Any, *, argument: str, value_range, modality: str | None = None) -> torch.Tensor | None:
    """``obj`` as (N, C, H, W) float32 in [-1, 1], or None when it is no kind of image collection."""
    from medanon.data.memory import to_float_images

    if isinstance(obj, torch.Tensor):
        return to_float_images(_nchw(obj, argument, channels_last=False, modality=modality), value_range=value_range,
                               name=argument + "=")
    if isinstance(obj, np.ndarray):
        return to_float_images(_nchw(obj, argument, channels_last=True, modality=modality), value_range=value_range,
                               name=argument + "=")
    if isinstance(obj, (list, tuple)) and obj:
        try:
            from PIL import Image
        except ImportError:                      # pragma: no cover - pillow is a dependency
            Image = None
        if Image is not None and all(isinstance(x, Image.Image) for x in obj):
            arrays = [_pil_array(x) for x in obj]
            return to_float_images(_stack(arrays, argument, channels_last=True, pil=True),
                                   value_range=value_range, name=argument + "=")
        if all(isinstance(x, (torch.Tensor, np.ndarray)) for x in obj):
            arrays = [x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x for x in obj]
            numpy_items = all(isinstance(x, np.ndarray) for x in obj)      # numpy's images may be (H, W, C)
            return to_float_images(_stack(arrays, argument, channels_last=numpy_items),
                                   value_range=value_range, name=argument + "=")
        bad = next(x for x in obj if not isinstance(x, (torch.Tensor, np.ndarray)))
        raise DataError(f"{argument}= is a list holding {a_type(bad)}; a list holds PIL images or (C, H, W) "
                        "tensors or arrays, all alike", fix="convert every item to the same kind first")
    return None


def _pil_array(image) -> np.ndarray:
    """One PIL image as an array: 8-bit modes as a folder's images are read (grey as L, colour as RGB; alpha
    dropped), except a palette of greys, which stays one channel; 16-bit and float modes as they are (their
    value_range says what they mean)."""
    from medanon.data.imageio import pil_uint8

    u8 = pil_uint8(image)
    if u8 is None:
        return np.asarray(image)
    if image.mode in ("P", "PA") and (u8 == u8[..., :1]).all():       # a palette of greys only
        return np.ascontiguousarray(u8[..., 0])
    return u8


def _stack(arrays: list[np.ndarray], argument: str, *, channels_last: bool, pil: bool = False) -> np.ndarray:
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        mixed = channels_last and len({a.shape[:2] for a in arrays}) == 1     # (H, W) grey beside (H, W, 3) colour
        raise DataError(f"{argument}= holds images of different shapes: {sorted(shapes)[:4]}",
                        fix="convert them all to one mode, grey ('L') or colour ('RGB')" if mixed
                        else "resize them to one square size first")
    a = np.stack(arrays)
    if a.ndim == 4 and channels_last and not pil and a.shape[1] in (1, 3) and a.shape[-1] in (1, 3):
        raise DataError(f"{argument}= is a list of {a.shape[1:]} arrays: (C, H, W) or (H, W, C)? Both read them",
                        fix="pass a list of torch tensors (torch.from_numpy(image)), each read as (C, H, W)")
    if a.ndim == 4 and channels_last and a.shape[-1] in (1, 3):
        a = a.transpose(0, 3, 1, 2)
    return _nchw(a, argument, channels_last=False, listed=True)


def _nchw(a, argument: str, *, channels_last: bool, modality: str | None = None, listed: bool = False):
    """``a`` as (N, C, H, W). Shapes that could be read two ways are refused, never guessed: a 3-D array whose
    first dimension is 3 (one RGB image, or three grey ones?) unless ``modality="xray"``; an (H, W, C) image; a
    tensor whose last dimension looks like channels; a numpy array that is channels first and channels last at once
    (N, 3, 3, 3)."""
    shape = tuple(a.shape)
    if a.ndim == 3:                              # (N, H, W): one channel
        if shape[0] == 3 and modality != "xray" and not listed:      # a list holds images, one per item
            raise DataError(f"{argument}= has shape {shape}: one (C, H, W) colour image, or 3 grey (H, W) images?",
                            fix="pass one image as a batch of one, images[None] (shape (1, 3, H, W)); for grey "
                                "images pass shape (N, 1, H, W) or modality='xray'")
        if shape[-1] in (1, 3) and shape[0] not in (1, 3) and shape[1] not in (1, 3):
            raise DataError(f"{argument}= has shape {shape}: one (H, W, C) image?",
                            fix="pass images as (N, C, H, W), e.g. image.permute(2, 0, 1)[None] for a tensor "
                                "(a numpy array may be (N, H, W, C))")
        return a[:, None]
    if a.ndim != 4:
        raise DataError(f"{argument}= has shape {shape}; images are (N, C, H, W)",
                        fix="stack the images into one (N, C, H, W) array (or (N, H, W) for grayscale)")
    if channels_last and not listed and shape[1] in (1, 3) and shape[-1] in (1, 3):
        raise DataError(f"{argument}= has shape {shape}: (N, C, H, W) or numpy's (N, H, W, C)? Both read it",
                        fix="pass it as a torch tensor (torch.from_numpy(images)), which is read as (N, C, H, W)")
    if shape[1] not in (1, 3) and shape[-1] in (1, 3):
        if channels_last:
            return a.transpose(0, 3, 1, 2)      # numpy's (N, H, W, C)
        if listed:
            raise DataError(f"{argument}= is a list of {shape[1:]} tensors: channels last? Each is read as (C, H, W)",
                            fix="pass [t.permute(2, 0, 1) for t in images] (channels first)")
        raise DataError(f"{argument}= has shape {shape}: channels last? A tensor is read as (N, C, H, W)",
                        fix="pass images.permute(0, 3, 1, 2) (channels first)")
    return a


def _sequence(values: Any, name: str) -> list:
    """One value per image, in image order: a list, tuple, array or pandas Series of scalars. A mapping or a set
    has no image order (a dict's keys would be read as the values), and nested values are no one value each."""
    if isinstance(values, (str, bytes, Mapping, set, frozenset)) or not hasattr(values, "__len__"):
        raise ConfigError(f"{name}= is {a_type(values)}; it takes one value per image, in image order (a list, "
                          "array or pandas Series)", fix=f"pass {name}=[...] with one entry per image"
                          + (f" (a dict: list({name}.values()) if it is in image order)"
                             if isinstance(values, Mapping) else ""))
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    out = list(values.tolist() if hasattr(values, "tolist") else values)
    nested = next((v for v in out if isinstance(v, (list, tuple, dict, set, np.ndarray, torch.Tensor))), None)
    if nested is not None:
        raise ConfigError(f"{name}= holds {a_type(nested)} values ({nested!r:.40}); it takes one value per image",
                          fix=f"pass {name}=[...] with one plain value (a number or a string) per image")
    return out


def _patient_id(p: Any) -> str:
    if isinstance(p, (bool, np.bool_)):          # True would be the patient 1
        raise ConfigError(f"patient_ids= holds {p!r}, a truth value, not a patient id",
                          fix="give every image its patient's id (a string or a whole number)")
    if p is None or (isinstance(p, float) and math.isnan(p)):
        raise ConfigError("patient_ids= holds a missing id", fix="give every image its patient's id")
    if not str(p).strip():                       # "" would make every image without an id one patient
        raise ConfigError(f"patient_ids= holds an empty id ({p!r})", fix="give every image its patient's id")
    if isinstance(p, numbers.Real) and not isinstance(p, numbers.Integral) and float(p).is_integer():
        return str(int(p))                       # 7 and 7.0 are one person (a pandas column with a gap is float)
    if isinstance(p, numbers.Integral):
        return str(int(p))                       # numpy integers too
    return str(p)


def _labels(labels: Mapping[str, Sequence[Any]] | None, n: int) -> dict[str, list[float]]:
    from medanon.data.labels import spec

    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise ConfigError(f"labels= is {a_type(labels)}; it takes a mapping of label name -> one value per "
                          "image", fix="pass e.g. labels={'grade': [0, 2, 1, ...]}")
    out = {}
    for name, values in labels.items():
        vals = _sequence(values, f"labels[{name!r}]")
        if len(vals) != n:
            raise ConfigError(f"labels[{name!r}] has {len(vals)} values for {n} images", fix="pass one per image")
        try:
            out[str(name)] = [spec(str(name)).encode(v) for v in vals]
        except (ValueError, OverflowError) as e:
            raise ConfigError(f"labels[{name!r}]: {e}", fix="see medanon.data.labels.LABELS for the canonical "
                                                            "values") from None
    return out
