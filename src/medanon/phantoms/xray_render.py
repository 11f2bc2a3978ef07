"""One acquisition of a chest X-ray phantom (:class:`~medanon.phantoms.xray.XrayPatient`).

A random pose (rotation, translation, scale), inspiration depth, exposure (window/level, gamma, heel
effect), collimation, blur and quantum noise; every pixel is mapped back into patient coordinates and
the anatomy (:mod:`medanon.phantoms.xray_anatomy`) evaluated there; the burned-in marker block goes on
last, in image coordinates. Returns the image, the lung mask of that acquisition and the labels.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

from medanon.phantoms.common import PhantomImage, to_uint8
from medanon.phantoms.xray import XrayPatient, marker_pixel_box
from medanon.phantoms.xray_anatomy import density


def _rot(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s], [s, c]])



def _burn_marker(img: np.ndarray, patient: XrayPatient) -> None:
    box = marker_pixel_box(patient, img.shape[0])
    if box is None:
        return
    r0, r1, c0, c1 = box
    img[r0:r1, c0:c1] = 255
    h, w = r1 - r0, c1 - c0
    f = max(1, round(0.15 * h))                    # solid frame; the pattern sits inside it
    if h - 2 * f < 1 or w - 2 * f < 1:
        return
    bits = patient.marker_bits
    rr = np.arange(h - 2 * f) * bits.shape[0] // (h - 2 * f)
    cc = np.arange(w - 2 * f) * bits.shape[1] // (w - 2 * f)
    cell = bits[rr[:, None], cc[None, :]]
    img[r0 + f:r1 - f, c0 + f:c1 - f] = np.where(cell, 40, 255).astype(np.uint8)


def render(patient: XrayPatient, rng: np.random.Generator, size: int) -> PhantomImage:
    """One PA acquisition of ``patient`` at ``size`` x ``size`` pixels."""
    size = int(size)
    if size < 4:
        raise ValueError(f"size must be at least 4, got {size}")
    # per-acquisition draws, all up front (their number does not depend on the patient)
    angle = math.radians(float(np.clip(rng.normal(0, 1.8), -5.0, 5.0)))
    shift = np.clip(rng.normal(0, 0.02, 2), -0.06, 0.06)
    scale = float(np.clip(1.0 + rng.normal(0, 0.02), 0.94, 1.06))
    insp = float(rng.uniform(-0.045, 0.045))
    contrast = float(rng.uniform(0.88, 1.12))
    bright = float(rng.normal(0, 0.03))
    gamma = float(rng.uniform(0.85, 1.15))
    heel = rng.normal(0, 0.03, 2)
    blur = float(rng.uniform(0.25, 0.75))          # in units of size/128 pixels
    noise_sd = float(rng.uniform(0.006, 0.02))
    collim = rng.uniform(0.01, 0.035, 4) * (rng.random(4) < 0.04)
    op_gain = float(rng.uniform(0.85, 1.15))
    noise_seed = int(rng.integers(0, 2**63))

    hx, hy, hdy = patient.habitus_x, patient.habitus_y, patient.habitus_dy
    pix = 2.0 / size / scale / min(hx, hy)            # pixel size in anatomy units
    g = (np.arange(size) + 0.5) * (2.0 / size) - 1.0
    x, y = np.meshgrid(g, g)
    R = _rot(angle)
    # image = scale * R @ patient + shift  ->  patient = R.T @ (image - shift) / scale
    xs, ys = (x - shift[0]) / scale, (y - shift[1]) / scale
    u = R[0, 0] * xs + R[1, 0] * ys
    v = R[0, 1] * xs + R[1, 1] * ys
    mirror = -1.0 if patient.situs_inversus else 1.0
    u = u * (mirror / hx)
    v = (v - hdy) / hy

    def to_img(pu, pv):
        pu = pu * (mirror * hx)
        pv = pv * hy + hdy
        return (scale * (R[0, 0] * pu + R[0, 1] * pv) + shift[0],
                scale * (R[1, 0] * pu + R[1, 1] * pv) + shift[1])

    D, lung = density(patient, u, v, insp, pix, op_gain, to_img, size)

    # exposure: window/level, gamma, heel effect
    lum = np.clip(D, 0.0, None) * (1.0 + heel[0] * y + heel[1] * x)
    knee = 0.72                                     # detector / display shoulder: no hard clipping
    lum = np.where(lum > knee, knee + (1.0 - knee) * (1.0 - np.exp(-(lum - knee) / (1.0 - knee))), lum)
    lum = np.clip(0.5 + contrast * (lum - 0.5) + bright, 0.0, 1.0) ** gamma
    # collimation: unexposed (bright) borders, left / right / top / bottom
    n_l, n_r, n_t, n_b = (round(w * size / 2) for w in collim)
    if n_l:
        lum[:, :n_l] = 0.88
    if n_r:
        lum[:, size - n_r:] = 0.88
    if n_t:
        lum[:n_t, :] = 0.88
    if n_b:
        lum[size - n_b:, :] = 0.88
    sigma = blur * size / 128.0
    if sigma > 0.2:
        lum = ndimage.gaussian_filter(lum, sigma, mode="nearest")
    nrng = np.random.default_rng(noise_seed)
    lum = lum + noise_sd * np.sqrt(np.clip(lum, 0.02, 1.0)) * nrng.standard_normal(lum.shape)
    img = to_uint8(lum)
    _burn_marker(img, patient)

    labels = {
        "pneumonia": float(patient.pneumonia),
        "sex": float(patient.sex),
        "age": float(patient.age),
        "marker_block": float(patient.marker_block),
        "situs_inversus": float(patient.situs_inversus),
        "view": 0.0,
        "n_opacities": float(patient.n_opacities),
    }
    return PhantomImage(image=img, mask=lung > 0.5, labels=labels)
