"""``medanon train flow``: train a GLOW flow (DP-GLOW's codec, or one of the two flows of the
likelihood-ratio pathology classifier) on a dataset's patient-level training split."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from medanon.cli.base import CONTEXT, FiniteRange, train
from medanon.cli.data import data_dir_argument, data_options, open_from_cli
from medanon.cli.words import TRAIN_FLAGS, speaks_flags


def parse_where(items: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} must look like LABEL=NUMBER, e.g. pneumonia=0", param_hint="--where")
    return out


@train.command("flow", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder to train on.")
@data_options
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run directory (checkpoints, flow.pt).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="YAML with GlowConfig fields, e.g. configs/glow/cpu64.yaml.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a GlowConfig field, e.g. --set depth=16 (repeatable).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Optimisation steps.  [default: from config]")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Images per step.  [default: from config]")
@click.option("--seed", type=int, default=None, help="Seeds weights, batches and dequantisation.  [default: 0]")
@click.option("--where", multiple=True, metavar="LABEL=VALUE",
              help="Train only on images with this label value, e.g. --where pneumonia=0 for the normal-only flow "
                   "of the likelihood-ratio classifier (repeatable; applied after the patient split).")
@click.option("--subset", type=click.Choice(["train", "all"]), default="train",
              help="Train on the patient-level training split (val gives bits/dim, test is left for evaluation) "
                   "or on every image.")
@click.option("--val", "val_frac", type=FiniteRange(0, 0.9), default=0.15, help="Fraction of patients in val.")
@click.option("--test", "test_frac", type=FiniteRange(0, 0.9), default=0.15, help="Fraction of patients in test.")
@click.option("--split-seed", type=int, default=0, help="Seed of the patient split (the same as other commands').")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint.")
@click.option("--threads", type=click.IntRange(min=0), default=0,
              help="CPU threads for torch (0 = torch's default; under torchrun the cores shared among the ranks).")
@click.option("--accum", type=click.IntRange(min=1), default=1,
              help="Gradient accumulation: each rank computes its part of the batch as this many micro-batches.")
@click.pass_context
@speaks_flags({**TRAIN_FLAGS, "batch=": "--batch "})
def train_flow_cmd(ctx, data_dir, out, config_file, overrides, steps, batch, seed, where, subset, val_frac, test_frac,
                   split_seed, resume, threads, accum, **data_opts) -> None:
    """Train a GLOW flow on the images in DATA_DIR (maximum likelihood, bits/dim).

    Under torchrun (`torchrun --nproc_per_node 4 -m medanon train flow ...`) every process trains on its
    share of each batch (docs/distributed.md); --batch is the global batch.

    \b
    Example:
      medanon train flow --data phantom-xray --config configs/glow/cpu64.yaml --out runs/glow-xray
    """
    from medanon.cli.base import check_outputs
    from medanon.runtime import resolve_device

    check_outputs((out, "dir", "--out", "run"), data_dir=data_dir, opts=data_opts, existing_ok=True)
    from medanon.train.loop import check_run_state

    check_run_state(out, resume=resume)          # a resume needs a run, a new run an empty place: before the data
    from medanon.train.distributed import init_distributed, shutdown

    dist = init_distributed(resolve_device(ctx.obj["device"]))
    try:
        _train_flow(dist, data_dir, out, config_file, overrides, steps, batch, seed, where, subset, val_frac, test_frac,
                    split_seed, resume, threads, accum, data_opts)
    finally:
        shutdown(dist)


def _train_flow(dist, data_dir, out, config_file, overrides, steps, batch, seed, where, subset, val_frac, test_frac,
                split_seed, resume, threads, accum, data_opts) -> None:
    import torch

    from medanon.cli.base import dataset_input
    from medanon.config import build, load_yaml
    from medanon.data.records import records_digest
    from medanon.data.splits import split_records
    from medanon.data.training_people import patients_digest
    from medanon.errors import ConfigError
    from medanon.models.glow import GlowConfig
    from medanon.phantoms.provenance import phantom_settings
    from medanon.runtime import cpu_count, files_digest, recording_inputs
    from medanon.train.distributed import threads_per_rank
    from medanon.train.flow import train_flow
    from medanon.train.loop import to_uint8_images, training_images_digest

    if threads or dist.enabled:
        torch.set_num_threads(threads_per_rank(threads, cpu_count()))
    filters = parse_where(where)
    if config_file is None and resume and (out / "config.yaml").is_file():
        config_file = out / "config.yaml"             # the run's own settings (not the defaults), --set applied
    cfg = build(GlowConfig, path=config_file, overrides=overrides, steps=steps, batch=batch, seed=seed,
                resolution=data_opts.get("size"))
    data_opts["size"] = cfg.resolution
    ds = open_from_cli(data_dir, **data_opts)
    if resume and (out / "checkpoint.pt").is_file():   # another config is refused before the images decode
        from medanon.checkpoint import load_checkpoint
        from medanon.train.flow import KIND_TRAINING, check_same_config

        check_same_config(load_checkpoint(out / "checkpoint.pt", kind=KIND_TRAINING),
                          dataclasses.replace(cfg, channels=ds.channels), out / "checkpoint.pt")
    given = {o.split("=", 1)[0].strip() for o in overrides or ()} | \
        (set(load_yaml(config_file)) if config_file is not None else set())
    if "channels" in given and cfg.channels != ds.channels:      # the flow takes the data's channel count
        raise ConfigError(f"the config's channels ({cfg.channels}) differ from the {ds.channels} channel(s) the data "
                          "are read with", fix="leave channels out of --set and --config: the flow takes the data's "
                                               "channel count (read the data with --channels to choose it)")
    cfg = dataclasses.replace(cfg, channels=ds.channels)
    cfg.validate()
    stratify = {"xray": "pneumonia", "fundus": "grade"}.get(ds.modality or "", "")
    if subset == "train":
        parts = split_records(ds.records, val=val_frac, test=test_frac, stratify=stratify, seed=split_seed)
    else:
        parts = {"train": list(ds.records), "val": [], "test": []}

    def keep(recs):
        bad = [n for n in filters if n not in ds.label_names]
        if bad:
            raise ConfigError(f"--where names unknown label(s) {bad}", fix=f"use one of {ds.label_names}")
        return [r for r in recs if all(r.labels.get(n) == v for n, v in filters.items())]

    train_recs, val_recs = keep(parts["train"]), keep(parts["val"])
    if not train_recs:                                     # before any image is decoded
        matching = len(keep(ds.records))
        raise ConfigError(f"no training images are left after the split and --where filter: {matching} of the "
                          f"{len(ds.records)} images match {filters or 'no filter'}, {len(parts['train'])} are in the "
                          f"{subset} subset", fix="choose another --where value, or --subset all to use every image")
    index = {r.record_id: i for i, r in enumerate(ds.records)}
    images, _ = ds.tensors()
    sel = lambda recs: images[[index[r.record_id] for r in recs]] if recs else None  # noqa: E731
    data = {"source": files_digest([r.path for r in ds.records], root=data_dir), "modality": ds.modality,
            "where": filters, "subset": subset, "split": {"val": val_frac, "test": test_frac, "seed": split_seed,
                                                          "stratify": stratify},
            "train_images": len(train_recs), "val_images": len(val_recs),
            # which records the split and --where chose, by id, patient and labels: an edited labels.csv can
            # change the selection without changing its counts
            "records": {"train": records_digest(train_recs), "val": records_digest(val_recs)},
            # the training patients' digest (never ids): an evaluation tells whether the flow saw its controls
            "patients_digest": patients_digest([r.patient_id for r in train_recs]),
            # the pixels as read: the same files under another --crop, --size or reader are other training images
            "crop": ds.crop, "train_pixels": training_images_digest(to_uint8_images(sel(train_recs))),
            # a phantom's people are fixed by its seed: a release of another phantom can tell it holds them
            **({"phantom": phantom} if (phantom := phantom_settings(data_dir)) else {})}
    with recording_inputs(data=dataset_input(ds)):
        res = train_flow(cfg, sel(train_recs), val_images=sel(val_recs), out=out, resume=resume, data=data, dist=dist,
                         accumulation=accum)
    if not dist.is_main:
        return
    val = "n/a" if res.val_bpd is None else f"{res.val_bpd:.3f}"
    click.echo(f"wrote {res.path}: {res.steps} steps, {res.train_bpd:.3f} bits/dim on {len(train_recs)} training "
               f"images, {val} on {len(val_recs)} validation images")
