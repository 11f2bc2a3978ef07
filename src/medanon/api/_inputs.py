"""What every API function does with its arguments first: the data as a dataset, models by name, types checked.

* :func:`dataset_arg`: the ``ds`` argument through :func:`medanon.data.inputs.as_dataset` (a dataset, a
  folder, or images in memory with ``patient_ids=``, ``labels=``, ``modality=``); :func:`at_model_size`: a
  folder opened again at the side of the model that reads it;
* :func:`model_arg`: a ``codec=``, ``model=``, ``flow=``, ... argument through
  :func:`medanon.models_registry.resolve_model` (a name on ``medanon models``, a path, a loaded network, or the
  role's default for the data's modality), with the record the manifest keeps;
* :func:`number`: a numeric argument of the wrong type is refused with a message that names the type.
"""

from __future__ import annotations

import numbers
import os
from typing import Any


def dataset_arg(ds: Any, *, method: str, patient_ids=None, labels=None, modality=None, value_range=None,
                require_patients=False, why: str | None = None, size: int = 64):
    """``ds`` as the :class:`~medanon.data.dataset.ImageDataset` the methods read (a folder opened at ``size``)."""
    from medanon.data.inputs import as_dataset

    return as_dataset(ds, patient_ids=patient_ids, labels=labels, modality=modality, value_range=value_range,
                      require_patients=require_patients, argument="ds", method=method, why=why, size=size)


def at_model_size(given: Any, ds, size: int | None, **kw):
    """``ds`` again at the side of the model that reads it, when it was given as a folder path (opened at 64 px
    before the model was known: its modality chooses the default model); ``kw``: :func:`dataset_arg`'s."""
    if size is None or ds.size == size or not isinstance(given, (str, os.PathLike)):
        return ds
    return dataset_arg(given, size=int(size), **kw)


def value_kind(obj: Any) -> str | None:
    """``"float"`` or ``"integer"`` for images held in memory (a tensor, an array, a list of them or of PIL images),
    None for anything else (a dataset, a folder)."""
    import numpy as np
    import torch

    first = obj[0] if isinstance(obj, (list, tuple)) and obj else obj
    if isinstance(first, (torch.Tensor, np.ndarray)):
        floating = first.is_floating_point() if isinstance(first, torch.Tensor) else np.issubdtype(first.dtype,
                                                                                                    np.floating)
        return "float" if floating else "integer"
    return "integer" if type(first).__module__.startswith("PIL") else None


def memory_range(obj: Any, value_range, *, like: Any):
    """``value_range`` for a second data argument (``calibrate_on=``, ``pca_basis=``) where it holds images in memory
    of the same kind (float or integer) as the first, ``like``; None otherwise (a dataset or folder has its own
    values, and images of another kind are read by their own range)."""
    kind = value_kind(obj)
    return value_range if kind is not None and kind == value_kind(like) else None


def model_arg(value: Any, *, role: str, ds, argument: str, method: str, used: dict[str, Any] | None = None):
    """``value`` resolved for ``role`` on ``ds``'s modality; what was chosen is added to ``used`` (argument ->
    {file, chosen}) for the release manifest."""
    from medanon.models_registry import resolve_model

    obj, record = resolve_model(value, role=role, modality=getattr(ds, "modality", None), argument=argument,
                                method=method)
    if record is not None and used is not None:
        used[argument] = record
    return obj


def number(name: str, value: Any, *, integer: bool = False, allow_none: bool = False) -> None:
    """Refuse ``value`` unless it is a real number (an integer with ``integer``); bools are not numbers here."""
    from medanon.errors import ConfigError, a_type

    if value is None and allow_none:
        return
    ok = isinstance(value, numbers.Integral if integer else numbers.Real) and not isinstance(value, bool)
    if not ok:
        want = "an integer" if integer else "a number"
        hint = f" (convert it: {name}={'int' if integer else 'float'}({value!r}))" if isinstance(value, str) else ""
        raise ConfigError(f"{name}={value!r} is {a_type(value)}; {name} takes {want}{hint}",
                          fix=f"pass {name}= as {want}, e.g. {name}={'5' if integer else '0.3'}")
    if integer:
        from medanon.config import check_seed

        check_seed(name, value)


def device_arg(device: Any):
    """``device=`` as a ``torch.device``, or None (the method's default): a string through
    :func:`medanon.runtime.resolve_device` (``auto``, ``cpu``, ``cuda``, ``cuda:N``), a ``torch.device`` as it is;
    an unknown name, or CUDA without a GPU, is a :class:`~medanon.errors.ConfigError` before any model is loaded."""
    import torch

    from medanon.errors import ConfigError, a_type
    from medanon.runtime import resolve_device

    if device is None:
        return None
    if isinstance(device, torch.device):
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"device={device!r} was asked for but no CUDA GPU is available",
                              fix="use device='cpu' (or 'auto')")
        return device
    if not isinstance(device, str):
        raise ConfigError(f"device={device!r} is {a_type(device)}; device takes a name or a torch.device",
                          fix="pass device='cpu', 'cuda', 'cuda:N' or 'auto'")
    return resolve_device(device)
