"""How many channels images are read with, and refusing a model of another channel count than the files hold.

The files' own channel counts come from their headers (:class:`~medanon.data.imageio.ImageInfo`). Without an
explicit ``channels=`` the modality decides: X-rays 1 (a colour file among them is read as grey, and named in a
warning where it is in colour: :func:`medanon.data.decode.warn_colour_dropped`), colour fundus photographs 3, where
the files must agree: grey images are replicated into RGB only when asked.

Example:
    >>> from medanon.data.imageio import ImageInfo
    >>> resolve_channels(0, "xray", [ImageInfo(8, 8, 1, "png")] * 2, [None, None])
    1
    >>> try:
    ...     resolve_channels(0, "fundus", [ImageInfo(8, 8, 1, "png")] * 2, [None, None])
    ... except GreyFundus as e:
    ...     print(e.message[:58])
    every image is grey (1 channel), but the data are read as
    >>> resolve_channels(3, "fundus", [ImageInfo(8, 8, 1, "png")] * 2, [None, None])
    3
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from medanon.errors import DataError


class MixedChannels(DataError):
    """The images of a dataset have different channel counts and no ``channels=`` says what to make of them."""


class GreyFundus(DataError):
    """Every image of a dataset read as colour fundus photographs is grey, and no ``channels=`` says to convert."""


def _mix(counts: Counter) -> str:
    """``Counter({3: 5, 1: 2})`` -> ``"2 with 1 channel, 5 with 3 channels"``."""
    return ", ".join(f"{n} with {c} channel{'s' if c > 1 else ''}" for c, n in sorted(counts.items()))


def _files_with(records: Sequence[Any], infos: Sequence[Any], channels: int, *, same: bool) -> list[str]:
    """The paths of the images whose files hold ``channels`` channels (``same``), or another count."""
    return [str(r.path) for r, i in zip(records, infos, strict=False) if (i.channels == channels) == same]


def resolve_channels(requested: int, modality: str | None, infos: Sequence[Any], records: Sequence[Any]) -> int:
    """An explicit ``channels`` wins; else the images must agree, and the modality decides conversions."""
    counts = Counter(i.channels for i in infos)
    if requested:
        return requested
    if modality == "xray":          # X-rays are grey: colour files too are read as grey (in colour: named, decode.py)
        return 1
    if len(counts) > 1:
        minority = min(counts, key=lambda c: counts[c])
        raise MixedChannels(f"the images have mixed channel counts ({_mix(counts)}); the {minority}-channel ones "
                            "are:", files=_files_with(records, infos, minority, same=True),
                            fix="pass channels=3 to convert every image to RGB (colour fundus photographs), or "
                                "channels=1 for grayscale (a grayscale image in a colour fundus set may be a "
                                "red-free or angiography frame that does not belong)")
    if modality == "fundus":
        if set(counts) == {1}:
            raise GreyFundus(f"every image is grey (1 channel), but the data are read as colour fundus photographs "
                             f"({len(infos)} images): replicated into three equal channels, they would be taken for "
                             "colour photographs by the fundus models and attacks",
                             fix="pass channels=3 to convert them anyway, or channels=1 to keep them grey (red-free "
                                 "or angiography frames need models trained on such images)")
        return 3
    if modality == "xray":
        return 1
    return next(iter(counts)) if counts else 3


def file_channels(ds: Any) -> Counter:
    """How many images of ``ds`` have 1 and 3 channels in their files (from their headers), before any conversion;
    empty for images held in memory (their channels are what the caller gave)."""
    return Counter(i.channels for i in getattr(ds, "infos", None) or [])


def check_file_channels(ds: Any, channels: int, *, model: str, fix: str) -> None:
    """Refuse to fit ``model`` (a ``channels``-channel network) to images whose files hold another channel count: a
    colour network trained on grey X-rays replicated into RGB, or mixed grey and colour images, would be trained
    without a word on what the data are not."""
    counts = file_channels(ds)
    if not counts or set(counts) == {channels}:
        return
    records = getattr(ds, "records", [])
    if len(counts) > 1:
        raise MixedChannels(f"{model} takes {channels}-channel images, but the images have mixed channel counts "
                            f"({_mix(counts)}); those of another channel count are:",
                            files=_files_with(records, ds.infos, channels, same=False), fix=fix)
    have = next(iter(counts))
    kind = "grey (1 channel)" if have == 1 else "colour (3 channels)"
    raise DataError(f"{model} takes {channels}-channel images, but every image of the data is {kind}: it would be "
                    f"trained on converted images", fix=fix)
