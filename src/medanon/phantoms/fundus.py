"""Procedural retinal fundus phantoms with identity, attribute, pathology and vessel ground truth.

A :class:`FundusPatient` is the persistent anatomy of one eye of one patient, drawn once by
:func:`sample_patient`: optic disc (position, size, cup), fovea and macula, fundus pigmentation
and a choroidal texture, a recursively branching vessel tree (arteries thinner and brighter,
veins wider and darker) whose temporal trunks form the superior and inferior arcades around
the macula, diabetic-retinopathy lesions placed in patient coordinates, and an optional
burned-in identifying block. :func:`render` draws one acquisition of it: a random pose (rotation,
translation, scale of the eye inside the fixed circular field of view), illumination, colour
cast, occasional defocus and sensor noise, and returns the image, the vessel mask of that
acquisition and the labels.

Geometry lives in normalised coordinates: the field of view is the unit disc, ``x`` to the
right, ``y`` down (image convention). In a right eye the optic disc is on the right of the
image (nasal side as seen by the examiner), in a left eye on the left. Every length (vessel
calibre, lesion size) is in these units, so images of any size (16 to 512 px) show the same eye.

Attributes subtly change the anatomy: age narrows the arterioles, adds tortuosity, prunes the
finest vessels, enlarges the cup and yellows and darkens the lens; males have a slightly larger
disc, wider vessels and a darker fundus. The DR grade (ICDR 0-4) sets the lesions:
1 microaneurysms only; 2 more microaneurysms, haemorrhages, hard exudates, sometimes cotton-wool
spots; 3 haemorrhages in all four quadrants, cotton-wool spots, venous beading; 4 adds
neovascularisation and sometimes a pre-retinal haemorrhage. The colour palette is tuned to the
real image ``skimage.data.retina()`` (mean and spread of R, G, B inside the field of view).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage

from medanon.phantoms.common import PhantomImage, PhantomParams, to_uint8

__all__ = ["FundusPatient", "MarkerBlock", "Vessel", "render", "sample_patient"]

_TAU = 2.0 * math.pi
_STOP_R2 = 1.18 ** 2            # vessels are grown up to this radius (poses can bring it into view)
_TEX_EXTENT = 1.25              # the choroidal texture covers [-extent, extent]^2 in patient space
_TEX_SIZE = 64                  # texture grid cells per side
_DEFAULT_PARAMS = PhantomParams()
_MASK_THRESHOLD = 0.28          # vessel coverage of a pixel above which it is in the vessel mask

# Reflectance multipliers (R, G, B) of blood vessels and lesions on the fundus background.
_VEIN = np.array([0.85, 0.42, 0.55])
_ARTERY = np.array([0.95, 0.62, 0.72])
_NEO = np.array([0.86, 0.55, 0.66])
_BLOOD = np.array([0.72, 0.42, 0.52])
# Colours blended on top (bright lesions, disc).
_EXUDATE = np.array([0.99, 0.86, 0.42])
_COTTON = np.array([0.97, 0.78, 0.66])


@dataclass(frozen=True, eq=False)
class Vessel:
    """One vessel segment chain in patient coordinates."""

    points: np.ndarray          # (k, 2) float64 polyline
    widths: np.ndarray          # (k - 1,) calibre of each segment, normalised units
    kind: int                   # 0 artery, 1 vein


@dataclass(frozen=True, eq=False)
class MarkerBlock:
    """A burned-in identifying block, in image coordinates (fractions of width and height)."""

    x0: float
    y0: float
    w: float
    h: float
    bits: np.ndarray            # (rows, cols) bool: True cells bright, False cells dark
    bright: tuple[float, float, float]
    dark: tuple[float, float, float]


@dataclass(frozen=True, eq=False)
class FundusPatient:
    """Persistent anatomy and attributes of one eye of one patient (patient coordinates)."""

    sex: int                                    # 0 female, 1 male
    age: float                                  # years, one decimal
    laterality: int                             # 0 left, 1 right
    grade: int                                  # ICDR 0..4
    disc_center: tuple[float, float]
    disc_radius: float
    disc_aspect: float                          # vertical / horizontal radius
    cup_ratio: float                            # cup / disc diameter
    cup_center: tuple[float, float]
    disc_rgb: tuple[float, float, float]
    cup_rgb: tuple[float, float, float]
    fovea_center: tuple[float, float]
    macula_radius: float
    macula_depth: float
    base_rgb: tuple[float, float, float]        # fundus reflectance (pigmentation)
    lens_rgb: tuple[float, float, float]        # lens transmission (yellows with age)
    texture: np.ndarray                         # (_TEX_SIZE, _TEX_SIZE) float32, unit variance
    texture_amp: float
    vessels: tuple[Vessel, ...]
    microaneurysms: np.ndarray                  # (n, 3): x, y, radius
    haemorrhages: tuple[np.ndarray, ...]        # polygons (k, 2), blot, flame and pre-retinal
    exudates: np.ndarray                        # (n, 3): x, y, radius
    cotton_wool: tuple[np.ndarray, ...]         # polygons (k, 2)
    neovascularisation: tuple[np.ndarray, ...]  # polylines (k, 2) of new-vessel tufts
    nv_centers: np.ndarray                      # (t, 2) centre of each tuft
    marker: MarkerBlock | None

    @property
    def marker_block(self) -> bool:
        return self.marker is not None


# --------------------------------------------------------------------------------------------
# Sampling the patient
# --------------------------------------------------------------------------------------------


class _Tree:
    """Accumulates vessels while growing the tree (canonical right eye)."""

    def __init__(self, rng: np.random.Generator, fovea: tuple[float, float], faz: float, w_min: float,
                 p_branch: float, tort: float, max_points: int = 2600):
        self.rng = rng
        self.fovea = fovea
        self.faz = faz
        self.w_min = w_min
        self.p_branch = p_branch
        self.tort = tort
        self.max_points = max_points
        self.n_points = 0
        self.vessels: list[tuple[np.ndarray, np.ndarray, int]] = []

    # A walker whose heading drifts (smoothed random turns) and is pulled towards a target:
    # away from `centre` (mode 0), towards it (mode 1) or along a fixed angle (mode 2).
    def walk(self, p0, h0, n_max, step, tort, centre, mode, pull, stop_near=None):
        rng = self.rng
        noise = rng.standard_normal(n_max).tolist()
        x, y = float(p0[0]), float(p0[1])
        h = float(h0)
        dh = 0.0
        cx, cy = centre
        pts = [(x, y)]
        fx, fy = self.fovea
        stop2 = stop_near * stop_near if stop_near else -1.0
        for k in range(n_max):
            dh = 0.88 * dh + tort * noise[k]
            if mode == 0:
                target = math.atan2(y - cy, x - cx)
            elif mode == 1:
                target = math.atan2(cy - y, cx - x)
            else:
                target = cx
            diff = (target - h + math.pi) % _TAU - math.pi
            h += dh + pull * diff
            x += step * math.cos(h)
            y += step * math.sin(h)
            pts.append((x, y))
            if x * x + y * y > _STOP_R2:
                break
            if (x - fx) ** 2 + (y - fy) ** 2 < stop2:
                break
        return np.asarray(pts)

    def grow(self, pts: np.ndarray, w0: float, kind: int, depth: int, centre, taper: float = 0.35,
             first_branch: float = 0.05) -> None:
        """Add a vessel along `pts` starting with calibre `w0`, then its side branches (recursively)."""
        rng = self.rng
        if len(pts) < 2:
            return
        seg = np.diff(pts, axis=0)
        seglen = np.hypot(seg[:, 0], seg[:, 1])
        s = np.concatenate([[0.0], np.cumsum(seglen)])
        widths = w0 * np.exp(-taper * s[1:])
        self.n_points += len(pts)
        heads = np.arctan2(seg[:, 1], seg[:, 0])
        # Branch points along the vessel; wide vessels branch a little less often.
        branches = []
        pos = first_branch + rng.uniform(0.0, 0.06)
        while pos < s[-1] - 0.04 and depth < 6:
            branches.append(int(np.searchsorted(s, pos)))
            pos += rng.uniform(0.08, 0.22) * (1.0 + 8.0 * w0)
        fx, fy = self.fovea
        for idx in branches:
            idx = min(max(idx, 1), len(widths) - 1)
            wp = widths[idx]
            r = rng.uniform(0.45, 0.85)
            wc = wp * r
            side = 1.0 if rng.random() < 0.5 else -1.0
            h = heads[idx] + side * rng.uniform(0.3, 0.9)
            p = pts[idx]
            # A branch heading for the fovea is a macular branch that stops at the foveal avascular
            # zone; few of those exist, and branching thins out with depth.
            tx, ty = fx - p[0], fy - p[1]
            towards = centre is self.fovea and (math.cos(h) * tx + math.sin(h) * ty) > 0.3 * math.hypot(tx, ty)
            go = rng.random() < self.p_branch * (0.3 if towards else 1.0) * (0.85 ** depth)
            if wc < self.w_min or not go or self.n_points > self.max_points:
                continue
            widths[idx:] *= max(0.72, (1.0 - r ** 3) ** (1.0 / 3.0))
            length = wc * rng.uniform(35.0, 70.0) + rng.uniform(0.08, 0.25)
            step = 0.022
            n = max(3, int(length / step))
            if towards:
                n = min(n, int(1.2 * math.hypot(tx, ty) / step) + 1)
                child = self.walk(p, h, n, step, self.tort, self.fovea, 1, 0.15, stop_near=self.faz + 0.03)
            else:
                child = self.walk(p, h, n, step, self.tort, centre, 0, 0.04,
                                  stop_near=self.faz if centre is self.fovea else None)
            self.grow(child, wc, kind, depth + 1, centre, taper=0.5)
        self.vessels.append((pts, widths, kind))


def _arcade(rng: np.random.Generator, fovea, start, upper: bool, u_end: float, a: float, b: float,
            wiggle: float, step: float) -> np.ndarray:
    """A trunk leaving the disc and curving around the macula (parametric in the angle about the fovea)."""
    fx, fy = fovea
    vx, vy = start[0] - fx, start[1] - fy
    r0 = math.hypot(vx, vy)
    phi0 = math.atan2(vy, vx)
    sgn = -1.0 if upper else 1.0
    n = max(8, int(r0 * math.pi * u_end * 1.25 / step))
    u = np.linspace(0.0, u_end, n)
    # Smooth random radial perturbation (low-frequency tortuosity), zero at the disc.
    k = np.arange(1, 5)[:, None]
    amp = wiggle * rng.standard_normal((4, 1)) / k
    ph = rng.uniform(0, _TAU, (4, 1))
    pert = (amp * np.sin(k * 3.0 * np.pi * u[None, :] + ph)).sum(0)
    pert -= pert[0]
    g = 1.0 + b * u ** 2 - a * np.sin(np.pi * u) + pert * np.minimum(1.0, 4.0 * u)
    phi = phi0 + sgn * np.pi * u
    return np.stack([fx + r0 * g * np.cos(phi), fy + r0 * g * np.sin(phi)], axis=1)


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only array, so that a patient's anatomy cannot be changed after sampling."""
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def _resample(pts: np.ndarray, step: float) -> np.ndarray:
    seg = np.hypot(*np.diff(pts, axis=0).T)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    n = max(2, int(s[-1] / step) + 1)
    t = np.linspace(0.0, s[-1], n)
    return np.stack([np.interp(t, s, pts[:, 0]), np.interp(t, s, pts[:, 1])], axis=1)


def _blob(rng: np.random.Generator, cx: float, cy: float, rx: float, ry: float, angle: float,
          n: int = 10, rough: float = 0.15) -> np.ndarray:
    t = np.linspace(0, _TAU, n, endpoint=False)
    rad = 1.0 + rough * rng.standard_normal(n)
    x = rx * rad * np.cos(t)
    y = ry * rad * np.sin(t)
    c, s = math.cos(angle), math.sin(angle)
    return np.stack([cx + c * x - s * y, cy + s * x + c * y], axis=1)


def _lesion_site(rng: np.random.Generator, fovea, disc, disc_r, quadrant: int | None = None,
                 spread: float = 0.38) -> tuple[float, float]:
    """A lesion position in the posterior pole: around the macula, outside the disc, inside the FOV."""
    fx, fy = fovea
    for _ in range(100):
        if quadrant is None:
            x, y = fx + spread * rng.standard_normal(), fy + spread * rng.standard_normal()
        else:
            ang = (quadrant + rng.uniform(0.05, 0.95)) * (math.pi / 2.0)
            rad = rng.uniform(0.12, 0.8)
            x, y = fx + rad * math.cos(ang), fy + rad * math.sin(ang)
        if x * x + y * y > 0.8 ** 2:                         # inside the FOV whatever the pose
            continue
        if math.hypot(x - disc[0], y - disc[1]) < 1.5 * disc_r:
            continue
        if math.hypot(x - fx, y - fy) < 0.04:
            continue
        return x, y
    return fx + 0.2, fy


def _counts(rng: np.random.Generator, grade: int) -> dict[str, int]:
    """Numbers of lesions of each kind for a grade (0 for grade 0; totals rise with the grade)."""
    ri = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    if grade == 0:
        return dict(ma=0, haem=0, exu=0, cws=0, nv=0, pre=0)
    if grade == 1:
        return dict(ma=ri(1, 6), haem=0, exu=0, cws=0, nv=0, pre=0)
    if grade == 2:
        return dict(ma=ri(4, 14), haem=ri(1, 7), exu=ri(3, 20) if rng.random() < 0.6 else 0,
                    cws=ri(1, 2) if rng.random() < 0.35 else 0, nv=0, pre=0)
    if grade == 3:
        return dict(ma=ri(8, 20), haem=ri(20, 36), exu=ri(5, 30) if rng.random() < 0.7 else 0,
                    cws=ri(2, 6), nv=0, pre=0)
    return dict(ma=ri(10, 24), haem=ri(16, 34), exu=ri(10, 45) if rng.random() < 0.9 else 0,
                cws=ri(1, 6), nv=ri(1, 3), pre=int(rng.random() < 0.4))


def sample_patient(rng: np.random.Generator, params: PhantomParams = _DEFAULT_PARAMS) -> FundusPatient:
    """Draw the persistent anatomy and attributes of one eye of one patient."""
    weights = np.asarray(params.grade_weights, dtype=np.float64)
    if weights.shape != (5,) or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError(f"grade_weights must be 5 non-negative numbers, got {params.grade_weights!r}")
    lo, hi = (float(v) for v in params.age_range)
    if not 0 <= lo <= hi:
        raise ValueError(f"age_range must be (low, high) with 0 <= low <= high, got {params.age_range!r}")

    # --- attributes
    sex = int(rng.random() < 0.5)
    age = round(float(rng.uniform(lo, hi)), 1)
    laterality = int(rng.random() < 0.5)
    tilt = 0.0 if hi == lo else (age - 0.5 * (lo + hi)) / (0.5 * (hi - lo))   # -1 young .. 1 old
    w = weights * np.exp(0.35 * tilt * (np.arange(5) > 0))                      # mild age-grade link
    grade = int(rng.choice(5, p=w / w.sum()))
    a = (age - 55.0) / 30.0                                                      # about -1 .. 1

    # --- optic disc and fovea (canonical right eye: disc to the right, temporal = -x)
    disc_r = 0.098 * (1.0 + 0.08 * sex) * math.exp(0.08 * rng.standard_normal())
    dd = 2.0 * disc_r
    fovea = (float(rng.normal(-0.02, 0.05)), float(rng.normal(0.03, 0.04)))
    fd = 2.5 * dd * rng.uniform(0.9, 1.1)
    disc = (fovea[0] + fd, fovea[1] - dd * rng.uniform(0.05, 0.45))
    disc_aspect = float(rng.uniform(1.02, 1.14))
    cup_ratio = float(np.clip(0.33 + 0.08 * a + 0.08 * rng.standard_normal(), 0.12, 0.7))
    cup_center = (disc[0] - disc_r * rng.uniform(0.0, 0.2), disc[1] + disc_r * rng.normal(0, 0.08))
    disc_rgb = (rng.uniform(0.97, 1.0), rng.uniform(0.66, 0.84), rng.uniform(0.46, 0.62))
    cup_rgb = (1.0, min(1.0, disc_rgb[1] + 0.16), min(1.0, disc_rgb[2] + 0.16))
    macula_radius = 0.15 * math.exp(0.12 * rng.standard_normal())
    macula_depth = float(np.clip(rng.normal(0.45, 0.06) - 0.04 * a, 0.15, 0.6))

    # --- pigmentation: light orange-red .. dark brown-red; males slightly darker
    pig = 1.0 / (1.0 + math.exp(-(rng.standard_normal() + 0.6 * (sex - 0.5)) * 1.2))
    light = np.array([1.01, 0.45, 0.355])
    dark = np.array([0.86, 0.32, 0.225])
    base = (1 - pig) * light + pig * dark
    base *= np.exp(0.03 * rng.standard_normal(3))
    yellow = max(0.0, age - 20.0) / 60.0                                 # the lens yellows and darkens
    lens = np.exp(-yellow * np.array([0.05, 0.11, 0.24]) + 0.02 * rng.standard_normal(3))
    lens = np.minimum(lens, 1.0)
    tex = ndimage.gaussian_filter(rng.standard_normal((_TEX_SIZE, _TEX_SIZE)), 1.0, mode="wrap")
    tex = (tex / tex.std()).astype(np.float32)
    texture_amp = float(0.008 + 0.012 * (1 - pig) + 0.008 * max(a, 0.0)) * math.exp(0.2 * rng.standard_normal())

    # --- vessel tree
    calibre = (1.0 + 0.1 * sex) * math.exp(0.05 * rng.standard_normal())
    w_vein = 0.029 * calibre
    w_art = 0.0205 * calibre * (1.0 - 0.1 * a)                         # arteriolar narrowing with age
    tort = (0.014 + 0.006 * (a + 1.0)) * math.exp(0.2 * rng.standard_normal())
    w_min = 0.0032 * (1.0 + 0.3 * (a + 1.0))                           # fewer fine vessels when old
    p_branch = 0.95 - 0.08 * (a + 1.0)
    faz = 0.06 + 0.01 * rng.standard_normal()
    tree = _Tree(rng, fovea, faz, w_min, p_branch, tort)
    step = 0.02
    vein_tort = 1.3 * (1.5 if grade >= 3 else 1.0)
    for upper in (True, False):
        for kind in (1, 0):
            sgn = -1.0 if upper else 1.0
            # Where the trunk leaves the disc: veins and arteries a little apart.
            ang = sgn * rng.uniform(0.6, 1.3) + (0.25 if kind else -0.25) * sgn * rng.uniform(0.2, 1.0)
            start = (disc[0] + 0.35 * disc_r * math.cos(ang), disc[1] + 0.35 * disc_r * math.sin(ang))
            u_end = rng.uniform(0.6, 0.78)
            arc = _arcade(rng, fovea, start, upper, u_end, a=rng.uniform(0.08, 0.22), b=rng.uniform(0.2, 0.55),
                          wiggle=0.012 + 0.012 * (a + 1.0) * (vein_tort if kind else 1.0), step=step)
            arc = _resample(arc, step)
            d = arc[-1] - arc[-2]
            h_end = math.atan2(d[1], d[0])
            target = math.pi - sgn * rng.uniform(0.25, 0.55)                # then run temporally
            tail = tree.walk(arc[-1], h_end, 80, step, tort * 0.6, (target, 0.0), 2, 0.06)
            pts = np.concatenate([arc, tail[1:]], axis=0)
            tree.grow(pts, w_vein if kind else w_art, kind, 0, fovea, taper=0.3, first_branch=0.12)
            # Nasal trunk.
            ang_n = sgn * rng.uniform(0.35, 1.1)
            start = (disc[0] + 0.3 * disc_r * math.cos(ang_n), disc[1] + 0.3 * disc_r * math.sin(ang_n))
            nasal = tree.walk(start, ang_n, 60, step, tort * (vein_tort if kind else 1.0), disc, 0, 0.05)
            tree.grow(nasal, (w_vein if kind else w_art) * 0.78, kind, 1, disc, taper=0.4, first_branch=0.1)
    # Small macular vessels straight from the temporal disc rim towards the fovea.
    for _ in range(int(rng.integers(1, 4))):
        ang = math.pi + rng.uniform(-0.6, 0.6)
        start = (disc[0] + 0.8 * disc_r * math.cos(ang), disc[1] + 0.8 * disc_r * math.sin(ang))
        mv = tree.walk(start, ang, 22, step, tort, fovea, 1, 0.15, stop_near=faz + 0.08)
        tree.grow(mv, rng.uniform(0.25, 0.4) * w_vein, int(rng.random() < 0.5), 3, fovea, taper=1.0)

    vessels = []
    for pts, widths, kind in tree.vessels:
        if kind == 1 and grade >= 3 and widths[0] > 0.009:                 # venous beading
            seg = np.hypot(*np.diff(pts, axis=0).T)
            s = np.cumsum(seg)
            widths = widths * (1.0 + 0.35 * np.maximum(0.0, np.sin(_TAU * s / 0.07 + rng.uniform(0, _TAU))) ** 2)
        vessels.append(Vessel(pts, widths, kind))
    # Draw thin vessels first so wide ones are never overwritten by a faint thin one.
    vessels.sort(key=lambda v: float(v.widths.max()))

    # --- lesions
    n = _counts(rng, grade)
    ma = np.zeros((n["ma"], 3))
    for i in range(n["ma"]):
        x, y = _lesion_site(rng, fovea, disc, disc_r, spread=0.3)
        ma[i] = (x, y, rng.uniform(0.006, 0.011))
    haem = []
    for i in range(n["haem"]):
        q = i % 4 if grade >= 3 else None
        x, y = _lesion_site(rng, fovea, disc, disc_r, quadrant=q)
        if rng.random() < 0.55:                                             # blot
            r = rng.uniform(0.014, 0.034)
            haem.append(_blob(rng, x, y, r, r * rng.uniform(0.75, 1.0), rng.uniform(0, _TAU), 10, 0.12))
        else:                                                               # flame: along the nerve fibres
            ang = math.atan2(y - disc[1], x - disc[0])
            L = rng.uniform(0.028, 0.06)
            haem.append(_blob(rng, x, y, L, L * rng.uniform(0.25, 0.4), ang + rng.normal(0, 0.2), 12, 0.08))
    for _ in range(n["pre"]):                                               # boat-shaped pre-retinal
        x, y = _lesion_site(rng, fovea, disc, disc_r, spread=0.25)
        r = rng.uniform(0.06, 0.1)
        t = np.linspace(0, math.pi, 12)
        poly = np.stack([x + r * np.cos(t), y + 0.8 * r * np.sin(t)], axis=1)
        haem.append(np.concatenate([poly, [[x - r, y - 0.05 * r], [x + r, y - 0.05 * r]]]))
    exu = np.zeros((n["exu"], 3))
    if n["exu"]:
        n_cl = int(rng.integers(1, 4))
        centres = [_lesion_site(rng, fovea, disc, disc_r, spread=0.2) for _ in range(n_cl)]
        for i in range(n["exu"]):
            cx, cy = centres[i % n_cl]
            if rng.random() < 0.8:                                          # (circinate) cluster
                ang, rad = rng.uniform(0, _TAU), rng.uniform(0.01, 0.08)
                x, y = cx + rad * math.cos(ang), cy + rad * math.sin(ang)
            else:
                x, y = _lesion_site(rng, fovea, disc, disc_r, spread=0.3)
            exu[i] = (x, y, rng.uniform(0.005, 0.013))
    cws = []
    for _ in range(n["cws"]):
        ang = rng.uniform(0, _TAU)
        x, y = disc[0] + rng.uniform(0.15, 0.5) * math.cos(ang), disc[1] + rng.uniform(0.15, 0.5) * math.sin(ang)
        if x * x + y * y > 0.85 ** 2 or math.hypot(x - disc[0], y - disc[1]) < 1.8 * disc_r:
            x, y = _lesion_site(rng, fovea, disc, disc_r, spread=0.3)
        r = rng.uniform(0.025, 0.045)
        cws.append(_blob(rng, x, y, r, r * rng.uniform(0.6, 0.9), rng.uniform(0, _TAU), 12, 0.2))
    nv_lines: list[np.ndarray] = []
    nv_centres = np.zeros((n["nv"], 2))
    for t_i in range(n["nv"]):
        if t_i == 0 and rng.random() < 0.6:                                 # at the disc (NVD)
            ang = rng.uniform(0, _TAU)
            cx, cy = disc[0] + 0.7 * disc_r * math.cos(ang), disc[1] + 0.7 * disc_r * math.sin(ang)
        else:                                                               # elsewhere, on a big vein
            big = [v.points for v in vessels if v.kind == 1 and v.widths[0] > 0.012] or [vessels[-1].points]
            sites = np.concatenate(big)
            far = np.hypot(sites[:, 0] - disc[0], sites[:, 1] - disc[1])
            sites = sites[((sites ** 2).sum(1) < 0.75 ** 2) & (far > 3.0 * disc_r)]
            if not len(sites):
                sites = np.array([disc])
            cx, cy = sites[int(rng.integers(len(sites)))]
        nv_centres[t_i] = (cx, cy)
        for _ in range(int(rng.integers(6, 12))):
            start = (cx + rng.normal(0, 0.01), cy + rng.normal(0, 0.01))
            nv_lines.append(tree.walk(start, rng.uniform(0, _TAU), int(rng.integers(8, 18)), 0.007, 0.5,
                                      (cx, cy), 1, 0.12))

    # --- identifying block, in image coordinates
    marker = None
    if rng.random() < params.marker_rate:
        bw, bh = rng.uniform(0.1, 0.17), rng.uniform(0.05, 0.09)
        bits = rng.random((2, 5)) < 0.5
        bits[0, 0], bits[1, -1] = True, False                              # never uniform
        bits = _frozen(bits)
        bright = tuple(float(v) for v in rng.uniform(0.85, 1.0, 3))
        dark = tuple(float(v) for v in rng.uniform(0.0, 0.12, 3))
        marker = MarkerBlock(float(rng.uniform(0.03, 0.97 - bw)), float(rng.uniform(0.03, 0.97 - bh)),
                             float(bw), float(bh), bits, bright, dark)

    # --- mirror for a left eye (disc on the left of the image)
    if laterality == 0:
        def mx(arr: np.ndarray) -> np.ndarray:
            out = np.array(arr, dtype=np.float64, copy=True)
            if out.size:
                out[..., 0] *= -1.0
            return out
        vessels = [Vessel(mx(v.points), v.widths, v.kind) for v in vessels]
        ma, exu, nv_centres = mx(ma), mx(exu), mx(nv_centres)
        haem = [mx(p) for p in haem]
        cws = [mx(p) for p in cws]
        nv_lines = [mx(p) for p in nv_lines]
        disc, fovea, cup_center = (-disc[0], disc[1]), (-fovea[0], fovea[1]), (-cup_center[0], cup_center[1])
        tex = tex[:, ::-1].copy()
    vessels = [Vessel(_frozen(v.points), _frozen(v.widths), v.kind) for v in vessels]
    return FundusPatient(
        sex=sex, age=age, laterality=laterality, grade=grade,
        disc_center=(float(disc[0]), float(disc[1])), disc_radius=float(disc_r), disc_aspect=disc_aspect,
        cup_ratio=cup_ratio, cup_center=(float(cup_center[0]), float(cup_center[1])),
        disc_rgb=tuple(float(v) for v in disc_rgb), cup_rgb=tuple(float(v) for v in cup_rgb),
        fovea_center=(float(fovea[0]), float(fovea[1])), macula_radius=float(macula_radius),
        macula_depth=macula_depth, base_rgb=tuple(float(v) for v in base), lens_rgb=tuple(float(v) for v in lens),
        texture=_frozen(tex), texture_amp=texture_amp, vessels=tuple(vessels), microaneurysms=_frozen(ma),
        haemorrhages=tuple(_frozen(h) for h in haem), exudates=_frozen(exu),
        cotton_wool=tuple(_frozen(c) for c in cws), neovascularisation=tuple(_frozen(x) for x in nv_lines),
        nv_centers=_frozen(nv_centres), marker=marker,
    )


# --------------------------------------------------------------------------------------------
# Rendering one acquisition
# --------------------------------------------------------------------------------------------


def _supersampling(size: int) -> int:
    return max(2, math.ceil(256 / size))


class _Canvas:
    """Supersampled 8-bit coverage layers drawn with PIL, reduced to the output size."""

    def __init__(self, A: np.ndarray, b: np.ndarray, size: int, ss: int):
        self.C = size * ss
        self.ss = ss
        self.A = A * (self.C / 2.0)                       # patient -> canvas pixels
        self.b = (b + 1.0) * (self.C / 2.0) - 0.5
        self.k = float(math.sqrt(abs(np.linalg.det(A)))) * self.C / 2.0   # normalised length -> canvas px

    def new(self) -> tuple[Image.Image, ImageDraw.ImageDraw]:
        im = Image.new("L", (self.C, self.C), 0)
        return im, ImageDraw.Draw(im)

    def tf(self, pts: np.ndarray) -> np.ndarray:
        return pts @ self.A.T + self.b

    def lines(self, draw: ImageDraw.ImageDraw, pts: np.ndarray, widths: np.ndarray) -> None:
        """A polyline whose segments have the given calibres; sub-pixel calibres are drawn faint."""
        q = self.tf(pts)
        wc = widths * self.k
        wi = np.maximum(1, np.rint(wc)).astype(np.int64)
        fill = np.where(wc < 1.0, np.clip(np.rint(wc * 8.0), 1, 8) * 32 - 1, 255).astype(np.int64)
        key = wi * 1024 + fill
        cuts = np.flatnonzero(np.diff(key)) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), len(wc)]
        for s, e in zip(starts, ends, strict=True):
            w = int(wi[s])
            draw.line(q[s:e + 1].ravel().tolist(), fill=int(fill[s]), width=w, joint="curve" if w > 2 else None)

    def polygon(self, draw: ImageDraw.ImageDraw, pts: np.ndarray) -> None:
        draw.polygon(self.tf(pts).ravel().tolist(), fill=255)

    def dots(self, draw: ImageDraw.ImageDraw, xyr: np.ndarray) -> None:
        if not len(xyr):
            return
        q = self.tf(xyr[:, :2])
        rad = np.maximum(xyr[:, 2] * self.k, 0.5)
        for (x, y), r in zip(q.tolist(), rad.tolist(), strict=True):
            draw.ellipse([x - r, y - r, x + r, y + r], fill=255)

    def reduce(self, im: Image.Image) -> np.ndarray:
        if self.ss > 1:
            im = im.reduce(self.ss)
        return np.asarray(im, dtype=np.float32) * np.float32(1.0 / 255.0)


def _inside(points: np.ndarray, A: np.ndarray, b: np.ndarray, radius: float = 0.98) -> np.ndarray:
    if not len(points):
        return np.zeros(0, dtype=bool)
    q = points @ A.T + b
    return (q ** 2).sum(1) < radius ** 2


def render(patient: FundusPatient, rng: np.random.Generator, size: int) -> PhantomImage:
    """Draw one acquisition of ``patient`` at ``size`` x ``size`` pixels (re-acquisition changes from ``rng``)."""
    N = int(size)
    if N < 8:
        raise ValueError(f"size must be at least 8 pixels, got {size!r}")
    p = patient
    # --- acquisition parameters (always drawn in this order)
    theta = math.radians(rng.uniform(-8.0, 8.0))
    scale = math.exp(rng.uniform(math.log(0.95), math.log(1.05)))
    shift = np.clip(rng.normal(0.0, 0.03, 2), -0.08, 0.08)
    bright = math.exp(rng.normal(0.0, 0.06))
    vig, vig_p = rng.uniform(0.18, 0.38), rng.uniform(1.8, 3.5)
    grad, grad_ang = rng.uniform(0.0, 0.15), rng.uniform(0.0, _TAU)
    cast = np.exp(rng.normal(0.0, 0.035, 3))
    gamma = math.exp(rng.normal(0.0, 0.05))
    blur = rng.uniform(0.005, 0.016) if rng.random() < 0.2 else 0.0
    noise_sd = rng.uniform(0.003, 0.01)
    noise = rng.standard_normal((N, N, 3), dtype=np.float32)

    c, s = math.cos(theta), math.sin(theta)
    A = scale * np.array([[c, -s], [s, c]])               # patient -> image (normalised)
    b = shift
    Ainv = np.linalg.inv(A)

    # --- pixel grid in image and patient coordinates
    g = ((np.arange(N, dtype=np.float32) + 0.5) / N * 2.0 - 1.0)
    U, V = np.meshgrid(g, g)
    R = np.sqrt(U * U + V * V)
    fov = np.clip(N / 2.0 * (1.0 - R) + 0.5, 0.0, 1.0)
    Xp = Ainv[0, 0] * (U - b[0]) + Ainv[0, 1] * (V - b[1])
    Yp = Ainv[1, 0] * (U - b[0]) + Ainv[1, 1] * (V - b[1])

    # --- background reflectance: pigmentation, choroidal texture, macula
    tcoord = (_TEX_SIZE - 1) / (2.0 * _TEX_EXTENT)
    tex = ndimage.map_coordinates(p.texture, [(Yp + _TEX_EXTENT) * tcoord, (Xp + _TEX_EXTENT) * tcoord],
                                  order=1, mode="nearest")
    base = np.asarray(p.base_rgb, dtype=np.float32)
    refl = base * (1.0 + p.texture_amp * tex[..., None] * np.array([0.8, 1.2, 1.4], dtype=np.float32))
    fx, fy = p.fovea_center
    mac = np.exp(-((Xp - fx) ** 2 + (Yp - fy) ** 2) / (2.0 * p.macula_radius ** 2))
    refl *= 1.0 - p.macula_depth * mac[..., None] * np.array([0.45, 1.0, 1.1], dtype=np.float32)

    # --- optic disc with its cup, a faint halo and the brighter (thicker) nerve fibre layer around it
    dx, dy = p.disc_center
    rd = p.disc_radius
    d2 = (Xp - dx) ** 2 + (Yp - dy) ** 2
    refl *= 1.0 + np.exp(-d2 * (1.0 / (2.0 * 0.4 ** 2)))[..., None] * np.array([0.05, 0.22, 0.16], dtype=np.float32)
    px_norm = 2.0 / (N * scale)                          # one output pixel in patient units
    e = np.sqrt(((Xp - dx) / rd) ** 2 + ((Yp - dy) / (rd * p.disc_aspect)) ** 2)
    soft = max(0.12, px_norm / rd)
    a_disc = np.clip((1.0 - e) / soft + 0.5, 0.0, 1.0)
    halo = 0.08 * np.exp(-(((e - 1.0) / 0.35) ** 2)) * (1.0 - a_disc)
    refl = refl * (1.0 + halo[..., None])
    refl = refl * (1.0 - a_disc[..., None]) + np.asarray(p.disc_rgb, dtype=np.float32) * a_disc[..., None]
    cx, cy = p.cup_center
    rc = max(p.cup_ratio * rd, 1e-3)
    ec = np.sqrt((Xp - cx) ** 2 + ((Yp - cy) / p.disc_aspect) ** 2) / rc
    a_cup = np.clip((1.0 - ec) / 0.6 + 0.3, 0.0, 1.0) * a_disc
    refl = refl * (1.0 - a_cup[..., None]) + np.asarray(p.cup_rgb, dtype=np.float32) * a_cup[..., None]

    # --- vessels and lesions, drawn on supersampled canvases
    ss = _supersampling(N)
    cv = _Canvas(A, b, N, ss)
    art, d_art = cv.new()
    vein, d_vein = cv.new()
    for v in p.vessels:
        cv.lines(d_vein if v.kind else d_art, v.points, v.widths)
    cov_a = cv.reduce(art)
    cov_v = cv.reduce(vein)
    refl *= 1.0 - cov_v[..., None] * (1.0 - _VEIN.astype(np.float32))
    refl *= 1.0 - cov_a[..., None] * (1.0 - _ARTERY.astype(np.float32))
    if p.neovascularisation:
        im, d = cv.new()
        for line in p.neovascularisation:
            cv.lines(d, line, np.full(len(line) - 1, 0.0045))
        cov = cv.reduce(im)
        refl *= 1.0 - cov[..., None] * (1.0 - _NEO.astype(np.float32))
    if len(p.microaneurysms) or p.haemorrhages:
        im, d = cv.new()
        cv.dots(d, p.microaneurysms)
        for poly in p.haemorrhages:
            cv.polygon(d, poly)
        cov = ndimage.gaussian_filter(cv.reduce(im), 0.003 * N / 2.0 * scale)
        refl *= 1.0 - cov[..., None] * (1.0 - _BLOOD.astype(np.float32))
    if len(p.exudates):
        im, d = cv.new()
        cv.dots(d, p.exudates)
        cov = 0.9 * cv.reduce(im)[..., None]
        refl = refl * (1.0 - cov) + _EXUDATE.astype(np.float32) * cov
    if p.cotton_wool:
        im, d = cv.new()
        for poly in p.cotton_wool:
            cv.polygon(d, poly)
        cov = ndimage.gaussian_filter(cv.reduce(im), 0.012 * N / 2.0 * scale)
        cov = 0.75 * np.clip(cov * 1.3, 0.0, 1.0)[..., None]
        refl = refl * (1.0 - cov) + _COTTON.astype(np.float32) * cov

    # --- camera: lens, illumination, colour cast, gamma, defocus, field of view, noise
    light = bright * (1.0 - vig * R ** vig_p) * (1.0 + grad * (math.cos(grad_ang) * U + math.sin(grad_ang) * V))
    img = refl * (np.asarray(p.lens_rgb, dtype=np.float32) * cast.astype(np.float32)) * light[..., None]
    img = np.clip(img, 0.0, 1.0) ** np.float32(gamma)
    if blur > 0.0:
        sig = blur * N / 2.0
        img = ndimage.gaussian_filter(img, (sig, sig, 0))
    img = img * fov[..., None] + (noise_sd * fov)[..., None] * noise
    if p.marker is not None:
        _burn_marker(img, p.marker)
    image = to_uint8(img)

    mask = (np.maximum(cov_a, cov_v) >= _MASK_THRESHOLD) & (fov >= 0.5)
    haem_c = np.array([h.mean(0) for h in p.haemorrhages]) if p.haemorrhages else np.zeros((0, 2))
    cws_c = np.array([h.mean(0) for h in p.cotton_wool]) if p.cotton_wool else np.zeros((0, 2))
    labels = {
        "grade": float(p.grade),
        "sex": float(p.sex),
        "age": float(p.age),
        "laterality": float(p.laterality),
        "marker_block": float(p.marker is not None),
        "n_microaneurysms": float(_inside(p.microaneurysms[:, :2], A, b).sum()),
        "n_haemorrhages": float(_inside(haem_c, A, b).sum()),
        "n_exudates": float(_inside(p.exudates[:, :2], A, b).sum()),
        "n_cotton_wool": float(_inside(cws_c, A, b).sum()),
        "neovascularisation": float(_inside(p.nv_centers, A, b).any()),
    }
    return PhantomImage(image=image, mask=mask, labels=labels)


def _burn_marker(img: np.ndarray, m: MarkerBlock) -> None:
    """Overwrite the block's pixels (image coordinates, not moved by the pose)."""
    N = img.shape[0]
    x0 = min(N - 1, round(m.x0 * N))
    y0 = min(N - 1, round(m.y0 * N))
    x1 = min(N, max(x0 + 1, round((m.x0 + m.w) * N)))
    y1 = min(N, max(y0 + 1, round((m.y0 + m.h) * N)))
    rows, cols = m.bits.shape
    ri = ((np.arange(y1 - y0) + 0.5) * rows / (y1 - y0)).astype(np.int64)
    ci = ((np.arange(x1 - x0) + 0.5) * cols / (x1 - x0)).astype(np.int64)
    cells = m.bits[ri[:, None], ci[None, :]]
    img[y0:y1, x0:x1] = np.where(cells[..., None], np.asarray(m.bright, np.float32), np.asarray(m.dark, np.float32))
