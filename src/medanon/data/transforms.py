"""Preprocessing: field-of-view detection and square crop for fundus photographs, crops for
X-rays, channel conversion, resizing with anti-aliasing, and normalisation to [-1, 1].

All functions take and return NumPy arrays so they are usable without torch; ``preprocess``
chains them into the tensor layout of DESIGN.md §3: float32 (C, H, W) in [-1, 1].
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


def detect_fov(img: np.ndarray, *, threshold: float | None = None) -> FieldOfView:
    """Find the circular field of view of a fundus photograph.

    The FOV is the largest bright connected region (the black surround is near zero in the red
    channel). Its horizontal extent gives the diameter, which stays right when the camera frame
    cuts the circle at the top and bottom (common in EyePACS). ``threshold`` is on [0, 1]
    intensity; by default a fraction of a robust maximum, with a floor.
    """
    a = img[..., 0] if img.ndim == 3 else img    # red channel: brightest in fundus, ~0 outside
    if img.ndim == 3:
        a = np.maximum(a, img.mean(axis=-1))
    h, w = a.shape
    if threshold is None:
        hi = float(np.percentile(a, 99))
        threshold = max(0.04, 0.12 * hi)
    fg = a > threshold
    fg = ndimage.binary_opening(fg, iterations=1) if min(h, w) >= 16 else fg
    lab, n = ndimage.label(fg)
    if n == 0:
        return FieldOfView(w / 2, h / 2, min(h, w) / 2, False)
    sizes = ndimage.sum_labels(fg, lab, index=np.arange(1, n + 1))
    big = lab == (int(np.argmax(sizes)) + 1)
    if big.sum() < 0.05 * h * w:
        return FieldOfView(w / 2, h / 2, min(h, w) / 2, False)
    rows = np.flatnonzero(big.any(axis=1))
    cols = np.flatnonzero(big.any(axis=0))
    x0, x1, y0, y1 = cols[0], cols[-1] + 1, rows[0], rows[-1] + 1
    radius = max(x1 - x0, y1 - y0) / 2
    cx = _centre(x0, x1, w, radius)
    cy = _centre(y0, y1, h, radius)
    return FieldOfView(float(cx), float(cy), float(radius), True)


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
