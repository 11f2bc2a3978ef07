"""``medanon data summary|split`` and the dataset options every dataset-reading command shares."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import warnings
from pathlib import Path

import click

from medanon.cli.base import CONTEXT, FiniteRange, check_outputs, data, scan_quietly
from medanon.cli.library import translate
from medanon.cli.words import DATA_FLAGS, SPLIT_FLAGS, speaks_flags
from medanon.config import DataConfig, SplitConfig, build
from medanon.data.imageio import DEFAULT_MAX_PIXELS
from medanon.data.layouts import LAYOUTS
from medanon.errors import MedanonError

log = logging.getLogger("medanon")


def _check_size(ctx, param, value):
    if value is not None and not (16 <= value <= 1024 and value & (value - 1) == 0):
        raise click.BadParameter(f"{value} is not a power of two from 16 to 1024: use 16, 32, 64, 128, 256, 512 "
                                 "or 1024", ctx=ctx, param=param)
    return value


def layout_options(f):
    """How to read a dataset folder: its layout, or the generic description. Every command that reads a dataset
    takes these, under the same names."""
    opts = [
        click.option("--layout", type=click.Choice(["auto", *LAYOUTS]), default="auto",
                     help="Folder layout; 'auto' detects it from the files present."),
        click.option("--labels", "labels_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     default=None, help="Generic layout: the labels CSV (a path, not relative to DATA_DIR)."),
        click.option("--image-col", default=None, help="Generic layout: column with image paths."),
        click.option("--label-cols", default=None,
                     help="Generic layout: comma-separated labels, each NAME or NAME=COLUMN (e.g. grade=level,sex)."),
        click.option("--patient-col", default=None, help="Generic layout: column with patient ids."),
        click.option("--images", "images_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                     default=None, help="Generic layout: folder the image paths are relative to.  "
                                        "[default: the --labels CSV's folder]"),
    ]
    f = speaks_flags(DATA_FLAGS)(f)             # every dataset-reading command takes these, and the data words
    for o in reversed(opts):
        f = o(f)
    return f


def file_options(f):
    """Which image files to accept when pixels are read."""
    opts = [
        click.option("--allow-outside", is_flag=True, default=False,
                     help="Read files the labels name outside the dataset folder (../x.png, absolute paths) and "
                          "symlinks that lead out of it; by default they are refused as bad files."),
        click.option("--skip-bad", is_flag=True, default=None,
                     help="Leave out missing, unreadable, oversized, outside or unlabelled files (and list them) "
                          "instead of failing; commands that read pixels then decode every image once up front to "
                          "find corrupt pixels too (data summary: with --decode)."),
        click.option("--xray-views", default=None, metavar="frontal|PA,AP,...",
                     help="Chest X-rays: read only these views, 'frontal' (every view but the laterals) or a comma "
                          "list of PA, AP, LATERAL, LL, OTHER.  [default: every image; an X-ray folder holding "
                          "laterals is named in a warning]"),
        click.option("--max-pixels", type=click.IntRange(min=1), default=DEFAULT_MAX_PIXELS, show_default=True,
                     help="Refuse images whose header claims more pixels (decompression bombs); raise it for "
                          "genuinely large scans."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def image_options(f):
    """How images become tensors: size, channels, crop, modality."""
    opts = [
        click.option("--size", type=int, default=None, callback=_check_size,
                     help="Output side in pixels, a power of two from 16 to 1024.  [default: the side of the "
                          "model the command reads, where it reads one; else 64]"),
        click.option("--channels", type=click.Choice(["0", "1", "3"]), default=None,
                     help="1 or 3 to convert every image; 0 = by modality.  [default: 0]"),
        click.option("--crop", type=click.Choice(["auto", "fov", "center", "pad", "none"]), default=None,
                     help="fov: fundus field of view; center; pad; none.  [default: auto]"),
        click.option("--modality", type=click.Choice(["auto", "fundus", "xray"]), default=None,
                     help="Overrides what the layout implies.  [default: auto]"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def data_options(f):
    """Options shared by every command that reads a dataset folder into images."""
    return layout_options(file_options(image_options(f)))


@contextlib.contextmanager
def clean_warnings():
    """Layout warnings (e.g. no patient column) as one log line each, not Python's warning with a source line."""
    from medanon.data.layouts import LayoutWarning

    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always", LayoutWarning)
            try:
                yield
            finally:
                caught = list(recorded)
    finally:
        # re-emitted after the recording context has closed: inside it, each re-emitted warning was recorded
        # again while the list was being read, an endless loop that filled memory whenever a command warned
        for w in caught:
            if issubclass(w.category, LayoutWarning):
                log.warning("%s", translate(str(w.message), DATA_FLAGS))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def generic_from_cli(*, layout, labels_csv, image_col, label_cols, patient_col, images_dir):
    """The generic-layout description from the layout options, or None for a named/detected layout."""
    from medanon.data.layouts import GenericOptions

    if labels_csv is not None or layout == "generic":
        if labels_csv is None or image_col is None:
            raise click.UsageError("the generic layout needs --labels CSV and --image-col NAME")
        cols = tuple(c.strip() for c in (label_cols or "").split(",") if c.strip())
        return GenericOptions(labels_csv=labels_csv, image_col=image_col, label_cols=cols,
                              patient_col=patient_col, images_dir=images_dir)
    if any(v is not None for v in (image_col, label_cols, patient_col, images_dir)):
        raise click.UsageError("--image-col, --label-cols, --patient-col and --images need --labels CSV")
    return None


def declared_from_cli(data_dir: Path, *, layout="auto", labels_csv=None, image_col=None, label_cols=None,
                      patient_col=None, images_dir=None, skip_bad=None, max_pixels=DEFAULT_MAX_PIXELS,
                      allow_outside=False, xray_views=None):
    """A context in which library code that opens ``data_dir`` itself (``evaluate --real``) reads it with
    these layout and file options (:func:`medanon.data.dataset.reading`)."""
    from medanon.data.dataset import reading

    generic = generic_from_cli(layout=layout, labels_csv=labels_csv, image_col=image_col, label_cols=label_cols,
                               patient_col=patient_col, images_dir=images_dir)
    stack = contextlib.ExitStack()
    stack.enter_context(clean_warnings())
    stack.enter_context(reading(data_dir, layout=layout, generic=generic, skip_bad=bool(skip_bad),
                                max_pixels=max_pixels, allow_outside=allow_outside,
                                xray_views=xray_views or ""))
    return stack


def scan_from_cli(data_dir: Path, *, layout, labels_csv, image_col, label_cols, patient_col, images_dir,
                  allow_outside: bool = False, **_ignored):
    """The records of a dataset folder (no pixels read), with the layout options (``audit --source``)."""
    from medanon.data.layouts import scan

    generic = generic_from_cli(layout=layout, labels_csv=labels_csv, image_col=image_col, label_cols=label_cols,
                               patient_col=patient_col, images_dir=images_dir)
    with clean_warnings():
        return scan(data_dir, layout, generic=generic, allow_outside=allow_outside)


def data_dir_argument(*, required: bool = True, help: str = "Dataset folder."):
    """The dataset folder, accepted both ways every medanon command accepts it: ``--data DIR`` or a positional
    ``DATA_DIR`` (so ``medanon anonymize snow --data DIR`` and ``medanon anonymize snow DIR`` are the same).
    The command receives it as ``data_dir`` (None only when ``required=False`` and neither is given)."""

    def decorate(f):
        @functools.wraps(f)
        def wrapper(*args, data_pos=None, data_opt=None, **kwargs):
            if data_pos is not None and data_opt is not None and Path(data_pos) != Path(data_opt):
                raise click.UsageError(f"the dataset folder is given twice ({data_pos} and --data {data_opt}): "
                                       "give it once")
            data_dir = data_opt if data_opt is not None else data_pos
            if data_dir is None and required:
                raise click.UsageError("no dataset folder: give it as --data DIR")
            return f(*args, data_dir=data_dir, **kwargs)

        wrapper = click.option("--data", "data_opt", type=click.Path(path_type=Path), default=None,
                               metavar="DIR", help=help + " (or as the first argument)")(wrapper)
        return click.argument("data_pos", type=click.Path(path_type=Path), required=False,
                              metavar="[DATA_DIR]")(wrapper)

    return decorate


def open_from_cli(data_dir: Path, *, layout="auto", labels_csv=None, image_col=None, label_cols=None,
                  patient_col=None, images_dir=None, size=None, channels=None, crop=None, modality=None,
                  skip_bad=None, max_pixels=DEFAULT_MAX_PIXELS, allow_outside=False, progress: bool = True,
                  check_pixels: bool | None = None, xray_views=None):
    from medanon.data.dataset import open_dataset

    cfg = build(DataConfig, layout=layout if layout != "auto" else None, size=size,
                channels=int(channels) if channels is not None else None, crop=crop, modality=modality,
                skip_bad=skip_bad or None, xray_views=xray_views)
    generic = generic_from_cli(layout=layout, labels_csv=labels_csv, image_col=image_col, label_cols=label_cols,
                               patient_col=patient_col, images_dir=images_dir)
    with clean_warnings():
        return open_dataset(data_dir, cfg, generic=generic, progress=progress, max_pixels=max_pixels,
                            allow_outside=allow_outside, check_pixels=check_pixels)


@data.command("summary", context_settings=CONTEXT)
@click.argument("data_dir", type=click.Path(path_type=Path))
@data_options
@click.option("--decode", is_flag=True, help="Decode every image too (finds corrupt pixel data; slower).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def data_summary(data_dir: Path, decode: bool, as_json: bool, **opts) -> None:
    """Counts by label and patient, image sizes and problems of the dataset in DATA_DIR.

    Files the other commands would refuse (missing, unreadable, too large, outside the folder) are
    refused here the same way; --skip-bad lists them instead. Images of mixed channel counts, or a fundus folder of
    grey images, are listed as a PROBLEM under the summary (exit status 1) unless --channels says what to make of
    them.

    \b
    Examples:
      medanon data summary /data/aptos2019
      medanon data summary /data/eyepacs --decode --skip-bad
      medanon data summary /data/mine --labels /data/mine/labels.csv --image-col file --label-cols grade=dr_level,sex \\
          --patient-col subject"""
    from medanon.data.channels import GreyFundus, MixedChannels
    from medanon.data.dataset import drop_records, raise_for_problems, verify_decoding
    from medanon.data.summary import format_summary, summarize

    mixed = None
    try:
        ds = open_from_cli(data_dir, check_pixels=decode, **opts)      # headers only unless --decode
    except (MixedChannels, GreyFundus) as e:    # a problem to list with the others: summarised as RGB
        mixed = e
        ds = open_from_cli(data_dir, check_pixels=decode, **{**opts, "channels": "3"})
    if decode:
        bad = verify_decoding(ds, progress=True)
        if bad and not opts["skip_bad"]:
            raise_for_problems(bad, root=data_dir)
        ds = drop_records(ds, bad)
    s = summarize(ds)
    if mixed is not None:
        from medanon.cli.library import translate
        from medanon.cli.words import DATA_FLAGS

        s["problems"] = [{"problem": mixed.message, "files": mixed.files, "fix": translate(mixed.fix, DATA_FLAGS)}]
    click.echo(json.dumps(s, indent=2) if as_json else format_summary(s))
    if mixed is not None:                       # printed in full, and still a problem the other commands refuse
        click.get_current_context().exit(1)


@data.command("split", context_settings=CONTEXT)
@click.argument("data_dir", type=click.Path(path_type=Path))
@data_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="CSV to write: record_id, patient_id, split, bytes (each image file's size: the CSV of "
                   "another dataset with the same file names is refused); private: holds patient ids.")
@click.option("--val", type=FiniteRange(0, 1, max_open=True), default=None,
              help="Fraction of patients.  [default: 0.15]")
@click.option("--test", type=FiniteRange(0, 1, max_open=True), default=None,
              help="Fraction of patients.  [default: 0.15]")
@click.option("--stratify", default=None, help="Label to stratify by ('' for none).  [default: the modality's utility "
                                                "label, grade for fundus and pneumonia for X-ray data; none when the "
                                                "data lack it]")
@click.option("--seed", type=int, default=None, help="Random seed.  [default: 0]")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists (only a splits file medanon wrote).")
@speaks_flags(SPLIT_FLAGS)
def data_split(data_dir: Path, out: Path, val, test, stratify, seed, overwrite, **opts) -> None:
    """Patient-level train/val/test split of DATA_DIR, stratified by a label. Warns when the split cannot
    meet the fractions (too few patients per stratum).

    \b
    Example:
      medanon data split /data/brset --out private/splits.csv --stratify grade --val 0.15 --test 0.15"""
    from collections import Counter

    from medanon.data.splits import check_stratify, check_train_left, split_patients, split_shortfalls, write_splits_csv

    sc = build(SplitConfig, val=val, test=test, stratify=stratify, seed=seed)
    check_stratify(sc.stratify)                      # before any image is read
    scanned = scan_quietly(data_dir, opts)
    if stratify and scanned is not None and scanned.records:   # as given (None: the modality's own, below), checked
        _check_label(sc.stratify, list(dict.fromkeys(n for r in scanned.records for n in r.labels)), data_dir)
    from medanon.locks import OutputLock

    check_outputs((out, "file", "--out", "splits"), data_dir=data_dir, opts=opts, overwrite=overwrite,
                  scanned=scanned)
    with OutputLock(out, name="--out"):          # two splits written to one file at once: refused, not mixed
        ds = open_from_cli(data_dir, **opts)
        if stratify is None:                     # the modality's utility label, as the evaluation's split uses
            from medanon.release.labels import default_labels

            sc.stratify = (default_labels(ds) or [""])[0]
        if sc.stratify:
            _check_label(sc.stratify, ds.label_names, data_dir)
        assignment = split_patients(ds.records, val=sc.val, test=sc.test, stratify=sc.stratify, seed=sc.seed)
        check_train_left(assignment, val=sc.val, test=sc.test)
        write_splits_csv(out, ds.records, assignment)
    per_split = Counter(assignment[r.patient_id] for r in ds.records)
    patients = Counter(assignment.values())
    for problem in split_shortfalls(patients, {"val": sc.val, "test": sc.test}, sc.stratify):
        click.secho(f"warning: {translate(problem, SPLIT_FLAGS)}", fg="yellow", err=True)
    click.echo(f"wrote {out}: " + ", ".join(f"{s} {patients[s]} patients / {per_split[s]} images"
                                            for s in ("train", "val", "test"))
               + (f"; stratified by {sc.stratify}" if sc.stratify else "; not stratified"))


def _check_label(stratify: str, names: list[str], data_dir) -> None:
    """Refuse a ``--stratify`` label the dataset does not have, naming the ones it has."""
    if stratify not in names:
        raise MedanonError(f"--stratify {stratify!r} is not a label of {data_dir}",
                           fix=f"use one of {names} or --stratify ''")
