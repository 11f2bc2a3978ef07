"""That DP-GLOW Table 3's test patients were held out from both flows: recomputed from each flow's record of its
training folder and split (:mod:`medanon.cli.train_flow` records the folder's digest, the split's settings and the
training records' digest), not taken on trust. A flow trained on every image of its folder, or on another folder,
has no held-out split to test on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medanon.errors import ConfigError

NOTHING_RECORDED = "records no digest of the folder it was trained on"


def _training_patients(blob: dict[str, Any], records, root) -> set[str] | str:
    """The patients a flow was trained on among ``records`` (every record of its folder ``root``), recomputed from
    what the flow records of its run (:mod:`medanon.cli.train_flow`), or why they cannot be: another folder (or
    this one changed), every image used (no split held out), a split that does not reproduce the recorded one, or
    nothing recorded (a flow trained from Python without ``data=``)."""
    from medanon.data.records import records_digest
    from medanon.data.splits import split_records
    from medanon.runtime import files_digest

    data = blob.get("extra", {}).get("data") or {}
    src = (data.get("source") or {}).get("sha256")
    if not src:
        return NOTHING_RECORDED
    if files_digest([r.path for r in records], root=root)["sha256"] != src:
        return "was trained on another folder, or on this one before it changed"
    if data.get("subset", "all") != "train":
        return "was trained on every image of this folder (subset all): it holds no split out"
    split = data.get("split") or {}
    train = split_records(records, val=split.get("val", 0.15), test=split.get("test", 0.15),
                          stratify=split.get("stratify", ""), seed=split.get("seed", 0))["train"]
    where = data.get("where") or {}
    train = [r for r in train if all(r.labels.get(n) == v for n, v in where.items())]
    recorded = (data.get("records") or {}).get("train")
    if recorded and records_digest(train) != recorded:
        return "has a training split that cannot be recomputed here (the folder is read with other options)"
    return {r.patient_id for r in train}


def check_unseen(data_dir, test, flows: Sequence[tuple[str, Any, dict[str, Any]]], records) -> str:
    """That the test patients were held out from every flow (``flows``: argument name, path, checkpoint blob),
    recomputed from each flow's record of its run: a ConfigError where a test patient trained a flow, or where the
    flow's training patients cannot be recomputed and told apart. Returns what was checked; a flow that records
    nothing of its data (trained from Python without ``data=``) warns and is said to be unchecked."""
    import warnings

    tested = {r.patient_id for r in test}
    unchecked = []
    for name, path, blob in flows:
        got = _training_patients(blob, records, data_dir)
        if got == NOTHING_RECORDED:
            unchecked.append(name)
            continue
        fix = ("train both flows with `medanon train flow DATA --subset train` on this folder, or pass test_dir= a "
               "dataset of other people")
        if isinstance(got, str):
            raise ConfigError(f"{name} {path} {got}, so the test split of {data_dir} cannot be shown to hold only "
                              "people it never saw", fix=fix)
        if tested & got:
            raise ConfigError(f"{len(tested & got)} of the {len(tested)} test patients of {data_dir} are among the "
                              f"training patients of {name} {path}", fix=fix)
    if unchecked:
        warnings.warn(f"{' and '.join(unchecked)} record(s) nothing of the folder they were trained on (trained from "
                      "Python without data=): that the test patients are unseen is the caller's assurance, not "
                      "checked", UserWarning, stacklevel=3)
        return f"not checked for {', '.join(unchecked)} (the flow records nothing of its training folder)"
    return ("checked: the test patients are none of either flow's training patients, recomputed from each flow's "
            "record of its folder and split")
