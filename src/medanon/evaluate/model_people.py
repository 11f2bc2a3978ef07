"""Whether the models a release was made with were trained on the evaluation's controls.

The attacks compare the release's members with its controls, people not in the release. A codec or flow that was
trained on the controls is not blind to them: what it memorised of them can reach the released images, the control
rates rise, and the residual risks (attack minus control) fall. The controls are still people outside the release,
so the attacks still run; the report says loudly which models saw them and how many.

A model's training people are known where the release names it and its training data can be compared with the
evaluation's real data:

- medanon's shipped checkpoints (recognised by the file digests a release's manifest records) were trained on
  phantoms of known settings (:data:`medanon.phantoms.provenance.SHIPPED_TRAINING`); a phantom's people are fixed
  by its seed, so a real dataset that is a phantom of those settings holds some of them
  (:func:`medanon.phantoms.provenance.shared_people`);
- a model trained with ``medanon train`` records its dataset's digest and the digest of its training patients,
  which a release carries in its ``params`` keyed by the dataset's content digest (``trained_people``:
  :func:`medanon.data.training_people.public_people`; the manifest is public): where the dataset is this
  evaluation's, the patients are recognised when they are exactly the members, the controls, both, or every
  patient; a digest tells equal sets only.

Models trained on other data, or recording nothing, are not checked (and are said to be unknown only where a
release names a model trained on this very dataset that matches none of those sets).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from medanon.evaluate.context import RealContext
    from medanon.evaluate.inputs import ReleaseData


def _unique(ids) -> set[str]:
    return {str(p) for p in ids}


def _shipped_overlaps(rel: ReleaseData, ctx: RealContext) -> Iterator[tuple[str, int | None, str]]:
    """(model file, controls it saw, how it is known) for the shipped models of ``rel`` trained on a phantom that
    holds controls of this evaluation."""
    from medanon.models_shipped import shipped_name
    from medanon.phantoms.provenance import SHIPPED_TRAINING, shared_people

    controls = sorted(_unique(ctx.real.patients[ctx.held]))
    for sha in sorted(set((rel.manifest.get("models") or {}).values())):
        name = shipped_name(str(sha))
        trained = SHIPPED_TRAINING.get(name or "")
        seen = shared_people(trained, ctx.real.root, controls)
        if seen:
            yield (name, len(seen), f"a phantom of seed {trained['seed']}, {trained['patients']} patients, which "
                                    "this phantom's people belong to")


def _recorded(params: Any) -> Iterator[tuple[str, dict]]:
    """(model, record) for every ``trained_people`` record in a release's params (any depth: each method nests its
    models' descriptions differently)."""
    if isinstance(params, dict):
        for key, value in params.items():
            if key == "trained_people" and isinstance(value, list):
                for rec in value:
                    if isinstance(rec, dict):
                        yield str(rec.get("model") or "a model"), rec
            else:
                yield from _recorded(value)
    elif isinstance(params, list):
        for value in params:
            yield from _recorded(value)


def _recognised(rec: dict, ctx: RealContext) -> tuple[str, np.ndarray] | bool | None:
    """Which of the evaluation's patient sets a release's record of a model's training people is
    (:func:`medanon.evaluate.context.recorded_patients`'s sets); None where the record is of this dataset but none of
    them; False where it is of another dataset (or this one changed), or says nothing. A public record is keyed by
    the dataset's content digest (:func:`medanon.data.training_people.public_people`); a raw one (digests in the
    clear) is compared as such."""
    from medanon.data.training_people import keyed, patients_digest
    from medanon.evaluate.context import patient_sets, recorded_patients

    ours = getattr(ctx.real, "files_sha256", None)
    if not ours:
        return False
    if "dataset_key" in rec:
        if rec.get("dataset_key") != keyed(ours, "dataset"):
            return False
        for what, rows in patient_sets(ctx):
            if rec.get("people_key") == keyed(ours, "people:" + patients_digest(ctx.real.patients[rows].tolist())):
                return what, rows
        return None
    if (rec.get("source") or {}).get("sha256") != ours:
        return False
    return recorded_patients({"data": rec}, ctx)


def _recorded_overlaps(rel: ReleaseData, ctx: RealContext) -> Iterator[tuple[str, int | None, str]]:
    """As :func:`_shipped_overlaps`, for the training patients the release's models record (see the module); None
    controls: of this dataset, but not known which."""
    controls = _unique(ctx.real.patients[ctx.held])
    seen_pairs = set()
    for model, rec in _recorded(rel.params):
        key = (model, rec.get("people_key") or rec.get("patients_digest"))
        if key in seen_pairs:
            continue
        seen_pairs.add(key)
        which = _recognised(rec, ctx)
        if which is False:
            continue
        if which is None:
            yield (model, None, f"it was trained on {rec.get('images', '?')} images of this very dataset "
                                  f"(the {rec.get('split', '?')!r} split), patients that are not exactly the "
                                  "members, the controls or both")
            continue
        what, rows = which
        ids = _unique(ctx.real.patients[rows])
        if ids & controls:
            yield model, len(ids & controls), f"its record: {what}"


def model_people_notes(rels: Sequence[ReleaseData], ctx: RealContext) -> list[str]:
    """One loud note per release whose models were trained on the evaluation's controls (or on patients of this
    dataset the evaluator cannot tell apart from them)."""
    out = []
    n_controls = len(_unique(ctx.real.patients[ctx.held]))
    for rel in rels:
        found = list(_shipped_overlaps(rel, ctx)) + list(_recorded_overlaps(rel, ctx))
        groups: dict[tuple[int, str], list[str]] = {}            # models that saw the same controls, said once
        for model, c, how in found:
            if c is not None:
                groups.setdefault((c, how), []).append(model)
        known = [f"{' and '.join(models)} saw {c} of the {n_controls} controls ({how})"
                 for (c, how), models in groups.items()]
        unknown = [f"{model}: {how}" for model, c, how in found if c is None]
        if known:
            out.append(f"release {rel.name} was made with models trained on this evaluation's controls: "
                       f"{'; '.join(known)}. The controls are not people its models never saw: what the models "
                       "memorised of them can raise the control rates and so lower every residual risk (attack "
                       "minus control) below the release's risk for people the models never saw; train the models "
                       "on the release's patients only (the split it was made from), or on other people (for a "
                       "phantom: another seed)")
        if unknown:
            out.append(f"release {rel.name}: whether its models saw the controls is not known: "
                       f"{'; '.join(unknown)}. Where they did, the control rates can be raised and the residual risks "
                       "lowered; train the models on the split the release was made "
                       "from, with the same splits file")
    return out
