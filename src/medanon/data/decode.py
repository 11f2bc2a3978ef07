"""One image file to its preprocessed tensor, fast: decode only as many pixels as the output needs.

A 4752 x 3168 fundus JPEG becomes a 64 px tensor in about 30 ms instead of 2-3 s: the JPEG is decoded at
1/8 scale by libjpeg's DCT scaling (Pillow's draft mode; other formats are decoded fully and box-averaged),
the crop is planned in source pixels on that reduced image, and the same anti-aliased Lanczos resize as
:func:`~medanon.data.transforms.preprocess` samples it. The reduced image is kept at least
:data:`OVERSAMPLE` times the output size across the crop, so the box pre-filter changes the output by well
under 1/255 (``benchmarks/decode.py`` measures both paths on EyePACS-size JPEGs; ``tests/test_data_decode.py``
holds the tolerance). What does change: a fundus field of view is located on the reduced image, so its
centre and radius are known to about ``scale`` source pixels rather than one (0.1 output pixel at 64 px).

Images no larger than a few times the output are decoded exactly as before (``scale`` 1), so small
datasets, such as the phantoms, give bit-identical tensors.
"""

from __future__ import annotations

from pathlib import Path

from medanon.data import imageio
from medanon.data.transforms import Preprocessed, plan_crop, preprocess, render

OVERSAMPLE = 2          # the reduced crop spans at least this many pixels per output pixel
_PLAN_MARGIN = 4        # choose the scale for a reduced short side of >= this many output sizes
SCALES = (8, 4, 2, 1)


def choose_scale(width: int, height: int, size: int) -> int:
    """The largest reduction that keeps the short side at least ``_PLAN_MARGIN`` x ``size`` pixels."""
    for s in SCALES:
        if min(width, height) / s >= _PLAN_MARGIN * size:
            return s
    return 1


def decode(path: str | Path, *, size: int, channels: int, crop: str,
           max_pixels: int | None = imageio.DEFAULT_MAX_PIXELS,
           info: imageio.ImageInfo | None = None) -> Preprocessed:
    """``preprocess(imageio.read(path), ...)``, decoding at a reduced scale where that cannot be seen.

    ``info`` (from :func:`imageio.probe`) saves reading the header twice."""
    info = info or imageio.probe(path, max_pixels=max_pixels)
    scale = choose_scale(info.width, info.height, size)
    while scale > 1:
        red = imageio.read_reduced(path, scale, max_pixels=max_pixels)
        plan = plan_crop(red.image, crop, scale=red.scale, width=red.width, height=red.height)
        side = max(red.width, red.height) if plan.whole else plan.side
        if side / red.scale >= OVERSAMPLE * size:
            return render(red.image, plan, scale=red.scale, width=red.width, height=red.height, size=size,
                          channels=channels)
        scale //= 2            # a small field of view in a large frame: decode finer
    return preprocess(imageio.read(path, max_pixels=max_pixels), size=size, channels=channels, crop=crop)
