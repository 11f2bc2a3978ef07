"""``medanon generate``: sample a trained generator into PNGs and a sample grid."""

from __future__ import annotations

from pathlib import Path

import click

from medanon.cli.anonymize_ksame import MODEL
from medanon.cli.base import CONTEXT, FiniteRange, cli
from medanon.cli.words import speaks_flags

FLAGS = {"pass n=1 or more": "pass --n 1 or more", "n=": "--n ", "truncation=": "--truncation ",
         "overwrite=True": "--overwrite", "device=": "--device ",
         "noise=": "--noise "}


@cli.command("generate", context_settings=CONTEXT)
@click.option("--model", type=MODEL, required=True,
              help="A `medanon train gan` checkpoint (its EMA generator), or an inversion codec (its generator): "
                   "a file, or a model's name (`medanon models`).")
@click.option("--n", type=click.IntRange(min=1), default=64, help="Number of images.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="New folder: images/NNNNNN.png, grid.png (the first 64), manifest.json.")
@click.option("--truncation", type=FiniteRange(0, 1), default=1.0,
              help="psi: 1 = the model's full range; smaller pulls towards the average image.")
@click.option("--seed", type=int, default=0, help="Seeds the latents: same model, seed and psi give the same images.")
@click.option("--batch", type=click.IntRange(min=1), default=64, help="Images per forward pass.")
@click.option("--noise", type=click.Choice(["random", "const"]), default="random", show_default=True,
              help="Per-layer noise: fresh for every image (as FID is computed) or the generator's constant noise.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists (only a folder medanon wrote).")
@click.pass_context
@speaks_flags(FLAGS)
def generate_cmd(ctx: click.Context, model: Path, n: int, out: Path, truncation: float, seed: int, batch: int,
                 noise: str, overwrite: bool) -> None:
    """Sample N images from a trained generator: a first look at what it learned.

    \b
    Example:
      medanon generate --model checkpoints/stylegan2-fundus64.pt --n 64 --out samples --truncation 0.7
    """
    from medanon.cli.base import check_outputs
    from medanon.runtime import resolve_device
    from medanon.sampling import generate_samples

    check_outputs((out, "dir", "--out", "samples"), reads=(model,), overwrite=overwrite)   # in the command's words
    man = generate_samples(model, n, out, seed=seed, truncation=truncation, overwrite=overwrite,
                           device=resolve_device(ctx.obj["device"]), batch=batch, noise=noise)
    click.echo(f"wrote {n} samples ({man['channels']}x{man['resolution']}px, psi={truncation:g}, seed {seed}) "
               f"to {out / 'images'} and the grid {out / 'grid.png'}")
