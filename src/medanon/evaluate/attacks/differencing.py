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
  each counts once, so the Wilson interval over patients respects images of one patient being alike.

The distances of all pairs to all targets come from inner products (``|d − v|²`` expands into ``a·a``, ``b·b``,
``a·b``, ``a·v``, ``b·v`` and ``v·v``), in float64, so the cost is that of the pair-by-target minimum, not of forming
every ``d``. Known answers (``tests/test_differencing.py``): nested k-Same-Pixel releases at k = 3 and 2 recover the
people the smaller release leaves out; releases of disjoint people, or a constant release, recover no one.

Not measured here: differencing in a latent space (k-Centroid or k-SALSA averages inverted with a public codec),
combinations of more than two records, and releases whose records are not averages (Snow's unchanged pixels, DP
noise that averages out over releases).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from medanon.evaluate.attacks.risk import risk_entry, success_rate

ASSUMPTIONS = ("attacker holds a target's real images and both public releases (images and each record's "
               "n_people); for every pair of records of different n_people it forms (n_a·a − n_b·b) / (n_a − n_b); "
               "success = one such image within the threshold of the target and at most half as far from it as the "
               "nearest released record")


def _flat(x) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    return t.reshape(len(t), -1).to(torch.float64)


def patient_references(images, patients: Sequence) -> tuple[torch.Tensor, np.ndarray, list]:
    """Each patient's images and their mean, as rows (R, D), with the patient index of each row and the patients."""
    pats = np.asarray(patients).astype(str)
    names = sorted(set(pats.tolist()))
    x = _flat(images)
    rows, owner = [], []
    for n, p in enumerate(names):
        own = x[torch.from_numpy(np.flatnonzero(pats == p))]
        rows += [own, own.mean(0, keepdim=True)] if len(own) > 1 else [own]
        owner += [n] * (len(own) + (len(own) > 1))
    return torch.cat(rows), np.asarray(owner, np.int64), names


def scale(images, patients: Sequence) -> tuple[float, int]:
    """The median RMS difference between the mean images of two different patients, and the patients it used."""
    pats = np.asarray(patients).astype(str)
    names = sorted(set(pats.tolist()))
    x = _flat(images)
    means = torch.stack([x[torch.from_numpy(np.flatnonzero(pats == p))].mean(0) for p in names])
    if len(means) < 2:
        return float("nan"), len(means)
    d = torch.cdist(means, means).div(means.shape[1] ** 0.5)
    iu = torch.triu_indices(len(means), len(means), 1)
    return float(d[iu[0], iu[1]].median()), len(means)


def nearest_single(records: torch.Tensor, refs: torch.Tensor) -> torch.Tensor:
    """Per reference row: the RMS difference to the nearest record."""
    return torch.cdist(refs, records).min(1).values.div(refs.shape[1] ** 0.5)


def nearest_difference(a: torch.Tensor, n_a: np.ndarray, b: torch.Tensor, n_b: np.ndarray, refs: torch.Tensor, *,
                       chunk: int = 1 << 22) -> torch.Tensor:
    """Per reference row: the RMS difference to the nearest ``(n_a·a − n_b·b) / (n_a − n_b)`` over all record pairs
    of different ``n`` (inf where no pair qualifies)."""
    na = torch.as_tensor(np.asarray(n_a, np.float64))[:, None]
    nb = torch.as_tensor(np.asarray(n_b, np.float64))[None, :]
    gap = na - nb
    ok = gap != 0
    alpha = torch.where(ok, na / gap.where(ok, torch.ones_like(gap)), torch.zeros_like(gap))   # (A, B)
    beta = torch.where(ok, nb / gap.where(ok, torch.ones_like(gap)), torch.zeros_like(gap))
    aa, bb, ab = (a * a).sum(1)[:, None], (b * b).sum(1)[None, :], a @ b.T
    dd = alpha ** 2 * aa + beta ** 2 * bb - 2 * alpha * beta * ab                              # |d|², (A, B)
    av, bv, vv = a @ refs.T, b @ refs.T, (refs * refs).sum(1)                                  # (A, R), (B, R), (R,)
    best = torch.full((len(refs),), float("inf"), dtype=torch.float64)
    step = max(1, chunk // max(a.shape[0] * b.shape[0], 1))
    for s in range(0, len(refs), step):
        sl = slice(s, s + step)
        sq = (dd[..., None] - 2 * alpha[..., None] * av[:, None, sl] + 2 * beta[..., None] * bv[None, :, sl]
              + vv[sl])
        sq = sq.masked_fill(~ok[..., None], float("inf"))
        best[sl] = sq.flatten(0, 1).min(0).values.clamp_min(0)
    return best.sqrt().div(refs.shape[1] ** 0.5)


def _per_patient(row_values: torch.Tensor, owner: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, np.inf)
    np.minimum.at(out, owner, row_values.numpy())
    return out


def differencing(*, release_a, people_a: Sequence[int], release_b, people_b: Sequence[int], member_images,
                 member_patients: Sequence, control_images, control_patients: Sequence, scale_images,
                 scale_patients: Sequence, fraction: float = 0.25, confidence: float = 0.95) -> dict:
    """The differencing attack on two releases (images (R, C, H, W) in [−1, 1] at one size, with each record's
    public ``n_people``) against their members (the patients of either release, with their real images) and
    controls (held-out patients); the threshold's scale comes from ``scale_images`` of other patients.

    Returns the report entry: the residual-risk row (members vs controls, Wilson over patients), the threshold with
    its scale, and the counts of patients: recovered (some difference within the threshold), shown alone (some record
    within it), recovered beyond (recovered, by a difference at most half as far as the nearest record: the attack's
    success), with the median RMS difference of the members' best difference where it succeeds.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction} must be in (0, 1)")
    a, b = _flat(release_a), _flat(release_b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the releases' images differ in size ({a.shape[1]} vs {b.shape[1]} values)")
    typical, used = scale(scale_images, scale_patients)
    threshold = fraction * typical
    if not np.isfinite(threshold):
        raise ValueError(f"the threshold needs the mean images of at least 2 patients; scale_images has {used}")
    both = torch.cat([a, b])
    out: dict = {"assumptions": ASSUMPTIONS,
                 "threshold": {"value": threshold, "fraction": fraction, "median_patient_distance": typical,
                               "patients": used, "unit": "RMS difference of pixels in [-1, 1]"},
                 "pairs": int(sum(int(x != y) for x in people_a for y in people_b))}
    found = {}
    for who, images, patients in (("members", member_images, member_patients),
                                  ("controls", control_images, control_patients)):
        refs, owner, names = patient_references(images, patients)
        diff = _per_patient(nearest_difference(a, np.asarray(people_a), b, np.asarray(people_b), refs), owner,
                            len(names))
        alone = _per_patient(nearest_single(both, refs), owner, len(names))
        hit = diff < threshold
        found[who] = hit & (diff <= alone / 2)
        out[who] = {"patients": len(names), "recovered": int(hit.sum()), "shown_alone": int((alone < threshold).sum()),
                    "recovered_beyond": int(found[who].sum())}
        if who == "members":
            out[who]["median_error"] = float(np.median(diff[found[who]])) if found[who].any() else None
    attack = success_rate(int(found["members"].sum()), len(found["members"]), confidence=confidence)
    control = success_rate(int(found["controls"].sum()), len(found["controls"]), confidence=confidence)
    out["risk"] = risk_entry(attack, control, what="patients whose image a difference of two records recovers, "
                             "beyond what either release shows alone",
                             control_is="held-out patients: the same search over the same differences")
    return out
