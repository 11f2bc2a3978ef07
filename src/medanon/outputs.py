"""The one rule every command that writes follows, checked before any expensive work.

1. Never write into, over, or as a parent of an input: a dataset folder, its labels and descriptor files, an
   image or mask folder (after resolving links), a checkpoint being read, a release being evaluated. Paths are
   compared as files (device and inode of the path and of each folder above it), so links, bind mounts and
   other spellings of one folder cannot hide an input.
2. Never replace an existing file or folder unless the caller passes ``overwrite`` (an empty folder holds
   nothing to lose and is used as it is).
3. Even with ``overwrite``, replace only medanon's own output of the same kind (a release replaces a release, a
   mapping a mapping), and only when every file in it is one medanon wrote there
   (:mod:`medanon.output_inventory`): any other file present means a refusal that names it.
4. The place must be writable: the error comes now, not after an hour of work.

:func:`check_output` applies rules 1-4 to one output path; :func:`dataset_inputs` lists what a dataset
reads, so that a command can pass it as ``inputs``; :func:`checkpoint_files` the checkpoint files this process
loaded, by content. One writer at a time is :mod:`medanon.locks`.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> (root / "data").mkdir()
>>> check_output(root / "release", inputs=[root / "data"]).name
'release'
>>> check_output(root / "data" / "release", inputs=[root / "data"])
Traceback (most recent call last):
...
medanon.outputs.UnsafeOutputError: out ... is inside the input ...
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from medanon.errors import ConfigError, MedanonError, OutputExistsError, path_problem, short_path, with_article
from medanon.output_inventory import (  # noqa: F401  (re-exported: the rule's vocabulary)
    MAPPING_FORMAT,
    MARKER,
    SPLITS_HEADER,
    checkpoint_kind,
    file_kind,
    folder_kind,
    foreign_files,
    normalise_command,
    run_command,
    write_marker,
)

_CHECKPOINTS_READ: dict[str, set[Path]] = {}          # sha256 -> files this process loaded a checkpoint from


class UnsafeOutputError(MedanonError):
    """An output path would write into, over or around an input, or over something medanon did not write."""


def _resolve(p: str | os.PathLike) -> Path:
    """``p`` as the real path it leads to, component by component as the operating system follows it (a link, then
    ``..`` from where the link leads: ``link/../x`` is beside the link's target, not beside the link); a
    symbolic-link loop on the way is a :class:`ConfigError` naming it (it leads to no file, and Python raises a bare
    RuntimeError)."""
    try:
        return Path(p).expanduser().absolute().resolve(strict=False)
    except (RuntimeError, OSError) as e:
        raise ConfigError(f"{p} leads through a loop of symbolic links (or a link that cannot be read): it names no "
                          f"file or folder ({e})", fix="fix or remove the link, or give another path") from None


def note_checkpoint_read(path: str | os.PathLike, sha256: str) -> None:
    """Remember that a checkpoint with content ``sha256`` was read from ``path`` (called by the loader), so that
    an output of a release recording that model (by its sha256) is checked against the file it came from."""
    _CHECKPOINTS_READ.setdefault(sha256, set()).add(_resolve(path))


def checkpoint_files(shas: Iterable[str]) -> list[Path]:
    """The files this process loaded the checkpoints with these sha256 from."""
    return sorted({p for s in shas for p in _CHECKPOINTS_READ.get(str(s), ())})


def dataset_inputs(ds: Any) -> list[Path]:
    """Everything an opened dataset reads: its root and descriptor files, the generic layout's labels CSV and
    image folder, and every folder holding one of its images or masks (after resolving links)."""
    paths: set[Path] = set()
    root = getattr(ds, "root", None)
    if root is not None:
        paths.add(_resolve(root))
    generic = getattr(getattr(ds, "read_options", None), "generic", None)
    for p in (getattr(generic, "labels_csv", None), getattr(generic, "images_dir", None),
              *getattr(ds, "source_files", ())):
        if p is not None:
            paths.add(_resolve(p))
    for r in getattr(ds, "records", ()):
        if getattr(r, "path", None) is not None:
            paths.add(_resolve(r.path).parent)
        if getattr(r, "mask_path", None):
            paths.add(_resolve(r.mask_path).parent)
    return sorted(paths)


def is_medanon_output(path: str | os.PathLike) -> bool:
    """Whether ``path`` is something medanon wrote (or an empty folder, which holds nothing to lose)."""
    p = Path(path)
    if p.is_dir():
        return not any(p.iterdir()) or folder_kind(p) is not None
    return p.is_file() and file_kind(p) is not None


def _identity(p: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(p)                                # follows links: the file itself, wherever it is reached
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _existing_chain(p: Path) -> list[tuple[int, int]]:
    """The identities of ``p`` (if it exists) and of each existing folder above it, nearest first."""
    return [i for i in (_identity(q) for q in (p, *p.parents)) if i is not None]


def _relation(out: Path, inp: Path) -> str | None:
    """How the output ``out`` stands to the input ``inp``, compared as files (device and inode), so that links,
    bind mounts and other spellings of one folder are the same folder; by path where neither exists yet."""
    out_id, inp_id = _identity(out), _identity(inp)
    if out == inp or (out_id is not None and out_id == inp_id):
        return "is the input"
    above_out = set(_existing_chain(out.parent)) | set(out.parents)
    if inp in above_out or (inp_id is not None and inp_id in above_out):
        return "is inside the input"
    above_inp = set(_existing_chain(inp.parent)) | set(inp.parents)
    if out in above_inp or (out_id is not None and out_id in above_inp):
        return "contains the input"
    return None


def _input_inside(out: Path, inputs: list[Path]) -> Path | None:
    """An input found inside the existing folder ``out`` by walking it (an input reached through a bind mount or
    a link elsewhere is not below ``out`` by its path)."""
    wanted = {i: p for p in inputs if (i := _identity(p)) is not None}
    if not wanted or not out.is_dir():
        return None
    seen = 0
    for root, dirs, files in os.walk(out):
        for name in (*dirs, *files):
            i = _identity(Path(root, name))
            if i in wanted:
                return wanted[i]
        seen += len(dirs) + len(files)
        if seen > 500_000:                             # no medanon output is this large: refused by rule 3 anyway
            break
    return None


def _kind_check(out: Path, kind: str | None, what: str | None, name: str, noun: str) -> None:
    """``what`` may name a checkpoint's own kind too: ``checkpoint:classifier`` (several: ``checkpoint:a|b``)."""
    if kind is None:
        raise UnsafeOutputError(f"{name} {out} exists and was not written by medanon: it is never replaced, even "
                                "with overwrite", fix=f"choose another {name}, or remove it yourself")
    base, _, inner = (what or "").partition(":")
    if what is not None and kind != base:
        raise UnsafeOutputError(f"{name} {out} is a medanon {kind} {noun}, not {with_article(base)} {noun}: it is "
                                f"never replaced by another kind of output", fix=f"choose another {name}")
    if inner:
        held = checkpoint_kind(out)
        if held not in inner.split("|"):
            raise UnsafeOutputError(f"{name} {out} is a medanon {held} checkpoint, not "
                                    f"{with_article(inner.replace('|', ' or '))} one: it is never replaced by another "
                                    "kind of model", fix=f"choose another {name}")


def check_run_folder(path: str | os.PathLike, command: str, *, name: str = "out") -> None:
    """A run (training, evaluation, demo) writes into an existing folder only when it is a run or report folder and,
    where it records the command that wrote it, a run of this same ``command``: never into a release, a phantom
    dataset or another command's run."""
    p = Path(path)
    if not p.is_dir() or not any(p.iterdir()):
        return
    kind = folder_kind(p)
    if kind not in ("run", "report"):
        raise UnsafeOutputError(f"{name} {p} is {'a medanon ' + kind if kind else 'not a medanon'} folder, not a run "
                                f"of {normalise_command(command)}: a run writes only into its own folder",
                                fix=f"choose another {name}")
    done = run_command(p)
    if done is not None and done != normalise_command(command):
        raise UnsafeOutputError(f"{name} {p} holds a run of {done}, not of {normalise_command(command)}: a run resumes "
                                "only its own folder", fix=f"choose another {name}")


def check_replaceable(out: str | os.PathLike, *, what: str | None = None, name: str = "out") -> None:
    """Raise unless the existing ``out`` may be replaced: medanon's output of the kind ``what`` (any kind when
    None) holding only the files medanon wrote there (:mod:`medanon.output_inventory`)."""
    out = Path(out)
    if not out.is_dir():
        _kind_check(out, file_kind(out), what, name, "file")
        return
    if not any(out.iterdir()):
        return
    kind = folder_kind(out)
    _kind_check(out, kind, what, name, "folder")
    foreign = foreign_files(out)
    if foreign is None:
        why = "a run or report folder keeps no list" if kind == "run" else "written by an earlier version"
        raise UnsafeOutputError(f"{name} {out} is a medanon {kind} folder that does not list the files it holds "
                                f"({why}), so medanon cannot tell its files from yours and never replaces it",
                                fix=f"choose another {name}, or remove it yourself")
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise UnsafeOutputError(f"{name} {out} holds {foreign[0]}{more}, which medanon did not write there (or "
                                "which changed since): overwrite never deletes your files",
                                fix=f"move {out / foreign[0]} out of {out}, or choose another {name}")


SHIPPED_MAX_BYTES = 64 << 20     # above the largest public checkpoint (11 MB; tests/test_models_registry.py checks)


def _refuse_shipped(out: Path, name: str) -> None:
    """A file that is one of medanon's public checkpoints (by its digest, under any name) is never replaced: runs that
    ask for it by name would use another model under the public one's name, and its statements say it is public."""
    from medanon.fsutil import sha256_file
    from medanon.models_shipped import shipped_name

    try:
        if out.stat().st_size > SHIPPED_MAX_BYTES:    # larger than any public checkpoint: not one (not hashed)
            return
        shipped = shipped_name(sha256_file(out))
    except OSError:
        return
    if shipped is not None:
        raise UnsafeOutputError(f"{name} {out} is medanon's public checkpoint {shipped}: replacing it would make "
                                "every run that asks for that model by name use another one under its name",
                                fix=f"choose another {name}, e.g. {out.with_name('my-' + out.name)}")


def _what(kind: str, name: str) -> str | None:
    """The kind of output an option writes, where its name says it (for the kind check of ``overwrite``)."""
    if kind == "file" and "mapping" in name:
        return "mapping"
    if kind == "file" and "export" in name:
        return "checkpoint"
    return None


def check_not_an_input(out: Path, *, inputs: Iterable[str | os.PathLike | None] = (), name: str = "out"
                       ) -> tuple[Path, list[tuple[str | os.PathLike, Path]]]:
    """Rule 1 alone: ``out`` is not inside a release, phantom or dataset folder, and not inside, over or around any
    of ``inputs``. Returns ``out`` resolved and the inputs with their resolved paths."""
    target = _resolve(out)
    shared = _inside_data_folder(target)
    if shared is not None:
        folder, held = shared
        raise UnsafeOutputError(f"{name} {out} is inside {folder}, a medanon {held} folder: medanon never writes into "
                                "a release (it is shared as it is) or a dataset", fix=f"choose another {name}, "
                                                                                      "outside it")
    resolved = [(inp, _resolve(inp)) for inp in inputs if inp is not None]
    for inp, r in resolved:
        rel = _relation(target, r)
        if rel is not None:
            raise UnsafeOutputError(f"{name} {out} {rel} {inp}: medanon never writes into, over or around "
                                    "what it reads", fix=f"choose another {name}, outside the data it reads")
    return target, resolved


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = (),
                 overwrite: bool = False, kind: Literal["dir", "file"] = "dir", name: str = "out",
                 existing_ok: bool = False, what: str | None = None, can_overwrite: bool = True) -> Path:
    """Check that ``path`` may be written; return it unchanged. Raise before any work is done if not.

    ``inputs`` are the paths the command reads (see :func:`dataset_inputs`); ``kind`` says whether the output
    is a folder or a file; ``name`` is the argument's name for messages; ``what`` the kind of medanon output it
    is (``release``, ``mapping``, ``splits``, ``checkpoint``, ...), which an existing output must match to be
    replaced. ``existing_ok`` accepts an existing medanon output without ``overwrite`` (a run folder being
    resumed, a report folder with its cache): it is written into, not replaced. ``can_overwrite``: whether the
    caller offers ``overwrite`` at all (the fix of an existing output says so).
    """
    out = Path(path)
    problem = path_problem(out)
    if problem:
        raise UnsafeOutputError(f"{name} {short_path(path)} {problem}",
                                fix="choose a path without it" if "NUL" in problem else "choose a shorter path")
    if out.name in ("", ".", ".."):                 # Path(".").name is "": no name to write beside or replace
        raise UnsafeOutputError(f"{name} {str(path)!r} names a folder by its place, not its name: medanon writes a "
                                "new output beside others",
                                fix="give a path that ends in the new output's name, e.g. ./release")
    what = what if what is not None else _what(kind, name)
    target, resolved = check_not_an_input(out, inputs=inputs, name=name)
    from medanon.locks import refuse_inside_written

    refuse_inside_written(out, name=name)           # a folder another run writes may replace what is put there
    if out.exists() or out.is_symlink():
        if out.is_symlink() and not out.exists():
            raise UnsafeOutputError(f"{name} {out} is a link to {os.readlink(out)}, which does not exist: medanon "
                                    "does not write through a dangling link",
                                    fix=f"choose another {name}, or remove the link yourself")
        if out.is_symlink() and not (overwrite or existing_ok):
            # a new output is published by renaming it into place: over the link, not where the link leads (an
            # empty folder behind it stayed empty); overwrite= replaces the link as asked, and an output written
            # into (a run folder) is written where the link leads
            raise UnsafeOutputError(f"{name} {out} is a link to {os.readlink(out)}: medanon would replace the link "
                                    "itself with its new output (the place it leads to left as it was), not write "
                                    "there", fix=f"give the path it leads to, {os.path.realpath(out)}, or another "
                                                 f"{name}")
        if kind == "dir" and not out.is_dir():
            raise UnsafeOutputError(f"{name} {out} exists and is not a folder",
                                    fix=f"choose another {name}, or move that file away yourself")
        if kind == "file" and out.is_dir():
            raise UnsafeOutputError(f"{name} {out} is a folder, a file is needed here",
                                    fix=f"give a file path for {name}")
        if kind == "file" and not out.is_file() and not out.is_dir():   # a pipe would block the checks reading it
            raise UnsafeOutputError(f"{name} {out} exists and is not a plain file (a pipe, a device or a socket)",
                                    fix=f"choose another {name}")
        if out.is_file():
            _refuse_shipped(out, name)              # neither replaced nor resumed into (the one place it is read)
        inside = _input_inside(target, [r for _, r in resolved]) if kind == "dir" else None
        if inside is not None:
            raise UnsafeOutputError(f"{name} {out} contains the input {inside}: medanon never writes into, over "
                                    "or around what it reads", fix=f"choose another {name}, outside the data it "
                                                                   "reads")
        empty_dir = out.is_dir() and not any(out.iterdir())
        if not empty_dir:
            if not (overwrite or existing_ok):
                raise OutputExistsError(f"{name} {out} already exists",
                                        fix=f"choose another {name}, or pass overwrite=True to replace it"
                                        if can_overwrite else f"choose another {name}, or remove {out} yourself")
            if existing_ok and not overwrite:
                if not is_medanon_output(out):
                    raise UnsafeOutputError(f"{name} {out} exists and was not written by medanon: medanon never "
                                            "writes into it", fix=f"choose another {name}")
                if what is not None:                   # resumed or written into: only an output of its kind
                    _kind_check(out, folder_kind(out) if out.is_dir() else file_kind(out), what, name,
                                "folder" if out.is_dir() else "file")
            else:
                check_replaceable(out, what=what, name=name)
    _check_writable(target.parent, out, name)
    return out


SHARED_KINDS = ("release", "phantom", "dataset")     # folders nothing is ever written into


def _inside_data_folder(target: Path) -> tuple[Path, str] | None:
    """The nearest folder above ``target`` that is a medanon release, phantom or dataset, and its kind; None. Only
    folders holding one of the files that name those kinds are read (never a run's checkpoint)."""
    for folder in target.parents:
        if folder == folder.parent:
            break
        if (folder / "dataset.yaml").is_file():      # the medanon layout's description: a dataset
            return folder, "dataset"
        if any((folder / f).is_file() for f in (MARKER, "manifest.json", "phantom.json")):
            kind = folder_kind(folder)
            if kind in SHARED_KINDS:
                return folder, kind
    return None


def _check_writable(folder: Path, out: Path, name: str) -> None:
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UnsafeOutputError(f"{name} {out} cannot be created: {probe} is a file",
                                fix=f"choose another {name}, whose parent folders are folders")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UnsafeOutputError(f"{name} {out} cannot be written: no write permission in {probe}",
                                fix=f"choose another {name}, in a folder you can write to")


EXPORTS = "exports.json"       # in a run folder: the sha256 of every export the run wrote


def record_export(run: str | os.PathLike, export: str | os.PathLike) -> None:
    """Note in the run folder ``run`` that it exported ``export`` (by content), so that a resumed run may replace it
    (:func:`check_own_export`)."""
    from medanon.fsutil import atomic_write_text, read_json_object, sha256_file, strict_json

    ledger_path = Path(run) / EXPORTS
    ledger = read_json_object(ledger_path, what="a run's export list", fix="remove it") if ledger_path.is_file() \
        else {}
    ledger[str(Path(export).absolute())] = sha256_file(export)
    atomic_write_text(ledger_path, strict_json(ledger) + "\n")


@contextlib.contextmanager
def writing_export(run: str | os.PathLike, export: str | os.PathLike, *, name: str = "export"):
    """Write ``export`` (a run's copy of its model) under a lock of its own, checked once more to be absent or this
    run's own (:func:`check_own_export`: another run may have exported to the same path while this one trained), and
    recorded after (:func:`record_export`)."""
    from medanon.locks import OutputLock

    with OutputLock(export, name=name):
        check_own_export(run, export, name=name)
        yield
        record_export(run, export)


def check_own_export(run: str | os.PathLike, export: str | os.PathLike | None, *, name: str = "export") -> None:
    """A resumed run replaces an existing ``export`` only when the run itself wrote that very file: the run's
    :data:`EXPORTS` lists this path (as a file: a link or another spelling counts) with the file's content sha256.
    Never another run's export of the same kind, one edited since, nor a copy of the run's export kept elsewhere (a
    user's backup, or the only copy of a moved export)."""
    if export is None or not Path(export).exists():
        return
    import json

    from medanon.fsutil import sha256_file

    ledger_path = Path(run) / EXPORTS
    try:
        ledger = json.loads(ledger_path.read_text(encoding="utf-8"))
        here = _resolve(export)
        ours = {sha for path, sha in ledger.items() if _resolve(path) == here}
    except (OSError, ValueError, AttributeError, ConfigError):
        ours = set()
    if not Path(export).is_file() or sha256_file(export) not in ours:
        raise UnsafeOutputError(f"{name} {export} exists and is not an export of the run in {run} (another run's, "
                                "one changed since, a copy of its export kept elsewhere, or one this run's folder did "
                                "not record): a run replaces only its own export",
                                fix=f"choose another {name} (the run's model stays in {run}), or remove {export} "
                                    "yourself")
