"""The vessel tree of a fundus phantom: arcades around the macula and recursively branching vessels.

:class:`Tree` grows vessels from trunks by a random walk that bends towards targets, branches with a
probability that falls with calibre and stops at the field of view; :func:`arcade` draws the superior and
inferior temporal arcades; :func:`resample` spaces a polyline evenly. Used by
:func:`medanon.phantoms.fundus.sample_patient`, which fixes the order in which they draw from the generator.
"""

from __future__ import annotations

import math

import numpy as np

_TAU = 2.0 * math.pi
STOP_R2 = 1.18 ** 2             # vessels are grown up to this radius (poses can bring it into view)

class Tree:
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
            if x * x + y * y > STOP_R2:
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


def arcade(rng: np.random.Generator, fovea, start, upper: bool, u_end: float, a: float, b: float,
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


def resample(pts: np.ndarray, step: float) -> np.ndarray:
    seg = np.hypot(*np.diff(pts, axis=0).T)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    n = max(2, int(s[-1] / step) + 1)
    t = np.linspace(0.0, s[-1], n)
    return np.stack([np.interp(t, s, pts[:, 0]), np.interp(t, s, pts[:, 1])], axis=1)
