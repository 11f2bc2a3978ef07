"""``medanon train segmenter``: train the vessel segmenter VS-Snow uses."""

from __future__ import annotations

import json
from pathlib import Path

import click

from medanon.cli.base import CONTEXT, FiniteRange, check_export_is_not_the_run, check_outputs, train
from medanon.cli.data import data_dir_argument, data_options, open_from_cli
from medanon.cli.words import TRAIN_FLAGS, speaks_flags
from medanon.fsutil import atomic_write_bytes

# data options a --vessel-images/--vessel-masks pair cannot honour: (option key, flag, the values it may have)
FOLDER_PAIR_IGNORES = (("layout", "--layout", ("auto",)), ("labels_csv", "--labels", ()),
                       ("image_col", "--image-col", ()), ("label_cols", "--label-cols", ()),
                       ("patient_col", "--patient-col", ()), ("images_dir", "--images", ()),
                       ("allow_outside", "--allow-outside", (False,)), ("skip_bad", "--skip-bad", (False,)),
                       ("channels", "--channels", ("0", "3")), ("modality", "--modality", ("auto", "fundus")))


FLAGS = {**TRAIN_FLAGS, "larger val and test fractions": "larger --val and --test fractions",
         "(data_from_folders(images_dir, masks_dir))": "(--vessel-images DIR --vessel-masks DIR)",
         "epochs=": "--epochs ", "vessels='frangi'": "`anonymize vs-snow --vessels frangi`"}


@train.command("segmenter", context_settings=CONTEXT)
@data_dir_argument(required=False, help="Dataset folder with vessel masks (phantoms).")
@data_options
@click.option("--vessel-images", "images_pair", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="DRIVE-style training instead of DATA_DIR: folder of fundus images ...")
@click.option("--vessel-masks", "masks_pair", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="... and folder of their manual vessel masks (same stem or DRIVE id).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Run folder.")
@click.option("--epochs", type=click.IntRange(min=1), default=25, show_default=True)
@click.option("--batch", "--batch-size", "batch_size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Patches per step.")
@click.option("--lr", type=FiniteRange(min=0, min_open=True), default=2e-3, show_default=True)
@click.option("--width", type=click.IntRange(min=4), default=8, show_default=True,
              help="Channels of the full-resolution branch.")
@click.option("--patch", type=click.IntRange(min=0), default=0, show_default=True,
              help="Train on random crops of this side (0 = whole images); use 64-128 for 512 px images.")
@click.option("--val", type=FiniteRange(0, 1, min_open=True, max_open=True), default=0.15, show_default=True,
              help="Fraction of patients for validation (early stopping, threshold).")
@click.option("--test", type=FiniteRange(0, 1, min_open=True, max_open=True), default=0.15, show_default=True,
              help="Fraction of patients for the reported test scores.")
@click.option("--seed", type=int, default=0, show_default=True, help="Splits, initialisation and batches.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run in --out.")
@click.option("--export", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also copy the final checkpoint here (e.g. checkpoints/unet-vessels64.pt)."
                   " A resumed run replaces the export it wrote itself (never another file).")
@click.pass_context
@speaks_flags(FLAGS)
def train_segmenter_cmd(ctx: click.Context, data_dir, images_pair, masks_pair, out, epochs, batch_size, lr, width,
                        patch, val, test, seed, resume, export, **opts) -> None:
    """Train the full-resolution U-Net vessel segmenter on DATA_DIR (a dataset whose layout has vessel
    masks, e.g. `medanon phantom --modality fundus`) or on --vessel-images/--vessel-masks folders,
    then report test Dice and AUROC for it and for the Frangi and Sato baselines.

    \b
    Example:
      medanon train segmenter --data phantom-fundus --out runs/unet --export unet.pt
    """

    reads = [images_pair, masks_pair]
    check_outputs((out, "dir", "--out", "run"), data_dir=data_dir, opts=opts, reads=reads, existing_ok=True)
    check_export_is_not_the_run(export, out)
    check_outputs((export, "file", "--export", "checkpoint:vessel-segmenter"), data_dir=data_dir, opts=opts,
                  reads=[*reads, out / "checkpoint.pt"], existing_ok=resume, can_overwrite=False)
    if resume:
        from medanon.outputs import check_own_export

        check_own_export(out, export, name="--export")
    from medanon.train.segmenter import check_segmenter_run

    check_segmenter_run(out, resume=resume)      # a resume needs a run, a new run an empty place: before the data
    from medanon.runtime import resolve_device
    from medanon.train.distributed import init_distributed, shutdown

    if (images_pair is None) != (masks_pair is None):
        raise click.UsageError("--vessel-images and --vessel-masks go together")
    if (data_dir is None) == (images_pair is None):
        raise click.UsageError("give DATA_DIR, or --vessel-images and --vessel-masks (not both)")
    if images_pair is not None:                  # the folder pair is read as colour fundus images, one per patient
        unused = [flag for key, flag, ok in FOLDER_PAIR_IGNORES if opts.get(key) not in (None, *ok)]
        if unused:
            raise click.UsageError(f"{', '.join(unused)} do(es) not apply to --vessel-images/--vessel-masks (colour "
                                   "fundus images, each its own patient; --size and --crop apply)")
    from medanon.locks import export_lock

    dist = init_distributed(resolve_device(ctx.obj["device"]))   # under torchrun: data-parallel, rank 0 writes
    try:
        with export_lock(export, dist):          # another run exporting to the same path: refused now
            _train(dist, data_dir, images_pair, masks_pair, out, epochs, batch_size, lr, width, patch, val, test,
                   seed, resume, export, opts)
    finally:
        shutdown(dist)


def _train(dist, data_dir, images_pair, masks_pair, out, epochs, batch_size, lr, width, patch, val, test, seed, resume,
           export, opts) -> None:
    from medanon.cli.base import dataset_input
    from medanon.cli.library import library_call
    from medanon.config import build
    from medanon.runtime import recording_inputs
    from medanon.train.segmenter import SegmenterTrainConfig, data_from_dataset, data_from_folders, train_segmenter

    if data_dir is not None:
        ds = open_from_cli(data_dir, **opts)
        data = data_from_dataset(ds)
        size = ds.size
        inputs = {"data": dataset_input(ds)}
    else:
        size = opts["size"] or 64
        crop = opts.get("crop") or "auto"
        data = data_from_folders(images_pair, masks_pair, size=size, crop="fov" if crop == "auto" else crop)
        inputs = {"images": {"path": str(images_pair), **data.digest}, "masks": {"path": str(masks_pair)}}
    cfg = build(SegmenterTrainConfig, size=size, epochs=epochs, batch_size=batch_size, lr=lr, width=width,
                patch=patch, val=val, test=test, seed=seed)
    with recording_inputs(**inputs), library_call(FLAGS):       # its warnings in this command's words
        path = train_segmenter(data, out, cfg, resume=resume, progress=True, dist=dist)
    if not dist.is_main:
        return
    summary = json.loads((out / "test_metrics.json").read_text())
    click.echo(f"wrote {path} (threshold {summary['threshold']:.2f}); test split, {summary['test_images']} images "
               f"of {summary['test_patients']} patients:")
    for method, r in summary["test"].items():
        click.echo(f"  {method:7s} Dice {r['dice']:.3f}  AUROC {r['auroc']:.3f}")
    if export is not None:                       # checked again: another run may have exported there meanwhile
        from medanon.outputs import writing_export

        with writing_export(out, export, name="--export"):
            atomic_write_bytes(export, path.read_bytes())
        click.echo(f"copied to {export}")
