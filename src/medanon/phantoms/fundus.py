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
from scipy import ndimage

from medanon.phantoms.common import PhantomImage, PhantomParams
from medanon.phantoms.fundus_vessels import Tree, arcade, resample

__all__ = ["FundusPatient", "MarkerBlock", "Vessel", "render", "sample_patient"]

_TAU = 2.0 * math.pi
TEX_EXTENT = 1.25               # the choroidal texture covers [-extent, extent]^2 in patient space
TEX_SIZE = 64                   # texture grid cells per side
_DEFAULT_PARAMS = PhantomParams()


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
    texture: np.ndarray                         # (TEX_SIZE, TEX_SIZE) float32, unit variance
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


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only array, so that a patient's anatomy cannot be changed after sampling."""
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


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
    """Draw the persistent anatomy and attributes of one eye of one patient.

    The parts are drawn in a fixed order from ``rng`` (attributes, disc and macula, pigmentation, vessel
    tree, lesions, marker), so the same generator state always gives the same eye.
    """
    weights, lo, hi = _check_params(params)
    sex, age, laterality, grade, a = _attributes(rng, weights, lo, hi)
    eye = _disc_and_macula(rng, sex, a)
    base, lens, tex, texture_amp = _pigmentation(rng, sex, age, a)
    vessels, tree = _vessel_tree(rng, sex, a, grade, eye["fovea"], eye["disc"], eye["disc_r"])
    lesions = _lesions(rng, grade, eye["fovea"], eye["disc"], eye["disc_r"], vessels, tree)
    marker = _marker(rng, params.marker_rate)
    return assemble(sex, age, laterality, grade, eye, (base, lens, tex, texture_amp), vessels, lesions, marker)


def assemble(sex: int, age: float, laterality: int, grade: int, eye: dict, pigmentation: tuple,
             vessels: list[Vessel], lesions: dict, marker: MarkerBlock | None) -> FundusPatient:
    """A :class:`FundusPatient` from its drawn parts (canonical right-eye coordinates), mirrored for a left eye."""
    base, lens, tex, texture_amp = pigmentation
    if laterality == 0:                                 # a left eye: the disc on the left of the image
        eye, vessels, lesions, tex = _mirror(eye, vessels, lesions, tex)
    vessels = [Vessel(_frozen(v.points), _frozen(v.widths), v.kind) for v in vessels]
    disc, fovea, cup_center = eye["disc"], eye["fovea"], eye["cup_center"]
    return FundusPatient(
        sex=sex, age=age, laterality=laterality, grade=grade,
        disc_center=(float(disc[0]), float(disc[1])), disc_radius=float(eye["disc_r"]),
        disc_aspect=eye["disc_aspect"], cup_ratio=eye["cup_ratio"],
        cup_center=(float(cup_center[0]), float(cup_center[1])),
        disc_rgb=tuple(float(v) for v in eye["disc_rgb"]), cup_rgb=tuple(float(v) for v in eye["cup_rgb"]),
        fovea_center=(float(fovea[0]), float(fovea[1])), macula_radius=float(eye["macula_radius"]),
        macula_depth=eye["macula_depth"], base_rgb=tuple(float(v) for v in base),
        lens_rgb=tuple(float(v) for v in lens), texture=_frozen(tex), texture_amp=texture_amp,
        vessels=tuple(vessels), microaneurysms=_frozen(lesions["ma"]),
        haemorrhages=tuple(_frozen(h) for h in lesions["haem"]), exudates=_frozen(lesions["exu"]),
        cotton_wool=tuple(_frozen(c) for c in lesions["cws"]),
        neovascularisation=tuple(_frozen(x) for x in lesions["nv_lines"]),
        nv_centers=_frozen(lesions["nv_centres"]), marker=marker,
    )


def _check_params(params: PhantomParams) -> tuple[np.ndarray, float, float]:
    weights = np.asarray(params.grade_weights, dtype=np.float64)
    if weights.shape != (5,) or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError(f"grade_weights must be 5 non-negative numbers, got {params.grade_weights!r}")
    lo, hi = (float(v) for v in params.age_range)
    if not 0 <= lo <= hi:
        raise ValueError(f"age_range must be (low, high) with 0 <= low <= high, got {params.age_range!r}")
    return weights, lo, hi


def _attributes(rng: np.random.Generator, weights: np.ndarray, lo: float, hi: float
                ) -> tuple[int, float, int, int, float]:
    """Sex, age, laterality, DR grade (mildly linked to age) and the age on a -1 .. 1 scale."""
    sex = int(rng.random() < 0.5)
    age = round(float(rng.uniform(lo, hi)), 1)
    laterality = int(rng.random() < 0.5)
    tilt = 0.0 if hi == lo else (age - 0.5 * (lo + hi)) / (0.5 * (hi - lo))   # -1 young .. 1 old
    w = weights * np.exp(0.35 * tilt * (np.arange(5) > 0))                      # mild age-grade link
    grade = int(rng.choice(5, p=w / w.sum()))
    a = (age - 55.0) / 30.0                                                      # about -1 .. 1
    return sex, age, laterality, grade, a


def _disc_and_macula(rng: np.random.Generator, sex: int, a: float) -> dict:
    """Optic disc, cup and fovea, in a canonical right eye (disc to the right, temporal = -x)."""
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
    return {"disc_r": disc_r, "fovea": fovea, "disc": disc, "disc_aspect": disc_aspect, "cup_ratio": cup_ratio,
            "cup_center": cup_center, "disc_rgb": disc_rgb, "cup_rgb": cup_rgb, "macula_radius": macula_radius,
            "macula_depth": macula_depth}


def _pigmentation(rng: np.random.Generator, sex: int, age: float, a: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Fundus colour (light orange-red .. dark brown-red; males slightly darker), lens, choroidal texture."""
    pig = 1.0 / (1.0 + math.exp(-(rng.standard_normal() + 0.6 * (sex - 0.5)) * 1.2))
    light = np.array([1.01, 0.45, 0.355])
    dark = np.array([0.86, 0.32, 0.225])
    base = (1 - pig) * light + pig * dark
    base *= np.exp(0.03 * rng.standard_normal(3))
    yellow = max(0.0, age - 20.0) / 60.0                                 # the lens yellows and darkens
    lens = np.exp(-yellow * np.array([0.05, 0.11, 0.24]) + 0.02 * rng.standard_normal(3))
    lens = np.minimum(lens, 1.0)
    tex = ndimage.gaussian_filter(rng.standard_normal((TEX_SIZE, TEX_SIZE)), 1.0, mode="wrap")
    tex = (tex / tex.std()).astype(np.float32)
    texture_amp = float(0.008 + 0.012 * (1 - pig) + 0.008 * max(a, 0.0)) * math.exp(0.2 * rng.standard_normal())
    return base, lens, tex, texture_amp


def _vessel_tree(rng: np.random.Generator, sex: int, a: float, grade: int, fovea, disc, disc_r: float
                 ) -> tuple[list[Vessel], Tree]:
    """Arcades and nasal trunks of veins and arteries, macular vessels, venous beading; thin vessels first."""
    calibre = (1.0 + 0.1 * sex) * math.exp(0.05 * rng.standard_normal())
    w_vein = 0.029 * calibre
    w_art = 0.0205 * calibre * (1.0 - 0.1 * a)                         # arteriolar narrowing with age
    tort = (0.014 + 0.006 * (a + 1.0)) * math.exp(0.2 * rng.standard_normal())
    w_min = 0.0032 * (1.0 + 0.3 * (a + 1.0))                           # fewer fine vessels when old
    p_branch = 0.95 - 0.08 * (a + 1.0)
    faz = 0.06 + 0.01 * rng.standard_normal()
    tree = Tree(rng, fovea, faz, w_min, p_branch, tort)
    step = 0.02
    vein_tort = 1.3 * (1.5 if grade >= 3 else 1.0)
    for upper in (True, False):
        for kind in (1, 0):
            sgn = -1.0 if upper else 1.0
            # Where the trunk leaves the disc: veins and arteries a little apart.
            ang = sgn * rng.uniform(0.6, 1.3) + (0.25 if kind else -0.25) * sgn * rng.uniform(0.2, 1.0)
            start = (disc[0] + 0.35 * disc_r * math.cos(ang), disc[1] + 0.35 * disc_r * math.sin(ang))
            u_end = rng.uniform(0.6, 0.78)
            arc = arcade(rng, fovea, start, upper, u_end, a=rng.uniform(0.08, 0.22), b=rng.uniform(0.2, 0.55),
                          wiggle=0.012 + 0.012 * (a + 1.0) * (vein_tort if kind else 1.0), step=step)
            arc = resample(arc, step)
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
    return vessels, tree


def _lesions(rng: np.random.Generator, grade: int, fovea, disc, disc_r: float, vessels: list[Vessel],
             tree: Tree) -> dict:
    """Microaneurysms, haemorrhages (blot, flame, pre-retinal), exudates, cotton-wool spots, new vessels."""
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
    return {"ma": ma, "haem": haem, "exu": exu, "cws": cws, "nv_lines": nv_lines, "nv_centres": nv_centres}


def _marker(rng: np.random.Generator, rate: float) -> MarkerBlock | None:
    """An identifying block burned into the image (in image coordinates), for a share ``rate`` of patients."""
    if rng.random() >= rate:
        return None
    bw, bh = rng.uniform(0.1, 0.17), rng.uniform(0.05, 0.09)
    bits = rng.random((2, 5)) < 0.5
    bits[0, 0], bits[1, -1] = True, False                              # never uniform
    bits = _frozen(bits)
    bright = tuple(float(v) for v in rng.uniform(0.85, 1.0, 3))
    dark = tuple(float(v) for v in rng.uniform(0.0, 0.12, 3))
    return MarkerBlock(float(rng.uniform(0.03, 0.97 - bw)), float(rng.uniform(0.03, 0.97 - bh)),
                       float(bw), float(bh), bits, bright, dark)


def _mirror(eye: dict, vessels: list[Vessel], lesions: dict, tex: np.ndarray
            ) -> tuple[dict, list[Vessel], dict, np.ndarray]:
    """The same anatomy as a left eye: every x coordinate negated (the marker stays where it is)."""
    def mx(arr: np.ndarray) -> np.ndarray:
        out = np.array(arr, dtype=np.float64, copy=True)
        if out.size:
            out[..., 0] *= -1.0
        return out

    vessels = [Vessel(mx(v.points), v.widths, v.kind) for v in vessels]
    lesions = {"ma": mx(lesions["ma"]), "exu": mx(lesions["exu"]), "nv_centres": mx(lesions["nv_centres"]),
               "haem": [mx(p) for p in lesions["haem"]], "cws": [mx(p) for p in lesions["cws"]],
               "nv_lines": [mx(p) for p in lesions["nv_lines"]]}
    eye = {**eye, "disc": (-eye["disc"][0], eye["disc"][1]), "fovea": (-eye["fovea"][0], eye["fovea"][1]),
           "cup_center": (-eye["cup_center"][0], eye["cup_center"][1])}
    return eye, vessels, lesions, tex[:, ::-1].copy()


def render(patient: FundusPatient, rng: np.random.Generator, size: int) -> PhantomImage:
    """One acquisition of ``patient`` at ``size`` px: :func:`medanon.phantoms.fundus_render.render`."""
    from medanon.phantoms.fundus_render import render as draw

    return draw(patient, rng, size)
