"""``medanon train identity`` and ``medanon train classifier``: the evaluation's networks, on their own."""

from __future__ import annotations

from pathlib import Path

import click

from medanon.cli.base import CONTEXT, FiniteRange, check_outputs, to_json, train
from medanon.cli.data import data_dir_argument, data_options, open_from_cli
from medanon.cli.words import TRAIN_FLAGS, speaks_flags
from medanon.errors import ConfigError
from medanon.locks import main_rank_lock

FLAGS = {**TRAIN_FLAGS, "phantoms: per_patient=2+": "phantoms: medanon phantom --per-patient 2+",
         "resume=False": "--fresh"}


def _trained_on(ds, data_dir: Path, rows, split: str, splits: Path | None, seed: int | None,
                stratify: str | None) -> dict:
    """What a network was trained on, for its checkpoint (:func:`medanon.data.training_people.training_people`:
    the folder's digest, the split and how it was made, digests, never ids, of the images and patients chosen)."""
    from medanon.data.training_people import training_people

    return training_people(ds, [ds.records[int(i)] for i in rows], split=split, splits=splits, seed=seed,
                           stratify=stratify if stratify is not None else "auto")


def _refuse_replacing(out: Path, fresh: bool, overwrite: bool) -> None:
    """``--fresh`` without ``--overwrite`` never replaces a finished network at ``--out`` (another run's result)."""
    if fresh and Path(out).is_file() and not overwrite:
        raise ConfigError(f"--out {out} holds a finished identity network, and --fresh would replace it",
                          fix="pass --overwrite to replace it, or write the new network to another --out")


def _split_rows(ds, splits: Path | None, split: str, seed: int | None, stratify: str | None):
    """The rows of ``split``: from the splits CSV, else recomputed as `medanon data split` does (stratified by the
    modality's utility label unless ``stratify`` names another label or is ''; seed 0 unless given)."""
    import numpy as np

    from medanon.data.splits import split_patients
    from medanon.evaluate.inputs import _read_splits_csv
    from medanon.release.labels import default_labels

    if splits is not None:
        for flag, value in (("--stratify", stratify), ("--split-seed", seed)):
            if value is not None:
                raise click.BadParameter("the split comes from --splits; it would change nothing", param_hint=flag)
    if stratify not in (None, "auto", "") and stratify not in ds.label_names:
        raise click.BadParameter(f"{stratify!r} is not a label of the data (labels: {', '.join(ds.label_names)})",
                                 param_hint="--stratify")
    if split == "all":
        return np.arange(len(ds.records))
    if splits is not None:
        names = _read_splits_csv(splits, ds.records)
    else:
        if stratify in (None, "auto"):
            stratify = (default_labels(ds) or [""])[0]
        a = split_patients(ds.records, stratify=stratify, seed=seed or 0)
        names = np.array([a[r.patient_id] for r in ds.records])
    rows = np.flatnonzero(names == split)
    if len(rows) == 0:
        raise click.UsageError(f"the {split!r} split is empty")
    return rows


def _split_options(f):
    opts = [
        click.option("--split", type=click.Choice(["train", "val", "test", "all"]), default="train",
                     help="Which patients to train on."),
        click.option("--splits", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
                     help="Splits CSV (record_id, patient_id, split); else the split is recomputed from --split-seed."),
        click.option("--split-seed", type=int, default=None, help="Seed of the recomputed split.  [default: 0]"),
        click.option("--stratify", default=None,
                     help="Label the recomputed split is stratified by ('' for none).  [default: the modality's "
                          "utility label, as `medanon data split`]"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@train.command("identity", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder to train on.")
@data_options
@_split_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Checkpoint to write (kind 'identity'); an interrupted run with the same settings resumes.")
@click.option("--steps", type=click.IntRange(min=1), default=1500, help="Optimiser steps.")
@click.option("--arch", type=click.Choice(["small", "resnet10", "resnet18"]), default="small", help="Backbone.")
@click.option("--embed-dim", type=click.IntRange(min=2), default=128, help="Embedding size.")
@click.option("--image-size", type=click.IntRange(8, 1024), default=None, help="Training side (default: --size).")
@click.option("--margin", type=FiniteRange(0, 1.5), default=0.3, help="ArcFace angular margin (radians).")
@click.option("--seed", type=int, default=0, help="Weights, batches, augmentation.")
@click.option("--fresh", is_flag=True, help="Start over instead of resuming an interrupted run at --out; a finished "
              "network there is replaced (with --overwrite) only when the new one is finished.")
@click.option("--overwrite", is_flag=True, help="With --fresh: replace a finished identity network at --out.")
@click.pass_context
@speaks_flags(FLAGS)
def train_identity_cmd(ctx: click.Context, data_dir, split, splits, split_seed, stratify, out, steps, arch, embed_dim,
                       image_size, margin, seed, fresh, overwrite, **opts) -> None:
    """Train the identity network (ArcFace on patient ids) on the repeated acquisitions of DATA_DIR's patients,
    then report verification AUC and rank-1 identification on the held-out test split. On fundus data whose
    laterality label shows patients photographed in both eyes, each eye photographed repeatedly, it learns eyes
    instead (a person's two retinas differ) and verifies by eye; `identity_unit` in its output and checkpoint says
    which.

    \b
    Example:
      medanon train identity --data phantom-fundus --out identity.pt --steps 1500
    """
    import numpy as np

    check_outputs((out, "file", "--out", "checkpoint:identity"), data_dir=data_dir, opts=opts, reads=[splits],
                  existing_ok=True)
    if overwrite and not fresh:
        raise click.UsageError("--overwrite only goes with --fresh: without it a finished network at --out is "
                               "continued or refused, never replaced")
    _refuse_replacing(out, fresh, overwrite)

    from medanon.evaluate.metrics import roc_auc
    from medanon.phantoms.provenance import trained_on_phantom
    from medanon.runtime import resolve_device
    from medanon.train.distributed import init_distributed, shutdown
    from medanon.train.identity import (
        IdentityTrainConfig,
        check_resumable,
        eye_ids,
        identity_units,
        train_identity,
        verification_ids,
    )

    dist = init_distributed(resolve_device(ctx.obj["device"]))   # under torchrun: data-parallel, rank 0 writes
    try:
        with main_rank_lock(out, dist, name="--out"):                 # one run writes --out at a time
            _refuse_replacing(out, fresh, overwrite)             # again: another run may have finished it meanwhile
            ds = open_from_cli(data_dir, **opts)
            cfg = IdentityTrainConfig(arch=arch, embed_dim=embed_dim, image_size=image_size or ds.size, steps=steps,
                                      margin=margin, seed=seed)
            check_resumable(out, cfg, ds.channels, resume=not fresh)   # before any image is decoded
            rows = _split_rows(ds, splits, split, split_seed, stratify)
            images, _ = ds.tensors()
            patients = np.array([r.patient_id for r in ds.records])
            # --fresh: nothing held at --out is read; the network there is replaced only when the new one is finished
            seen = trained_on_phantom(data_dir, patients[rows])    # a phantom's people, for evaluate's check
            sides = ds.label_array("laterality")[rows] if ds.modality == "fundus" and "laterality" in ds.label_names \
                else None
            units, unit = identity_units(patients[rows], sides)   # a fundus patient's eyes where they repeat
            net = train_identity(images[rows], units, cfg=cfg, out=out, resume=not fresh, progress=True,
                                 dist=dist, extra={"data": _trained_on(ds, data_dir, rows, split, splits, split_seed,
                                                                       stratify),
                                                   "identity_unit": unit, **({"phantom": seen} if seen else {})})
            if not dist.is_main:
                return
            result = {"checkpoint": str(out), "trained_on": f"{split} split, {len(rows)} images",
                      "identity_unit": unit}
            if split not in ("all", "test"):         # trained on the test split: no held-out score exists
                test = _split_rows(ds, splits, "test", split_seed, stratify)
                e = net.embed(images[test]).double().numpy()
                p = patients[test]                       # verified as it was trained: eyes or patients
                if unit == "eye":
                    p, fell = verification_ids(eye_ids(p, ds.label_array("laterality")[test]), p)
                    if fell and len(np.unique(p)) < len(p):
                        result["test_verified_on"] = ("patients: no eye is photographed twice in the test split, so "
                                                      "its pairs are a patient's two eyes, which this network learned "
                                                      "to tell apart")
                sim = e @ e.T
                iu = np.triu_indices(len(p), 1)
                result["test_verification_auc"] = roc_auc((p[:, None] == p[None, :])[iu], sim[iu])
                np.fill_diagonal(sim, -np.inf)
                result["test_rank1_identification"] = float((p[sim.argmax(1)] == p).mean())
            click.echo(to_json(result))
    finally:
        shutdown(dist)


@train.command("classifier", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder to train on.")
@data_options
@_split_options
@click.option("--label", required=True, help="Label to predict, e.g. grade, pneumonia, sex.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Checkpoint to write (kind 'classifier').")
@click.option("--steps", type=click.IntRange(min=1), default=300, help="Optimiser steps.")
@click.option("--arch", type=click.Choice(["small", "resnet10", "resnet18"]), default="small", help="Architecture.")
@click.option("--loss", type=click.Choice(["ce", "weighted", "focal"]), default="ce",
              help="Cross-entropy, class-weighted cross-entropy, or class-weighted focal loss.")
@click.option("--image-size", type=click.IntRange(8, 1024), default=None, help="Training side (default: --size).")
@click.option("--seed", type=int, default=0, help="Weights, batches, augmentation.")
@click.option("--overwrite", is_flag=True, help="Replace an existing classifier checkpoint at --out.")
@click.pass_context
@speaks_flags(FLAGS)
def train_classifier_cmd(ctx: click.Context, data_dir, split, splits, split_seed, stratify, label, out, steps, arch,
                         loss, image_size, seed, overwrite, **opts) -> None:
    """Train the small ResNet classifier on one label of DATA_DIR and report its held-out test metrics.

    Under torchrun (`torchrun --nproc_per_node N -m medanon train classifier ...`) the batch is split
    across the processes (docs/distributed.md); rank 0 writes and reports.

    \b
    Example:
      medanon train classifier --data phantom-fundus --label grade --out classifier-grade.pt
    """
    from medanon.runtime import resolve_device

    check_outputs((out, "file", "--out", "checkpoint:classifier"), data_dir=data_dir, opts=opts, reads=[splits],
                  overwrite=overwrite)      # it always trains afresh: a finished classifier is replaced only so
    from medanon.train.distributed import init_distributed, shutdown

    dist = init_distributed(resolve_device(ctx.obj["device"]))
    try:
        with main_rank_lock(out, dist, name="--out"):                 # one run writes --out at a time
            from medanon.outputs import check_output

            # again, on every rank: another run may have written it meanwhile
            check_output(out, overwrite=overwrite, kind="file", name="--out", what="checkpoint:classifier")
            _train_classifier(dist, data_dir, split, splits, split_seed, stratify, label, out, steps, arch, loss,
                              image_size, seed, opts)
    finally:
        shutdown(dist)


def _train_classifier(dist, data_dir, split, splits, split_seed, stratify, label, out, steps, arch, loss, image_size,
                      seed, opts) -> None:
    import numpy as np

    from medanon.data.tensors import resize_to
    from medanon.evaluate.utility import KNOWN_TASKS, Task, score
    from medanon.models.classifier import predict_proba, save_classifier
    from medanon.phantoms.provenance import trained_on_phantom
    from medanon.train.classifier import ClassifierTrainConfig, train_classifier

    ds = open_from_cli(data_dir, **opts)
    if label not in ds.label_names:
        raise click.UsageError(f"--label {label!r} is not a label of {data_dir}; it has {ds.label_names}")
    from medanon.data.labels import LABELS

    if label in LABELS and LABELS[label].kind == "continuous":
        raise click.UsageError(f"--label {label!r} is a continuous label (every value would be a class of its own); "
                               "a classifier predicts classes: grade, sex, pneumonia, ...")
    values = ds.label_array(label)
    known = values[~np.isnan(values)]
    task = KNOWN_TASKS.get(label, Task(label, int(known.max()) + 1 if len(known) else 0, "multiclass"))
    if label == "sex":
        task = Task("sex", 2, "binary")
    rows = _split_rows(ds, splits, split, split_seed, stratify)
    ok, y = task.targets(values[rows])
    if len(y) < 2:                               # before any image is read
        raise click.UsageError(f"the {split!r} split of {data_dir} has {len(y)} image(s) with a {label} label; a "
                               "classifier needs at least two: use more patients, or --split all")
    images, _ = ds.tensors()
    cfg = ClassifierTrainConfig(arch=arch, steps=steps, loss=loss, image_size=image_size or ds.size, seed=seed)
    model = train_classifier(images[rows[ok]], y, num_classes=task.num_classes, cfg=cfg, progress=True, dist=dist)
    if not dist.is_main:
        return
    seen = trained_on_phantom(data_dir, np.array([r.patient_id for r in ds.records])[rows[ok]])
    save_classifier(out, model, step=cfg.steps,
                    extra={"label": label, "train_config": cfg.to_dict(),
                           "data": _trained_on(ds, data_dir, rows[ok], split, splits, split_seed, stratify),
                           **({"phantom": seen} if seen else {})})
    result = {"checkpoint": str(out), "label": label, "trained_on": f"{split} split, {int(ok.sum())} images"}
    if split not in ("all", "test"):             # trained on the test split: no held-out score exists
        test = _split_rows(ds, splits, "test", split_seed, stratify)
        tok, ty = task.targets(values[test])
        if tok.sum():
            probs = predict_proba(model, resize_to(images[test[tok]], cfg.image_size))
            result["test"] = score(task, ty, probs.numpy())
    click.echo(to_json(result))
