"""Which images two datasets have in common, whatever their paths and their encoding. A release's data-derived
parts (an LDP clip box, DP-GLOW's flow, a k-Same-PCA basis) are "separate" only if they share no image with the
released data, and a copy of the released folder that was re-saved, converted to another format or resized is
not separate data.

An image of one dataset is counted as an image of the other when

- its file has the same contents (whatever its path: a link, a copy in another folder), or
- its decoded 8-bit pixels, as the dataset reads them (size, channels, crop), are the same, or
- it is a near-duplicate: the 8x8 grey thumbnails of the two images as read differ by at most
  :data:`NEAR_GREY_LEVELS` grey levels (root mean square). ``benchmarks/overlap_thresholds.py`` measures, on
  phantoms of 32, 64 and 128 px read at their size and at half of it: re-saved, JPEG, enlarged and shrunk copies at
  most 1.97 from their originals (a 32 px image shrunk to 24 px and saved as JPEG; 1.35 at 64 px, 0.52 at 128 px);
  two different images at least 3.26 apart (the fundus phantom, whose people differ only in detail). The
  threshold, 2.5, sits between; a 32 px image shrunk to half its side and read at 32 px (2.6 to 2.8) is the
  stated exception below.

:func:`same_people` adds the patients of two datasets read from one folder (two splits of it) or from phantoms of
the same people. What neither can see is another photograph of the same person in another folder (patient ids of
two folders may coincide for different people, so they are not compared), nor a copy made much smaller than the
size the data is read at (its detail is gone): that is the assumption stated with the guarantee.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

#: What :func:`images_in_common` and :func:`same_people` compare, as a statement says it.
COMPARED = ("compared by file, by pixels and as resized or re-encoded copies, and by patient id where both come from "
            "one folder or phantom; another photograph of a released person in another folder is not detected")

#: Largest root-mean-square difference, in 8-bit grey levels, of two images' 8x8 grey thumbnails for the two to
#: count as copies of one image (``benchmarks/overlap_thresholds.py`` measures copies and different people).
NEAR_GREY_LEVELS = 2.5
THUMBNAIL = 8


def thumbnail(images: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) images in [-1, 1] -> (N, 64) grey 8x8 area averages in 8-bit grey levels."""
    grey = ((images.float().clamp(-1, 1) + 1) * 127.5).mean(1, keepdim=True)
    return torch.nn.functional.adaptive_avg_pool2d(grey, THUMBNAIL).flatten(1)


class _Signatures:
    """What identifies each image of a dataset: file digests (of files of a size in ``sizes`` only: others cannot
    be equal) and grey thumbnails of the images as read (None where the dataset cannot decode; the same pixels give
    the same thumbnail, so no digest of the pixels is needed)."""

    def __init__(self, ds, sizes: set[int], *, decoded: bool, what: str = ""):
        from medanon.fsutil import sha256_file

        recs = ds.records
        self.files = ["file:" + sha256_file(r.path)
                      if getattr(r, "path", None) is not None and Path(r.path).stat().st_size in sizes else None
                      for r in recs]
        self.thumbs: torch.Tensor | None = None
        if not decoded:
            return
        read = getattr(ds, "_pixels", None) or ds.load     # the file's pixels, before any transform=
        thumbs = torch.empty(len(recs), THUMBNAIL * THUMBNAIL)

        def one(i: int) -> None:
            thumbs[i] = thumbnail(read(i)["image"][None])[0]

        from tqdm.auto import tqdm

        from medanon.data.dataset import decode_threads
        from medanon.release.release import show_progress

        bar = tqdm(total=len(recs), desc=f"comparing images: {what}", unit="img", leave=False,
                   disable=not show_progress(None) or len(recs) < 256)      # on a terminal, for a long read
        with ThreadPoolExecutor(max_workers=decode_threads(None)) as pool:
            for _ in pool.map(one, range(len(recs))):
                bar.update()
        bar.close()
        self.thumbs = thumbs


def as_records(x):
    """A dataset, or a sequence of image paths as an object with ``records`` of those paths."""
    if hasattr(x, "records"):
        return x
    from types import SimpleNamespace

    return SimpleNamespace(records=[SimpleNamespace(path=Path(p)) for p in x])


def common_mask(released, other) -> torch.Tensor:
    """For each image of ``released``, whether it is also an image of ``other`` (module docstring): a bool tensor
    of ``len(released.records)``. Datasets that cannot decode (sequences of paths) are compared by file only."""
    released, other = (as_records(d) for d in (released, other))
    decoded = all(hasattr(d, "load") for d in (released, other))
    sizes = [{Path(r.path).stat().st_size for r in d.records if getattr(r, "path", None) is not None}
             for d in (released, other)]        # only files of a size the other side has are hashed
    mine = _Signatures(released, sizes[1], decoded=decoded, what="the released data")
    theirs = _Signatures(other, sizes[0], decoded=decoded, what="the other data")
    keys = {k for k in theirs.files if k is not None}
    found = torch.tensor([f in keys for f in mine.files], dtype=torch.bool)
    if mine.thumbs is not None and theirs.thumbs is not None and len(theirs.thumbs) and len(mine.thumbs):
        for start in range(0, len(mine.thumbs), 1024):       # (1024, M) distances at a time
            d = torch.cdist(mine.thumbs[start:start + 1024].double(), theirs.thumbs.double())
            near = d.min(1).values / THUMBNAIL <= NEAR_GREY_LEVELS
            found[start:start + 1024] |= near
    return found


def same_people(released, other) -> int:
    """How many patients of ``released`` are certainly people of ``other`` too: both datasets are read from one
    folder (two splits or subsets of it, whose patient ids name the same people), or both are phantoms of the same
    people (:mod:`medanon.phantoms.provenance`), and they share patient ids. Ids of two other folders may name
    different people by chance (a hospital's 1, 2, 3...): they are not compared, and 0 is returned."""
    from medanon.phantoms.provenance import people_of, phantom_settings

    roots = [getattr(d, "root", None) for d in (released, other)]
    if None in roots or not all(hasattr(d, "records") for d in (released, other)):
        return 0
    same = Path(roots[0]).resolve() == Path(roots[1]).resolve()
    if not same:
        a, b = (phantom_settings(r) for r in roots)
        same = a is not None and b is not None and people_of(a) == people_of(b)
    if not same:
        return 0
    theirs = {r.patient_id for r in other.records}
    return len({r.patient_id for r in released.records} & theirs)


def images_in_common(released, other) -> int:
    """How many images of ``released`` are also images of ``other`` (datasets, or sequences of image paths): the
    same file content, the same 8-bit pixels as read, or a resized or re-encoded copy (module docstring).

    >>> import torch
    >>> from medanon.data.inputs import as_dataset
    >>> x = torch.rand(4, 1, 8, 8) * 2 - 1
    >>> a = as_dataset(x, patient_ids=list("abcd"), modality="xray", value_range=(-1, 1))
    >>> b = as_dataset(torch.cat([x[:1], -x[1:]]), patient_ids=list("abcd"), modality="xray", value_range=(-1, 1))
    >>> images_in_common(a, b)
    1
    """
    return int(common_mask(released, other).sum())
