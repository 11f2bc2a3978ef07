"""Procedural chest X-ray phantoms (postero-anterior view): the patient.

A patient (:class:`XrayPatient`, drawn by :func:`sample_patient`) is a persistent anatomy in
normalised *patient coordinates*: ``u`` runs from -1 (image left, the patient's right in PA
convention) to +1, ``v`` from -1 (top) to +1 (bottom), for a standard pose that fills the image.
:func:`render` draws one acquisition (:mod:`medanon.phantoms.xray_render`): it picks a pose (rotation,
translation, scale), an inspiration depth, an exposure, blur and noise from its generator, maps every
pixel back into patient coordinates and evaluates the anatomy there
(:mod:`medanon.phantoms.xray_anatomy`), so every size from 16 to 512 pixels shows the same patient.

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

from medanon.phantoms.common import PhantomImage, PhantomParams
from medanon.phantoms.xray_anatomy import lung_soft

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
            lung = lung_soft(p, np.array([cu]), np.array([cv]), 0.0, 1e-3)
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


def render(patient: XrayPatient, rng: np.random.Generator, size: int) -> PhantomImage:
    """One PA acquisition of ``patient`` at ``size`` px: :func:`medanon.phantoms.xray_render.render`."""
    from medanon.phantoms.xray_render import render as draw

    return draw(patient, rng, size)
