"""Procedural chest X-ray phantoms (postero-anterior view).

A patient (:class:`XrayPatient`, drawn by :func:`sample_patient`) is a persistent anatomy in
normalised *patient coordinates*: ``u`` runs from -1 (image left, the patient's right in PA
convention) to +1, ``v`` from -1 (top) to +1 (bottom), for a standard pose that fills the image.
:func:`render` draws one acquisition: it picks a pose (rotation, translation, scale), an inspiration
depth, an exposure, blur and noise from its generator, maps every pixel back into patient coordinates
and evaluates the anatomy there, so every size from 16 to 512 pixels shows the same patient.

The image is built as an additive "display density" (0 = no attenuation = black, about 0.5 = soft
tissue, about 0.8 = mediastinum, bones on top), then exposed, blurred and given quantum noise.
Thin structures (ribs, vessels, clavicles) are drawn with an analytic anti-aliasing: their profile is
widened to at least about a pixel and its amplitude reduced to keep the integral, so small sizes do
not alias.

Identity lives in the patient: body outline and soft-tissue habitus, lung shapes, heart and
mediastinum, aortic knob, diaphragm domes, clavicles, rib count/spacing/curvature, vessel tree, hila,
humeral heads. Sex and age change anatomy subtly (breast shadows and a narrower thorax for women;
fainter bones, a larger heart, an unfolded aorta, a flatter and lower diaphragm and higher clavicles
with age). Pneumonia adds persistent patchy opacities inside the lungs. Identifying markers follow the
DP-GLOW paper: a burned-in block (in image coordinates, identical in every acquisition) and situs
inversus (the anatomy mirrored left-right).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from medanon.phantoms.common import PhantomImage, PhantomParams, to_uint8

__all__ = ["XrayPatient", "marker_pixel_box", "render", "sample_patient"]


@dataclass
class XrayPatient:
    """Persistent anatomy and attributes of one patient (normalised patient coordinates).

    Lateral quantities are given for the *normal* situs: positive ``u`` is the patient's left
    (image right). With ``situs_inversus`` the whole anatomy is mirrored when rendered.
    """

    # attributes and pathology
    sex: int                          # 0 female, 1 male
    age: float                        # years, one decimal
    pneumonia: bool
    situs_inversus: bool
    marker_block: bool
    # build and placement: anatomy is drawn at (u / habitus_x, (v - habitus_dy) / habitus_y)
    habitus_x: float
    habitus_y: float
    habitus_dy: float
    # body outline and soft tissue
    chest_hw: float                   # half-width of the body at lung level
    neck_hw: float
    shoulder_y: float                 # height of the shoulders next to the neck
    shoulder_drop: float              # how much the shoulders slope down laterally
    axilla_y: float
    waist: float                      # narrowing of the abdomen below the domes
    soft: float                       # soft-tissue density (habitus)
    breast: float                     # breast-shadow density (0 for most men)
    breast_y: float
    breast_size: float
    # lungs: index 0 = patient right (image left), 1 = patient left (image right)
    lung_cx: np.ndarray               # (2,) |u| of each lung's centre
    lung_hw: np.ndarray               # (2,) lung half-widths
    lung_apex: np.ndarray             # (2,) v of the apices
    lung_air: float                   # how dark the lungs are
    dome_y: np.ndarray                # (2,) v of each diaphragm dome top (right higher)
    dome_cx: np.ndarray               # (2,) |u| of each dome top
    dome_curv: float
    med_hw: float                     # upper mediastinum half-width
    med_shift: float                  # lateral offset of the mediastinum (towards the patient's left)
    # heart and great vessels
    heart_cx: float                   # left-ventricular border: centre of its elliptic arc
    heart_dy: float                   # centre of the left heart border arc, above the left dome top
    heart_a: float                    # lateral reach of the left heart border from heart_cx
    heart_b: float                    # vertical half-extent of the left heart border
    ra_a: float                       # right atrial bulge (right heart border)
    ra_b: float
    pt_r: float                       # pulmonary trunk bump on the left border
    knob_x: float
    knob_y: float
    knob_r: float
    hilum_y: np.ndarray               # (2,)
    trachea_x: float
    carina_y: float
    gastric: float                    # gastric bubble density (0 = none visible)
    gastric_x: float
    # bones
    bone: float                       # bone density factor (falls with age)
    spine_hw: float
    vert_pitch: float
    vert_phase: float
    rib_y: np.ndarray                 # (2, n) posterior rib heights at the spine
    rib_rise: np.ndarray              # (2, n)
    rib_curv: np.ndarray              # (2, n)
    rib_w: float
    ant_rib_y: np.ndarray             # (2, m) anterior rib heights at the lateral wall
    ant_rib_slope: float
    clav_y: np.ndarray                # (2,) sternal-end height
    clav_slope: np.ndarray            # (2,)
    clav_w: float
    humerus_r: float
    cartilage: np.ndarray             # (k, 3) calcified costal cartilage dots (|u|, v, side)
    # lung markings: segments (x0, y0, x1, y1, width, amplitude) in patient coordinates
    vessels: np.ndarray
    texture: np.ndarray               # (k, 4) parenchymal texture waves (ku, kv, phase, amplitude)
    # pneumonia: sub-blobs (u, v, radius, amplitude, opacity index)
    opacity_blobs: np.ndarray
    n_opacities: int
    # burned-in marker block: box in normalised image coordinates (x0, y0, x1, y1) and bit pattern
    marker_box: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    marker_bits: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))


# ----------------------------------------------------------------------------------------------
# small numeric helpers

def _sig(x: np.ndarray | float, e: float) -> np.ndarray:
    """Smooth step 0 -> 1 around 0 with softness ``e`` (logistic)."""
    return 0.5 * (1.0 + np.tanh(np.asarray(x) / (2.0 * e)))


def _band(d: np.ndarray, w: float, pix: float, p: int = 2) -> np.ndarray:
    """Profile of a thin structure of half-width ``w`` at distance ``d``, anti-aliased for pixel ``pix``."""
    we = np.sqrt(w * w + (0.55 * pix) ** 2)
    z = d / we
    if p == 2:
        return (w / we) * np.exp(-z * z)
    z2 = z * z
    return (w / we) * np.exp(-z2 * z2)


def _rot(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s], [s, c]])


# ----------------------------------------------------------------------------------------------
# the patient

def sample_patient(
    rng: np.random.Generator,
    params: PhantomParams = PhantomParams(),  # noqa: B008 (frozen dataclass: a safe default)
) -> XrayPatient:
    """Draw one patient: attributes, persistent anatomy, pathology and identifying markers.

    The draws are ordered so that anatomy does not depend on the pathology or marker rates: two
    calls with the same generator state and different ``params`` rates give the same anatomy.
    """
    n = rng.normal
    u = rng.uniform
    sex = int(rng.random() < 0.5)
    lo, hi = params.age_range
    age = round(float(u(lo, hi)), 1)
    ag = float(np.clip((age - 25.0) / 60.0, -0.5, 1.5))   # 0 at 25, 1 at 85
    male = float(sex)

    habitus_x = math.exp(n(0, 0.045))
    habitus_y = math.exp(n(0, 0.05)) * (1.0 - 0.03 * ag)         # shorter thorax with age (kyphosis)
    habitus_dy = n(0, 0.04)
    chest_hw = 0.78 + 0.05 * male + 0.015 * ag + n(0, 0.03)
    neck_hw = 0.16 + 0.03 * male + n(0, 0.015)
    shoulder_y = -0.80 + 0.03 * ag + n(0, 0.03)
    shoulder_drop = 0.14 + n(0, 0.03)
    axilla_y = -0.42 + n(0, 0.04)
    waist = 0.06 + n(0, 0.03)
    soft = 0.50 + n(0, 0.035)
    if sex == 0:
        breast = 0.13 + abs(n(0, 0.04)) + 0.02 * (ag > 0.4)
        breast_size = 1.0 + n(0, 0.12)
    else:
        breast = max(0.0, n(0.02, 0.015))
        breast_size = 0.9 + n(0, 0.1)
    breast_y = 0.30 + n(0, 0.04)

    width_scale = (chest_hw - 0.12) / 0.70
    base_hw = (0.325 + 0.012 * male) * width_scale + n(0, 0.012)
    lung_hw = np.array([base_hw * (1.04 + n(0, 0.02)), base_hw * (0.97 + n(0, 0.02))])
    lung_cx = np.array([0.40, 0.40]) * width_scale + n(0, 0.012, 2)
    lung_apex = np.array([-0.70, -0.72]) + 0.02 * ag + n(0, 0.02, 2)
    lung_air = 0.27 + n(0, 0.025)
    dome_r = 0.40 + 0.04 * ag - 0.02 * male + n(0, 0.03)
    dome_y = np.array([dome_r, dome_r + 0.05 + n(0, 0.02)])
    dome_cx = np.array([0.40, 0.42]) * width_scale + n(0, 0.03, 2)
    dome_curv = (1.9 - 0.5 * ag) * (1.0 + n(0, 0.12))
    med_hw = 0.085 + 0.02 * ag + n(0, 0.008)
    med_shift = 0.015 + n(0, 0.01)

    heart_scale = (1.0 + 0.12 * ag + 0.04 * male) * math.exp(n(0, 0.06))
    heart_cx = 0.02 + 0.02 * ag + n(0, 0.02)
    heart_dy = 0.18 + n(0, 0.025)
    heart_a = 0.27 * heart_scale * width_scale ** 0.5
    heart_b = 0.38 * (1.0 + 0.5 * (heart_scale - 1.0)) * (1.0 + n(0, 0.05))
    ra_a = 0.165 * heart_scale * (1.0 + n(0, 0.06))
    ra_b = 0.25 * (1.0 + n(0, 0.06))
    pt_r = 0.045 * (1.0 + n(0, 0.15))
    knob_x = 0.10 + 0.05 * ag + n(0, 0.012)
    knob_y = -0.30 + n(0, 0.025)
    knob_r = 0.045 * (1.0 + 0.45 * ag) * math.exp(n(0, 0.1))
    hilum_y = np.array([-0.06, -0.10]) + n(0, 0.02, 2)
    trachea_x = -0.01 + n(0, 0.01)
    carina_y = -0.30 + n(0, 0.03)
    gastric = max(0.0, n(0.12, 0.06))
    gastric_x = 0.40 + n(0, 0.05)

    bone = float(np.clip((1.0 - 0.30 * ag) * (1.0 + n(0, 0.08)), 0.35, 1.3))
    spine_hw = 0.055 + 0.005 * male + n(0, 0.004)
    vert_pitch = 0.085 + n(0, 0.006)
    vert_phase = u(0, 1)
    n_ribs = int(rng.integers(9, 12))
    rib_top = -0.74 + 0.015 * ag + n(0, 0.02)
    spacing = (0.105 + n(0, 0.008)) * (1.0 + n(0, 0.04, (2, n_ribs)))
    spacing *= np.linspace(0.85, 1.15, n_ribs)[None, :]       # wider intercostal spaces lower down
    rib_y = rib_top + np.cumsum(spacing, axis=1) - spacing[:, :1]
    rib_y[1] += n(0, 0.01)
    rise0 = (0.38 - 0.10 * ag) * (1.0 + n(0, 0.1))              # ribs flatter with age (kyphosis)
    curv0 = 0.45 * (1.0 + n(0, 0.1))
    rib_rise = rise0 * (1.0 + n(0, 0.05, (2, n_ribs)))
    rib_curv = curv0 * (1.0 + n(0, 0.05, (2, n_ribs))) * np.linspace(1.4, 0.9, n_ribs)[None, :]
    rib_w = 0.026 + 0.003 * male + n(0, 0.002)
    n_ant = 6
    ant_rib_y = -0.50 + 0.02 * ag + np.cumsum(np.full((2, n_ant), 0.13) * (1.0 + n(0, 0.05, (2, n_ant))), axis=1)
    ant_rib_slope = 0.55 + n(0, 0.06)
    clav_y = np.array([-0.58, -0.58]) - 0.05 * ag + n(0, 0.02) + n(0, 0.01, 2)
    clav_slope = np.array([-0.22, -0.22]) + n(0, 0.04) + n(0, 0.02, 2)
    clav_w = 0.030 + 0.004 * male + n(0, 0.002)
    humerus_r = 0.11 + 0.01 * male + n(0, 0.008)
    k = int(rng.poisson(8 * max(ag - 0.35, 0.0)))
    cartilage = np.column_stack([u(0.22, 0.35, k), u(-0.2, 0.5, k), rng.integers(0, 2, k)]).astype(float)

    vessels = _sample_vessels(rng, lung_cx, hilum_y, lung_hw)
    k_tex = 8
    freq = rng.uniform(6.0, 16.0, k_tex)
    ang = rng.uniform(0, math.pi, k_tex)
    texture = np.column_stack([freq * np.cos(ang), freq * np.sin(ang), rng.uniform(0, 2 * math.pi, k_tex),
                               rng.uniform(0.006, 0.014, k_tex)])

    # pathology and markers last (see docstring)
    pneumonia = bool(rng.random() < params.pneumonia_rate)
    marker = bool(rng.random() < params.marker_rate)
    situs = bool(rng.random() < params.situs_inversus_rate)
    prng = np.random.default_rng(rng.integers(0, 2**63))
    mrng = np.random.default_rng(rng.integers(0, 2**63))

    patient = XrayPatient(
        sex=sex, age=age, pneumonia=pneumonia, situs_inversus=situs, marker_block=marker,
        habitus_x=habitus_x, habitus_y=habitus_y, habitus_dy=habitus_dy,
        chest_hw=chest_hw, neck_hw=neck_hw, shoulder_y=shoulder_y, shoulder_drop=shoulder_drop,
        axilla_y=axilla_y, waist=waist, soft=soft, breast=breast, breast_y=breast_y,
        breast_size=breast_size, lung_cx=lung_cx, lung_hw=lung_hw, lung_apex=lung_apex,
        lung_air=lung_air, dome_y=dome_y, dome_cx=dome_cx, dome_curv=dome_curv, med_hw=med_hw,
        med_shift=med_shift, heart_cx=heart_cx, heart_dy=heart_dy, heart_a=heart_a, heart_b=heart_b,
        ra_a=ra_a, ra_b=ra_b, pt_r=pt_r, knob_x=knob_x, knob_y=knob_y, knob_r=knob_r, hilum_y=hilum_y,
        trachea_x=trachea_x, carina_y=carina_y, gastric=gastric, gastric_x=gastric_x, bone=bone,
        spine_hw=spine_hw, vert_pitch=vert_pitch, vert_phase=vert_phase, rib_y=rib_y,
        rib_rise=rib_rise, rib_curv=rib_curv, rib_w=rib_w, ant_rib_y=ant_rib_y,
        ant_rib_slope=ant_rib_slope, clav_y=clav_y, clav_slope=clav_slope, clav_w=clav_w,
        humerus_r=humerus_r, cartilage=cartilage, vessels=vessels, texture=texture,
        opacity_blobs=np.zeros((0, 5)), n_opacities=0,
    )
    if pneumonia:
        patient.opacity_blobs, patient.n_opacities = _sample_opacities(prng, patient)
    if marker:
        patient.marker_box, patient.marker_bits = _sample_marker(mrng)
    return patient


def _sample_vessels(rng: np.random.Generator, lung_cx, hilum_y, lung_hw) -> np.ndarray:
    """A branching pulmonary vessel tree fanning out of each hilum (segments in patient coordinates)."""
    segs = []
    for side in (0, 1):
        s = -1.0 if side == 0 else 1.0
        hx = s * (0.15 + 0.01 * side)
        hy = hilum_y[side]
        n_trunks = 8
        # directions measured from "straight lateral", spanning up-lateral to down-lateral
        angles = np.linspace(-1.2, 1.3, n_trunks) + rng.normal(0, 0.08, n_trunks)
        for a0 in angles:
            x_start = hx + s * rng.uniform(0.0, 0.05)
            y_start = hy + 0.25 * (a0 / 1.3) * 0.3 + rng.normal(0, 0.02)
            stack = [(x_start, y_start, a0, 0.022, 0.07, 0.24 + 0.1 * rng.random(), 0)]
            while stack:
                x, y, a, w, amp, length, depth = stack.pop()
                # the direction vector: lateral is +s in u; angle rotates towards +v (down)
                n_steps = 4
                for _ in range(n_steps):
                    a += rng.normal(0, 0.2)
                    step = length / n_steps
                    x1 = x + s * step * math.cos(a)
                    y1 = y + step * math.sin(a)
                    segs.append((x, y, x1, y1, w, amp))
                    x, y = x1, y1
                    w *= 0.88
                    amp *= 0.84
                if depth < 2:
                    for da in (-0.45, 0.4):
                        if rng.random() < 0.8:
                            stack.append((x, y, a + da + rng.normal(0, 0.1), w * 0.9, amp * 0.95,
                                          length * (0.7 + 0.2 * rng.random()), depth + 1))
    return np.asarray(segs, dtype=float)


def _sample_opacities(rng: np.random.Generator, p: XrayPatient) -> tuple[np.ndarray, int]:
    """Patchy consolidations at positions inside the lung fields (nominal pose and inspiration)."""
    n_op = int(1 + rng.poisson(0.8))
    n_op = min(n_op, 4)
    blobs = []
    for i in range(n_op):
        for _ in range(200):
            side = int(rng.integers(0, 2))
            s = -1.0 if side == 0 else 1.0
            cu = s * (p.lung_cx[side] + rng.uniform(-0.8, 0.8) * p.lung_hw[side])
            cv = rng.uniform(p.lung_apex[side] + 0.25, p.dome_y[side] + 0.02)
            lung = _lung_soft(p, np.array([cu]), np.array([cv]), 0.0, 1e-3)
            hilum = math.hypot(abs(cu) - 0.16, cv - p.hilum_y[side])
            if lung[0] > 0.9 and hilum > 0.15:
                break
        r = rng.uniform(0.11, 0.22)
        amp = rng.uniform(0.7, 1.3)
        for _ in range(int(rng.integers(6, 12))):
            blobs.append((cu + rng.normal(0, 0.45 * r), cv + rng.normal(0, 0.45 * r),
                          r * rng.uniform(0.3, 0.6), amp * rng.uniform(0.5, 1.0), i))
    return np.asarray(blobs, dtype=float), n_op


def _sample_marker(rng: np.random.Generator) -> tuple[tuple[float, float, float, float], np.ndarray]:
    """A burned-in block (like burned-in text) near an image corner, with a patient-specific pattern."""
    w = rng.uniform(0.28, 0.42)
    h = rng.uniform(0.10, 0.15)
    left = rng.random() < 0.5
    top = rng.random() < 0.7
    x0 = rng.uniform(-0.95, -0.55) if left else rng.uniform(0.55 - w, 0.95 - w)
    y0 = rng.uniform(-0.95, -0.82) if top else rng.uniform(0.82 - h, 0.95 - h)
    bits = rng.random((2, int(rng.integers(5, 9)))) < 0.5
    bits[:, 0] |= ~bits[:, 0].any()
    return (float(x0), float(y0), float(x0 + w), float(y0 + h)), bits


# ----------------------------------------------------------------------------------------------
# anatomy evaluated at patient coordinates

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
    return _sig(left - u, 1.2 * e) * _sig(u - right, 1.2 * e) * _sig(v - top, 0.05)


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
        f = _sig(1.0 - r, 2.5 * e) * _sig(dome - v, e) * _sig(s * u, e)
        lungs.append(f)
        ys.append(Y)
    cover = _silhouette(p, u, v, insp, e)
    return lungs, ys, cover, (dr, dl)


def _lung_soft(p: XrayPatient, u: np.ndarray, v: np.ndarray, insp: float, pix: float) -> np.ndarray:
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


def _density(p: XrayPatient, u: np.ndarray, v: np.ndarray, insp: float, pix: float, op_gain: float,
             to_img, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Display density of the anatomy at patient coordinates, and the soft lung-field map."""
    e = max(0.012, 0.6 * pix)
    au = np.abs(u)
    lungs, ys, cover, (dr, dl) = _lung_parts(p, u, v, insp, pix)

    # --- body outline and soft tissue ------------------------------------------------------------
    sh = p.shoulder_y + p.shoulder_drop * np.clip((au - p.neck_hw) / 0.7, 0, None) ** 1.5
    flare = 1.5 * np.clip(v - (p.shoulder_y - 0.15), 0.0, 0.15) ** 2    # neck widens into the shoulders
    neck = _sig(p.neck_hw + flare - au, 1.5 * e)
    below_sh = _sig(v - sh, 2.0 * e)
    hw = p.chest_hw * (1.0 - p.waist * np.clip(v - 0.5, 0, None)) + 0.6 * _sig(p.axilla_y - v, 0.04)
    trunk = below_sh * _sig(hw - au, 1.5 * e)
    gap = 0.035 + 0.22 * np.clip(v - p.axilla_y, 0, None)
    arm_in = p.chest_hw + gap
    arm = below_sh * _sig(au - arm_in, 1.5 * e) * _sig(arm_in + 0.30 - au, 2 * e)
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
    abdomen = _sig(v - dome, 1.5 * e) * trunk
    D += 0.14 * abdomen * (1.0 - 0.3 * _sig(u, 0.1))
    bubble = np.exp(-(((u - p.gastric_x) / 0.12) ** 2 + ((v - dl - 0.09) / 0.06) ** 2))
    D -= p.gastric * bubble * abdomen

    # --- mediastinum, heart, great vessels -------------------------------------------------------
    D += 0.15 * cover * trunk * (1.0 - 0.5 * abdomen)
    trach = _band(u - p.trachea_x - 0.04 * np.clip(v - p.carina_y + 0.15, 0, None), 0.022, pix, 4)
    D -= 0.10 * trach * _sig(p.carina_y - v, 0.02) * _sig(v - (p.shoulder_y - 0.2), 0.05)
    for s in (-1.0, 1.0):   # main bronchi
        t = np.clip((v - p.carina_y) / 0.12, 0, 1)
        bx = p.trachea_x + s * 0.11 * t
        D -= 0.06 * _band(u - bx, 0.016, pix) * _sig(v - p.carina_y, 0.02) * _sig(p.carina_y + 0.12 - v, 0.02)
    for side, s in ((0, -1.0), (1, 1.0)):  # hila
        hx = s * (0.15 + 0.015 * side)
        D += 0.09 * np.exp(-(((u - hx) / 0.06) ** 2 + ((v - p.hilum_y[side]) / 0.09) ** 2))

    # --- spine ---------------------------------------------------------------------------------
    spine = _sig(p.spine_hw - np.abs(u - 0.5 * p.med_shift), 1.2 * e)
    vert = 0.75 + 0.25 * np.cos(2 * math.pi * (v / p.vert_pitch + p.vert_phase))
    if pix > 0.35 * p.vert_pitch:
        vert = 0.75
    D += 0.10 * p.bone * spine * vert * body

    # --- ribs ------------------------------------------------------------------------------------
    cage = _sig(p.chest_hw - 0.035 - au, 1.5 * e) * _sig(au - 0.03, e)
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
        bones += _band(d, w_rib, pix, 4)
    lat = p.chest_hw - 0.07
    fade = 0.6 * np.clip((au - 0.22) / 0.25, 0, 1)
    ca = 1.0 / math.sqrt(1.0 + p.ant_rib_slope ** 2)
    for j in range(p.ant_rib_y.shape[1]):
        yc = np.where(left, p.ant_rib_y[1, j], p.ant_rib_y[0, j]) + p.ant_rib_slope * (lat - au)
        bones += fade * _band((v - yc) * ca, 0.9 * p.rib_w, pix, 4)
    D += 0.08 * p.bone * bones * cage

    # --- clavicles, humeral heads, costal cartilage ------------------------------------------------
    for side, s in ((0, -1.0), (1, 1.0)):
        ta = np.clip(au - 0.06, 0, None)
        yc = p.clav_y[side] + p.clav_slope[side] * ta + 0.025 * np.sin(2 * math.pi * ta / 0.5)
        on = _sig(s * u - 0.06, e) * _sig(0.06 + 0.52 - s * u, e)
        D += 0.20 * p.bone * on * _band(v - yc, p.clav_w * (1.0 + 0.4 * np.clip(0.1 - ta, 0, None) / 0.1), pix, 4)
        hx = s * (p.chest_hw + 0.12)
        hy = p.shoulder_y + p.shoulder_drop * 0.9 + 0.16
        head = _sig(p.humerus_r - np.hypot(u - hx, v - hy), 1.5 * e)
        shaft = _sig(0.06 - np.abs(u - hx - s * 0.03 * (v - hy)), 1.5 * e) * _sig(v - hy, 0.01)
        D += 0.20 * p.bone * np.maximum(head, shaft) * body
    if len(p.cartilage):
        for cu, cv, cs in p.cartilage:
            s = -1.0 if cs < 0.5 else 1.0
            D += 0.10 * _band(np.hypot(u - s * cu, v - cv), 0.012, pix)

    # --- breast / pectoral shadows ------------------------------------------------------------------
    if p.breast > 0:
        for s in (-1.0, 1.0):
            rx, ry = 0.30 * p.breast_size, 0.24 * p.breast_size
            cx = s * (p.lung_cx[0] + 0.05)
            r = np.hypot((u - cx) / rx, (v - p.breast_y) / ry)
            # sharp, curved lower edge; the shadow fades out upwards
            ramp = np.clip((v - p.breast_y + 1.3 * ry) / (2.1 * ry), 0, 1)
            D += p.breast * _sig(1.0 - r, 0.05) * ramp * ramp * (1.0 - 0.4 * abdomen)

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
# one acquisition

def marker_pixel_box(patient: XrayPatient, size: int) -> tuple[int, int, int, int] | None:
    """Pixel box ``(row0, row1, col0, col1)`` of the burned-in block at ``size``, or ``None``."""
    if not patient.marker_block:
        return None
    x0, y0, x1, y1 = patient.marker_box
    c0 = int(np.clip(round((x0 + 1) / 2 * size), 0, size - 1))
    r0 = int(np.clip(round((y0 + 1) / 2 * size), 0, size - 1))
    c1 = int(np.clip(max(c0 + 3, round((x1 + 1) / 2 * size)), c0 + 1, size))
    r1 = int(np.clip(max(r0 + 2, round((y1 + 1) / 2 * size)), r0 + 1, size))
    return r0, r1, c0, c1


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

    D, lung = _density(patient, u, v, insp, pix, op_gain, to_img, size)

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
