"""Which images two datasets have in common, whatever their paths: the same file contents, or, where either holds
images in memory, the same 8-bit pixels. A release's data-derived parts (an LDP clip box, DP-GLOW's flow, a
k-Same-PCA basis) are "separate" only if they share no image with the released data."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch


def _image_keys(ds, pixels: bool, sizes: set[int] | None = None) -> dict[str, int]:
    """What identifies each image of ``ds``: the sha256 of its file's bytes (only for files of a size in
    ``sizes``: others cannot be equal), or with ``pixels`` of its decoded 8-bit pixels. Returns key -> count."""
    from medanon.fsutil import sha256_file

    keys: dict[str, int] = {}
    for i, r in enumerate(ds.records):
        if pixels:
            a = ((ds.load(i)["image"].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
            key = "px:" + hashlib.sha256(a.contiguous().numpy().tobytes()).hexdigest()
        else:
            if sizes is not None and Path(r.path).stat().st_size not in sizes:
                continue
            key = "file:" + sha256_file(r.path)
        keys[key] = keys.get(key, 0) + 1
    return keys


def as_records(x):
    """A dataset, or a sequence of image paths as an object with ``records`` of those paths."""
    if hasattr(x, "records"):
        return x
    from types import SimpleNamespace

    return SimpleNamespace(records=[SimpleNamespace(path=Path(p)) for p in x])


def images_in_common(released, other) -> int:
    """How many images of ``released`` are also images of ``other`` (datasets, or sequences of image paths): the
    same file content (whatever its path: a link, a copy in another folder) or, where either holds images in
    memory, the same 8-bit pixels at the datasets' size.

    >>> import torch
    >>> from medanon.data.inputs import as_dataset
    >>> x = torch.rand(4, 1, 8, 8) * 2 - 1
    >>> a = as_dataset(x, patient_ids=list("abcd"), modality="xray", value_range=(-1, 1))
    >>> b = as_dataset(torch.cat([x[:1], -x[1:]]), patient_ids=list("abcd"), modality="xray", value_range=(-1, 1))
    >>> images_in_common(a, b)
    1
    """
    released, other = (as_records(d) for d in (released, other))
    pixels = any(getattr(r, "path", None) is None for d in (released, other) for r in d.records)
    sizes = [None, None] if pixels else [{Path(r.path).stat().st_size for r in d.records} for d in (released, other)]
    mine = _image_keys(released, pixels, sizes[1])          # only files of a size the other side has are hashed
    theirs = _image_keys(other, pixels, sizes[0])
    return sum(n for k, n in mine.items() if k in theirs)
