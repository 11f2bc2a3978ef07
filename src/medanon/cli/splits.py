"""Patient-level split options of the commands that read a dataset: release (or train on) one split of it only,
from a splits file (`medanon data split`) or recomputed as the evaluation recomputes it."""

from __future__ import annotations

from pathlib import Path

import click

from medanon.cli.data import open_from_cli
from medanon.cli.library import library_call

SPLIT_FLAGS = {"splits= is only used with split='train', 'val' or 'test'": "--splits is only used with --split "
                                                                            "train|val|test",
               "pass split= the part to release, e.g. split='train'": "pass --split train",
               "release split='all'": "leave --split out", "split=": "--split "}


def split_options(f, *, training: bool = False):
    """``--split NAME --splits CSV --split-seed N``: release (``training``: train on) one patient-level split of the
    dataset only."""
    from medanon.data.splits import SPLIT_CHOICES

    f = click.option("--split-seed", type=int, default=None,
                     help="Seed of the recomputed split (as `medanon data split` and `medanon evaluate`).  "
                          "[default: 0]")(f)
    f = click.option("--splits", "splits_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     default=None, help="Splits CSV (record_id, patient_id, split: `medanon data split`); else "
                                        "--split is recomputed from --split-seed. "
                                        + ("" if training else "Evaluate the release with the same --splits."))(f)
    return click.option("--split", type=click.Choice(SPLIT_CHOICES), default="all",
                        help="Train only on this patient-level split (e.g. train: the patients a release will "
                             "hold, keeping the evaluation's held-out test patients unseen)." if training else
                        "Release only this patient-level split (e.g. train, to evaluate against held-out "
                        "test patients).")(f)


def train_split_options(f):
    """:func:`split_options` for the commands that train a model on a dataset."""
    return split_options(f, training=True)


def open_split(data_dir, data_opts: dict, split: str, splits_csv, split_seed: int | None, flags):
    """The dataset folder opened with the command's options, reduced to ``--split``."""
    check_split_args(split, splits_csv, split_seed)
    return reduce_to_split(open_from_cli(data_dir, **data_opts), split, splits_csv, split_seed, flags)


def check_split_args(split: str, splits_csv, split_seed: int | None, *, training: bool = False) -> None:
    """A split seed beside a splits file or ``--split all`` would change nothing: refused (before any work)."""
    check_split_seed(splits_csv, split_seed)
    if split == "all" and split_seed is not None:
        what = ("trains on every patient" if training else "releases every patient")
        then = ("train on one split, e.g. --split train" if training else
                "release one split, e.g. --split train, to evaluate the release")
        raise click.BadParameter(f"--split all {what}: a split seed would change nothing ({then})",
                                 param_hint="--split-seed")


def reduce_to_split(ds, split: str, splits_csv, split_seed: int | None, flags):
    """An opened dataset reduced to ``--split`` (all: itself), its messages in the command's ``flags``."""
    from medanon.data.splits import select_split

    with library_call({**SPLIT_FLAGS, **flags}):
        return select_split(ds, split, splits_csv=splits_csv, seed=split_seed or 0)


def reduce_with_people(ds, split: str, splits_csv, split_seed: int | None, flags, *, record: bool = True):
    """:func:`reduce_to_split`, and the record of the people the model trained on it will have seen
    (:func:`medanon.data.training_people.training_people`: digests of the whole folder and of the chosen patients,
    never ids), which its checkpoint keeps so that an evaluation can tell whether it saw the controls. ``record``:
    whether this process writes the checkpoint (under torchrun rank 0 alone hashes the folder; None elsewhere)."""
    from medanon.data.training_people import training_people

    part = reduce_to_split(ds, split, splits_csv, split_seed, flags)
    return part, (training_people(ds, part.records, split=split, splits=splits_csv, seed=split_seed) if record
                  else None)


def check_split_seed(splits_csv, split_seed: int | None) -> None:
    """``--split-seed`` recomputes a split; beside ``--splits`` (the split read from a file) it would change
    nothing."""
    if splits_csv is not None and split_seed is not None:
        raise click.BadParameter("the split comes from --splits; it would change nothing", param_hint="--split-seed")
