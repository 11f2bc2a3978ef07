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
import itertools
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
            "images": len(chosen), "patients": len({str(r.patient_id) for r in chosen}),
            "records_digest": records_digest(chosen),
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


SOME = -1      # released_overlap: trained on released patients, how many not recorded


def released_overlap(records: list[dict[str, Any]], ds) -> list[tuple[str, int | None, str]]:
    """For a release of dataset ``ds``, what its models' training-people ``records`` (:func:`model_people`, in the
    clear: the release is being made by the data's holder) say of the released patients: ``(model, released
    patients it was trained on, how it is known)``; ``None`` patients where it was trained on this very folder but
    on another set, :data:`SOME` where on released patients only but the record does not count them. Records of
    other data are left out. A digest tells equal sets only: recognised are every patient of the folder, exactly the
    released ones, a split the release was selected by (or a union of splits), exactly the folder's others (none
    released), and any set when the release holds every patient of the folder.

    >>> from types import SimpleNamespace as NS
    >>> from medanon.runtime import files_digest
    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> recs = [NS(path=root / f"{i}.png", patient_id=p) for i, p in enumerate("aabc")]
    >>> for r in recs: _ = r.path.write_bytes(b"x" + bytes([len(str(r.path))]))
    >>> src = {"sha256": files_digest([r.path for r in recs], root=root)["sha256"]}
    >>> part = NS(root=root, records=recs[:2], folder_records=recs)        # patient a released, b and c not
    >>> [n for _, n, _ in released_overlap([{"source": src, "patients_digest": patients_digest(p)}
    ...                                     for p in (["a", "b", "c"], ["a"], ["b", "c"], ["b"])], part)]
    [1, 1, 0, None]
    """
    recs = [r for r in records if isinstance(r, dict) and isinstance(r.get("source"), dict)
            and r["source"].get("sha256") and r.get("patients_digest")]
    root = getattr(ds, "root", None)
    if not recs or root is None:
        return []
    from medanon.runtime import files_digest

    folder = getattr(ds, "folder_records", None) or ds.records
    ours = files_digest([r.path for r in folder], root=root)["sha256"]
    released = {str(r.patient_id) for r in ds.records}
    everyone = {str(r.patient_id) for r in folder}
    known: dict[str, tuple[int, str]] = {}
    split_of = getattr(ds, "split_of", None) or {}          # the split each folder record is in (select_split)
    names = sorted(set(split_of.values()))
    for size in range(1, len(names) + 1):                   # every split, and every union of splits
        for chosen in itertools.combinations(names, size):
            people = {str(r.patient_id) for r in folder if split_of.get(r.record_id) in chosen}
            if people:
                known.setdefault(patients_digest(sorted(people)),
                                 (len(people & released), f"trained on this folder's {' + '.join(chosen)} split"))
    known.setdefault(patients_digest(sorted(everyone)), (len(released), "trained on every patient of this folder"))
    known.setdefault(patients_digest(sorted(released)), (len(released), "trained on exactly the released patients"))
    if everyone - released:
        known.setdefault(patients_digest(sorted(everyone - released)),
                         (0, "trained on this folder's patients that are not released"))
    out = []
    for rec in recs:
        if rec["source"]["sha256"] != ours:
            continue
        n, how = known.get(rec["patients_digest"], (None, f"trained on {rec.get('images', '?')} images of this "
                                                          f"folder (its {rec.get('split', '?')!r} split), patients "
                                                          "that are not exactly the released ones, the others or "
                                                          "all of them"))
        if n is None and not everyone - released:         # the whole folder is released: so is every one it saw
            count = rec.get("patients")
            n = count if isinstance(count, int) and count > 0 else SOME
            how = (f"trained on {rec.get('images', '?')} images of this folder (its {rec.get('split', '?')!r} "
                   "split), every patient of which is released")
        out.append((str(rec.get("model") or "a model"), n, how))
    return out
