"""Which synthetic people a phantom folder holds, so that a release can tell whether a model was trained on them.

Phantom patient ``i`` (id ``P{i+1:05d}``) is drawn from the seed and the generator's settings alone: the same person
in every phantom of that modality, seed and settings, whatever its number of patients, images per patient or image
size. A phantom of 6 patients at the default seed 0 is the first 6 people of the 400-patient phantom the shipped
flows were trained on. :func:`shared_people` names the released patients a model's training phantom holds too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

RENDERING = ("patients", "per_patient", "size", "workers", "both_eyes")     # how many, how large: not who

# The phantoms the shipped generative models were trained on (checkpoints/README.md: ph-fundus64, ph-xray64 and the
# flows' 400-patient phantoms; the flows' recorded source digests are these folders' digests). Settings not listed are
# PhantomConfig's defaults. The phantom's whole patient set counts, whatever split of it a model saw.
_PH_FUNDUS64 = {"modality": "fundus", "seed": 0, "patients": 500}
_PH_XRAY64 = {"modality": "xray", "seed": 0, "patients": 400}
SHIPPED_TRAINING: dict[str, dict[str, Any]] = {
    "glow-xray64.pt": {"modality": "xray", "seed": 0, "patients": 400},
    "glow-xray64-normal.pt": {"modality": "xray", "seed": 0, "patients": 400},
    "glow-fundus64.pt": {"modality": "fundus", "seed": 0, "patients": 400},
    **{name: _PH_FUNDUS64 for name in ("restyle-map-fundus64.pt", "cotrained-map-fundus64.pt", "restyle-fundus64.pt",
                                       "cotrained-fundus64.pt", "stylegan2-fundus64-wide.pt",
                                       "stylegan2-fundus64.pt")},
    **{name: _PH_XRAY64 for name in ("cotrained-map-xray64.pt", "cotrained-xray64.pt")},
}


def people_of(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings that decide who a phantom's patients are (all but :data:`RENDERING` and a training record's
    ``patient_ids``), defaults filled in."""
    from medanon.config import PhantomConfig

    full = {**asdict(PhantomConfig()), **settings}
    return {k: (list(v) if isinstance(v, tuple | list) else v) for k, v in full.items()
            if k not in RENDERING and k != "patient_ids"}


def trained_on_phantom(root: str | Path | None, patient_ids: Iterable[str]) -> dict[str, Any] | None:
    """What a model trained on ``patient_ids`` of the folder ``root`` records of it (a checkpoint's
    ``extra.phantom``): the phantom's generator settings and the synthetic patients it saw, or None for real data
    (whose patient ids a shareable checkpoint must not carry)."""
    settings = phantom_settings(root)
    if settings is None:
        return None
    ids = sorted({str(p) for p in patient_ids})
    if not all(_phantom_person(p, int(settings.get("patients", 0))) for p in ids):
        return None                 # not the phantom's own people (a phantom.json copied beside real data)
    return {**settings, "patient_ids": ids}


def phantom_settings(root: str | Path | None) -> dict[str, Any] | None:
    """The generator settings a phantom folder records (``phantom.json``), or None for any other folder."""
    if root is None:
        return None
    path = Path(root) / "phantom.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    settings = info.get("settings") if isinstance(info, dict) and info.get("phantom") else None
    return dict(settings) if isinstance(settings, dict) and "seed" in settings else None


def training_phantom(trained_on: dict[str, Any] | None, shipped_name: str | None) -> dict[str, Any] | None:
    """The phantom settings a model was trained on: recorded by its training run (``data.phantom``), else the table
    of shipped checkpoints by name, else None (trained on other data, or not known)."""
    recorded = (trained_on or {}).get("phantom")
    if isinstance(recorded, dict) and "seed" in recorded:
        return recorded
    return SHIPPED_TRAINING.get(shipped_name or "")


def shared_people(trained: dict[str, Any] | None, released_root: str | Path | None,
                  patient_ids: Iterable[str]) -> list[str]:
    """The released patients (of a phantom folder) who are also patients of the training phantom: same people
    settings and, where the training record lists the patients the model saw (``patient_ids``), one of them;
    otherwise an index below the phantom's patient count (the whole phantom counts). Empty where either is not a
    phantom."""
    released = phantom_settings(released_root)
    if trained is None or released is None or people_of(trained) != people_of(released):
        return []
    seen = trained.get("patient_ids")
    if isinstance(seen, list):
        return sorted(set(map(str, patient_ids)) & set(map(str, seen)))
    n = int(trained.get("patients", 0))
    return [pid for pid in sorted(set(patient_ids)) if _phantom_person(pid, n)]


def _phantom_person(pid: str, n: int) -> bool:
    """Whether ``pid`` is one of the first ``n`` people of a phantom (ids ``P00001`` ...)."""
    return len(pid) > 1 and pid[0] == "P" and pid[1:].isdigit() and 1 <= int(pid[1:]) <= n


def shipped_models_trained_on(models: dict[str, str], released_root: str | Path | None,
                              patient_ids: Iterable[str]) -> dict[str, tuple[int, dict[str, Any]]]:
    """Shipped model file -> (how many released patients it was trained on, its training phantom), for the models
    (role -> file sha256, as a release's manifest records them) trained on a phantom whose people the released phantom
    folder shares. Empty for any other data."""
    from medanon.models_shipped import shipped_name

    ids = list(patient_ids)
    out = {}
    for sha in models.values():
        name = shipped_name(sha)
        trained = SHIPPED_TRAINING.get(name or "")
        shared = shared_people(trained, released_root, ids)
        if shared:
            out[name] = (len(shared), trained)
    return out


def overlap_fact(overlap: dict[str, tuple[int, dict[str, Any]]]) -> tuple[int, str, str]:
    """What a release states of shipped models trained on its people (``overlap``: :func:`shipped_models_trained_on`,
    not empty): the most released patients one model was trained on, the files, and the sentence. Counts and file
    names only, never patient ids: it goes into the public manifest."""
    most = max(n for n, _ in overlap.values())
    seed = next(iter(overlap.values()))[1]["seed"]
    files = ", ".join(sorted(overlap))
    return most, files, (f"the models {files} were trained on a phantom (seed {seed}) that holds {most} of the "
                         "released patients")
