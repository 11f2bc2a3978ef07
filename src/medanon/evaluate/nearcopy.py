"""Memorisation and near-copy screening of a release: how close does each released image come to one real image?

For every released image, its nearest real image of the source split by **pixel distance** (RMSE at the
evaluation size, in [-1, 1] units) and by **identity embedding** (cosine). A released image is a
*near-copy* (pixels) when it is closer to a real image than a second acquisition of the same patient
comes to the first: the threshold is the ``quantile`` of the held-out images' distances to their nearest
other image of the same patient (of any other held-out image where no patient has two). By identity, the
control is the same screen run on held-out real images (new people) against the source split; the
threshold is the upper ``quantile`` of their best cosine, so about that share of new people is flagged.

A near-copy whose nearest real image is one of its own record's sources, and which is at most half as far
from it as from the record's other sources, is a **copy of a single source**; when the record claims to
stand for two or more people (k-anonymity), that claim does not protect the person copied (e.g. a
k-Same-Pixel average over near-duplicate images of two "patients" is the original photo). The closest
pairs are kept for the report to show side by side.

**Both orientations.** A left-right mirror of a real image is a copy of it (fundus photographs of the two eyes are
mirror images of each other's anatomy, so an identity network can miss one): every released image is compared in
both orientations and counts at its nearer one, by pixels and, where the mirrored images' embeddings are given, by
identity; the held-out control images go through the same screen, so its rates and thresholds stay like for like.

What needs no statistics is counted apart: **copies** (within one 8-bit grey level, RMS, of a real image: the image
itself, or one changed too little to tell at the evaluation size) and the patients they copy, and the same screen
against the **held-out** images, whose patients are the attacks' controls and the utility test set (a release
holding their images contaminates both). Where the mapping is given, the copies whose real image is none of their
record's sources are counted too (a mapping that is not this release's makes every attack that reads it wrong).
"""

from __future__ import annotations

import numpy as np
import torch

from medanon.evaluate.attacks.stats import exact_interval, unit

TIE_TOL_PIXELS = 1e-9           # relative: squared distances this close (rounding of the expansion) are tied
COPY_RMSE = 1 / 127.5           # a copy: within one 8-bit grey level (RMS) of a real image, at the evaluation size


def _flat(images: torch.Tensor) -> np.ndarray:
    return images.float().flatten(1).double().numpy()


def _rmse_nearest(query: np.ndarray, keys: np.ndarray, chunk: int = 512,
                  tied: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each query row, the index and RMSE of its nearest key row; with ``tied`` (a list), the indices of every
    key row tied for nearest (squared distances within ``TIE_TOL_PIXELS`` of the norms) are appended per query."""
    kk = (keys ** 2).sum(1)
    idx, dist = np.empty(len(query), np.int64), np.empty(len(query))
    for s in range(0, len(query), chunk):
        q = query[s:s + chunk]
        qq = (q ** 2).sum(1)
        d2 = np.maximum(qq[:, None] + kk[None, :] - 2 * q @ keys.T, 0.0)
        j = d2.argmin(1)
        best = d2[np.arange(len(q)), j]
        idx[s:s + chunk], dist[s:s + chunk] = j, np.sqrt(best / keys.shape[1])
        if tied is not None:
            tol = TIE_TOL_PIXELS * (qq + kk[j] + 1.0)
            tied += [np.flatnonzero(row <= b + t) for row, b, t in zip(d2, best, tol, strict=True)]
    return idx, dist



def _nearest_either(images: torch.Tensor, keys: np.ndarray, tied: list | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_rmse_nearest` of ``images`` (N, C, H, W) as they are and mirrored left-right, each row at its nearer
    orientation: (index, RMSE, mirrored?, the rows as compared)."""
    flat, mirrored = _flat(images), _flat(images.flip(-1))
    t0: list | None = [] if tied is not None else None
    t1: list | None = [] if tied is not None else None
    j0, d0 = _rmse_nearest(flat, keys, tied=t0)
    j1, d1 = _rmse_nearest(mirrored, keys, tied=t1)
    flip = d1 < d0
    if tied is not None:
        tied += [b if f else a for a, b, f in zip(t0, t1, flip, strict=True)]
    return np.where(flip, j1, j0), np.where(flip, d1, d0), flip, np.where(flip[:, None], mirrored, flat)


def _best_cosine(emb: np.ndarray, emb_mirrored: np.ndarray | None, keys: np.ndarray) -> np.ndarray:
    """(N, K) cosines of each row to each key, the larger of the two orientations where mirrored rows are given."""
    cos = unit(emb) @ keys.T
    return cos if emb_mirrored is None else np.maximum(cos, unit(emb_mirrored) @ keys.T)


def _within_heldout(x: np.ndarray, patients: np.ndarray | None) -> np.ndarray:
    """Each held-out image's RMSE to its nearest other image of the same patient (any other image if none)."""
    d2 = np.maximum((x ** 2).sum(1)[:, None] + (x ** 2).sum(1)[None, :] - 2 * x @ x.T, 0.0) / x.shape[1]
    np.fill_diagonal(d2, np.inf)
    if patients is not None:
        same = patients[:, None] == patients[None, :]
        if (same.sum(1) > 1).any():
            d2 = np.where(same, d2, np.inf)
            d2 = d2[np.isfinite(d2).any(1)]
    return np.sqrt(d2.min(1))


def screen(*, release_images: torch.Tensor, release_emb: np.ndarray, real_images: torch.Tensor,
           real_emb: np.ndarray, source_rows: np.ndarray, heldout_rows: np.ndarray,
           heldout_patients: np.ndarray | None = None, real_patients: np.ndarray | None = None,
           record_sources: list[list[int]] | None, quantile: float = 0.01, keep: int = 6,
           confidence: float = 0.95, release_emb_mirrored: np.ndarray | None = None,
           real_emb_mirrored: np.ndarray | None = None, other_rows: np.ndarray | None = None) -> dict:
    """Near-copy flags (pixel and identity), copies of a single source, and the ``keep`` closest pairs; every image in
    both orientations (the identity screen where both mirrored embeddings are given). ``other_rows``: the real images
    of neither the source nor the held-out split (such as the attacker's split), screened for copies too: a release
    of the source split holds none of them."""
    if (release_emb_mirrored is None) != (real_emb_mirrored is None):
        raise ValueError("give the mirrored embeddings of both the release and the real images, or of neither")
    keys = _flat(real_images[torch.as_tensor(source_rows)])
    kemb = unit(real_emb[source_rows])
    # control: held-out real images (never released, no patient in common) through the same screen
    held = real_images[torch.as_tensor(heldout_rows)]
    hx = _flat(held)
    _, held_d, _, _ = _nearest_either(held, keys)
    same_d = _within_heldout(hx, heldout_patients)
    held_cos = _best_cosine(real_emb[heldout_rows], None if real_emb_mirrored is None else
                            real_emb_mirrored[heldout_rows], kemb).max(1)
    # the identity threshold is the (1 - quantile) tail of one half of the held-out patients, and its control rate
    # is read on the other half: read on the images that set it, it would be the quantile by construction
    sets, rest = _halves(heldout_patients, len(heldout_rows))
    t_pix, t_cos = float(np.quantile(same_d, quantile)), float(np.quantile(held_cos[sets], 1 - quantile))
    tied: list = []
    j, d, mirrored, released = _nearest_either(release_images, keys, tied=tied)
    cos_all = _best_cosine(release_emb, release_emb_mirrored, kemb)
    jc = cos_all.argmax(1)
    c = cos_all[np.arange(len(jc)), jc]
    near_pix, near_id = d <= t_pix, c >= t_cos
    srcs = [set(map(int, s)) for s in record_sources] if record_sources is not None else None
    # a nearest real image tied with t others: the record's own sources among them get 1/(t+1) each (random tie
    # breaking), never the first index's luck
    own = (np.asarray([np.isin(source_rows[tied[r]], list(srcs[r])).mean() for r in range(len(d))])
           if srcs is not None else np.zeros(len(d)))
    nearest_row = source_rows[j]
    for r in np.flatnonzero(own > 0):                               # the nearest own source, where one is tied
        if int(nearest_row[r]) not in srcs[r]:
            nearest_row[r] = next(int(i) for i in source_rows[tied[r]] if int(i) in srcs[r])
    n_src = (np.asarray([len(s) for s in record_sources]) if record_sources is not None else np.ones(len(d), int))
    single = np.where(near_pix, own, 0.0)
    for r in np.flatnonzero((single > 0) & (n_src >= 2)):           # one source much closer than the others
        others = [int(i) for i in record_sources[r] if int(i) != int(nearest_row[r])]
        od = np.sqrt(((real_images[torch.as_tensor(others)].float().flatten(1).double().numpy()
                       - released[r:r + 1]) ** 2).mean(1))
        single[r] *= d[r] <= 0.5 * float(np.median(od))
    order = np.argsort(d, kind="stable")[:keep]
    n = len(d)
    copies = d <= COPY_RMSE
    _, hd, _, _ = _nearest_either(release_images, hx)              # the same screen against the held-out images
    h_copies, h_near = hd <= COPY_RMSE, hd <= t_pix
    h_closer = h_near & (hd <= 0.5 * d)         # much nearer a held-out image than any source: not an average of them
    h_cos = _best_cosine(release_emb, release_emb_mirrored, unit(real_emb[heldout_rows])).max(1)
    h_ident = (h_cos >= t_cos) & (h_cos > c)    # by identity: as like a held-out person as a copy, and more than any
    other = {}
    if other_rows is not None and len(other_rows):
        _, od, _, _ = _nearest_either(release_images, _flat(real_images[torch.as_tensor(other_rows)]))
        other = {"other": {"copies": int((od <= COPY_RMSE).sum()),
                           "near_copies_not_of_sources": int(((od <= t_pix) & (od <= 0.5 * d)).sum()),
                           "n_images": len(other_rows),
                           "what": "the released images against the real images of neither the source nor the "
                                   "held-out split (such as the attacker's split), same thresholds: a release of the "
                                   "source split copies none of them"}}
    return {
        **_exposure(copies, near_pix, nearest_row, real_patients, own if srcs is not None else None),
        "heldout": {"copies": int(h_copies.sum()), "near_copies": int(h_near.sum()),
                    "near_copies_not_of_sources": int(h_closer.sum()),
                    "near_copies_identity_not_of_sources": int(h_ident.sum()),
                    "what": "the released images against the held-out images (the controls' and the utility test's "
                            "patients), same thresholds; near-copies not of sources: at most half as far from the "
                            "held-out image as from the nearest source image (an average of sources is near to "
                            "held-out images too); by identity: at or above the identity threshold for a held-out "
                            "image and nearer it than any source image"},
        **other,
        "copy_rmse": COPY_RMSE, "mirrored": int(mirrored.sum()),
        "orientations": "both: each image compared as it is and mirrored left-right, at the nearer"
                        + ("" if release_emb_mirrored is not None else " (pixels only; identity as it is)"),
        "n": n, "n_source_images": len(source_rows), "n_heldout_images": len(heldout_rows),
        "quantile": quantile, "pixel_threshold": t_pix, "identity_threshold": t_cos,
        "identity_threshold_set_on": ("half of the held-out patients (the control is the other half)"
                                      if heldout_patients is not None else "the held-out images"),
        "near_copies_pixel": int(near_pix.sum()), "near_copies_pixel_rate": float(near_pix.mean()),
        "near_copies_pixel_ci": _release_ci(near_pix, record_sources, real_patients, confidence),
        "near_copies_identity": int(near_id.sum()), "near_copies_identity_rate": float(near_id.mean()),
        "near_copies_identity_ci": _release_ci(near_id, record_sources, real_patients, confidence),
        "interval": ("patient cluster bootstrap over the records' patients" if record_sources is not None and
                     real_patients is not None else "Clopper-Pearson over the records"),
        "copies_of_one_source": _count(single.sum()),
        "copies_of_one_source_in_multi_person_records": _count(single[n_src >= 2].sum()),
        "ties": "a nearest real image tied with t others counts 1/(t+1) as the record's own source",
        "control": _control(held_d <= t_pix, held_cos >= t_cos, heldout_patients, confidence, rest),
        **_few_patients(heldout_patients, sets, quantile),
        "median_pixel_distance": float(np.median(d)), "median_heldout_pixel_distance": float(np.median(held_d)),
        "closest": [{"record": int(r), "real_row": int(nearest_row[r]), "pixel_rmse": float(d[r]),
                     "cosine": float(cos_all[r, j[r]]), "own_source": bool(own[r] > 0),
                     "own_source_share": float(own[r]), "near_copy": bool(near_pix[r]), "mirrored": bool(mirrored[r]),
                     "n_sources": int(n_src[r]) if record_sources is not None else None,
                     "copy_of_one_source": bool(single[r] > 0)}
                    for r in order],
    }


def _exposure(copies: np.ndarray, near: np.ndarray, nearest_row: np.ndarray, real_patients, own) -> dict:
    """Copies and near-copies with the patients whose images they copy (no interval: counts of what is in the
    release), and the copies not of their record's own sources (``own``: None without a mapping)."""
    pats = np.asarray(real_patients)[nearest_row] if real_patients is not None else None
    return {"copies": int(copies.sum()),
            "copy_patients": None if pats is None else len(set(pats[copies].tolist())),
            "near_copy_patients": None if pats is None else len(set(pats[near].tolist())),
            "copies_not_of_own_source": None if own is None else int((copies & (own == 0)).sum())}


def _halves(patients, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the held-out images split by patient into two halves (alternate sorted patients); without
    patients, every row in both."""
    if patients is None:
        every = np.arange(n)
        return every, every
    pats = np.asarray(patients)
    uniq = np.unique(pats)
    if len(uniq) < 2:
        every = np.arange(n)
        return every, every
    first = np.isin(pats, uniq[::2])
    return np.flatnonzero(first), np.flatnonzero(~first)


def _release_ci(flags: np.ndarray, record_sources, real_patients, confidence: float) -> list[float]:
    """The interval of a release's flagged share: a patient cluster bootstrap over the records' patients (records
    sharing patients resample together) where the mapping and patients are known, else Clopper-Pearson."""
    from medanon.evaluate.attacks.bootstrap import record_clusters
    from medanon.evaluate.attacks.risk import rate

    if record_sources is None or real_patients is None:
        return exact_interval(int(flags.sum()), len(flags), confidence=confidence)
    return list(rate(flags.astype(float), groups=record_clusters(record_sources, real_patients),
                     confidence=confidence).ci)


def _control(pix: np.ndarray, ident: np.ndarray, patients, confidence: float, rest: np.ndarray) -> dict:
    """The screen's realised rates on held-out real images (new people), with patient bootstrap intervals where the
    patients are known (Wilson otherwise); the identity rate on ``rest``, the half that did not set its
    threshold."""
    from medanon.evaluate.attacks.risk import rate

    groups = None if patients is None else np.asarray(patients)
    p = rate(pix, groups=groups, confidence=confidence, stream=0)
    i = rate(ident[rest], groups=None if groups is None else groups[rest], confidence=confidence, stream=1)
    return {"n": len(pix), "pixel_rate": p.raw, "pixel_rate_ci": list(p.ci), "identity_rate": i.raw,
            "identity_rate_ci": list(i.ci), "identity_n": len(rest), "interval": p.method,
            "patients": None if groups is None else len(np.unique(groups)),
            "identity_patients": None if groups is None else len(np.unique(groups[rest])),
            "what": "held-out real images (new people) against the source split, same thresholds; the identity "
                    "rate on the half of the held-out patients that did not set its threshold"}


def _few_patients(patients, sets: np.ndarray, quantile: float) -> dict:
    """A warning where a threshold rests on fewer patients than the attacks need (``risk.MIN_PATIENTS``): its
    nominal tail is then not resolved (a 1 % tail of a few patients' images), and the near-copy rates are rough."""
    from medanon.evaluate.attacks.risk import MIN_PATIENTS

    if patients is None:
        return {}
    pix, ident = len(set(np.asarray(patients).tolist())), len(set(np.asarray(patients)[sets].tolist()))
    if min(pix, ident) >= MIN_PATIENTS:
        return {"threshold_patients": {"pixels": pix, "identity": ident}}
    return {"threshold_patients": {"pixels": pix, "identity": ident},
            "warning": f"the thresholds rest on {pix} held-out patients (pixels) and {ident} (identity), fewer than "
                       f"{MIN_PATIENTS}: a {quantile:.0%} tail of so few patients is not resolved, so the near-copy "
                       "rates are rough and their control rates show how far the tail moved"}


def _count(x: float) -> int | float:
    return int(np.rint(x)) if abs(x - np.rint(x)) < 1e-9 else float(x)
