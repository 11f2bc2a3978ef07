"""The chest X-ray phantom's anatomy, evaluated at patient coordinates (:mod:`medanon.phantoms.xray`).

:func:`density` gives the additive display density of an :class:`~medanon.phantoms.xray.XrayPatient`
at arrays of patient coordinates ``(u, v)`` for one inspiration depth and pixel size: body outline and
soft tissue, lungs, abdomen, mediastinum and heart, spine, ribs, clavicles and humeral heads, breast
shadows, lung markings and pneumonia. Thin structures are anti-aliased analytically (:func:`band`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from scipy import ndimage

if TYPE_CHECKING:
    from medanon.phantoms.xray import XrayPatient


def sig(x: np.ndarray | float, e: float) -> np.ndarray:
    """Smooth step 0 -> 1 around 0 with softness ``e`` (logistic)."""
    return 0.5 * (1.0 + np.tanh(np.asarray(x) / (2.0 * e)))


def band(d: np.ndarray, w: float, pix: float, p: int = 2) -> np.ndarray:
    """Profile of a thin structure of half-width ``w`` at distance ``d``, anti-aliased for pixel ``pix``."""
    we = np.sqrt(w * w + (0.55 * pix) ** 2)
    z = d / we
    if p == 2:
        return (w / we) * np.exp(-z * z)
    z2 = z * z
    return (w / we) * np.exp(-z2 * z2)


def _domes(p: XrayPatient, u: np.ndarray, insp: float) -> tuple[np.ndarray, np.ndarray]:
    """Height of the right (u<0) and left (u>0) diaphragm domes at ``u``."""
    dr = p.dome_y[0] + insp + p.dome_curv * (u + p.dome_cx[0]) ** 2
    dl = p.dome_y[1] + insp + p.dome_curv * (u - p.dome_cx[1]) ** 2
    return dr, dl


def _silhouette(p: XrayPatient, u: np.ndarray, v: np.ndarray, insp: float, e: float) -> np.ndarray:
    """Soft map of the cardiomediastinal silhouette (mediastinum, aortic knob, heart)."""
    top = p.lung_apex.min() - 0.05
    med = p.med_hw * (0.85 + 0.6 * np.clip((v - top) / 0.7, 0, 1) ** 2)
    # left border (patient left, +u): upper mediastinum, aortic knob, pulmonary trunk, left ventricle
    hy = p.dome_y[1] + 0.6 * insp - p.heart_dy
    z = (v - hy) / p.heart_b
    lv = p.heart_cx + p.heart_a * np.sqrt(np.clip(1.0 - z * z, 0.0, None)) * (1.0 + 0.3 * z)
    lv = np.where(z > 0, np.maximum(lv, p.heart_cx + 0.5 * p.heart_a), lv)     # merges into the dome
    # aortic knob and pulmonary trunk: rounded bulges out of the mediastinal border
    edge = p.med_shift + med
    kr = 1.4 * p.knob_r
    knob = edge + np.clip(p.knob_x + p.knob_r - edge, 0, None) * np.sqrt(
        np.clip(1.0 - ((v - p.knob_y) / kr) ** 2, 0.0, None))
    pty = p.knob_y + p.knob_r + 0.08
    pr = 1.4 * p.pt_r
    pt = edge + np.clip(0.06 + p.pt_r - edge, 0, None) * np.sqrt(np.clip(1.0 - ((v - pty) / pr) ** 2, 0.0, None))
    tk = 0.015                              # smooth maximum of the border components
    parts = np.stack([edge, lv, knob, pt])
    left = tk * np.log(np.exp((parts - 0.5) / tk).sum(0)) + 0.5
    # right border: superior vena cava, then the right atrium down to the right dome
    ray = p.dome_y[0] + 0.6 * insp - 0.10
    zr = (v - ray) / p.ra_b
    ra = p.ra_a * np.sqrt(np.clip(1.0 - zr * zr, 0.0, None))
    ra = np.where(zr > 0, np.maximum(ra, 0.6 * p.ra_a), ra)
    right = -(tk * np.logaddexp((med - p.med_shift) / tk, ra / tk))
    return sig(left - u, 1.2 * e) * sig(u - right, 1.2 * e) * sig(v - top, 0.05)


def _lung_parts(p: XrayPatient, u: np.ndarray, v: np.ndarray, insp: float, pix: float):
    """Soft maps of both lung envelopes (before the silhouette is cut out), their vertical
    coordinates, the cardiomediastinal silhouette and the dome heights."""
    e = max(0.012, 0.6 * pix)
    dr, dl = _domes(p, u, insp)
    lungs = []
    ys = []
    for side in (0, 1):
        s = -1.0 if side == 0 else 1.0
        cx = s * p.lung_cx[side]
        apex = p.lung_apex[side]
        base = (p.dome_y[side] + insp) + 0.30
        cy = 0.5 * (apex + base)
        hb = 0.5 * (base - apex)
        Y = (v - cy) / hb
        # narrower at the apex, wider towards the base, lateral wall nearly straight low down
        hw = p.lung_hw[side] * (0.86 + 0.22 * np.clip(Y, -1.0, 0.6))
        X = (u - cx) / hw
        Yp = np.where(Y < 0, Y * Y, np.abs(Y) ** 4)
        r = np.abs(X) ** 2.4 + Yp
        dome = dr if side == 0 else dl
        f = sig(1.0 - r, 2.5 * e) * sig(dome - v, e) * sig(s * u, e)
        lungs.append(f)
        ys.append(Y)
    cover = _silhouette(p, u, v, insp, e)
    return lungs, ys, cover, (dr, dl)


def lung_soft(p: XrayPatient, u: np.ndarray, v: np.ndarray, insp: float, pix: float) -> np.ndarray:
    lungs, _, cover, _ = _lung_parts(p, u, v, insp, pix)
    return np.maximum(lungs[0], lungs[1]) * (1.0 - cover)


def _splat_segments(segs: np.ndarray, pix: float, to_img, size: int) -> np.ndarray:
    """Line segments (x0, y0, x1, y1, w, amp) rendered by splatting points along them, then blurring.

    Each segment of Gaussian cross-section ``amp * exp(-d^2 / w^2)`` contributes its line integral
    ``amp * w * sqrt(pi)`` per unit length; points every half pixel are splatted bilinearly into the
    image and one Gaussian blur of the typical vessel width restores the profile. Exact for vessels
    thinner than a pixel, a good approximation above, and independent of the number of segments.
    """
    out = np.zeros(size * size)
    if len(segs) == 0:
        return out.reshape(size, size)
    x0, y0, x1, y1, w, amp = (segs[:, i] for i in range(6))
    dx, dy = x1 - x0, y1 - y0
    length = np.hypot(dx, dy)
    n = np.maximum(1, np.ceil(length / (0.5 * pix))).astype(int)
    idx = np.repeat(np.arange(len(segs)), n)
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    frac = (np.arange(idx.size) - start[idx] + 0.5) / n[idx]
    pu = x0[idx] + frac * dx[idx]
    pv = y0[idx] + frac * dy[idx]
    wgt = (amp * w * math.sqrt(math.pi) * length / n)[idx] / (pix * pix)
    ix, iy = to_img(pu, pv)
    c = (ix + 1.0) * size / 2.0 - 0.5
    r = (iy + 1.0) * size / 2.0 - 0.5
    c0 = np.floor(c).astype(int)
    r0 = np.floor(r).astype(int)
    fc, fr = c - c0, r - r0
    for dr_, dc_, wk in ((0, 0, (1 - fr) * (1 - fc)), (0, 1, (1 - fr) * fc), (1, 0, fr * (1 - fc)), (1, 1, fr * fc)):
        rr, cc = r0 + dr_, c0 + dc_
        ok = (rr >= 0) & (rr < size) & (cc >= 0) & (cc < size)
        out += np.bincount(rr[ok] * size + cc[ok], weights=(wgt * wk)[ok], minlength=size * size)
    img = out.reshape(size, size)
    sigma = max(0.009 / pix, 0.45)
    return ndimage.gaussian_filter(img, sigma, mode="constant")


def density(p: XrayPatient, u: np.ndarray, v: np.ndarray, insp: float, pix: float, op_gain: float,
             to_img, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Display density of the anatomy at patient coordinates, and the soft lung-field map."""
    e = max(0.012, 0.6 * pix)
    au = np.abs(u)
    lungs, ys, cover, (dr, dl) = _lung_parts(p, u, v, insp, pix)

    # --- body outline and soft tissue ------------------------------------------------------------
    sh = p.shoulder_y + p.shoulder_drop * np.clip((au - p.neck_hw) / 0.7, 0, None) ** 1.5
    flare = 1.5 * np.clip(v - (p.shoulder_y - 0.15), 0.0, 0.15) ** 2    # neck widens into the shoulders
    neck = sig(p.neck_hw + flare - au, 1.5 * e)
    below_sh = sig(v - sh, 2.0 * e)
    hw = p.chest_hw * (1.0 - p.waist * np.clip(v - 0.5, 0, None)) + 0.6 * sig(p.axilla_y - v, 0.04)
    trunk = below_sh * sig(hw - au, 1.5 * e)
    gap = 0.035 + 0.22 * np.clip(v - p.axilla_y, 0, None)
    arm_in = p.chest_hw + gap
    arm = below_sh * sig(au - arm_in, 1.5 * e) * sig(arm_in + 0.30 - au, 2 * e)
    body = np.maximum(np.maximum(neck, trunk), arm)
    thick = np.sqrt(np.clip(1.0 - (u / (p.chest_hw + 0.35)) ** 2, 0.0, 1.0))
    D = p.soft * body * (0.45 + 0.55 * thick)

    # --- lungs (air) ------------------------------------------------------------------------------
    lung = np.maximum(lungs[0], lungs[1])
    Y = np.where(u < 0, ys[0], ys[1])
    # darkest in the mid zones; apices (muscles) and bases (soft tissue) lighter; lateral periphery lighter
    zone = 1.0 - 0.28 * np.clip(-Y - 0.45, 0, None) / 0.55 - 0.12 * np.clip(Y, 0, None)
    lung_vis = lung * (1.0 - cover)
    D -= p.lung_air * lung_vis * zone

    # --- below the diaphragm: liver / spleen / stomach -------------------------------------------
    dome = np.minimum(dr, dl)
    abdomen = sig(v - dome, 1.5 * e) * trunk
    D += 0.14 * abdomen * (1.0 - 0.3 * sig(u, 0.1))
    bubble = np.exp(-(((u - p.gastric_x) / 0.12) ** 2 + ((v - dl - 0.09) / 0.06) ** 2))
    D -= p.gastric * bubble * abdomen

    # --- mediastinum, heart, great vessels -------------------------------------------------------
    D += 0.15 * cover * trunk * (1.0 - 0.5 * abdomen)
    trach = band(u - p.trachea_x - 0.04 * np.clip(v - p.carina_y + 0.15, 0, None), 0.022, pix, 4)
    D -= 0.10 * trach * sig(p.carina_y - v, 0.02) * sig(v - (p.shoulder_y - 0.2), 0.05)
    for s in (-1.0, 1.0):   # main bronchi
        t = np.clip((v - p.carina_y) / 0.12, 0, 1)
        bx = p.trachea_x + s * 0.11 * t
        D -= 0.06 * band(u - bx, 0.016, pix) * sig(v - p.carina_y, 0.02) * sig(p.carina_y + 0.12 - v, 0.02)
    for side, s in ((0, -1.0), (1, 1.0)):  # hila
        hx = s * (0.15 + 0.015 * side)
        D += 0.09 * np.exp(-(((u - hx) / 0.06) ** 2 + ((v - p.hilum_y[side]) / 0.09) ** 2))

    # --- spine ---------------------------------------------------------------------------------
    spine = sig(p.spine_hw - np.abs(u - 0.5 * p.med_shift), 1.2 * e)
    vert = 0.75 + 0.25 * np.cos(2 * math.pi * (v / p.vert_pitch + p.vert_phase))
    if pix > 0.35 * p.vert_pitch:
        vert = 0.75
    D += 0.10 * p.bone * spine * vert * body

    # --- ribs ------------------------------------------------------------------------------------
    cage = sig(p.chest_hw - 0.035 - au, 1.5 * e) * sig(au - 0.03, e)
    bones = np.zeros_like(u)
    a0 = 0.035
    t = np.clip(au - a0, 0, None)
    left = u >= 0
    t2 = t * t
    lat_bend = 1.2 * np.clip(t - 0.5, 0, None) ** 2
    w_rib = p.rib_w * (0.85 + 0.4 * np.clip(t / 0.6, 0, 1))      # ribs widen laterally
    for i in range(p.rib_y.shape[1]):
        y0 = np.where(left, p.rib_y[1, i], p.rib_y[0, i])
        rise = np.where(left, p.rib_rise[1, i], p.rib_rise[0, i])
        curv = np.where(left, p.rib_curv[1, i], p.rib_curv[0, i])
        yc = y0 - rise * t + curv * t2 + lat_bend
        slope = 2 * curv * t - rise
        d = (v - yc) / np.sqrt(1.0 + slope * slope)
        bones += band(d, w_rib, pix, 4)
    lat = p.chest_hw - 0.07
    fade = 0.6 * np.clip((au - 0.22) / 0.25, 0, 1)
    ca = 1.0 / math.sqrt(1.0 + p.ant_rib_slope ** 2)
    for j in range(p.ant_rib_y.shape[1]):
        yc = np.where(left, p.ant_rib_y[1, j], p.ant_rib_y[0, j]) + p.ant_rib_slope * (lat - au)
        bones += fade * band((v - yc) * ca, 0.9 * p.rib_w, pix, 4)
    D += 0.08 * p.bone * bones * cage

    # --- clavicles, humeral heads, costal cartilage ------------------------------------------------
    for side, s in ((0, -1.0), (1, 1.0)):
        ta = np.clip(au - 0.06, 0, None)
        yc = p.clav_y[side] + p.clav_slope[side] * ta + 0.025 * np.sin(2 * math.pi * ta / 0.5)
        on = sig(s * u - 0.06, e) * sig(0.06 + 0.52 - s * u, e)
        D += 0.20 * p.bone * on * band(v - yc, p.clav_w * (1.0 + 0.4 * np.clip(0.1 - ta, 0, None) / 0.1), pix, 4)
        hx = s * (p.chest_hw + 0.12)
        hy = p.shoulder_y + p.shoulder_drop * 0.9 + 0.16
        head = sig(p.humerus_r - np.hypot(u - hx, v - hy), 1.5 * e)
        shaft = sig(0.06 - np.abs(u - hx - s * 0.03 * (v - hy)), 1.5 * e) * sig(v - hy, 0.01)
        D += 0.20 * p.bone * np.maximum(head, shaft) * body
    if len(p.cartilage):
        for cu, cv, cs in p.cartilage:
            s = -1.0 if cs < 0.5 else 1.0
            D += 0.10 * band(np.hypot(u - s * cu, v - cv), 0.012, pix)

    # --- breast / pectoral shadows ------------------------------------------------------------------
    if p.breast > 0:
        for s in (-1.0, 1.0):
            rx, ry = 0.30 * p.breast_size, 0.24 * p.breast_size
            cx = s * (p.lung_cx[0] + 0.05)
            r = np.hypot((u - cx) / rx, (v - p.breast_y) / ry)
            # sharp, curved lower edge; the shadow fades out upwards
            ramp = np.clip((v - p.breast_y + 1.3 * ry) / (2.1 * ry), 0, 1)
            D += p.breast * sig(1.0 - r, 0.05) * ramp * ramp * (1.0 - 0.4 * abdomen)

    # --- lung markings and pneumonia -------------------------------------------------------------
    marks = _splat_segments(p.vessels, pix, to_img, size)
    tex = np.zeros_like(u)
    for ku, kv, ph, amp in p.texture:
        if math.hypot(ku, kv) * pix < 1.2:        # skip waves the pixel grid cannot carry
            tex += amp * np.cos(ku * u + kv * v + ph)
    D += tex * lung_vis
    D += marks * (0.35 + 0.65 * lung_vis)
    if len(p.opacity_blobs) and op_gain > 0:
        acc = np.zeros_like(u)
        for bu, bv, br, ba, _ in p.opacity_blobs:
            acc += ba * np.exp(-(((u - bu) ** 2 + (v - bv) ** 2) / (br * br)))
        D += op_gain * 0.28 * (1.0 - np.exp(-acc)) * lung_vis

    return D, lung_vis


# ----------------------------------------------------------------------------------------------
