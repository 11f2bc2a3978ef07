"""What a report says about its releases together: releases made from the same people, and releases anyone can
recompute because the models they were made with are medanon's public shipped checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from medanon.evaluate.inputs import ReleaseData

RECOMPUTABLE = ("gmia", "inverted")             # deterministic per image: the models and a candidate give its record


def public_models(rels: Sequence[ReleaseData]) -> dict[str, list[str]]:
    """Release name -> the shipped checkpoints it was made with, for releases of a deterministic per-image method
    made only with medanon's shipped (public) models: anyone can recompute their records."""
    wanted = [r for r in rels if r.method in RECOMPUTABLE and (r.manifest.get("models") or {})]
    if not wanted:
        return {}
    from medanon.models_registry import SOURCE_CHECKPOINTS, list_models

    shipped = {m.sha256: m.name for m in list_models() if m.path.parent == SOURCE_CHECKPOINTS}
    out = {}
    for r in wanted:
        digests = list(r.manifest["models"].values())
        if all(d in shipped for d in digests):
            out[r.name] = sorted({shipped[d] for d in digests})
    return out


def shared_people(rels: Sequence[ReleaseData]) -> list[str]:
    """The releases (by name) whose mapping shares a source image with another release's."""
    rows = {r.name: {i for record in r.sources for i in record} for r in rels if r.sources is not None}
    return [a for a in rows if any(rows[a] & rows[b] for b in rows if b != a)]
