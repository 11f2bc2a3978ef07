"""Differencing two releases of the same people: the attack that a k-Same guarantee, made per release, leaves open.

Two releases whose records are averages (each record's ``n_people`` is public in its ``labels.csv``) can be
combined. For a record ``a`` of ``n_a`` people and a record ``b`` of ``n_b != n_a`` people,

    d = (n_a·a − n_b·b) / (n_a − n_b)

is, when ``b``'s people are all among ``a``'s, the mean image of the people ``a`` has and ``b`` has not: with one
person left, that person's image (up to the 8-bit rounding of ``a`` and ``b``). The attacker of this module holds a
target's real images (as every attacker of the evaluation does) and both public releases; it forms ``d`` for
every pair of records and asks whether one of them *is* the target:

- **success** for a target patient: some ``d`` lies within ``threshold`` (root-mean-square difference, pixels in
  [−1, 1]) of one of the target's images or of their mean, **and at most half as far as the nearest released
  record** (a release that already shows the target, e.g. a copy, is measured by the single-release attacks; this
  one counts what publishing the two together adds: a k = 2 average of two near-identical people may lie inside
  the threshold, the difference that isolates one of them lies far closer);
- ``threshold`` = ``fraction`` × the median RMS difference between the mean images of two different patients of the
  calibration split (people in neither release nor the controls): an image that close to the target is the
  target's, not a look-alike;
- **members**: the patients in either release (from the private mappings); **control**: the same attack against
  held-out patients, who are in neither release (any success there is a false recovery). Patients are the unit:
  each counts once, so the Wilson interval over patients respects images of one patient being alike. It treats the
  patients as independent, which the people of one record are not (one difference may recover one of them and not
  another); a cluster bootstrap by linked records is not possible here, as two releases clustered differently link
  nearly everyone into one cluster.

Only pairs whose counts differ by one are formed (``max_gap``): a difference of more people is the mean of several,
nobody's image. Images are compared average-pooled to at most ``side`` pixels (32: differences and rounding are
linear, pooling keeps both) and centred on the targets' mean (``d − μ = α(a − μ) − β(b − μ)`` as α − β = 1), so the
distances of all pairs to all targets come from float32 inner products (``|d − v|²`` expands into ``a·a``, ``b·b``,
``a·b``, ``a·v``, ``b·v`` and ``v·v``), and each release's products with the targets are computed once
(:class:`Space`), whatever the number of pairs it is in.

**Both orientations** (fundus photographs): k-Same releases average left eyes mirrored and show a record mirrored
back when most of its patients' eyes are left ones (:mod:`medanon.anonymize.eye_sides`), so the person a difference
isolates may appear mirrored, or two records may be shown as different eyes. The attacker then also takes the
targets' images mirrored and the second release's records mirrored (the control likewise), and, for a patient with
both eyes (a record averages the right eye and the mirrored left one), the mean of their images turned to one side
(sides by the ``laterality`` label, else the optic disc: :func:`medanon.anonymize.eye_sides.image_sides`).

Known answers (``tests/test_differencing.py``): nested k-Same-Pixel releases at k = 3 and 2 recover the people the
smaller release leaves out, also when some records are shown mirrored; releases of disjoint people, or a constant
release, recover no one.

The rows may be a codec's latents instead of images (:func:`pooled` takes (N, D) rows as they are): a k-Centroid
record is the generator's image of its members' mean latent, so an attacker holding the public codec inverts the
released images and differences latents (``medanon evaluate`` does, for releases made with a shipped codec;
``benchmarks/latent_differencing.py`` measures both spaces on nested k-Centroid releases).

Not measured here: combinations of more than two records, and releases whose records are not averages (Snow's
unchanged pixels, DP noise that averages out over releases).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from medanon.evaluate.attacks.risk import risk_entry, success_rate

ASSUMPTIONS = ("attacker holds a target's real images and both public releases (images and each record's "
               "n_people); for every pair of records whose n_people differ by one it forms (n_a·a − n_b·b) / "
               "(n_a − n_b); success = one such image within the threshold of the target and at most half as far "
               "from it as the nearest released record")
SIDE = 32
CHUNK = 1 << 22                                 # pair-by-target distances held at once


def pooled(images, side: int = SIDE) -> torch.Tensor:
    """(N, C, H, W) images as float32 rows (N, D), average-pooled to at most ``side`` pixels a side; rows (N, D)
    already (e.g. a codec's latents) are taken as they are."""
    x = torch.as_tensor(np.asarray(images) if not isinstance(images, torch.Tensor) else images).to(torch.float32)
    if x.ndim == 2:
        return x
    if x.shape[-1] > side:
        x = F.adaptive_avg_pool2d(x, side)
    return x.reshape(len(x), -1)


def by_patient(patients: Sequence) -> tuple[list[str], list[torch.Tensor]]:
    """The patients (sorted) and the rows of each, in one pass (not one scan of every row per patient)."""
    names, inverse = np.unique(np.asarray(patients).astype(str), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    rows = np.split(order, np.cumsum(np.bincount(inverse, minlength=len(names)))[:-1])
    return names.tolist(), [torch.from_numpy(r) for r in rows]


@dataclass
class Released:
    rows: torch.Tensor                          # (R, D) centred
    people: np.ndarray                          # (R,) public n_people
    norms: torch.Tensor                         # (R,) |r|²
    dots: torch.Tensor                          # (R, T) r · v
    alone: torch.Tensor                         # (T,) RMS distance of each target row to its nearest record


class Space:
    """The targets (each patient's images and their mean, pooled and centred) and, once per release, its products
    with them."""

    def __init__(self, images, patients: Sequence, *, side: int = SIDE, mirrored=None, left=None):
        x = pooled(images, side)
        self.side, self.dim = side, x.shape[1]
        self.mu = x.mean(0)
        self.names, groups = by_patient(patients)
        # ``mirrored``: the same targets mirrored left-right (in the same space): a difference of records shown as the
        # other eye is the target's mirror image, and counts as the target. ``left`` (with ``mirrored``): which targets
        # are left eyes; turned to one side (as a k-Same release averages them, and mirrored), a patient with both
        # eyes is isolated as the mean of the turned images, which neither mean as taken is
        views = [x] if mirrored is None else [x, pooled(mirrored, side)]
        turned = []
        if left is not None and mirrored is not None:     # a turned image is the image or its mirror: so is its row
            lt = torch.as_tensor(np.asarray(left, bool))[:, None]
            turned = [torch.where(lt, views[1], x), torch.where(lt, x, views[1])]
        rows, owner = [], []
        for n, idx in enumerate(groups):
            means = []
            for view in views:
                own = view[idx] - self.mu
                means.append(own.mean(0, keepdim=True))
                rows += [own, means[-1]] if len(own) > 1 else [own]
                owner += [n] * (len(own) + (len(own) > 1))
            for view in turned:                 # a mean of both eyes as one side: only where it is another image
                mean = view[idx].mean(0, keepdim=True) - self.mu
                if len(idx) > 1 and not any(torch.allclose(mean, m) for m in means):
                    means.append(mean)
                    rows.append(mean)
                    owner.append(n)
        self.refs, self.owner = torch.cat(rows), np.asarray(owner, np.int64)
        self.vv = (self.refs * self.refs).sum(1)

    def released(self, images, people: Sequence[int]) -> Released:
        r = pooled(images, self.side)
        if r.shape[1] != self.dim:
            raise ValueError(f"the release's images pool to {r.shape[1]} values, the targets' to {self.dim}")
        r = r - self.mu
        norms, dots = (r * r).sum(1), r @ self.refs.T
        alone = (norms[:, None] + self.vv[None] - 2 * dots).clamp_min(0).min(0).values
        return Released(r, np.asarray(people, np.int64), norms, dots, alone.sqrt() / self.dim ** 0.5)

    def nearest_difference(self, a: Released, b: Released, *, max_gap: int = 1, chunk: int = CHUNK) -> torch.Tensor:
        """Per target row: the RMS distance to the nearest ``(n_a·a − n_b·b) / (n_a − n_b)`` over the record pairs
        with 0 < |n_a − n_b| <= ``max_gap`` (inf where none qualifies). Pairs are taken a block per pair of counts
        (one α and β): ``|d − v|² = dd[i, j] + x[i, v] + y[j, v] + |v|²``, broadcast in chunks of ``a``'s rows."""
        best = torch.full((len(self.refs),), float("inf"))
        ab = None
        for n_a in np.unique(a.people):
            for n_b in np.unique(b.people):
                if not 0 < abs(int(n_a) - int(n_b)) <= max_gap:
                    continue
                if ab is None:
                    ab = a.rows @ b.rows.T
                i = torch.from_numpy(np.flatnonzero(a.people == n_a))
                j = torch.from_numpy(np.flatnonzero(b.people == n_b))
                alpha, beta = float(n_a) / float(n_a - n_b), float(n_b) / float(n_a - n_b)
                dd = (alpha ** 2 * a.norms[i, None] + beta ** 2 * b.norms[None, j]
                      - 2 * alpha * beta * ab[i][:, j])                                   # (I, J)
                x = -2 * alpha * a.dots[i] + self.vv[None]                                # (I, T)
                y = 2 * beta * b.dots[j]                                                  # (J, T)
                step = max(1, chunk // max(len(j) * len(self.refs), 1))
                for s in range(0, len(i), step):
                    sq = dd[s:s + step, :, None] + y[None] + x[s:s + step, None]
                    best = torch.minimum(best, sq.flatten(0, 1).min(0).values)
        return best.clamp_min(0).sqrt() / self.dim ** 0.5

    def per_patient(self, row_values: torch.Tensor) -> np.ndarray:
        out = np.full(len(self.names), np.inf)
        np.minimum.at(out, self.owner, row_values.numpy().astype(np.float64))
        return out


def scale(images, patients: Sequence, *, side: int = SIDE) -> tuple[float, int]:
    """The median RMS difference between the mean images of two different patients (pooled like the targets), and
    the patients it used."""
    x = pooled(images, side)
    means = torch.stack([x[idx].mean(0) for idx in by_patient(patients)[1]])
    if len(means) < 2:
        return float("nan"), len(means)
    d = torch.cdist(means.double(), means.double()).div(means.shape[1] ** 0.5)
    iu = torch.triu_indices(len(means), len(means), 1)
    return float(d[iu[0], iu[1]].median()), len(means)


def threshold_entry(images, patients: Sequence, fraction: float, *, side: int = SIDE, unit: str | None = None) -> dict:
    """The threshold: ``fraction`` × the median distance between two patients of ``images`` (other people);
    ``unit`` says what the distance is between, where the rows are not pooled images."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction} must be in (0, 1)")
    typical, used = scale(images, patients, side=side)
    if not np.isfinite(typical):
        raise ValueError(f"the threshold needs the mean images of at least 2 patients; the scale images have {used}")
    return {"value": fraction * typical, "fraction": fraction, "median_patient_distance": typical, "patients": used,
            "unit": unit or f"RMS difference of pixels in [-1, 1], images average-pooled to at most {side} px"}


def attack_pair(space: Space, a: Released, b: Released, *, members: set, controls: set, threshold: dict,
                confidence: float = 0.95, max_gap: int = 1, b_mirrored: Released | None = None) -> dict:
    """The report entry of two releases (see the module): counts per group of patients (``members``,
    ``controls``: patient names of the space), the residual-risk row and the threshold. ``b_mirrored``: ``b``'s
    records mirrored left-right, differenced with ``a`` too (two records shown as different eyes)."""
    t = threshold["value"]
    diff = space.per_patient(space.nearest_difference(a, b, max_gap=max_gap))
    alone = space.per_patient(torch.minimum(a.alone, b.alone))
    if b_mirrored is not None:
        diff = np.minimum(diff, space.per_patient(space.nearest_difference(a, b_mirrored, max_gap=max_gap)))
    names = np.asarray(space.names)
    gap = np.abs(a.people[:, None] - b.people[None, :])
    out: dict = {"assumptions": ASSUMPTIONS, "threshold": threshold, "max_gap": max_gap,
                 "pairs": int(((gap > 0) & (gap <= max_gap)).sum())}
    found = {}
    for who, group in (("members", members), ("controls", controls)):
        keep = np.isin(names, sorted(group))
        hit = diff[keep] < t
        found[who] = hit & (diff[keep] <= alone[keep] / 2)
        out[who] = {"patients": int(keep.sum()), "recovered": int(hit.sum()),
                    "shown_alone": int((alone[keep] < t).sum()), "recovered_beyond": int(found[who].sum())}
        if who == "members":
            out[who]["median_error"] = float(np.median(diff[keep][found[who]])) if found[who].any() else None
    attack = success_rate(int(found["members"].sum()), len(found["members"]), confidence=confidence)
    control = success_rate(int(found["controls"].sum()), len(found["controls"]), confidence=confidence)
    out["risk"] = risk_entry(attack, control, what="patients whose image a difference of two records recovers, "
                             "beyond what either release shows alone",
                             control_is="held-out patients: the same search over the same differences")
    return out


def differencing(*, release_a, people_a: Sequence[int], release_b, people_b: Sequence[int], member_images,
                 member_patients: Sequence, control_images, control_patients: Sequence, scale_images,
                 scale_patients: Sequence, fraction: float = 0.25, confidence: float = 0.95, max_gap: int = 1,
                 side: int = SIDE, mirrored: bool = False, sides: Sequence[int] | None = None) -> dict:
    """The differencing attack on two releases (images (R, C, H, W) in [−1, 1], with each record's public
    ``n_people``) against their members (the patients of either release, with their real images) and controls
    (held-out patients, other names); the threshold's scale comes from ``scale_images`` of other patients.

    Returns the report entry: the residual-risk row (members vs controls, Wilson over patients), the threshold with
    its scale, and the counts of patients: recovered (some difference within the threshold), shown alone (some record
    within it), recovered beyond (recovered, by a difference at most half as far as the nearest record: the attack's
    success), with the median RMS difference of the members' best difference where it succeeds. ``mirrored``
    (fundus photographs): records and targets are also taken mirrored left-right (a record shown as the other eye);
    ``sides``: each member and control image's eye side (1 right, 0 left, -1 unknown), for the mean of a patient's
    eyes turned to one side.
    """
    threshold = threshold_entry(scale_images, scale_patients, fraction, side=side)
    mp, cp = np.asarray(member_patients).astype(str), np.asarray(control_patients).astype(str)
    if set(mp) & set(cp):
        raise ValueError("a patient is both a member and a control")
    images = torch.cat([torch.as_tensor(np.asarray(member_images)), torch.as_tensor(np.asarray(control_images))])
    space = Space(images, np.concatenate([mp, cp]), side=side, mirrored=images.flip(-1) if mirrored else None,
                  left=None if sides is None else np.asarray(sides) == 0)
    a, b = space.released(release_a, people_a), space.released(release_b, people_b)
    b_m = space.released(torch.as_tensor(np.asarray(release_b)).flip(-1), people_b) if mirrored else None
    return attack_pair(space, a, b, members=set(mp), controls=set(cp), threshold=threshold, confidence=confidence,
                       max_gap=max_gap, b_mirrored=b_m)
