"""The root ``medanon`` group, the sub-groups that several command modules add to, and shared helpers.

Each command lives in a small module of :mod:`medanon.cli` named after what it does, and
registers itself on one of the groups defined here. Commands are thin: parse and validate,
call one library function, write outputs.
"""

from __future__ import annotations

import errno
import logging

import click

from medanon import __version__
from medanon.errors import MedanonError

log = logging.getLogger("medanon")

CONTEXT = {"help_option_names": ["-h", "--help"], "show_default": True, "max_content_width": 110}


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that refuses NaN and infinity: NaN passes every bound (each comparison is false), and
    an infinite learning rate or time limit is no setting."""

    def convert(self, value, param, ctx):
        import math

        out = super().convert(value, param, ctx)
        if isinstance(out, float) and not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return out


class MedanonGroup(click.Group):
    """Prints MedanonError and operating-system errors (a full disk, a permission) as a clean message (no
    traceback) and exits with status 1; any other exception is a medanon bug, said as such with status 70 (the
    traceback with --log-level debug, or with MEDANON_TRACEBACK set, as the test suite does); Ctrl-C exits with 130
    (the shell's convention for SIGINT) after saying that outputs were left as they were (atomic writes)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except MedanonError as e:
            click.secho(f"error: {_in_flags(e)}", fg="red", err=True)
            ctx.exit(1)
        except OSError as e:                           # no space, no permission, quota: the file and the reason
            where = f" {e.filename}" if e.filename else ""
            resumes = (" (an interrupted release resumes from its .partial folder)"
                       if ctx.invoked_subcommand in ("anonymize", "demo") else "")
            fix = {errno.ENAMETOOLONG: "give a shorter path", errno.ENOENT: "check that the path exists",
                   errno.ENOTDIR: "a part of the path is a file, not a folder: check the path"}.get(
                e.errno, "free space or fix the permissions there")
            click.secho(f"error: the operating system refused{where}: {e.strerror or e}\n  fix: {fix}, then rerun "
                        f"the same command{resumes}", fg="red", err=True)
            ctx.exit(1)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:                         # a bug: said plainly; the traceback on request
            import os

            if os.environ.get("MEDANON_TRACEBACK") or logging.getLogger("medanon").isEnabledFor(logging.DEBUG):
                raise
            first = str(e).splitlines()[0] if str(e) else ""
            click.secho(f"error: an unexpected {type(e).__name__} inside medanon{': ' + first if first else ''}\n"
                        "  this is a medanon bug, not a problem medanon found in your input: rerun the same command "
                        "with --log-level debug for the traceback and report it with that output", fg="red", err=True)
            ctx.exit(70)                               # EX_SOFTWARE: an internal error
        except KeyboardInterrupt:
            click.secho("interrupted: nothing half-written was left under an output's name. To continue: run the "
                        "same command again (releases, evaluate, demo, train identity), add --resume (train gan, "
                        "encoder, autoencoder, flow, segmenter, once the run has written its first checkpoint: "
                        "checkpoint.pt, or last.pt for the segmenter; before that, run it again without --resume, "
                        "which starts the run afresh); train classifier starts over", fg="yellow", err=True)
            ctx.exit(130)


# The output rule's words (medanon.outputs, medanon.locks name the library's parameters) as every command's flags.
OUTPUT_FLAGS = {"another out": "another --out", "another mapping": "another --mapping",
                "another cache": "another --cache", "overwrite=True": "--overwrite"}


def _in_flags(e: MedanonError) -> MedanonError:
    """``e`` in the command line's words: ``out X is inside ...`` -> ``--out X is inside ...``."""
    import re

    from medanon.cli.words import reworded

    e = reworded(e, OUTPUT_FLAGS)
    e.message = re.sub(r"^(out|mapping|cache) ", r"--\1 ", e.message)
    e.args = (str(e),)
    return e


@click.group(cls=MedanonGroup, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="medanon")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              help="Logging verbosity (to stderr); warning and error also turn progress bars off. A command's "
                   "privacy lines and warnings (privacy:, note:, WARNING:) are printed at every level.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars, no info messages (same as --log-level warning); "
                                                  "privacy lines and warnings are still printed.")
@click.option("--device", default="auto", metavar="auto|cpu|cuda[:N]",
              help="Where models run; 'auto' picks a CUDA GPU if there is one.")
@click.pass_context
def cli(ctx: click.Context, log_level: str, quiet: bool, device: str) -> None:
    """medanon: share medical images without exposing patients.

    \b
    Example:
      medanon phantom --modality fundus --patients 50 --out phantom-fundus
      medanon anonymize snow phantom-fundus --p 0.3 --out release-snow
      medanon audit release-snow --source phantom-fundus
    """
    import sys

    from medanon.runtime import setup_logging, silence_progress_bars

    if quiet and log_level in ("debug", "info"):
        log_level = "warning"
    setup_logging(log_level)
    if log_level in ("warning", "error") or not sys.stderr.isatty():
        silence_progress_bars()                    # no bars in quiet mode, nor \r-lines in a log file
    from medanon.errors import ConfigError
    from medanon.runtime import check_device_name

    try:
        device = check_device_name(device)       # its form, for every command; a GPU is looked for where one is used
    except ConfigError:
        raise click.BadParameter(f"{device!r} is not a device: use auto, cpu, cuda or cuda:N (N a GPU's index, "
                                 "e.g. cuda:0)", param_hint="--device") from None
    ctx.ensure_object(dict)
    ctx.obj["device"] = device



@cli.group(context_settings=CONTEXT)
def data() -> None:
    """Inspect and split datasets."""


@cli.group(context_settings=CONTEXT)
def train() -> None:
    """Train the models the methods need (checkpoints, --resume, sample grids)."""


@cli.group(context_settings=CONTEXT)
def anonymize() -> None:
    """Turn a dataset into a release with one of the de-identification methods."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:      # torchrun: one share per process (docs/distributed.md)
        _torchrun_process()


def note_without_mapping(mapping) -> None:
    """The note of a release written without ``--mapping``: nothing ties its records to their sources then."""
    if mapping is None:
        click.echo("note: no --mapping given, so no private mapping was written: `medanon audit` cannot recount the "
                   "people per record from the sources, and `medanon evaluate` runs no attack that needs to know whose "
                   "images a record stands for (membership, linkability, singling out, differencing, attribute "
                   "inference unless the release publishes the attribute) on this release (make it again with "
                   "--mapping FILE outside the release to keep one)")


def _torchrun_process() -> None:
    """One of several processes torchrun started: its own GPU under --device cuda; only rank 0 prints."""
    import os
    import sys

    from medanon.runtime import silence_progress_bars
    from medanon.train.distributed import bind_local_gpu

    if bind_local_gpu() > 0:
        silence_progress_bars()
        logging.getLogger("medanon").setLevel(logging.WARNING)
        sys.stdout = open(os.devnull, "w")              # rank 0 prints the summary lines


def scan_quietly(data_dir, opts: dict):
    """A scan of the dataset at ``data_dir`` with the command's layout options (no pixel decoded), or None when it
    cannot be scanned (the data's own error comes when the command opens it)."""
    if data_dir is None:
        return None
    from medanon.cli.data import scan_from_cli
    from medanon.errors import MedanonError

    layout = {"layout": "auto", "labels_csv": None, "image_col": None, "label_cols": None, "patient_col": None,
              "images_dir": None, **{k: v for k, v in opts.items() if v is not None}}
    try:
        return scan_from_cli(data_dir, **layout)
    except (MedanonError, OSError, click.ClickException):
        return None


def _scanned_inputs(data_dir, opts: dict, scanned=None) -> list:
    """The files and folders the dataset at ``data_dir`` reads, from a scan of its layout (``scanned``, where the
    command made one already; none when it cannot be scanned)."""
    from medanon.outputs import dataset_inputs

    scanned = scanned if scanned is not None else scan_quietly(data_dir, opts)
    return [] if scanned is None else [*dataset_inputs(scanned), *getattr(scanned, "files", ())]


def check_outputs(*outputs: tuple, data_dir=None, opts: dict | None = None, reads=(),
                  overwrite: bool = False, existing_ok: bool = False, can_overwrite: bool = True,
                  scanned=None) -> None:
    """Check every ``(path, kind, option name[, what])`` output of a command before it does any work
    (``medanon.outputs``; ``what`` the kind of medanon output it is, e.g. ``splits``, which an existing one must be).
    ``can_overwrite``: False for a command without ``--overwrite`` (its refusals do not suggest one). ``scanned``:
    the dataset's scan (:func:`scan_quietly`) where the command made one already.

    The inputs are the dataset folder, the generic layout's labels CSV and image folder from ``opts``, every
    folder holding one of the dataset's images (a scan reads no pixel: images a labels CSV names outside the
    dataset folder are inputs too), and ``reads`` (checkpoints, releases); ``None`` outputs (an option not given)
    are skipped.
    """
    from medanon.outputs import check_output

    opts = opts or {}
    inputs = [data_dir, opts.get("labels_csv"), opts.get("images_dir"), *reads,
              *_scanned_inputs(data_dir, opts, scanned)]
    for path, kind, name, *what in outputs:
        if path is not None:
            check_output(path, inputs=inputs, overwrite=overwrite, kind=kind, name=name, existing_ok=existing_ok,
                         what=what[0] if what else None, can_overwrite=can_overwrite)


def check_export_is_not_the_run(export, out, name: str = "--export") -> None:
    """Refuse an export path inside the run folder ``out`` (compared by real paths, so a link into it counts): the
    run writes and replaces its files there (its checkpoint, ``last.pt``, the manifest, the metrics), and an export
    over one of them destroyed the state the run resumes from. Said as such, not as an input."""
    import os
    from pathlib import Path

    from medanon.outputs import UnsafeOutputError

    if export is None:
        return
    run = Path(os.path.realpath(out))
    target = Path(os.path.realpath(export))
    if target == run or run in target.parents:
        what = (f"is the run's own {target.name} ({Path(out) / target.relative_to(run)}), which the run writes"
                if target.exists() and target.is_file() else f"lies inside the run folder {out}, whose files the run "
                                                             "writes and replaces")
        raise UnsafeOutputError(f"{name} {export} {what}",
                                fix=f"export to a file outside the run folder, e.g. {name} model.pt")


def to_json(obj) -> str:
    """``obj`` as strict JSON for the terminal (:func:`medanon.fsutil.strict_json`: NaN and infinities as ``null``)."""
    from medanon.fsutil import strict_json

    return strict_json(obj)


def dataset_input(ds) -> dict:
    """A dataset as a run's manifest records it (``medanon.runtime.recording_inputs``): folder, layout, how its
    images were read, its counts and the digest of its records (ids, patients, labels; the run's checkpoint holds
    the digest of the pixels it trained on); no file is read."""
    from medanon.data.records import records_digest
    from medanon.release.release import reading_params

    return {"path": str(ds.root), "layout": getattr(ds, "layout", "") or None, "images": len(ds.records),
            "patients": len({r.patient_id for r in ds.records}), "records_sha256": records_digest(ds.records),
            "reading": reading_params(ds)}


def checkpoint_input(path) -> dict | None:
    """A checkpoint a run starts from, as its manifest records it (None: not given)."""
    if path is None:
        return None
    from medanon.fsutil import sha256_file

    return {"path": str(path), "sha256": sha256_file(path)}


def split_input(split: str, splits_csv, split_seed: int | None) -> dict | None:
    """The patient-level split a run trained on, as its manifest records it (None: every image)."""
    if split == "all":
        return None
    from medanon.fsutil import sha256_file

    return {"split": split, **({"splits_csv": str(splits_csv), "sha256": sha256_file(splits_csv)}
                               if splits_csv is not None else {"recomputed_with_seed": split_seed or 0})}
