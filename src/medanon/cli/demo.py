"""``medanon demo``: the main job on the embedded phantom datasets."""

from __future__ import annotations

from pathlib import Path

import click

from medanon.cli.base import CONTEXT, cli
from medanon.cli.words import speaks_flags


@cli.command(context_settings=CONTEXT)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("demo-output"),
              help="Run directory for everything the demo writes.")
@click.option("--patients", type=click.IntRange(min=20), default=200,
              help="Phantom patients per modality: at least 20, and 30 for the evaluation.")
@click.option("--per-patient", type=click.IntRange(min=1), default=4, help="Acquisitions per patient.")
@click.option("--size", type=click.IntRange(64, 64), default=64,
              help="Image side in pixels: 64, the size of the shipped checkpoints (other sizes need models trained "
                   "at that size with `medanon train`).")
@click.option("--seed", type=int, default=0, help="Random seed for everything the demo does.")
@click.option("--ksalsa-steps", type=click.IntRange(min=0), default=100, help="Adam steps per k-SALSA cluster.")
@click.option("--gmia-steps", type=click.IntRange(min=0), default=None,
              help="Adam steps per GMIA batch.  [default: medanon anonymize gmia's default]")
@click.option("--checkpoints", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Folder with the shipped checkpoints (default: checkpoints/ of this source checkout).")
@click.option("--skip-evaluation", is_flag=True, help="Only anonymise and audit (a quick check).")
@click.option("--no-inception", is_flag=True,
              help="Evaluate without FID/KID on Inception-v3 (for a machine without medanon[features]).")
@click.pass_context
@speaks_flags({"size=": "--size ", "checkpoints= DIR": "--checkpoints DIR", "patients=": "--patients "})
def demo(ctx: click.Context, out: Path, patients: int, per_patient: int, size: int, seed: int, ksalsa_steps: int,
         gmia_steps: int | None, checkpoints: Path | None, skip_evaluation: bool, no_inception: bool) -> None:
    """The main job on the embedded phantom datasets: anonymise, audit, evaluate, report (PHANTOM results).

    \b
    Example:
      medanon demo --out demo-output
    """
    from medanon.demo import run_demo

    run_demo(out, patients=patients, per_patient=per_patient, size=size, seed=seed, device=ctx.obj["device"],
             ksalsa_steps=ksalsa_steps, gmia_steps=gmia_steps, checkpoints=checkpoints, evaluation=not skip_evaluation,
             inception=not no_inception)


