"""``medanon phantom``: generate a phantom dataset."""

from __future__ import annotations

import json
from pathlib import Path

import click

from medanon.cli.base import CONTEXT, cli
from medanon.cli.words import speaks_flags
from medanon.config import PhantomConfig, build


@cli.command(context_settings=CONTEXT)
@click.option("--modality", type=click.Choice(["fundus", "xray"]), default=None,
              help="Fundus photographs (RGB) or chest X-rays (grayscale).  [default: fundus]")
@click.option("--patients", type=click.IntRange(min=1), default=None, help="Number of patients.  [default: 200]")
@click.option("--per-patient", type=click.IntRange(min=1), default=None,
              help="Acquisitions per patient (per eye photographed, with --both-eyes).  [default: 4]")
@click.option("--size", type=click.IntRange(16, 1024), default=None, help="Image side in pixels.  [default: 64]")
@click.option("--seed", type=int, default=None, help="Random seed; same seed, same bytes.  [default: 0]")
@click.option("--both-eyes", type=click.FloatRange(0, 1), default=None, metavar="SHARE",
              help="Fundus: the chance that a patient is photographed in both eyes (drawn per patient), the other "
                   "eye's acquisitions numbered after the first's (EyePACS: 1).  [default: 0]")
@click.option("--workers", type=click.IntRange(min=0), default=None, help="Processes (0 = all cores).")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Output folder (must not exist).")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="YAML file with PhantomConfig fields.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a config field, e.g. --set marker_rate=0.1 (repeatable).")
@speaks_flags({"patients and per_patient": "--patients and --per-patient", "size=": "--size ",
               "overwrite=True": "--overwrite", "both_eyes=": "--both-eyes ",
               "leave both_eyes at 0 for modality='xray'": "leave --both-eyes at 0 for --modality xray"})
def phantom(modality, patients, per_patient, size, seed, both_eyes, workers, out, overwrite, config_file,
            overrides) -> None:
    """Generate a phantom dataset (synthetic patients with ground truth) in medanon's layout.

    \b
    Example:
      medanon phantom --modality xray --patients 200 --per-patient 4 --size 64 --out phantom-xray
    """
    from medanon.cli.base import check_outputs
    from medanon.phantoms.generate import generate

    check_outputs((out, "dir", "--out"), overwrite=overwrite)      # in the command's words, before any work
    cfg = build(PhantomConfig, path=config_file, overrides=overrides, modality=modality, patients=patients,
                per_patient=per_patient, size=size, seed=seed, both_eyes=both_eyes, workers=workers)
    generate(cfg, out, overwrite=overwrite, progress=True)
    info = json.loads((out / "phantom.json").read_text(encoding="utf-8"))
    two = f" ({info['patients_both_eyes']} in both eyes)" if "patients_both_eyes" in info else ""
    click.echo(f"wrote {info['images']} {cfg.modality} phantom images of {cfg.patients} patients{two} to {out}")


