"""What a trained model records of the people it was trained on: digests, never ids.

A checkpoint may be shared; a hospital's patient ids must not travel with it. It records the digest of the
dataset's files (:func:`medanon.runtime.files_digest`, the digest an evaluation of that dataset computes), the split
it trained on and how the split was made, and digests of the chosen records and of the chosen patients' sorted ids.
An evaluation of the same dataset recognises the training patients when they are exactly its members, its controls,
both or every patient (:func:`medanon.evaluate.context.recorded_patients`): a digest tells equal sets only.

A release's public manifest carries none of these (the content digest fingerprints the source data, and a digest
of few or guessable ids can be confirmed by guessing): :func:`public_people` keys them with the dataset's content
digest, which only a holder of the data can recompute.

>>> patients_digest(["b", "a", "a"]) == patients_digest(["a", "b"])
True
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medanon.fsutil import sha256_bytes


def patients_digest(patient_ids: Sequence[str]) -> str:
    """A digest of the training patients (sorted, each once), stored in a checkpoint instead of the ids."""
    return sha256_bytes("\n".join(sorted(set(map(str, patient_ids)))).encode())[:16]


def training_people(ds, chosen, *, split: str = "all", splits: str | Path | None = None,
                    seed: int | None = None, stratify: str | None = None, model: str | None = None) -> dict[str, Any]:
    """The record of a model trained on the records ``chosen`` of the dataset ``ds`` (every record it holds, read
    as the model read them): the folder's digest, the split and how it was made, digests of the chosen records and
    patients. ``splits``: the splits CSV the split came from, else it was recomputed with ``seed`` (and
    ``stratify``: the label it was stratified by; None where the split procedure does not say)."""
    from medanon.data.records import records_digest
    from medanon.fsutil import sha256_file
    from medanon.runtime import files_digest

    chosen = list(chosen)
    how: dict[str, Any] = {}
    if split != "all":
        how = ({"splits_sha256": sha256_file(splits)} if splits is not None else
               {"split_seed": seed or 0, **({"stratify": stratify} if stratify is not None else {})})
    return {**({"model": model} if model else {}),
            "source": files_digest([r.path for r in ds.records], root=ds.root), "split": split, **how,
            "images": len(chosen), "records_digest": records_digest(chosen),
            "patients_digest": patients_digest([r.patient_id for r in chosen])}


def model_people(blob: dict[str, Any]) -> list[dict[str, Any]]:
    """The training-people records a loaded checkpoint holds: its own run's (``extra.training_images.people``, or an
    attacker's ``extra.data``) and those of the generator it was built on (``extra.generator_checkpoint``), each
    named by the file that recorded it (``model``)."""
    extra = blob.get("extra") or {}
    name = Path(str(blob.get("path") or "")).name or None
    own = list((extra.get("training_images") or {}).get("people") or [])
    data = extra.get("data")
    if isinstance(data, dict) and data.get("patients_digest"):
        own.append(data)
    out = [{**({"model": name} if name else {}), **r} for r in own if isinstance(r, dict)]
    start = extra.get("generator_checkpoint") or {}
    out += [r for r in start.get("trained_people") or [] if isinstance(r, dict) and r not in out]
    return out


def keyed(dataset_sha256: str, what: str) -> str:
    """HMAC-SHA256 of ``what`` keyed by a dataset's content digest (hex, 32 characters): recomputed by whoever holds
    that dataset, by nobody else."""
    return hmac.new(dataset_sha256.encode(), what.encode(), "sha256").hexdigest()[:32]


def public_people(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a release's public manifest says of its models' training people: per record, the model, the split and
    the image count, and two keyed digests (:func:`keyed`) an evaluator holding the dataset recomputes: of the
    dataset itself (``dataset_key``) and of the patients' digest (``people_key``). Records without a dataset digest
    are left out.

    >>> rec = {"model": "c.pt", "source": {"sha256": "ab"}, "split": "train", "images": 4, "records_digest": "x",
    ...        "patients_digest": patients_digest(["p1", "p2"])}
    >>> pub = public_people([rec])[0]
    >>> sorted(pub), pub["people_key"] == keyed("ab", "people:" + rec["patients_digest"])
    (['dataset_key', 'images', 'model', 'people_key', 'split'], True)
    """
    out = []
    for r in records:
        key = (r.get("source") or {}).get("sha256") if isinstance(r.get("source"), dict) else None
        if not key or not r.get("patients_digest"):
            continue
        out.append({"model": r.get("model"), "split": r.get("split"), "images": r.get("images"),
                    "dataset_key": keyed(key, "dataset"), "people_key": keyed(key, "people:" + r["patients_digest"])})
    return out
