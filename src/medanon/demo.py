"""``medanon demo``: the main job, on the embedded phantom datasets.

Today it generates the fundus and chest X-ray phantoms, checks them through the same loaders
real data use, splits them by patient and prints their summaries. The anonymisation methods
and their evaluation join this run as they land. Every number it prints is a PHANTOM result.

Re-running with the same settings reuses the phantom data already generated (resumable).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import click

from medanon.config import DataConfig, PhantomConfig, to_dict
from medanon.data.dataset import open_dataset
from medanon.data.splits import split_patients, write_splits_csv
from medanon.data.summary import format_summary, summarize
from medanon.fsutil import atomic_write_text
from medanon.phantoms.generate import generate
from medanon.runtime import RunDir, resolve_device, seed_everything

log = logging.getLogger(__name__)


@dataclass
class DemoConfig:
    patients: int = 200                         # phantom patients per modality
    per_patient: int = 4                        # acquisitions per patient
    size: int = 64                              # image side in pixels
    seed: int = 0                               # seeds phantoms, splits and every later step
    device: str = "auto"                        # resolved at run time


def _phantoms(cfg: PhantomConfig, out: Path) -> Path:
    """Generate phantom data unless ``out`` already holds the same settings (resume)."""
    info = out / "phantom.json"
    if info.exists():
        settings = json.loads(info.read_text())["settings"]
        wanted = {k: v for k, v in to_dict(cfg).items() if k != "workers"}
        if settings == wanted:
            log.info("reusing phantom data in %s", out)
            return out
        click.echo(f"{out} holds phantoms with other settings: regenerating")
    return generate(cfg, out, overwrite=True, progress=True)


def run_demo(out: str | Path, *, patients: int = 200, per_patient: int = 4, size: int = 64, seed: int = 0,
             device: str = "auto") -> dict:
    cfg = DemoConfig(patients=patients, per_patient=per_patient, size=size, seed=seed, device=device)
    out = Path(out)
    seed_everything(seed)
    dev = resolve_device(device)
    run = RunDir(out, config=cfg, command="demo", seeds={"phantoms": seed, "splits": seed})
    run.update(device=str(dev))
    click.echo(f"medanon demo -> {out}   (device {dev}; all results below are on PHANTOM data)")
    results = {}
    for modality in ("fundus", "xray"):
        t0 = time.perf_counter()
        pcfg = PhantomConfig(modality=modality, patients=patients, per_patient=per_patient, size=size, seed=seed)
        data_dir = _phantoms(pcfg, out / "data" / modality)
        gen_s = time.perf_counter() - t0
        ds = open_dataset(data_dir, DataConfig(size=size))
        run.record_input(f"{modality}_phantom", data_dir, files=[r.path for r in ds.records])
        stratify = "grade" if modality == "fundus" else "pneumonia"
        assignment = split_patients(ds.records, val=0.15, test=0.15, stratify=stratify, seed=seed)
        write_splits_csv(out / f"splits_{modality}.csv", ds.records, assignment)
        summary = summarize(ds)
        summary["split_patients"] = {s: sum(v == s for v in assignment.values()) for s in ("train", "val", "test")}
        results[modality] = summary
        run.log_metrics(step="phantoms", modality=modality, images=len(ds), patients=summary["patients"],
                        seconds=round(gen_s, 3))
        click.echo("")
        click.echo(f"== {modality} phantom ({gen_s:.1f} s) ==")
        click.echo(format_summary(summary))
        click.echo("split     " + ", ".join(f"{k} {v} patients" for k, v in summary["split_patients"].items()))
    atomic_write_text(out / "summary.json", json.dumps(results, indent=2) + "\n")
    run.finish()
    click.echo(f"\nwrote {out / 'summary.json'}, {out / 'manifest.json'}, splits_*.csv")
    return results
