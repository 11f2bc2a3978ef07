"""``medanon train gan``: train the StyleGAN2-ADA backbone of the latent methods (k-SALSA, GMIA)."""

from __future__ import annotations

from pathlib import Path

import click

from medanon.cli.base import CONTEXT, FiniteRange, train
from medanon.cli.data import data_dir_argument, data_options
from medanon.cli.splits import train_split_options
from medanon.cli.words import DATA_FLAGS, TRAIN_FLAGS, speaks_flags


@train.command("gan", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder (any layout `medanon data summary` reads; every image it holds, or that "
                        "--xray-views keeps, is used for training).")
@data_options
@train_split_options
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="StyleGANConfig YAML, e.g. configs/stylegan/cpu64.yaml (with --resume: the run's own).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Run folder.")
@click.option("--steps", type=click.IntRange(min=0), default=2000, help="Train until this many steps in total.")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its checkpoint.pt.")
@click.option("--retune", is_flag=True,
              help="With --resume: let --config/--set change training settings (learning rates, R1, EMA, ADA, "
                   "augmentations, loss, batch), and the data change the training images (said in a warning), from "
                   "the resumed step on; recorded in the checkpoint and manifest. The architecture, seed and "
                   "modality never change.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a config field, e.g. --set channels=1 (repeatable).")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=100, help="Steps between checkpoints.")
@click.option("--sample-every", type=click.IntRange(min=1), default=100, help="Steps between sample grids.")
@click.option("--minutes", type=FiniteRange(min=0), default=0.0,
              help="Stop (with a final checkpoint) after this much wall-clock time; 0 = no limit.")
@click.option("--threads", type=click.IntRange(min=0), default=0,
              help="CPU threads for torch; 0 = all cores. On a busy shared machine 1 is often fastest.")
@click.option("--export", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a small copy of the final model (EMA generator, discriminator, config) here."
                   " A resumed run replaces the export it wrote itself (never another file).")
@click.option("--accum", type=click.IntRange(min=1), default=1,
              help="Gradient accumulation: each rank computes its part of the batch as this many micro-batches.")
@click.pass_context
@speaks_flags({**TRAIN_FLAGS, **DATA_FLAGS, "channels=": "--set channels="})   # the config's channels read the data
def train_gan_cmd(ctx: click.Context, data_dir: Path, config_file: Path | None, out: Path, steps: int, resume: bool,
                  retune: bool, overrides: tuple[str, ...], checkpoint_every: int, sample_every: int, minutes: float,
                  threads: int, export: Path | None, accum: int, **data_opts) -> None:
    """Train StyleGAN2-ADA on the images in --data; images are loaded at the config's resolution and channels
    (--set resolution=, --set channels=; --size and --channels, where given, must agree with them).

    Writes checkpoint.pt, sample grids, metrics.jsonl, config.yaml and manifest.json to --out. Under
    torchrun (e.g. `torchrun --nproc_per_node 4 -m medanon train gan ...`) every process trains on its
    share of each batch (docs/distributed.md); the config's batch is the global batch.

    \b
    Example:
      medanon train gan --data phantom-fundus --config configs/stylegan/cpu64.yaml --out runs/gan --steps 3000 \\
            --minutes 60 --threads 1 --export gan.pt
    """
    import torch

    from medanon.cli.base import check_export_is_not_the_run, check_outputs
    from medanon.cli.splits import reduce_with_people
    from medanon.cli.train_encoder import check_resumed_inputs, open_for_generator, pop_split_args, recording_run_inputs
    from medanon.outputs import check_own_export, writing_export

    split_args = pop_split_args(data_opts)
    check_outputs((out, "dir", "--out", "run"), data_dir=data_dir, opts=data_opts, reads=[split_args[1]],
                  existing_ok=True)
    check_export_is_not_the_run(export, out)
    check_outputs((export, "file", "--export", "checkpoint:stylegan2"), data_dir=data_dir, opts=data_opts,
                  reads=[out / "checkpoint.pt", split_args[1]], existing_ok=resume, can_overwrite=False)
    if resume:
        check_own_export(out, export, name="--export")
    from medanon.train.loop import check_run_state

    check_run_state(out, resume=resume)          # a resume needs a run, a new run an empty place: before the data

    from medanon.config import build
    from medanon.models.stylegan import StyleGANConfig
    from medanon.runtime import cpu_count, resolve_device
    from medanon.train.distributed import init_distributed, shutdown, threads_per_rank
    from medanon.train.gan import export_checkpoint, train_stylegan

    if config_file is None and not resume:
        raise click.UsageError("--config is needed for a new run (e.g. --config configs/stylegan/cpu64.yaml)")
    if config_file is None:
        config_file = out / "config.yaml"           # --resume [--retune --set X=...]: the run's own, X changed
    cfg = build(StyleGANConfig, path=config_file, overrides=overrides)
    if data_opts.get("size") not in (None, cfg.resolution):          # the config says what the generator renders
        raise click.BadParameter(f"the config's generator renders {cfg.resolution} px images; to train one at "
                                 f"{data_opts['size']} px, pass --set resolution={data_opts['size']}",
                                 param_hint="--size")
    if data_opts.get("channels") not in (None, str(cfg.channels)):
        raise click.BadParameter(f"the config's generator renders {cfg.channels}-channel images; to train one on "
                                 f"{data_opts['channels']}-channel images, pass --set channels={data_opts['channels']}",
                                 param_hint="--channels")
    from medanon.locks import export_lock, main_rank_lock

    dist = init_distributed(resolve_device(ctx.obj["device"]))
    try:                                         # the lock before the data is read: a second run is refused at once
        with main_rank_lock(out, dist, name="--out"), export_lock(export, dist):  # (the run's folder takes it over;
            # another run exporting to the same path is refused now, not after training)
            if dist.device.type == "cpu":
                torch.set_num_threads(threads_per_rank(threads, cpu_count()))
            ds = open_for_generator(data_dir, cfg.resolution, cfg.channels, {**data_opts, "progress": dist.is_main},
                                    fix=f"channels={4 - cfg.channels} to train on these images as they are "
                                        f"(X-rays: channels=1), or --channels {cfg.channels} to convert them; for "
                                        "mixed grey and colour images, a folder of one kind")
            ds, people = reduce_with_people(ds, *split_args, {}, record=dist.is_main)
            if resume:                           # settings the run refuses are refused before the images decode
                if not retune:
                    check_resumed_inputs(out, ds, split_args)
                from medanon.checkpoint import load_checkpoint
                from medanon.train.gan_checkpoint import KIND, resume_changes

                resume_changes(cfg, load_checkpoint(out / "checkpoint.pt", kind=KIND), retune=retune)
            images, _ = ds.tensors()
            with recording_run_inputs(ds, None, split_args):
                path = train_stylegan(images, cfg, out, steps=steps, resume=resume, retune=retune,
                                      checkpoint_every=checkpoint_every,
                                      sample_every=sample_every, max_seconds=minutes * 60 if minutes else None,
                                      command="medanon train gan", dist=dist, accumulation=accum,
                                      modality=ds.modality, people=people)
            if dist.is_main:
                click.echo(f"wrote {path}")
                if export is not None:                  # checked again: another run may have exported there
                    with writing_export(out, export, name="--export"):
                        click.echo(f"exported {export_checkpoint(path, export)}")
    finally:
        shutdown(dist)
