"""The release writer's safety checks: where a release and its mapping may go (``medanon.outputs``), what an
interrupted release's partial folder may hold, that no source stands behind two records, and an operating
system's refusal as one clear error. Used by :class:`medanon.release.writer.ReleaseWriter`."""

from __future__ import annotations

import os
import shutil
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medanon.errors import ConfigError, DataError, MedanonError, OutputExistsError, user_stacklevel
from medanon.fsutil import atomic_write_text
from medanon.outputs import MARKER, check_output

JOURNAL = ".journal.jsonl"
RANK_JOURNAL_GLOB = ".journal.rank*.jsonl"           # records of the other processes of a torchrun job


class OutputWriteError(MedanonError):
    """The operating system refused a write (no space, no permission, quota): the partial folder is kept."""


def os_error(e: OSError, partial: Path | None = None) -> OutputWriteError:
    """``e`` as one clear error naming the file; a resumable partial folder is named in the fix."""
    where = e.filename or partial or "the output"
    keep = f"; {partial} keeps what was written, and the same command resumes from it" if partial else ""
    return OutputWriteError(f"could not write {where}: {e.strerror or e}",
                            fix=f"free space or fix the permissions there, then rerun the same command{keep}")


def check_release_outputs(out: str | Path, mapping: str | Path | None = None, *, inputs: Sequence[str | Path] = (),
                          overwrite: bool = False) -> None:
    """The checks a release's outputs must pass before any work starts (``medanon.outputs``).

    ``out`` and ``mapping`` may not be, be inside, or contain any of ``inputs``; an existing one is replaced only
    with ``overwrite`` and only if medanon wrote it; the mapping (private) may not be inside the release.
    """
    out = Path(out)
    check_output(out, inputs=inputs, overwrite=overwrite, kind="dir", name="out", what="release")
    if mapping is not None:
        check_mapping_apart(mapping, [out])
        _check_mapping_is_of(mapping, out)          # first: overwrite would not help, so the fix must not offer it
        check_output(mapping, inputs=[*inputs, out], overwrite=overwrite, kind="file", name="mapping",
                     what="mapping", existing_ok=_written_by_interrupted_run(mapping, out))


def _held_mapping(mapping: str | Path) -> dict | None:
    """The medanon mapping at ``mapping``, or None when there is none (or it is not one: the output rules judge
    that)."""
    import json

    from medanon.output_inventory import MAPPING_FORMAT

    try:
        held = json.loads(Path(mapping).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return held if isinstance(held, dict) and held.get("format") == MAPPING_FORMAT else None


def _images_in(folder: Path) -> set[str]:
    """The records (``images/<random name>``) in the release folder ``folder``."""
    return {f"images/{p.name}" for p in (folder / "images").iterdir()} if (folder / "images").is_dir() else set()


def _record_names(out: Path) -> set[str]:
    """The records of the release ``out``: in its folder, in the ``OUT.partial`` folder it is being written in (its
    images, the copy a stopped shuffle left in ``.images.shuffled``) and in that run's journal (in ``OUT.partial`` or,
    while it is being published, ``.OUT.closing``)."""
    import json

    partial = out.with_name(out.name + ".partial")
    names = _images_in(out) | _images_in(partial)
    shuffled = partial / ".images.shuffled"
    if shuffled.is_dir():
        names |= {f"images/{p.name}" for p in shuffled.iterdir()}
    for journal in (partial / JOURNAL, closing_folder(out) / JOURNAL):
        try:
            lines = journal.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue                                # the head line's settings, or a torn last line
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                names.add(f"images/{entry['name']}")
    return names


def _is_mapping_of(held: dict, out: Path) -> bool:
    """Whether the mapping ``held`` is the release ``out``'s: it names that folder, and each record it maps is one of
    that release's (random names: a release of the same folder name elsewhere, or made again, has other ones)."""
    records = held.get("records")
    return (held.get("release") == out.name and isinstance(records, dict) and bool(records)
            and set(records) <= _record_names(out))


def _check_mapping_is_of(mapping: str | Path, out: Path) -> None:
    """An existing mapping is replaced only by the mapping of the release it belongs to (:func:`_is_mapping_of`):
    another release's mapping is the only link of that release's records to their sources, so replacing it would
    leave that release impossible to audit or evaluate."""
    held = _held_mapping(mapping) if Path(mapping).is_file() else None
    pending = pending_mapping(Path(mapping))
    waiting = _held_mapping(pending) if pending.is_file() else None
    if waiting is not None and _is_mapping_of(waiting, out):
        return              # a run killed while closing this release: its own mapping replaces this one on opening
    if waiting is not None:             # another release's, pending since a run of it was stopped while publishing
        from medanon.locks import ConcurrentRunError, writer_of

        whose = waiting.get("release")
        holder = writer_of(mapping)     # ... or being published now by a live run, which must not be disturbed
        if holder is not None:
            raise ConcurrentRunError(f"another medanon run is writing the mapping {mapping} now, for the release "
                                     f"{whose!r}" + (f" ({holder})" if holder else ""),
                                     fix="wait for it to finish, or give this release another mapping path")
        raise OutputExistsError(f"the mapping {mapping} is pending for the release {whose!r} ({pending}): a run of "
                                "it was stopped while publishing it, and this mapping is that release's only link to "
                                "its sources",
                                fix=f"run that release's command again with overwrite to finish it, or give this "
                                    f"release another mapping path (if that release is gone, delete {pending} "
                                    "yourself first)")
    if held is not None and not _is_mapping_of(held, out):
        whose = held.get("release")
        also = (f" (a release named {whose!r} whose records are not those of {out})" if whose == out.name else "")
        raise OutputExistsError(f"the mapping {mapping} belongs to the release {whose!r}{also}, not to {out}: "
                                "replacing it would lose which sources stand behind that release's records",
                                fix="give this release its own mapping path (if that release is gone, delete its "
                                    "mapping yourself first)")


MAPPING_SUFFIX = ".mapping.json"           # where evaluation and audit look for a release's mapping by default


PENDING_NOTE = "pending-mapping"             # in ``.OUT.closing``: where the closing run's mapping waits


def note_pending_mapping(out: Path, mapping: Path) -> Path:
    """Record in the closing folder (made first) where this run's mapping waits, so that a later run of ``out``
    settles it even when given another mapping path, or none; returns the pending path."""
    pending = pending_mapping(mapping)
    atomic_write_text(closing_folder(out) / PENDING_NOTE, str(Path(mapping).absolute()) + "\n")
    return pending


def settle_noted_mapping(out: Path) -> None:
    """The mapping a run killed while closing ``out`` had pending (its closing folder's note): put in place with its
    release, or removed (:func:`settle_pending_mapping`); said when it is removed."""
    note = closing_folder(out) / PENDING_NOTE
    try:
        mapping = Path(note.read_text(encoding="utf-8").strip())
    except OSError:
        return
    pending = pending_mapping(mapping)
    if pending.is_file():
        published = _maps_published(pending, out)
        settle_pending_mapping(out, mapping)
        if not published and not pending.exists():
            warnings.warn(f"removed {pending}, the private mapping a stopped run of {out} left before its release "
                          "was published", UserWarning, stacklevel=user_stacklevel())
    note.unlink(missing_ok=True)


def _maps_published(mapping: Path, out: Path) -> bool:
    held = _held_mapping(mapping) if mapping.is_file() else None
    records = (held or {}).get("records")
    return isinstance(records, dict) and bool(records) and set(records) <= _images_in(out)


def pending_mapping(mapping: Path) -> Path:
    """Where a closing release's mapping waits (beside ``mapping``, so that moving it into place is one rename) until
    the release it describes is in place: an existing mapping is replaced only together with its release."""
    return mapping.with_name(f".{mapping.name}.pending")


def settle_pending_mapping(out: Path, mapping: Path | None) -> None:
    """A release closing was stopped (interrupted, killed) with its mapping still pending: put the mapping in place
    when its records are the release's now in place (the release was moved in, the mapping not yet), else remove it
    (the release was not published: the old release keeps its mapping, and a resumed run writes it again)."""
    if mapping is None:
        return
    pending = pending_mapping(mapping)
    held = _held_mapping(pending) if pending.is_file() else None
    if held is None or held.get("release") != out.name:
        return                          # not this release's (another release's is refused by the output checks)
    if _maps_published(pending, out):
        os.replace(pending, mapping)
    elif _is_mapping_of(held, out):
        pending.unlink(missing_ok=True)     # this release's, of records never published
    # else: another release's of the same folder name (random record names tell them apart): not this run's to touch


def stale_sibling_mapping(out: Path, written: Path | None) -> Path | None:
    """``OUT.mapping.json`` beside the release ``out`` (where evaluation finds a mapping by default) when it is not
    the mapping just written (``written``) but one of an earlier release of that folder: it names ``out`` and none
    of its records (random names). It no longer describes the release; medanon does not delete it (it is the user's
    file), the writer warns and evaluation refuses it by name."""
    sibling = out.with_name(out.name + MAPPING_SUFFIX)
    if not sibling.is_file() or (written is not None and sibling.resolve() == written.resolve()):
        return None
    held = _held_mapping(sibling)
    if held is None or held.get("release") != out.name or not isinstance(held.get("records"), dict):
        return None
    return sibling if not set(held["records"]) & _images_in(out) else None


def _written_by_interrupted_run(mapping: str | Path, out: Path) -> bool:
    """Whether ``mapping`` is the one an interrupted run of ``out`` wrote while finishing (versions before the pending
    mapping, :func:`pending_mapping`, wrote it just before the release was renamed into place): the same command
    resumes it and writes it again."""
    journals = (out.with_name(out.name + ".partial") / JOURNAL, closing_folder(out) / JOURNAL)
    if not any(j.is_file() for j in journals) or not Path(mapping).is_file():     # a run killed while closing
        return False
    held = _held_mapping(mapping)
    return held is not None and _is_mapping_of(held, out)


def unpublished_mapping(mapping: str | Path, out: Path) -> bool:
    """Whether the file ``mapping`` is the mapping an interrupted run of ``out`` wrote while finishing, of records
    that were never published: it names ``out`` and every record it maps is in ``OUT.partial`` only (random names:
    the mapping of a published release, even of the same folder, maps other records)."""
    held = _held_mapping(mapping) if Path(mapping).is_file() else None
    return held is not None and _is_mapping_of(held, out) and not set(held["records"]) & _images_in(out)


def release_working_names(out: Path) -> tuple[str, str]:
    """The names a release ``out`` is written under before it becomes ``out``: its ``OUT.partial`` folder, and the
    ``.OUT.*`` siblings (lock, replaced release) of the same folder."""
    return out.name + ".partial", "." + out.name + "."


def check_mapping_apart(mapping: str | Path, outs: Sequence[str | Path]) -> None:
    """The private ``mapping`` is not inside any of the releases ``outs``, nor inside the folders they are written
    under until they are finished (``OUT.partial`` becomes ``OUT``: a mapping there would be published)."""
    from medanon.outputs import _resolve

    m = _resolve(mapping)
    for out in outs:
        o = _resolve(out)
        partial, hidden = release_working_names(o)
        for folder in (m, *m.parents):
            if folder.parent == o.parent and (folder.name in (o.name, partial) or folder.name.startswith(hidden)):
                raise ConfigError(f"the mapping file {mapping} would be inside the release {out} (or the folder it "
                                  "is written in until it is finished), which is published",
                                  fix="write the private mapping outside the release folder")


def _check_each_source_once(rows: list[dict[str, Any]], *, views: int, out: Path) -> None:
    """A source image stands behind one record (``views`` records of one cluster with latent augmentation): more
    would mean a record released twice with fresh randomness, e.g. by two runs writing one release."""
    counts = Counter(s for e in rows for s in e["sources"])
    over = sorted(s for s, n in counts.items() if n > views)
    if over:
        raise DataError(f"release {out}: {len(over)} source images stand behind more than {views} record(s) each; "
                        "their noise or averages were drawn more than once, which the privacy statement does not "
                        "cover", fix=f"delete {out}.partial and run the release again, in one process")


def closing_folder(out: Path) -> Path:
    """Where the private journals wait while a finished release is moved into place: beside it, not in it."""
    return out.with_name(f".{out.name}.closing")


def restore_closing_journals(out: Path, partial: Path) -> None:
    """A run killed while its release was being moved into place left the journals in ``.OUT.closing``: put them
    back into ``OUT.partial``, so that this run resumes it; if the release did reach its place, they are stale and
    removed."""
    closing = closing_folder(out)
    if not closing.is_dir():
        return
    settle_noted_mapping(out)                           # the mapping that run had pending, wherever it was
    names = [p.name for p in closing.iterdir() if p.name != PENDING_NOTE]
    if any(not (n == JOURNAL or Path(n).match(RANK_JOURNAL_GLOB)) for n in names):
        raise OutputExistsError(f"{closing} holds files medanon did not write there",
                                fix=f"move {closing} away: medanon keeps a closing release's journals there")
    if partial.is_dir() and not (partial / JOURNAL).exists() and JOURNAL in names:
        for n in names:
            os.replace(closing / n, partial / n)
        (partial / MARKER).unlink(missing_ok=True)      # written again when this run closes
    shutil.rmtree(closing)


def _is_empty_start(partial: Path) -> bool:
    """A partial folder killed between its creation and its journal head: nothing but an empty ``images``."""
    return all(p.name == "images" and p.is_dir() and not any(p.iterdir()) for p in partial.iterdir())


def _partial_foreign(partial: Path) -> list[str]:
    """Files in a partial release folder that the writer does not write there."""
    ok_top = {JOURNAL, "labels.csv", "manifest.json"}
    bad = []
    for p in partial.iterdir():
        if p.is_dir() and p.name in ("images", ".images.shuffled"):
            bad += [f"{p.name}/{q.name}" for q in p.iterdir()
                    if not (q.is_file() and (q.suffix == ".png" or q.name.endswith(".tmp")))]
        elif not (p.is_file() and (p.name in ok_top or p.match(RANK_JOURNAL_GLOB))):
            bad.append(p.name)
    return sorted(bad)


