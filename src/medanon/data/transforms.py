"""Preprocessing: field-of-view detection and square crop for fundus photographs, crops for
X-rays, channel conversion, resizing with anti-aliasing, and normalisation to [-1, 1].

All functions take and return NumPy arrays so they are usable without torch; ``preprocess``
chains them into the tensor layout of docs/design.md §3: float32 (C, H, W) in [-1, 1].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image
from scipy import ndimage


@dataclass(frozen=True)
class FieldOfView:
    cx: float                                    # centre column in the source image (pixels)
    cy: float                                    # centre row
    radius: float                                # radius in pixels
    found: bool                                  # False when no bright disc was found (whole image used)


def detect_fov(img: np.ndarray, *, threshold: float | None = None, scale: int = 1, width: int | None = None,
               height: int | None = None) -> FieldOfView:
    """Find the circular field of view of a fundus photograph.

    The FOV is the largest bright connected region (the black surround is near zero in the red
    channel). Its horizontal extent gives the diameter, which stays right when the camera frame
    cuts the circle at the top and bottom (common in EyePACS). ``threshold`` is on [0, 1]
    intensity; by default a fraction of a robust maximum, with a floor.

    ``scale`` > 1: ``img`` is the source (``width`` x ``height`` pixels) box-reduced ``scale`` times, and the
    result is in source pixels: each edge of the disc is placed where the reduced intensity profile across
    it, interpolated between pixel centres, crosses the threshold, so the geometry is not rounded to whole
    reduced pixels.
    """
    a = img[..., 0] if img.ndim == 3 else img    # red channel: brightest in fundus, ~0 outside
    if img.ndim == 3:   # the channel mean, written out: bit-identical to img.mean(axis=-1) and 15x faster
        a = np.maximum(a, (img[..., 0] + img[..., 1] + img[..., 2]) / 3 if img.shape[-1] == 3 else img.mean(axis=-1))
    h, w = a.shape
    W, H = (width or w * scale), (height or h * scale)
    if threshold is None:
        hi = float(np.percentile(a, 99))
        threshold = max(0.04, 0.12 * hi)
    fg = a > threshold
    fg = ndimage.binary_opening(fg, iterations=1) if min(h, w) >= 16 else fg
    lab, n = ndimage.label(fg)
    if n == 0:
        return FieldOfView(W / 2, H / 2, min(H, W) / 2, False)
    sizes = np.bincount(lab.ravel(), minlength=n + 1)[1:]      # pixels per component
    big = lab == (int(np.argmax(sizes)) + 1)
    if big.sum() < 0.05 * h * w:
        return FieldOfView(W / 2, H / 2, min(H, W) / 2, False)
    rows = np.flatnonzero(big.any(axis=1))
    cols = np.flatnonzero(big.any(axis=0))
    x0, x1, y0, y1 = cols[0], cols[-1] + 1, rows[0], rows[-1] + 1
    if scale > 1:
        x0, x1 = _edges(a[y0:y1].max(axis=0), x0, x1, threshold, scale, W)
        y0, y1 = _edges(a[:, x0 // scale:-(-x1 // scale)].max(axis=1), y0, y1, threshold, scale, H)
    radius = max(x1 - x0, y1 - y0) / 2
    cx = _centre(x0, x1, W, radius)
    cy = _centre(y0, y1, H, radius)
    return FieldOfView(float(cx), float(cy), float(radius), True)


def _edges(profile: np.ndarray, lo: int, hi: int, thr: float, scale: int, n: int) -> tuple[int, int]:
    """First and one-past-last source pixel above ``thr`` along a profile reduced ``scale`` times (block
    means) whose reduced extent above it is [lo, hi); an end at the border of the image stays there."""
    m = len(profile)
    first = 0 if lo == 0 else _rising_edge(profile, lo, thr, scale)
    last = n if hi >= m else m * scale - _rising_edge(profile[::-1], m - hi, thr, scale)
    first, last = max(0, first), min(n, last)
    return first, max(last, first + 1)


def _rising_edge(profile: np.ndarray, j: int, thr: float, scale: int) -> int:
    """The first source pixel above ``thr`` where the profile rises through it at reduced pixel ``j``.

    The edge is modelled as a linear ramp from 0 at source position ``a`` to the plateau ``P`` at ``a + w``;
    ``a`` and ``w`` are fitted (least squares, on a grid of quarter pixels) to the block means of the reduced
    pixels around ``j``, and the ramp's threshold crossing is returned. On phantom-like and synthetic
    EyePACS photographs this places the field of view's edges within a source pixel of what thresholding
    the full-resolution image finds (``tests/test_data_decode.py``)."""
    m = len(profile)
    idx = np.arange(max(0, j - 1), min(m, j + 3))
    after = profile[j + 2:j + 5]
    plateau = float(np.median(after)) if len(after) else float(profile[j:].max())
    if plateau <= thr:
        plateau = float(profile[j:].max())
    v0, v1 = float(profile[j - 1]), float(profile[j])
    t = min(1.0, max(0.0, (thr - v0) / (v1 - v0))) if v1 > v0 else 1.0
    fallback = int(np.ceil((j - 0.5 + t) * scale - 0.5))                 # linear interpolation between centres
    if plateau <= thr:
        return fallback
    starts = np.arange((j - 2) * scale, (j + 2) * scale, 0.25)[:, None, None]   # ramp start a
    widths = np.arange(0.5, 4 * scale + 0.5, 0.5)[None, :, None]                # ramp width w
    lo_edge = (idx * scale)[None, None, :].astype(np.float64)                  # each block's [lo, lo + scale)
    means = plateau * (_ramp_integral(lo_edge + scale, starts, widths)
                       - _ramp_integral(lo_edge, starts, widths)) / scale
    err = ((means - profile[idx]) ** 2).sum(axis=-1)
    i, k = np.unravel_index(int(np.argmin(err)), err.shape)
    crossing = float(starts[i, 0, 0] + widths[0, k, 0] * thr / plateau)
    return int(np.floor(crossing - 0.5)) + 1


def _ramp_integral(x: np.ndarray, a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Integral from -inf to ``x`` of the unit ramp clip((t - a) / w, 0, 1)."""
    u = np.clip(x - a, 0.0, None)
    return np.where(u <= w, u * u / (2 * w), u - w / 2)


def _centre(lo: int, hi: int, n: int, radius: float) -> float:
    """Centre of the FOV along one axis, when the frame may cut the circle on one side."""
    if hi - lo >= 2 * radius - 1 or (lo == 0 and hi == n):
        return (lo + hi) / 2
    if lo == 0:           # cut at the start: the far edge is real
        return hi - radius
    if hi == n:           # cut at the end
        return lo + radius
    return (lo + hi) / 2


def crop_square(img: np.ndarray, cx: float, cy: float, half: float) -> np.ndarray:
    """Square crop of side ``2*half`` around (cx, cy), zero-padded where it leaves the image."""
    h, w = img.shape[:2]
    side = max(1, round(2 * half))
    x0 = round(cx - side / 2)
    y0 = round(cy - side / 2)
    out = np.zeros((side, side, *img.shape[2:]), dtype=img.dtype)
    sx0, sy0 = max(0, x0), max(0, y0)
    sx1, sy1 = min(w, x0 + side), min(h, y0 + side)
    if sx1 > sx0 and sy1 > sy0:
        out[sy0 - y0:sy1 - y0, sx0 - x0:sx1 - x0] = img[sy0:sy1, sx0:sx1]
    return out


def circle_mask(size: int, radius_frac: float = 1.0) -> np.ndarray:
    """Boolean disc inscribed in a size x size square (pixel centres)."""
    yy, xx = np.mgrid[0:size, 0:size]
    c = (size - 1) / 2
    return (xx - c) ** 2 + (yy - c) ** 2 <= (radius_frac * size / 2) ** 2


def to_channels(img: np.ndarray, channels: int) -> np.ndarray:
    """(H, W) or (H, W, 3) -> exactly ``channels`` channels, as (H, W, C)."""
    if img.ndim == 2:
        img = img[..., None]
    c = img.shape[-1]
    if c == channels:
        return img
    if channels == 1:  # ITU-R 601 luma, as Pillow's "L" conversion
        return (img[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=img.dtype))[..., None]
    if channels == 3 and c == 1:
        return np.repeat(img, 3, axis=-1)
    raise ValueError(f"cannot convert {c} channels to {channels}")


def resize(img: np.ndarray, size: int) -> np.ndarray:
    """Anti-aliased resize of (H, W, C) float to (size, size, C) with Pillow's Lanczos filter
    (its support widens with the reduction factor, so downsampling does not alias)."""
    out = np.empty((size, size, img.shape[-1]), dtype=np.float32)
    for c in range(img.shape[-1]):
        ch = Image.fromarray(np.ascontiguousarray(img[..., c], dtype=np.float32), mode="F")
        out[..., c] = np.asarray(ch.resize((size, size), Image.Resampling.LANCZOS), dtype=np.float32)
    return np.clip(out, 0.0, 1.0)


def resize_mask(mask: np.ndarray, size: int) -> np.ndarray:
    m = Image.fromarray(mask.astype(np.float32), mode="F").resize((size, size), Image.Resampling.BOX)
    return np.asarray(m) >= 0.5


@dataclass(frozen=True)
class Preprocessed:
    image: np.ndarray                            # float32 (C, size, size) in [-1, 1]
    fov: np.ndarray                              # bool (size, size): pixels inside the field of view
    fov_found: bool
    transparent: bool = False                    # the source had transparent pixels (read as their stored colour)
    colour_dropped: bool = False                 # the source was a colour image, read as grey
    low_range: int = 0                           # a 16-bit source whose values fit in this many bits (<= 12)


def preprocess(img: np.ndarray, *, size: int, channels: int, crop: str) -> Preprocessed:
    """Crop, convert channels, resize and normalise one image (float in [0, 1], HxW or HxWx3).

    ``crop``: ``fov`` (fundus: detect the circular field of view, square crop around it, black
    outside), ``center`` (largest centred square), ``pad`` (pad to square with black), ``none``
    (resize as is, distorting the aspect ratio).
    """
    h, w = img.shape[:2]
    fov_found = False
    if crop == "fov":
        fov = detect_fov(img)
        fov_found = fov.found
        if fov.found:
            sq = crop_square(img, fov.cx, fov.cy, fov.radius)
            valid = crop_square(np.ones((h, w), dtype=np.float32), fov.cx, fov.cy, fov.radius)
        else:
            sq = crop_square(img, w / 2, h / 2, min(h, w) / 2)
            valid = np.ones(sq.shape[:2], dtype=np.float32)
    elif crop == "center":
        sq = crop_square(img, w / 2, h / 2, min(h, w) / 2)
        valid = np.ones(sq.shape[:2], dtype=np.float32)
    elif crop == "pad":
        sq = crop_square(img, w / 2, h / 2, max(h, w) / 2)
        valid = crop_square(np.ones((h, w), dtype=np.float32), w / 2, h / 2, max(h, w) / 2)
    elif crop == "none":
        sq, valid = img, np.ones((h, w), dtype=np.float32)
    else:
        raise ValueError(f"unknown crop {crop!r}")
    x = resize(to_channels(sq.astype(np.float32), channels), size)
    fov_mask = resize_mask(valid, size)
    if crop == "fov" and fov_found:
        fov_mask &= circle_mask(size)
        x[~fov_mask] = 0.0
    chw = np.ascontiguousarray(np.transpose(x * 2.0 - 1.0, (2, 0, 1)), dtype=np.float32)
    return Preprocessed(chw, fov_mask, fov_found)


# --------------------------------------------------------------------------------------------
# The same preprocessing from a reduced decode (JPEG draft mode / box average): the crop is planned in
# source pixel coordinates, then resampled from the reduced image with the same Lanczos filter.


@dataclass(frozen=True)
class CropPlan:
    x0: int                                      # square crop [x0, x0 + side) x [y0, y0 + side) in source pixels
    y0: int
    side: int
    fov_found: bool                              # a fundus field of view was found: black outside its disc
    mask_outside: bool                           # pixels of the crop outside the source count as outside the FOV
    whole: bool = False                          # crop "none": the whole source, resized as is


def plan_crop(img: np.ndarray, crop: str, *, scale: int = 1, width: int | None = None,
              height: int | None = None) -> CropPlan:
    """Where :func:`preprocess` crops, in source pixels, from ``img`` = the source reduced ``scale`` times
    (``width`` x ``height`` source pixels). The FOV is detected on ``img``, so its centre and radius are
    known to about ``scale`` source pixels."""
    h, w = img.shape[:2]
    W, H = width or w * scale, height or h * scale
    if crop == "fov":
        fov = detect_fov(img, scale=scale, width=W, height=H)
        if fov.found:
            return _square(fov.cx, fov.cy, fov.radius, True, True)
        return _square(W / 2, H / 2, min(H, W) / 2, False, False)
    if crop == "center":
        return _square(W / 2, H / 2, min(H, W) / 2, False, False)
    if crop == "pad":
        return _square(W / 2, H / 2, max(H, W) / 2, False, True)
    if crop == "none":
        return CropPlan(0, 0, max(H, W), False, False, whole=True)
    raise ValueError(f"unknown crop {crop!r}")


def _square(cx: float, cy: float, half: float, fov_found: bool, mask_outside: bool) -> CropPlan:
    side = max(1, round(2 * half))                          # as crop_square rounds
    return CropPlan(round(cx - side / 2), round(cy - side / 2), side, fov_found, mask_outside)


def render(img: np.ndarray, plan: CropPlan, *, scale: int, width: int, height: int, size: int,
           channels: int) -> Preprocessed:
    """:func:`preprocess` of the source, computed from ``img`` = the source reduced ``scale`` times.

    The crop's edges fall between reduced pixels when they are not multiples of ``scale``: the reduced image
    is cut at the nearest whole pixels outside them and Pillow's resize samples exactly the crop's box, so the
    result differs from the full-resolution one only by the box pre-filter (and a sliver under ``scale``
    source pixels wide at the crop's edges)."""
    x = to_channels(img.astype(np.float32, copy=False), channels)
    h, w = x.shape[:2]
    if plan.whole:
        boxes = (0.0, 0.0, width / scale, height / scale)
    else:
        s = plan.side / scale
        boxes = (plan.x0 / scale, plan.y0 / scale, plan.x0 / scale + s, plan.y0 / scale + s)
    bx0, by0, bx1, by1 = boxes
    # The last reduced column (row) may average fewer than `scale` source pixels. Where the crop runs past the
    # image, the zero padding must share that reduced pixel: scale it by the part of it that is image.
    cover_x, cover_y = width / scale - (w - 1), height / scale - (h - 1)
    if (cover_x < 1 and bx1 > width / scale) or (cover_y < 1 and by1 > height / scale):
        x = x.copy()
        if cover_x < 1 and bx1 > width / scale:
            x[:, -1] *= cover_x
        if cover_y < 1 and by1 > height / scale:
            x[-1] *= cover_y
    ix0, iy0 = int(np.floor(bx0)), int(np.floor(by0))
    ix1, iy1 = int(np.ceil(bx1)), int(np.ceil(by1))
    cut = np.zeros((iy1 - iy0, ix1 - ix0, x.shape[2]), dtype=np.float32)     # zero outside the source
    sx0, sy0, sx1, sy1 = max(0, ix0), max(0, iy0), min(w, ix1), min(h, iy1)
    if sx1 > sx0 and sy1 > sy0:
        cut[sy0 - iy0:sy1 - iy0, sx0 - ix0:sx1 - ix0] = x[sy0:sy1, sx0:sx1]
    box = (bx0 - ix0, by0 - iy0, bx1 - ix0, by1 - iy0)
    out = np.empty((size, size, x.shape[2]), dtype=np.float32)
    for c in range(x.shape[2]):
        ch = Image.fromarray(np.ascontiguousarray(cut[..., c]), mode="F")
        out[..., c] = np.asarray(ch.resize((size, size), Image.Resampling.LANCZOS, box=box), dtype=np.float32)
    out = np.clip(out, 0.0, 1.0)
    if plan.mask_outside and not plan.whole:
        cov_x = _coverage(plan.x0, plan.side, width, size)
        cov_y = _coverage(plan.y0, plan.side, height, size)
        fov_mask = (cov_y[:, None] * cov_x[None, :]) >= 0.5
    else:
        fov_mask = np.ones((size, size), dtype=bool)
    if plan.fov_found:
        fov_mask &= circle_mask(size)
        out[~fov_mask] = 0.0
    chw = np.ascontiguousarray(np.transpose(out * 2.0 - 1.0, (2, 0, 1)), dtype=np.float32)
    return Preprocessed(chw, fov_mask, plan.fov_found)


def _coverage(start: int, side: int, n: int, size: int) -> np.ndarray:
    """Fraction of each of ``size`` output pixels along one axis of the crop that lies inside [0, n)."""
    edges = start + np.arange(size + 1) * (side / size)
    lo, hi = np.clip(edges[:-1], 0, n), np.clip(edges[1:], 0, n)
    return (hi - lo) / (side / size)
