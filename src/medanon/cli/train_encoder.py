"""``medanon train encoder`` (ReStyle, frozen generator) and ``medanon train autoencoder`` (GMIA co-training).

Both train on every image of ``--data``, or on one patient-level split of it (``--split train``, from a
``--splits`` file or recomputed as `medanon data split` and `medanon evaluate` do), write a run
directory with ``checkpoint.pt``, ``metrics.jsonl``, source | reconstruction sample grids and a
manifest, continue with ``--resume``, and with ``--export`` also write a small copy of the final
checkpoint (no optimizer state) that ``medanon.codecs.stylegan.load_codec`` loads.
"""

from __future__ import annotations

from pathlib import Path

import click

from medanon.cli.base import (
    CONTEXT,
    FiniteRange,
    _scanned_inputs,
    check_export_is_not_the_run,
    check_outputs,
    checkpoint_input,
    dataset_input,
    split_input,
    train,
)
from medanon.cli.data import data_dir_argument, data_options, open_from_cli
from medanon.cli.splits import train_split_options
from medanon.cli.words import TRAIN_FLAGS, speaks_flags

# the inversion trainers' parameters as this command's flags (library messages name parameters)
FLAGS = {**TRAIN_FLAGS, "generator=": "--generator "}


def loop_options(f):
    """Options shared by both commands: config, run directory, length, intervals, export, threads."""
    opts = [
        data_dir_argument(help="Dataset folder (every image is used for training)."),
        click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     default=None, help="YAML with the config fields, e.g. configs/encoder/cpu64.yaml "
                                        "(with --resume: the run's own config.yaml)."),
        click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a config field, e.g. --set batch=16 (repeatable)."),
        click.option("--out", type=click.Path(path_type=Path), required=True,
                     help="Run directory (checkpoint.pt, metrics.jsonl, samples/)."),
        click.option("--steps", type=click.IntRange(min=0), default=2000, help="Train until this many steps in total."),
        click.option("--minutes", type=FiniteRange(min=0), default=0.0,
                     help="Stop (with a final checkpoint) after this much wall-clock time; 0 = no limit."),
        click.option("--resume", is_flag=True, help="Continue the run in --out from its checkpoint."),
        click.option("--checkpoint-every", type=click.IntRange(min=1), default=500, help="Steps between checkpoints."),
        click.option("--sample-every", type=click.IntRange(min=1), default=500,
                     help="Steps between source | reconstruction grids."),
        click.option("--log-every", type=click.IntRange(min=1), default=10, help="Steps between metrics lines."),
        click.option("--accum", type=click.IntRange(min=1), default=1,
                     help="Gradient accumulation: each process computes its part of the batch as this many "
                          "micro-batches (docs/distributed.md)."),
        click.option("--export", "export_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="At the end, also write a small copy of the checkpoint (no optimizer state) here."
                          " A resumed run replaces the export it wrote itself (never another file)."),
        click.option("--export-float16", is_flag=True,
                     help="Store the --export copy's weights as float16 (half the size; loads as float32)."),
        click.option("--eval-data", "eval_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                     default=None, help="Held-out dataset folder (other patients): at the end, write PSNR, SSIM, "
                                        "IW-SSIM and feature distance of the reconstructions to OUT/heldout.json."),
        click.option("--threads", type=click.IntRange(min=0), default=0,
                     help="CPU threads for torch; 0 = all cores. On a busy shared machine 1 is often fastest."),
    ]
    for o in reversed(opts):
        f = o(f)
    return train_split_options(f)


def pop_split_args(data_opts: dict) -> tuple[str, Path | None, int | None]:
    """``--split``, ``--splits``, ``--split-seed`` taken out of the data options (checked before any work)."""
    from medanon.cli.splits import check_split_args

    args = data_opts.pop("split"), data_opts.pop("splits_csv"), data_opts.pop("split_seed")
    check_split_args(*args, training=True)
    return args


def _setup(ctx, *, threads: int, config_file: Path | None, overrides, resume: bool, out: Path, steps: int,
           minutes: float, checkpoint_every: int, sample_every: int, log_every: int):
    """Threads; the config file to read (on --resume without --config: the run's own); the training-loop
    keyword arguments (device included) both trainers take."""
    import torch

    from medanon.runtime import cpu_count, resolve_device
    from medanon.train.distributed import threads_per_rank

    device = resolve_device(ctx.obj["device"])
    if device.type == "cpu":
        torch.set_num_threads(threads_per_rank(threads, cpu_count()))   # under torchrun: the cores shared
    if config_file is None and resume and (out / "config.yaml").is_file():
        config_file = out / "config.yaml"             # the run's own settings, with any --set applied to them
    loop = {"steps": steps, "resume": resume, "device": device, "checkpoint_every": checkpoint_every,
            "sample_every": sample_every, "log_every": log_every, "max_seconds": minutes * 60 or None}
    return config_file, loop


def _images_for_generator(data_dir: Path, out: Path, resume: bool, kind: str, gan_ckpt: Path | None,
                          fallback, data_opts: dict, eval_dir: Path | None = None, split_args=("all", None, None),
                          *, main: bool = True):
    """Every image of ``data_dir`` at the resolution and channels of the run's generator: the resumed run's,
    else the ``--generator`` checkpoint's, else ``fallback``'s (a StyleGANConfig; None: --generator needed); and
    ``eval_dir`` opened and checked the same way (None without it), before any training; the dataset reduced to
    the split, and the record of its people (:func:`medanon.cli.splits.reduce_with_people`)."""
    from medanon.checkpoint import load_checkpoint
    from medanon.train.loop import CHECKPOINT

    trained = None
    if resume and (out / CHECKPOINT).exists():
        g = load_checkpoint(out / CHECKPOINT, kind=kind)["config"]["generator"]
    elif gan_ckpt is not None:          # a GAN, or (ReStyle) a co-trained codec whose generator it inverts
        from medanon.codecs.stylegan import trained_on
        from medanon.train.encoder import GENERATOR_KINDS, generator_config

        blob = load_checkpoint(gan_ckpt, kind=GENERATOR_KINDS)
        g = generator_config(blob)
        trained = (gan_ckpt, trained_on(blob, int(g["channels"]), int(g["resolution"])))
    elif fallback is not None:
        g = {"resolution": fallback.resolution, "channels": fallback.channels}
    else:
        raise click.UsageError("pass --generator CHECKPOINT.pt (a `medanon train gan` checkpoint), or --resume a run")
    size, channels = int(g["resolution"]), int(g["channels"])
    from medanon.cli.splits import reduce_with_people

    ds, people = reduce_with_people(open_for_generator(data_dir, size, channels, data_opts, trained), *split_args,
                                    FLAGS, record=main)
    if resume:
        check_resumed_inputs(out, ds, split_args)
    held_out = open_for_generator(eval_dir, size, channels, data_opts, trained, flag="--eval-data") \
        if eval_dir is not None else None                  # its problems named now, not after the training
    images = ds.tensors()[0]
    if held_out is not None:
        _refuse_training_images(held_out, ds)
    return images, held_out, ds, people


def _refuse_training_images(held_out, ds) -> None:
    """``--eval-data`` must hold no training image (a copy of the folder, a re-encoded one) and no training patient
    (another split of the same folder, a phantom of the same people): its numbers would not be held-out ones."""
    from medanon.data.overlap import images_in_common, same_people

    n, people = images_in_common(held_out, ds), same_people(held_out, ds)
    if n or people:
        what = "; ".join(x for x in (f"{n} of its {len(held_out.records)} images are training images" if n else "",
                                     f"{people} of its patients are training patients" if people else "") if x)
        raise click.BadParameter(f"{what} (the same files, pixels or re-encoded copies; the same people): its "
                                 "numbers would not be held-out ones; pass a folder of patients the run does not "
                                 "train on",
                                 param_hint="--eval-data")


def open_for_generator(data_dir: Path, resolution: int, channels: int, data_opts: dict, trained=None, *,
                       flag: str = "DATA", fix: str | None = None):
    """``data_dir`` opened (headers read) at the generator's resolution and channel count; ``trained``:
    ``(checkpoint, what it was trained on)``, refused when the data are of another modality. Images whose files
    hold another channel count than the generator's are refused unless --channels asks for the conversion
    (``fix``: what the refusal advises instead of the conversion)."""
    if data_opts.get("size") not in (None, resolution):
        raise click.BadParameter(f"the generator renders {resolution} px images; --size {data_opts['size']} "
                                 "cannot be inverted by it", param_hint="--size")
    if data_opts.get("channels") not in (None, str(channels)):
        raise click.BadParameter(f"the generator renders {channels}-channel images", param_hint="--channels")
    converting = data_opts.get("channels") is not None
    data_opts = {**data_opts, "size": resolution, "channels": str(channels)}
    ds = open_from_cli(data_dir, **data_opts)
    if trained is not None:
        from medanon.codecs.stylegan import check_model_fits

        check_model_fits(*trained, ds)
    if not converting:
        from medanon.data.channels import check_file_channels

        check_file_channels(ds, channels, model=f"the generator ({channels}-channel)",
                            fix=fix or f"{flag} {data_dir}: pass images of the generator's kind, or --channels "
                                       f"{channels} to convert them")
    return ds


def check_resumed_inputs(out: Path, ds, split_args) -> None:
    """A resumed run reads its data as its start recorded (``manifest.json``'s ``inputs``: the split, how the images
    are read, how many): refused before any image is decoded, naming what changed (its checkpoint would refuse
    the other pixels later, saying only that they differ). Runs that recorded no inputs are not compared."""
    import json

    from medanon.config import differences
    from medanon.errors import ConfigError

    try:
        was = json.loads((Path(out) / "manifest.json").read_text(encoding="utf-8")).get("inputs") or {}
    except (OSError, ValueError):
        return
    if "data" not in was:                         # a run from before runs recorded their inputs
        return
    fields = ("reading", "images")                # which pixels: the checkpoint's digest compares them later
    data_now = dataset_input(ds)

    def split_of(rec):                            # the splits file by content: its path may be spelled otherwise
        return {k: v for k, v in rec.items() if k != "splits_csv"} if rec else None

    before = {"split": split_of(was.get("split")), "data": {f: was["data"].get(f) for f in fields}}   # none: all
    after = {"split": split_of(split_input(*split_args)), "data": {f: data_now.get(f) for f in fields}}
    if before != after:
        raise ConfigError(f"the run in {out} trained on other data than this resume reads "
                          f"({differences(before, after)})",
                          fix="resume with the data options the run started with (its manifest.json's inputs: the "
                              "folder, --split and --splits or --split-seed, --xray-views, --crop), or start a new "
                              "run in another --out")


def recording_run_inputs(ds, held_out, split_args, **checkpoints):
    """The run's inputs for its manifest: the training data and its split, the held-out data, the checkpoints it
    starts from."""
    from medanon.runtime import recording_inputs

    return recording_inputs(data=dataset_input(ds), split=split_input(*split_args),
                            eval_data=dataset_input(held_out) if held_out is not None else None, **checkpoints)


def _finish(ckpt: Path, out: Path, export_path: Path | None, held_out, what: str, **export_opts) -> None:
    """Export, evaluate on held-out data (every ReStyle iteration count up to the trained one), report."""
    import json

    from medanon.codecs.stylegan import load_codec
    from medanon.fsutil import atomic_write_text
    from medanon.train.encoder import export_codec, reconstruction_report

    click.echo(f"{ckpt} holds the trained codec ({what}); load it with medanon.codecs.stylegan.load_codec")
    if export_path is not None:                  # checked again: another run may have exported there meanwhile
        from medanon.outputs import writing_export

        with writing_export(out, export_path, name="--export"):
            click.echo(f"exported {export_codec(ckpt, export_path, **export_opts)}")
    if held_out is None:
        return
    codec = load_codec(ckpt)
    images, _ = held_out.tensors()
    eval_dir = held_out.root
    trained = codec.iterations
    reports = []
    for n in range(1, trained + 1):
        codec.iterations = n
        reports.append(reconstruction_report(codec, images, baseline=n == trained))
    result = {"data": str(eval_dir), "checkpoint": str(ckpt), "phantom_results": _is_phantom(Path(eval_dir)),
              "reports": reports}
    atomic_write_text(out / "heldout.json", json.dumps(result, indent=2) + "\n")
    for r in reports:
        m = r["codec"]
        click.echo(f"held-out ({r['images']} images, {r['iterations']} iteration(s)): PSNR {m['psnr']['mean']:.2f} dB, "
                   f"SSIM {m['ssim']['mean']:.4f}, IW-SSIM {m['iw_ssim']['mean']:.4f}, "
                   f"{r['labels']['feature_distance']} {m['feature_distance']['mean']:.4f}")
    base = reports[-1]["mean_latent"]
    click.echo(f"mean latent G(w_avg) for comparison: PSNR {base['psnr']['mean']:.2f} dB, "
               f"SSIM {base['ssim']['mean']:.4f}; written to {out / 'heldout.json'}")


_COMMANDS = {"restyle-encoder": "medanon train encoder", "cotrained-autoencoder": "medanon train autoencoder"}


def _check_outputs(data_dir, out: Path, export_path: Path | None, resume: bool, data_opts: dict, *reads,
                   kind: str, eval_dir: Path | None = None) -> None:
    """The run folder (resumed: existing is fine if it is a medanon run) and the export (a checkpoint of ``kind``),
    before any work; nothing read."""
    # the held-out data is read like --data: its image folders (links and outside paths included) are inputs too
    reads = (*reads, eval_dir, *(_scanned_inputs(eval_dir, data_opts) if eval_dir is not None else ()))
    check_outputs((out, "dir", "--out", "run"), data_dir=data_dir, opts=data_opts, reads=reads, existing_ok=True)
    if resume:                                   # another command's run, before its config.yaml is read as ours
        from medanon.outputs import check_run_folder

        check_run_folder(out, _COMMANDS[kind], name="--out")
    _check_heldout(data_dir, eval_dir)
    check_export_is_not_the_run(export_path, out)
    check_outputs((export_path, "file", "--export", f"checkpoint:{kind}"), data_dir=data_dir, opts=data_opts,
                  reads=[*reads, out / "checkpoint.pt"], existing_ok=resume, can_overwrite=False)
    if resume:
        from medanon.outputs import check_own_export

        check_own_export(out, export_path, name="--export")
    from medanon.train.loop import check_run_state

    check_run_state(out, resume=resume)          # a resume needs a run, a new run an empty place: before the data


def _check_heldout(data_dir, eval_dir) -> None:
    """``--eval-data`` is held-out data of the training data's modality: the training folder itself, or X-rays for a
    fundus codec, would be reported as held-out reconstruction quality."""
    if eval_dir is None or data_dir is None:
        return
    if Path(eval_dir).resolve() == Path(data_dir).resolve():
        raise click.BadParameter("is the training data: its numbers would not be held-out ones",
                                 param_hint="--eval-data")
    from medanon.data.layouts import scan
    from medanon.errors import MedanonError

    try:
        ours, theirs = scan(Path(data_dir)).modality, scan(Path(eval_dir)).modality
    except MedanonError:
        return                                   # the data's own error comes when it is opened
    if ours and theirs and ours != theirs:
        raise click.BadParameter(f"holds {theirs} images, the training data {ours} images", param_hint="--eval-data")


def _is_phantom(folder: Path) -> bool:
    return (folder / "phantom.json").is_file()


@train.command("encoder", context_settings=CONTEXT)
@loop_options
@click.option("--generator", "generator_ckpt", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="StyleGAN2 checkpoint to invert (from `medanon train gan`); it stays frozen. "
                                 "Not needed with --resume.")
@data_options
@click.pass_context
@speaks_flags(FLAGS)
def train_encoder_cmd(ctx, data_dir, config_file, overrides, out, export_path, export_float16, eval_dir, generator_ckpt,
                      threads, steps, minutes, resume, checkpoint_every, sample_every, log_every, accum,
                      **data_opts) -> None:
    """Train a ReStyle iterative inversion encoder for a frozen StyleGAN2 generator (k-SALSA's encoder).

    The perceptual term is a feature distance on EfficientNet-Lite0 ImageNet features, not LPIPS. Under
    torchrun the batch is split across the processes (docs/distributed.md); rank 0 writes.

    \b
    Example:
      medanon train encoder --data phantom-fundus --generator checkpoints/stylegan2-fundus64.pt \\
            --config configs/encoder/cpu64.yaml --out runs/restyle --export restyle.pt
    """
    split_args = pop_split_args(data_opts)
    _check_outputs(data_dir, out, export_path, resume, data_opts, generator_ckpt, split_args[1],
                   kind="restyle-encoder", eval_dir=eval_dir)
    from medanon.codecs.stylegan import KIND_RESTYLE
    from medanon.config import build
    from medanon.locks import export_lock
    from medanon.train.distributed import init_distributed, shutdown
    from medanon.train.encoder import EncoderConfig, train_restyle

    config_file, loop = _setup(ctx, threads=threads, config_file=config_file, overrides=overrides, resume=resume,
                               out=out, steps=steps, minutes=minutes, checkpoint_every=checkpoint_every,
                               sample_every=sample_every, log_every=log_every)
    dist = init_distributed(loop["device"])
    try:
        with export_lock(export_path, dist):      # another run exporting there: refused now
            cfg = build(EncoderConfig, path=config_file, overrides=overrides)
            images, held_out, ds, people = _images_for_generator(data_dir, out, resume, KIND_RESTYLE, generator_ckpt,
                                                                 None, data_opts, eval_dir, split_args,
                                                                 main=dist.is_main)
            with recording_run_inputs(ds, held_out, split_args, generator=checkpoint_input(generator_ckpt)):
                ckpt = train_restyle(images, generator_ckpt, cfg, out, **loop, command="medanon train encoder",
                                     dist=dist, accumulation=accum, modality=ds.modality, people=people)
            if dist.is_main:
                _finish(ckpt, out, export_path, held_out, f"ReStyle encoder, {cfg.iterations} iterations",
                        float16=export_float16)
    finally:
        shutdown(dist)


@train.command("autoencoder", context_settings=CONTEXT)
@loop_options
@click.option("--generator", "init_ckpt", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Start G and D from this StyleGAN2 checkpoint, or E and G from this co-trained "
                                 "codec (saves CPU time); without it they start from random weights with the "
                                 "config's `generator` architecture.")
@click.option("--export-discriminator", is_flag=True,
              help="Keep the discriminator in the --export copy, so that a new run started from it with --generator "
                   "continues E, G and D (a resumable state a few MB big; optimizer moments start fresh).")
@data_options
@click.pass_context
@speaks_flags(FLAGS)
def train_autoencoder_cmd(ctx, data_dir, config_file, overrides, out, export_path, export_float16, eval_dir, init_ckpt,
                          export_discriminator, threads, steps, minutes, resume, checkpoint_every, sample_every,
                          log_every, accum, **data_opts) -> None:
    """Co-train an encoder and a StyleGAN2 generator as an autoencoder-GAN (GMIA's projection).

    Losses: pixel, EfficientNet-Lite0 feature distance (not LPIPS) and adversarial for E and G, then
    the discriminator step. Under torchrun the batch is split across the processes (docs/distributed.md).

    \b
    Example:
      medanon train autoencoder --data phantom-fundus --generator checkpoints/stylegan2-fundus64.pt \\
            --config configs/autoencoder/cpu64.yaml --out runs/cotrained --export cotrained.pt
    """
    split_args = pop_split_args(data_opts)
    _check_outputs(data_dir, out, export_path, resume, data_opts, init_ckpt, split_args[1],
                   kind="cotrained-autoencoder", eval_dir=eval_dir)
    from medanon.codecs.stylegan import KIND_COTRAINED
    from medanon.config import build
    from medanon.locks import export_lock
    from medanon.train.autoencoder import AutoencoderConfig, train_autoencoder
    from medanon.train.distributed import init_distributed, shutdown

    config_file, loop = _setup(ctx, threads=threads, config_file=config_file, overrides=overrides, resume=resume,
                               out=out, steps=steps, minutes=minutes, checkpoint_every=checkpoint_every,
                               sample_every=sample_every, log_every=log_every)
    dist = init_distributed(loop["device"])
    try:
        with export_lock(export_path, dist):      # another run exporting there: refused now
            cfg = build(AutoencoderConfig, path=config_file, overrides=overrides)
            images, held_out, ds, people = _images_for_generator(data_dir, out, resume, KIND_COTRAINED, init_ckpt,
                                                                 cfg.generator, data_opts, eval_dir, split_args,
                                                                 main=dist.is_main)
            with recording_run_inputs(ds, held_out, split_args, generator=checkpoint_input(init_ckpt)):
                ckpt = train_autoencoder(images, cfg, out, init_ckpt=init_ckpt, **loop,
                                         command="medanon train autoencoder", dist=dist, accumulation=accum,
                                         modality=ds.modality, people=people)
            if dist.is_main:
                _finish(ckpt, out, export_path, held_out, "co-trained encoder + generator",
                        float16=export_float16, discriminator=export_discriminator)
    finally:
        shutdown(dist)
