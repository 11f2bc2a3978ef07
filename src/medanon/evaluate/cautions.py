"""What a report says about its releases together: releases made from the same people (noted, and differenced by
:func:`differencing_results`), and releases anyone can recompute because the models they were made with are
medanon's public shipped checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

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


def differencing_results(ctx: RealContext, rels: Sequence[ReleaseData]) -> list[dict]:
    """The differencing attack (:mod:`medanon.evaluate.attacks.differencing`) on every two releases that share a
    patient (by their mappings) and have records whose ``n_people`` differ by one; members are the patients of
    either release, controls the held-out patients, the threshold's scale the attacker split's patients (held-out
    where the attacker split is the source split). Each release's products with the targets are computed once.
    Pairs it cannot measure, and pairs where it recovers people, are noted (``ctx.note``)."""
    from medanon.evaluate.attacks.differencing import Released, Space, attack_pair, threshold_entry

    a = ctx.cfg.attacks
    real = ctx.real
    usable = [(r, n, {real.patients[j] for rows in r.sources for j in rows})          # each release's patients, once
              for r in rels if r.sources is not None and (n := _people_column(r)) is not None]
    own = ctx.attacker_from != ctx.cfg.source_split
    scale_rows, scale_split = (ctx.attacker_rows, ctx.attacker_from) if own else (ctx.held, ctx.cfg.heldout_split)
    pairs = []
    for i, (ra, na, pa) in enumerate(usable):
        for rb, nb, pb in usable[i + 1:]:
            if pa & pb and (np.abs(na[:, None] - nb[None, :]) == 1).any():
                pairs.append((ra, na, pa, rb, nb, pb))
    if not pairs:
        return []
    controls = set(real.patients[ctx.held].tolist())
    targets = np.flatnonzero(np.isin(real.patients, sorted(set().union(*(p[2] | p[5] for p in pairs)) | controls)))
    space = Space(real.images[targets], real.patients[targets])
    threshold = threshold_entry(real.images[scale_rows], real.patients[scale_rows], a.differencing_fraction)
    released: dict[str, Released] = {}
    out = []
    for ra, na, pa, rb, nb, pb in pairs:
        work = float(len(na)) * len(nb) * len(space.refs)
        if work > a.differencing_max_work:
            ctx.note(f"differencing {ra.name} and {rb.name} is not measured: {work:.2g} pair-to-image distances "
                     f"exceed attacks.differencing_max_work={a.differencing_max_work:g}; raise it to measure")
            continue
        for r, n in ((ra, na), (rb, nb)):
            if r.name not in released:
                released[r.name] = space.released(r.images, n)
        got = attack_pair(space, released[ra.name], released[rb.name], members=pa | pb, controls=controls,
                          threshold=threshold, confidence=a.confidence)
        got.update(releases=[ra.name, rb.name], shared_patients=len(pa & pb),
                   scale_from=f"{scale_split} split ({ctx.split_name(scale_rows)})")
        if got["risk"]["residual_risk"]["ci"][0] > 0:
            m = got["members"]
            ctx.note(f"differencing {ra.name} and {rb.name} recovers the image of {m['recovered_beyond']} of "
                     f"{m['patients']} patients (a difference of two records within "
                     f"{got['threshold']['value']:.3g} RMS of their image, at most half as far as any released "
                     "record): publish at most one of them")
        out.append(got)
    return out
