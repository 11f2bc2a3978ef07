"""What a report says about its releases together: releases made from the same people (noted, and differenced by
:func:`differencing_results`), and releases anyone can recompute because the models they were made with are
medanon's public shipped checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from medanon.errors import MedanonError

if TYPE_CHECKING:
    from medanon.evaluate.context import RealContext
    from medanon.evaluate.inputs import ReleaseData

RECOMPUTABLE = ("gmia", "inverted")             # deterministic per image: the models and a candidate give its record


def public_models(rels: Sequence[ReleaseData]) -> dict[str, list[str]]:
    """Release name -> the shipped checkpoints it was made with, for releases of a deterministic per-image method
    made only with medanon's shipped (public) models, wherever they were installed (recognised by the digests the
    manifest records, :mod:`medanon.models_shipped`): anyone can recompute their records."""
    from medanon.models_shipped import shipped_name

    out = {}
    for r in rels:
        names = [shipped_name(d) for d in (r.manifest.get("models") or {}).values()]
        if r.method in RECOMPUTABLE and names and all(names):
            out[r.name] = sorted(set(names))
    return out


def shared_people(rels: Sequence[ReleaseData]) -> list[str]:
    """The releases (by name) whose mapping shares a source image with another release's."""
    rows = {r.name: {i for record in r.sources for i in record} for r in rels if r.sources is not None}
    return [a for a in rows if any(rows[a] & rows[b] for b in rows if b != a)]


def _people_column(rel: ReleaseData) -> np.ndarray | None:
    """Each record's public ``n_people`` (None where a record lacks it: not a release of counted records)."""
    try:
        n = np.asarray([int(r.get("n_people") or 0) for r in rel.rows], np.int64)
    except ValueError:
        return None
    return n if len(n) and (n > 0).all() else None


def public_codec(rel: ReleaseData) -> str | None:
    """The shipped (public) checkpoint of the StyleGAN codec a release was made with, or None (no codec, or a
    private one): anyone holding it can invert the release's images to the latents they were rendered from."""
    from medanon.models_shipped import shipped_name

    for key, digest in (rel.manifest.get("models") or {}).items():
        if key.startswith("codec:"):
            return shipped_name(digest)
    return None


def _pairs(ctx: RealContext, rels: Sequence[ReleaseData]) -> list[tuple]:
    """Every two releases that share a patient and have records whose ``n_people`` differ by one, as
    ``(release, n_people, patients)`` twice."""
    usable = [(r, n, _patients_of(ctx, r))
              for r in rels if r.sources is not None and (n := _people_column(r)) is not None]
    return [(*x, *y) for i, x in enumerate(usable) for y in usable[i + 1:]
            if x[2] & y[2] and (np.abs(x[1][:, None] - y[1][None, :]) == 1).any()]


def _patients_of(ctx: RealContext, r: ReleaseData) -> set:
    """The patients a release (with its mapping) was made from, each once."""
    return {ctx.real.patients[j] for rows in r.sources for j in rows}


def _some(pairs: Sequence[str], shown: int = 4) -> str:
    """The first ``shown`` release pairs and how many more: seven releases of one dataset make 21 pairs, a note
    of 1,500 characters.

    >>> _some(["a × b", "a × c"]), _some([f"r{i} × s" for i in range(6)], shown=2)
    ('a × b; a × c', 'r0 × s; r1 × s and 4 more pairs')
    """
    more = len(pairs) - shown
    return "; ".join(pairs[:shown]) + (f" and {more} more pairs" if more > 0 else "")


def _note_unmeasured(ctx: RealContext, rels: Sequence[ReleaseData]) -> None:
    """Say why releases of the same people were not differenced (the report would otherwise be silent)."""
    people = [(r.name, _patients_of(ctx, r), _people_column(r) is not None) for r in rels if r.sources is not None]
    pairs = [(f"{a} × {b}", ca and cb) for i, (a, pa, ca) in enumerate(people) for b, pb, cb in people[i + 1:]
             if pa & pb]
    counted = [name for name, both in pairs if both]
    if counted:
        ctx.note(f"differencing is not measured: the releases that share patients ({_some(counted)}) have no two "
                 "records whose numbers of people differ by one, the records the attack subtracts")
    uncounted = [name for name, both in pairs if not both]
    if uncounted:
        ctx.note(f"differencing is not measured for {_some(uncounted)}, which share patients: a release of them "
                 "does not give every record's number of people (labels.csv's n_people), which the attack needs to "
                 "find records that differ by one person")
    unmapped = [r.name for r in rels if r.sources is None]
    if len(rels) > 1 and unmapped:
        ctx.note(f"differencing is not measured for {', '.join(unmapped)}: without a mapping, which releases share "
                 "people is not known")


def differencing_results(ctx: RealContext, rels: Sequence[ReleaseData]) -> list[dict]:
    """The differencing attack (:mod:`medanon.evaluate.attacks.differencing`) on every two releases that share a
    patient (by their mappings) and have records whose ``n_people`` differ by one; members are the patients of
    either release, controls the held-out patients, the threshold's scale the attacker split's patients (held-out
    where the attacker split is the source split). Pixels are differenced for every such pair, and the latents of
    the public codec both releases were made with (:func:`public_codec`; their images inverted by its encoder) for
    every pair that has one: k-Centroid records are rendered from mean latents, which subtract where their pixels
    do not. Pairs it cannot measure, and pairs where it recovers people, are noted (``ctx.note``)."""
    from medanon.evaluate.attacks.differencing import Space, threshold_entry

    pairs = _pairs(ctx, rels)
    if not pairs:
        _note_unmeasured(ctx, rels)
        return []
    real = ctx.real
    own = ctx.attacker_from != ctx.cfg.source_split
    scale_rows, scale_split = (ctx.attacker_rows, ctx.attacker_from) if own else (ctx.held, ctx.cfg.heldout_split)
    controls = set(real.patients[ctx.held].tolist())
    targets = np.flatnonzero(np.isin(real.patients, sorted(set().union(*(p[2] | p[5] for p in pairs)) | controls)))
    fraction = ctx.cfg.attacks.differencing_fraction
    scale_people = len(set(real.patients[scale_rows].tolist()))
    if scale_people < 2:                        # the threshold is a fraction of the distance between two people
        ctx.note(f"differencing of {', '.join(sorted({r.name for p in pairs for r in (p[0], p[3])}))} is not "
                 f"measured: its threshold's scale comes from the {scale_split} split, which holds {scale_people} "
                 "patient(s) (2 or more needed); a dataset with more held-out patients gives it")
        return []
    eyes = real.modality == "fundus"            # records may be shown as the other eye: both orientations
    left = ctx.real_sides[targets] == 0 if eyes else None      # and a both-eyes patient turned to one side
    space = Space(real.images[targets], real.patients[targets],
                  mirrored=real.images[targets].flip(-1) if eyes else None, left=left)
    threshold = threshold_entry(real.images[scale_rows], real.patients[scale_rows], fraction)
    scale_from = f"{scale_split} split ({ctx.split_name(scale_rows)})"
    out = _measure(ctx, pairs, space, threshold, lambda r, flip=False: r.images.flip(-1) if flip else r.images,
                   controls, scale_from, mirrored=eyes, space="pixels")
    by_codec: dict[str, list[tuple]] = {}
    for p in pairs:
        if (name := public_codec(p[0])) is not None and name == public_codec(p[3]):
            by_codec.setdefault(name, []).append(p)
    for name, group in sorted(by_codec.items()):
        try:
            invert = _inverter(ctx, name)
        except MedanonError as e:               # not installed here, or not a StyleGAN codec
            ctx.note(f"differencing {', '.join(sorted({r.name for p in group for r in (p[0], p[3])}))} in the latent "
                     f"space of {name} is not measured: {e.message}")
            continue
        needed = np.union1d(targets, scale_rows)            # each image inverted once (the scale may be held-out)
        z = invert(real.images[needed])
        latent = Space(z[np.searchsorted(needed, targets)], real.patients[targets],
                       mirrored=invert(real.images[targets].flip(-1)) if eyes else None, left=left)
        limit = threshold_entry(z[np.searchsorted(needed, scale_rows)], real.patients[scale_rows], fraction,
                                unit=f"RMS difference of the latents of {name}, the public codec")
        out += _measure(ctx, group, latent, limit,
                        lambda r, flip=False, f=invert: f(r.images.flip(-1) if flip else r.images), controls,
                        scale_from, mirrored=eyes, space="latent", codec=name)
    return out


def _inverter(ctx: RealContext, name: str):
    """Images (N, C, H, W) at the evaluation size -> the public codec's latents (N, D), float32 on the CPU, resized
    to the codec's resolution where the evaluation's differs."""
    from medanon.codecs.stylegan import load_codec
    from medanon.models.features.base import resize_antialiased
    from medanon.models_registry import find_model

    codec = load_codec(find_model(name), map_location=ctx.device)      # encode batches and moves to its device
    side = int(codec.describe()["resolution"])
    return lambda images: codec.encode(resize_antialiased(images, side)).flatten(1).float().cpu()


def _measure(ctx: RealContext, pairs: list[tuple], targets, threshold: dict, rows_of, controls: set,
             scale_from: str, *, mirrored: bool = False, **where) -> list[dict]:
    """The attack on each pair in one space; each release's products with the targets are computed once.
    ``rows_of(release, flip)``: its rows in the space (``flip``: of its images mirrored left-right, the second
    release's other orientation where ``mirrored``)."""
    from medanon.evaluate.attacks.differencing import Released, attack_pair

    a = ctx.cfg.attacks
    released: dict[str | tuple[str, str], Released] = {}
    out = []
    how = "" if where["space"] == "pixels" else f" in the latent space of {where['codec']} (public)"
    for ra, na, pa, rb, nb, pb in pairs:
        work = float(len(na)) * len(nb) * len(targets.refs) * (2 if mirrored else 1)
        if work > a.differencing_max_work:
            ctx.note(f"differencing {ra.name} and {rb.name}{how} is not measured: {work:.2g} pair-to-image distances "
                     f"exceed attacks.differencing_max_work={a.differencing_max_work:g}; raise it to measure")
            continue
        for r, n in ((ra, na), (rb, nb)):
            if r.name not in released:
                released[r.name] = targets.released(rows_of(r), n)
        if mirrored and (rb.name, "mirrored") not in released:
            released[rb.name, "mirrored"] = targets.released(rows_of(rb, True), nb)
        got = attack_pair(targets, released[ra.name], released[rb.name], members=pa | pb, controls=controls,
                          threshold=threshold, confidence=a.confidence,
                          b_mirrored=released[rb.name, "mirrored"] if mirrored else None)
        got.update(releases=[ra.name, rb.name], shared_patients=len(pa & pb), scale_from=scale_from, **where)
        if got["risk"]["residual_risk"]["ci"][0] > 0:
            m = got["members"]
            what = "image" if where["space"] == "pixels" else "latent (and so the codec's image)"
            ctx.note(f"differencing {ra.name} and {rb.name}{how} recovers the {what} of {m['recovered_beyond']} of "
                     f"{m['patients']} patients (a difference of two records within "
                     f"{got['threshold']['value']:.3g} RMS of theirs, at most half as far as any released "
                     "record): publish at most one of them")
        out.append(got)
    return out


def k_claim(rel: ReleaseData, patients: np.ndarray) -> dict | None:
    """Whether the release's mapping bears out the k its privacy statement claims: the people (distinct patients of
    the real data) each record stands for, counted from the mapping. None where nothing is claimed or there is no
    mapping."""
    k = (rel.manifest.get("privacy") or {}).get("k")
    if not k or rel.sources is None or not len(rel.sources):
        return None
    people = np.asarray([len(set(patients[np.asarray(rows, np.int64)].tolist())) for rows in rel.sources])
    return {"k": int(k), "records": len(people), "below_k": int((people < int(k)).sum()),
            "smallest": int(people.min()), "what": "people per record counted from the mapping against the k that "
                                                   "the release's privacy statement claims"}


# Fewer held-out patients than this: the utility intervals (a percentile bootstrap over those patients) cover the true
# value less often than stated. Simulated coverage of a 95 % AUROC interval, 4 images per patient, 300 datasets each
# (`python benchmarks/interval_coverage.py --reps 300 --patients 3,5,10,20,40`): 0.29 at 3 patients, 0.68 at 5, 0.89
# at 10, 0.92 at 20, 0.94 at 40; accuracy 0.66, 0.82, 0.90, 0.92, 0.94.
FEW_TEST_PATIENTS = 20


def few_test_patients(ctx: RealContext, tasks) -> list[str]:
    """A note for each utility task whose held-out test images come from fewer than :data:`FEW_TEST_PATIENTS`
    patients (its intervals are rough there)."""
    if not ctx.cfg.utility.bootstrap:
        return []
    out = []
    for task in tasks:
        rows, _ = ctx.test_set(task)
        g = len(set(ctx.real.patients[rows].tolist()))
        unlabelled = len(ctx.held) - len(rows)            # held-out images without a value for the task's label
        why = (f" ({unlabelled} of the {len(ctx.held)} held-out images have no {task.label} value: blank or "
               "uncertain)" if unlabelled > 0 else "")
        if len(rows) >= 2 and g < 2:
            out.append(f"utility ({task.label}) is tested on {len(rows)} images of one held-out patient{why}: its "
                       "values carry no interval (a bootstrap over patients needs two or more); hold out more "
                       "patients")
        elif len(rows) >= 2 and g < FEW_TEST_PATIENTS:        # fewer: not tested at all, and said so per release
            out.append(f"utility ({task.label}) is tested on {len(rows)} images of {g} held-out patient(s){why}: its "
                       f"intervals resample those patients, and a 95 % bootstrap interval over fewer than "
                       f"{FEW_TEST_PATIENTS} patients covers the true value less often than stated (simulated AUROC "
                       "intervals covered it in 92 % of datasets at 20 patients, 89 % at 10, 68 % at 5, 29 % at 3: "
                       "benchmarks/interval_coverage.py); read them as rough, and hold out more patients")
    return out
