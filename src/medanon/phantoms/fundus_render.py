"""Rendering one acquisition of a fundus phantom (:class:`~medanon.phantoms.fundus.FundusPatient`).

A random pose (rotation, translation, scale of the eye inside the fixed circular field of view),
illumination, colour cast, occasional defocus and sensor noise; supersampled coverage layers drawn with
PIL and reduced to the output size. Returns the image, the vessel mask of that acquisition and the labels.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage

from medanon.phantoms.common import PhantomImage, to_uint8
from medanon.phantoms.fundus import TEX_EXTENT, TEX_SIZE, FundusPatient, MarkerBlock

_TAU = 2.0 * math.pi
_MASK_THRESHOLD = 0.28          # vessel coverage of a pixel above which it is in the vessel mask

# Reflectance multipliers (R, G, B) of blood vessels and lesions on the fundus background.
_VEIN = np.array([0.85, 0.42, 0.55])
_ARTERY = np.array([0.95, 0.62, 0.72])
_NEO = np.array([0.86, 0.55, 0.66])
_BLOOD = np.array([0.72, 0.42, 0.52])
# Colours blended on top (bright lesions, disc).
_EXUDATE = np.array([0.99, 0.86, 0.42])
_COTTON = np.array([0.97, 0.78, 0.66])

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
    tcoord = (TEX_SIZE - 1) / (2.0 * TEX_EXTENT)
    tex = ndimage.map_coordinates(p.texture, [(Yp + TEX_EXTENT) * tcoord, (Xp + TEX_EXTENT) * tcoord],
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
