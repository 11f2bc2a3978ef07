"""Writing a phantom dataset to disk in medanon's own layout.

::

    OUT/
      dataset.yaml        layout descriptor read by ``medanon.data.layouts`` (layout "medanon")
      labels.csv          image, mask, patient_id, acquisition, labels and ground truth
      images/P00001_01.png
      masks/P00001_01.png vessel mask (fundus) or lung mask (X-ray)
      phantom.json        generator settings and software version (no timestamps: outputs are
                          byte-identical for the same seed, whatever the number of workers)

Patients are rendered in parallel processes; each patient and acquisition has its own random
generator derived from (seed, patient, acquisition), see :mod:`medanon.phantoms.common`.
"""

from __future__ import annotations

import csv
import io
import json
import multiprocessing as mp
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from PIL import Image
from tqdm.auto import tqdm

from medanon import __version__
from medanon.config import PhantomConfig, to_dict
from medanon.fsutil import atomic_dir, write_bytes
from medanon.phantoms.common import PhantomParams, acquisition_rng, fellow_rng, patient_rng
from medanon.runtime import cpu_count

# Columns written for each modality, in order (after image, mask, patient_id, acquisition).
LABEL_COLUMNS = {
    "fundus": ["grade", "sex", "age", "laterality", "marker_block", "n_microaneurysms", "n_haemorrhages",
               "n_exudates", "n_cotton_wool", "neovascularisation"],
    "xray": ["pneumonia", "sex", "age", "view", "marker_block", "situs_inversus", "n_opacities"],
}
# Written as class names so the CSV reads naturally; every other column as a number.
_NAMED = {"sex": ("F", "M"), "laterality": ("L", "R"), "view": ("PA", "AP", "LATERAL", "LL", "OTHER")}


def _generator(modality: str) -> tuple[Callable, Callable]:
    if modality == "fundus":
        from medanon.phantoms import fundus as mod
    elif modality == "xray":
        from medanon.phantoms import xray as mod
    else:
        raise ValueError(f"unknown phantom modality {modality!r}")
    return mod.sample_patient, mod.render


def patient_id(index: int) -> str:
    return f"P{index + 1:05d}"


def recorded_settings(cfg: PhantomConfig) -> dict[str, Any]:
    """The generator settings ``phantom.json`` records (all but ``workers``, which changes no byte; ``both_eyes``
    only when used, so that a one-eye phantom's files stay those of earlier versions, whose digests are recorded)."""
    return {k: v for k, v in to_dict(cfg).items() if k != "workers" and (k != "both_eyes" or v)}


def _png_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def eyes_of(cfg: PhantomConfig, index: int, patient: Any) -> list[Any]:
    """The eyes (or the chest) photographed of patient ``index``: the first, and the other eye for a share
    ``cfg.both_eyes`` of fundus patients (:mod:`medanon.phantoms.fundus_fellow`)."""
    if cfg.modality != "fundus" or not cfg.both_eyes:
        return [patient]
    from medanon.phantoms.fundus_fellow import sample_fellow_eye

    rng = fellow_rng(cfg.seed, index)
    return [patient, sample_fellow_eye(rng, patient)] if rng.random() < cfg.both_eyes else [patient]


def _render_patient(job: tuple[PhantomConfig, int, str]) -> list[dict[str, Any]]:
    cfg, index, tmp = job
    sample_patient, render = _generator(cfg.modality)
    params = PhantomParams(grade_weights=tuple(cfg.grade_weights), pneumonia_rate=cfg.pneumonia_rate,
                           marker_rate=cfg.marker_rate, situs_inversus_rate=cfg.situs_inversus_rate)
    eyes = eyes_of(cfg, index, sample_patient(patient_rng(cfg.seed, index), params))
    rows = []
    pid = patient_id(index)
    shots = [(e, a) for e in range(len(eyes)) for a in range(cfg.per_patient)]
    for n, (e, a) in enumerate(shots):              # a second eye's acquisitions are numbered after the first's
        ph = render(eyes[e], acquisition_rng(cfg.seed, index, a, eye=e), cfg.size)
        name = f"{pid}_{n + 1:02d}.png"
        write_bytes(Path(tmp) / "images" / name, _png_bytes(ph.image))
        row: dict[str, Any] = {"image": f"images/{name}", "mask": "", "patient_id": pid, "acquisition": n + 1}
        if ph.mask is not None:
            write_bytes(Path(tmp) / "masks" / name, _png_bytes(ph.mask.astype(np.uint8) * 255))
            row["mask"] = f"masks/{name}"
        for col in LABEL_COLUMNS[cfg.modality]:
            v = float(ph.labels[col])
            row[col] = _NAMED[col][int(v)] if col in _NAMED else f"{v:g}"
        rows.append(row)
    return rows


def _worker_signals() -> None:
    """A rendering worker ends quietly when the pool is closed (SIGTERM, from ``Pool.terminate``) and leaves Ctrl-C
    to the parent: a forked worker would otherwise inherit the command line's SIGTERM handler and print a
    KeyboardInterrupt traceback at the end of every successful run."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def generate(cfg: PhantomConfig, out: str | Path, *, overwrite: bool = False, progress: bool = True) -> Path:
    """Render the phantom dataset described by ``cfg`` into ``out`` (atomically). Returns ``out``."""
    cfg.validate()
    out = Path(out)
    workers = cfg.workers or cpu_count()
    workers = max(1, min(workers, cfg.patients))
    with atomic_dir(out, overwrite=overwrite, marker="phantom") as tmp:
        (tmp / "images").mkdir()
        (tmp / "masks").mkdir()
        jobs = [(cfg, i, str(tmp)) for i in range(cfg.patients)]
        bar = tqdm(total=cfg.patients, desc=f"{cfg.modality} phantoms", unit="patient",
                   disable=not progress)
        results: list[list[dict[str, Any]]] = []
        if workers == 1:
            for job in jobs:
                results.append(_render_patient(job))
                bar.update(1)
        else:
            ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
            with ctx.Pool(workers, initializer=_worker_signals) as pool:
                for rows in pool.imap(_render_patient, jobs, chunksize=max(1, min(16, cfg.patients // (4 * workers)))):
                    results.append(rows)
                    bar.update(1)
        bar.close()
        rows = [r for rs in results for r in rs]
        two = sum(len(rs) > cfg.per_patient for rs in results)
        columns = ["image", "mask", "patient_id", "acquisition", *LABEL_COLUMNS[cfg.modality]]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        (tmp / "labels.csv").write_text(buf.getvalue(), encoding="utf-8")
        descriptor = {
            "format": "medanon-dataset", "version": 1, "modality": cfg.modality, "labels": "labels.csv",
            "image_col": "image", "patient_col": "patient_id", "mask_col": "mask",
            "label_cols": LABEL_COLUMNS[cfg.modality],
            "description": f"medanon {cfg.modality} phantom (synthetic, no real patient): "
                           f"{cfg.patients} patients x {cfg.per_patient} acquisitions"
                           + (f" of each eye photographed ({two} patients in both eyes)" if cfg.both_eyes else "")
                           + f", seed {cfg.seed}",
        }
        (tmp / "dataset.yaml").write_text(yaml.safe_dump(descriptor, sort_keys=False), encoding="utf-8")
        settings = recorded_settings(cfg)
        info = {"generator": f"medanon.phantoms.{cfg.modality}", "medanon_version": __version__,
                "settings": settings, "images": len(rows), "patients": cfg.patients, "phantom": True,
                **({"patients_both_eyes": two} if cfg.both_eyes else {})}
        (tmp / "phantom.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out
