"""One image file to its preprocessed tensor, fast: decode only as many pixels as the output needs.

A 4752 x 3168 fundus JPEG becomes a 64 px tensor in about 30 ms of CPU instead of 1.5-3 s: the JPEG is
decoded at 1/8 scale by libjpeg's DCT scaling (Pillow's draft mode; other formats are decoded fully and
box-averaged), the crop is planned in source pixels on that reduced image, and the same anti-aliased Lanczos
resize as :func:`~medanon.data.transforms.preprocess` samples exactly the crop's box from it. The reduced
crop spans at least :data:`OVERSAMPLE` reduced pixels per output pixel.

How close to the full-resolution path (``benchmarks/decode.py`` measures it; ``tests/test_data_decode.py``
holds it), in [0, 1] intensity units:

* same crop geometry (X-ray centre crops, ``pad``, ``none``): within 1/255 everywhere (0.6/255 measured);
* fundus field of view: its edges are fitted on the 1/8 image to within a source pixel or two of what
  thresholding the full image finds; two output pixels inside the FOV's border the difference stays
  about 1/255 (mean 0.1/255), while on the border ring itself the red channel can differ by up to ~8/255,
  because a JPEG stores colour at half resolution and draft mode decodes it at 1/16.

Images no larger than a few times the output are decoded at full size (``scale`` 1), so small
datasets, such as the phantoms, give bit-identical tensors.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np

from medanon.data import imageio
from medanon.data.transforms import Preprocessed, plan_crop, preprocess, render

OVERSAMPLE = 2          # the reduced crop spans at least this many pixels per output pixel
COLOUR_SPREAD = 0.02    # mean (max - min) over a pixel's channels, in [0, 1] units, above which an image is colour
_PLAN_MARGIN = 4        # choose the scale for a reduced short side of >= this many output sizes
SCALES = (8, 4, 2, 1)


def choose_scale(width: int, height: int, size: int) -> int:
    """The largest reduction that keeps the short side at least ``_PLAN_MARGIN`` x ``size`` pixels."""
    for s in SCALES:
        if min(width, height) / s >= _PLAN_MARGIN * size:
            return s
    return 1


class ColourReadAsGrey(UserWarning):
    """A colour image is read with one grey channel (its dataset is read as X-rays, or with ``channels=1``)."""


def warn_colour_dropped(path: Path, root: Path | None, modality: str | None) -> None:
    """Warn (:class:`ColourReadAsGrey`, once per dataset folder in a process) that ``path``'s colour is dropped."""
    if not imageio.first_in_folder("colour", path, root):
        return
    where = f" (other images of {root} may be too; said once per folder)" if root is not None else ""
    why = "the dataset is read as X-rays" if modality == "xray" else "the dataset is read with one channel"
    warnings.warn(f"{path} is a colour image{where}, and {why}: its colour is converted to grey (ITU-R 601 luma). "
                  "A colour fundus set read as X-rays loses what its models and attacks see; read it with "
                  "modality='fundus' (the layout's or dataset.yaml's modality, or channels=3). A grey X-ray "
                  "with a coloured marking or tint is read as intended",
                  ColourReadAsGrey, stacklevel=3)


def in_colour(img: np.ndarray) -> bool:
    """``img`` (float in [0, 1], (h, w) or (h, w, 3)) has visible colour, not three equal grey channels.

    A grey image saved as RGB (as many X-ray exports are) has channels within a JPEG rounding of each other
    (spread below 1/255 on average); a fundus photograph's red and blue channels differ by a tenth or more."""
    if img.ndim != 3 or img.shape[-1] < 3:
        return False
    rgb = img[..., :3]
    return float((rgb.max(axis=-1) - rgb.min(axis=-1)).mean()) > COLOUR_SPREAD


def decode(path: str | Path, *, size: int, channels: int, crop: str,
           max_pixels: int | None = imageio.DEFAULT_MAX_PIXELS,
           info: imageio.ImageInfo | None = None) -> Preprocessed:
    """``preprocess(imageio.read(path), ...)``, decoding at a reduced scale where that cannot be seen.

    ``info`` (from :func:`imageio.probe`) saves reading the header twice. ``transparent`` of the result says the
    file had pixels below full opacity (their stored colour is what was read); ``colour_dropped`` says a colour
    image was read as grey (``channels=1``)."""
    info = info or imageio.probe(path, max_pixels=max_pixels)
    scale = choose_scale(info.width, info.height, size)
    while scale > 1:
        red = imageio.read_reduced(path, scale, max_pixels=max_pixels)
        plan = plan_crop(red.image, crop, scale=red.scale, width=red.width, height=red.height)
        side = max(red.width, red.height) if plan.whole else plan.side
        if side / red.scale >= OVERSAMPLE * size:
            pre = render(red.image, plan, scale=red.scale, width=red.width, height=red.height, size=size,
                         channels=channels)
            return dataclasses.replace(pre, transparent=red.transparent, low_range=red.low_range,
                                       colour_dropped=channels == 1 and in_colour(red.image))
        scale //= 2            # a small field of view in a large frame: decode finer
    full = imageio.read_reduced(path, 1, max_pixels=max_pixels)
    pre = preprocess(full.image, size=size, channels=channels, crop=crop)
    return dataclasses.replace(pre, transparent=full.transparent, low_range=full.low_range,
                               colour_dropped=channels == 1 and in_colour(full.image))
