"""Writing a release folder, resumably and atomically.

::

    RELEASE/
      images/3f9c0a6d1b2e4f57.png   random names: nothing links a file to its sources
      labels.csv                     image, n_sources, n_people, labels (aggregated), <label>_counts
      manifest.json                  method, params, privacy statement, seeds, models, counts, label rule

While a release is being written it lives in ``RELEASE.partial/`` next to its final place, with a
private journal (``.journal.jsonl``) of what each record stands for. A run that is interrupted
resumes from the journal (records already written are not redone); when the writer closes, the
journal is turned into the optional private mapping file and moved out of the folder (into ``.RELEASE.closing/``,
so that a run killed from then on still resumes), the folder is renamed into place and the journal removed.
Rows of ``labels.csv`` are sorted by the random names, so their order says nothing about clusters or sources
either.

Nothing else about the files may tell the order they were made in (which is the source order): when
the writer closes, the images are copied in a secret random order (so inode and directory order are
random), and every file and folder gets one timestamp (the release date, midnight UTC). Files are
readable by everyone (``0644``: a release is meant to be shared); the private mapping stays ``0600``.

What the writer checks before any work (``medanon.outputs``): ``out`` and ``mapping`` are not an input
(``inputs``, and the checkpoint files of the models the release records), not inside one and do not contain
one, compared as files; an existing release or mapping is replaced only with ``overwrite``, only by one of its
kind, and only if it holds nothing but what medanon wrote there (checked again just before it is replaced). One
writer at a time: a second run on the same ``out`` is refused at once (:mod:`medanon.locks`). ``OUT.partial`` is
created with the first record, so an argument a method checks before its first record leaves nothing behind.
A full disk or a lost permission is one :class:`OutputWriteError` naming the file, with the partial folder kept
for a resume. The source digest (content checksums of the source files, and of their record and patient ids
and labels, and of what else the records depend on: vessel masks read from files, a separate PCA basis, a testing
seed) is a fingerprint of the private data: it goes into the private journal (a resume whose sources changed is
refused) and into the private mapping, never into the public manifest.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medanon.anonymize.privacy import with_standard_fields
from medanon.config import differences
from medanon.data.records import Record
from medanon.errors import ConfigError, DataError, MedanonError, OutputExistsError, user_stacklevel
from medanon.fsutil import (
    atomic_write_text,
    remove_leftovers,
    replace_output,
)
from medanon.locks import ConcurrentRunError, OutputLock
from medanon.outputs import check_replaceable, checkpoint_files, write_marker
from medanon.release.files import _json_default, labels_csv, manifest_json, mapping_json, write_record
from medanon.release.order import _shuffle, _stamp
from medanon.release.writer_safety import (  # noqa: F401  (check_release_outputs, OutputWriteError: re-exported)
    JOURNAL,
    PENDING_NOTE,
    RANK_JOURNAL_GLOB,
    OutputWriteError,
    _check_each_source_once,
    _is_empty_start,
    _partial_foreign,
    check_release_outputs,
    closing_folder,
    note_pending_mapping,
    os_error,
    restore_closing_journals,
    settle_pending_mapping,
    stale_sibling_mapping,
    unpublished_mapping,
)

_SOURCE_PARTS = {"files": "the number of source images (another split or subset)",
                 "sha256": "the source images' content, or which of them are released (another split or subset)",
                 "records_sha256": "the source images' ids, patient ids or labels (labels.csv edited, or other "
                                   "label columns)",
                 "bytes": "the source images' sizes", "mode": "how the source images are fingerprinted",
                 "patients_known": "whether the sources have patient ids", "modality": "the modality",
                 "layout": "the layout"}


def _source_changes(before: dict, now: dict) -> str:
    """What differs between two source digests, in words (an unknown part: what else the records depend on)."""
    changed = sorted(k for k in {*before, *now} if before.get(k) != now.get(k))
    said = [_SOURCE_PARTS[k] for k in changed if k in _SOURCE_PARTS]
    if len(said) < len(changed):
        said.append("what else the records depend on (" + ", ".join(k for k in changed if k not in _SOURCE_PARTS)
                    + ": vessel masks, a PCA basis, a testing seed)")
    return "; ".join(said) or "the sources"


def launched_by_torchrun() -> bool:
    """Whether this process is one of several that torchrun started (its environment names a rank)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def _but_mapping(head: dict[str, Any]) -> dict[str, Any]:
    """A journal head without where the mapping goes: a resume may write the mapping elsewhere, so two heads that
    differ only there are of one release."""
    return {k: v for k, v in head.items() if k != "mapping"}


class ReleaseWriter:
    """Collects released records and writes the release folder.

    Use as a context manager; on a clean exit the release is finalised, on an exception the
    partial folder is kept so that the next run with ``resume=True`` continues where it stopped.

    ``labels`` names the labels released (aggregated over each record's sources); anything not
    named stays private. ``mapping`` is a path *outside* the release for the private
    record -> sources mapping (written only if given).
    """

    def __init__(self, out: str | Path, *,
                 method: str,                                    # e.g. "ksalsa", "dpglow", "snow"
                 params: Mapping[str, Any],                      # method parameters (k, lambda, epsilon, p, ...)
                 privacy: Mapping[str, Any],                     # exact privacy statement (see each method)
                 labels: Sequence[str],                          # labels to release
                 seeds: Mapping[str, int] | None = None,         # every seed used
                 models: Mapping[str, str] | None = None,        # model name -> checkpoint sha256
                 source: Mapping[str, Any] | None = None,        # source digest (files, sha256), never paths
                 phantom: bool = False,                          # the source is a medanon phantom
                 mapping: str | Path | None = None,              # private mapping file (outside the release)
                 overwrite: bool = False,
                 resume: bool = True,
                 inputs: Sequence[str | Path] = (),              # what the method reads (never written)
                 sharded: bool = False,                          # rank 0 of a torchrun job (release/sharded.py)
                 source_now: Callable[[], Mapping[str, Any]] | None = None):   # ``source`` computed again
        if launched_by_torchrun() and not sharded:
            raise ConfigError(f"release {out}: this method writes its release from one process only, and this is "
                              f"one of {os.environ['WORLD_SIZE']} processes started by torchrun (they would write "
                              "the same records over each other)",
                              fix="run it without torchrun; ksalsa, kcentroid, kpixel, kpca, inverted, gmia, dpglow "
                                  "and ldp-image are the methods that run sharded (docs/distributed.md)")
        self.out = Path(out)
        self.mapping = Path(mapping) if mapping else None
        self.source_now = source_now                 # at close: the source is what it was when the release began
        self.overwrite = overwrite
        inputs = [*inputs, *checkpoint_files((models or {}).values())]     # the checkpoints the models came from
        try:
            check_release_outputs(self.out, self.mapping, inputs=inputs, overwrite=overwrite)
        except OutputExistsError:
            self._settle_stopped_close()        # refused, but a killed run's published release gets its mapping
            raise
        self.partial = self.out.with_name(self.out.name + ".partial")
        self.lock = OutputLock(self.out).acquire()      # one writer per release, before anything is touched
        try:
            # and per mapping: two runs naming one mapping would each replace the other's when they close
            self.mapping_lock = OutputLock(self.mapping, name="mapping").acquire() if self.mapping else None
            # again under the locks: another run may have written this release (or mapping) since the first look
            check_release_outputs(self.out, self.mapping, inputs=inputs, overwrite=overwrite)
        except BaseException:
            if getattr(self, "mapping_lock", None) is not None:
                self.mapping_lock.release()
            self.lock.release()
            raise
        self._mapping_existed = self.mapping is not None and self.mapping.exists()
        try:
            for working in (self.partial, closing_folder(self.out)):
                if working.is_symlink():                 # its files would be written (and removed) where it leads
                    raise OutputExistsError(f"{working} is a link to {os.readlink(working)}, not a folder medanon made",
                                            fix=f"remove the link {working} (not where it leads): medanon keeps "
                                                "interrupted releases there")
            remove_leftovers(self.out)                   # a killed run's replaced release
            settle_pending_mapping(self.out, self.mapping)     # a killed run's mapping, pending while it closed
            restore_closing_journals(self.out, self.partial)   # a killed run's journals, while its release closed
            self._open(method, params, privacy, labels, seeds, models, source, phantom, resume, sharded)
        except BaseException:
            self.release_locks()
            raise

    def _settle_stopped_close(self) -> None:
        """A run killed after its release went in and before its mapping did left the mapping pending (noted in
        ``.OUT.closing``): put it in place, under the release's lock, even when this run is refused (the release
        exists), so that the published release is not left without its only link to its sources. Nothing is done
        while another run holds the lock (it may be closing now) or when there is nothing to settle."""
        if not (closing_folder(self.out) / PENDING_NOTE).is_file():
            return
        try:
            lock = OutputLock(self.out).acquire()
        except ConcurrentRunError:
            return
        try:
            settle_pending_mapping(self.out, self.mapping)
            restore_closing_journals(self.out, self.out.with_name(self.out.name + ".partial"))
        except MedanonError:
            pass                                # the refusal stands; the next accepted run reports what is wrong
        finally:
            lock.release()

    def _open(self, method, params, privacy, labels, seeds, models, source, phantom, resume, sharded) -> None:
        overwrite = self.overwrite
        self.settings = {"method": method, "params": dict(params), "labels": list(labels)}
        self.privacy = with_standard_fields(privacy)       # the same keys for every method (None: no such guarantee)
        self.seeds = dict(seeds or {})
        self.models = dict(models or {})
        self.source = dict(source or {})
        self.phantom = phantom
        self.entries: dict[str, dict[str, Any]] = {}
        self._head = {"settings": self.settings, "source": self.source, "models": self.models,
                      "seeds": self.seeds, "guarantee": self.privacy.get("guarantee"),
                      "mapping": str(self.mapping) if self.mapping is not None else None}
        if self.partial.exists() and not self.partial.is_dir():
            raise OutputExistsError(f"{self.partial} exists and is not a folder",
                                    fix=f"move {self.partial} away: medanon keeps interrupted releases there")
        if self.partial.is_dir() and not (self.partial / JOURNAL).is_file() and not _is_empty_start(self.partial):
            raise OutputExistsError(f"{self.partial} exists but holds no medanon journal",
                                    fix=f"move {self.partial} away: medanon keeps interrupted releases there")
        foreign = _partial_foreign(self.partial) if self.partial.is_dir() else []
        if foreign:
            raise OutputExistsError(f"{self.partial} holds {foreign[0]}, which medanon did not write there",
                                    fix=f"move it out of {self.partial}: medanon keeps interrupted releases there")
        self._started, self._sharded, self._made_partial = False, sharded, False
        if (self.partial / JOURNAL).is_file() and resume and not (overwrite and not self._same_settings()):
            self._load_journal()
            self._started = True
        else:
            if self.partial.exists():
                if (self.partial / JOURNAL).is_file():
                    warnings.warn(f"discarding the interrupted release in {self.partial} (resume=False, or "
                                  "overwrite=True with other settings or sources)", UserWarning,
                                  stacklevel=user_stacklevel())
                shutil.rmtree(self.partial)
            if sharded:                                  # the other processes write into it from the start
                self._start()

    def _start(self) -> None:
        """Create ``OUT.partial`` with its journal head (with the first record: checks before it leave nothing)."""
        if self._started:
            return
        self._made_partial = not self.partial.exists()   # by this run: removed again if it ends holding nothing
        try:
            (self.partial / "images").mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.partial / JOURNAL, json.dumps(self._head, default=_json_default) + "\n")
        except OSError as e:
            raise os_error(e, None) from None
        self._started = True

    # ------------------------------------------------------------------------------------------------ resume

    def _journal_head(self) -> dict[str, Any] | None:
        """The journal's first line, or None where it is empty or not a JSON object (a damaged journal)."""
        with open(self.partial / JOURNAL, encoding="utf-8", errors="replace") as f:
            first = f.readline()                         # the head only: the journal may hold 35k records
        try:
            head = json.loads(first)
        except json.JSONDecodeError:
            return None
        return head if isinstance(head, dict) else None

    def _same_settings(self) -> bool:
        head = self._journal_head()
        return head is not None and _but_mapping(head) == _but_mapping(json.loads(json.dumps(self._head,
                                                                                          default=_json_default)))

    def _load_journal(self) -> None:
        head = self._journal_head()
        if head is None:
            raise DataError(f"{self.partial} holds an interrupted release whose private journal cannot be read (its "
                            "first line, which records the settings and sources, is empty or damaged, e.g. by a "
                            "full disk or a kill while it was created): its records cannot be checked against this "
                            "run's settings", files=[str(self.partial / JOURNAL)],
                            fix="pass overwrite=True to discard it and start over")
        if head.get("mapping") and self.mapping is None:
            raise ConfigError(f"{self.partial} holds an interrupted release that was started with a private mapping "
                              f"({head['mapping']}); resumed without one, the release would have none, and a mapping "
                              "cannot be made afterwards",
                              fix=f"resume with mapping={head['mapping']} (or another mapping file), or delete "
                                  f"{self.partial} to start over without one")
        # models first: another model changes settings that describe it too (its trained_people), and the
        # models' message says what happened
        models = json.loads(json.dumps(self.models, default=_json_default))
        if "models" in head and head["models"] != models:          # journals before models were recorded: not checked
            changed = sorted(k for k in {*head["models"], *models} if head["models"].get(k) != models.get(k))
            raise ConfigError(f"{self.partial} holds an interrupted release made with other models "
                              f"({', '.join(changed)}: another checkpoint than the one it was started with, or that "
                              "checkpoint's content changed since): one release would mix two models",
                              fix="resume with the model files it was started with, or pass overwrite=True to discard "
                                  "it and start over")
        now = json.loads(json.dumps(self.settings, default=_json_default))
        if head.get("settings") != now:
            before = (head.get("settings") or {}).get("params") or {}
            older = "eye_sides" not in before and "eye_sides" in (now.get("params") or {}) and \
                "clustering" in before                  # a k-Same run started before eye sides were recorded
            raise ConfigError(f"{self.partial} holds an interrupted release with other settings: "
                              f"{differences(head.get('settings') or {}, now)}",
                              fix=("it was made without averaging eyes as right eyes (eye_sides='off', or a run "
                                   "started before they were): resume it with eye_sides='off' (as it was made), "
                                   if older else "rerun with the same settings to resume, ")
                                  + "or pass overwrite=True to discard it and start over")
        source_now = json.loads(json.dumps(self.source, default=_json_default))
        if head.get("source") != source_now:
            raise ConfigError(f"{self.partial} holds an interrupted release of other sources: "
                              f"{_source_changes(head.get('source') or {}, source_now)} changed since it was started, "
                              "so its images would be stale",
                              fix="resume with the data and split it was started with, or pass overwrite=True to "
                                  "discard it and start over")
        seeds = json.loads(json.dumps(self.seeds, default=_json_default))
        guarantee = self.privacy.get("guarantee")
        if ("seeds" in head and head["seeds"] != seeds) or ("guarantee" in head and head["guarantee"] != guarantee):
            what = differences({"seeds": head.get("seeds", seeds), "guarantee": head.get("guarantee", guarantee)},
                               {"seeds": seeds, "guarantee": guarantee})
            raise ConfigError(f"{self.partial} holds an interrupted release made with other seeds or another privacy "
                              f"guarantee ({what}): one statement cannot cover both halves",
                              fix="resume with the seed setting it was started with, or pass overwrite=True to "
                                  "discard it and start over")
        shuffled = self.partial / ".images.shuffled"
        if shuffled.is_dir() and not (self.partial / "images").exists():
            shuffled.rename(self.partial / "images")     # a close killed between its shuffle's delete and rename
        lines = (self.partial / JOURNAL).read_text(encoding="utf-8").splitlines()
        for line in lines[1:]:
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                break                                    # a torn last line: that record is redone
            if (self.partial / "images" / e["name"]).exists():
                self.entries[e["key"]] = e
        self.absorb_rank_journals()                      # records other processes of a torchrun job finished
        # an image written without its journal line (the process was killed in between) is an orphan
        known = {e["name"] for e in self.entries.values()}
        for p in (self.partial / "images").iterdir():
            if p.name not in known:
                p.unlink()
        self._drop_unpublished_mapping(head.get("mapping"))

    def _drop_unpublished_mapping(self, before: str | None) -> None:
        """A run killed while finishing (by a version that wrote the mapping before the release was in place, not
        pending beside it) had already written its mapping (to ``before``) and not yet published the release.
        Resumed with another mapping path, that file would stay behind: a second private copy of which sources stand
        behind records, of a release never published under it. It is removed, if it maps records of this interrupted
        release only, and the removal is said."""
        if not before or self.mapping is None or Path(before).resolve() == Path(self.mapping).resolve():
            return
        if unpublished_mapping(before, self.out):
            Path(before).unlink()
            warnings.warn(f"removed {before}, the private mapping an interrupted run of this release wrote before it "
                          f"was published; this run writes the mapping to {self.mapping}", UserWarning,
                          stacklevel=user_stacklevel())

    def done(self, key: str) -> bool:
        """Whether the record ``key`` was already written (by this or an interrupted run)."""
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    # ------------------------------------------------------------------------------------------------ write

    def add(self, key: str, image: torch.Tensor | np.ndarray, sources: Sequence[Record], *,
            quality: Mapping[str, Any] | None = None) -> str:
        """Write one released image standing for ``sources``; returns its random file name.

        ``key`` identifies the record for resuming (e.g. a cluster index); it is kept only in the
        private journal. ``quality``: how the record was computed (``{"diverged": bool}``: DP-GLOW's decoder fell
        back), kept with it in the journal, so that the manifest's total counts resumed records too.
        """
        if key in self.entries:
            raise ValueError(f"release record {key!r} was already written")
        self._start()
        try:
            entry = write_record(self.partial, JOURNAL, key, image, sources, self.settings["labels"], quality=quality)
        except OSError as e:
            raise os_error(e, self.partial) from None
        self.entries[key] = entry
        return entry["name"]

    def absorb_rank_journals(self) -> int:
        """Take in the records that other processes of a torchrun job wrote (``.journal.rank<R>.jsonl``,
        :mod:`medanon.release.sharded`): each record whose image exists and whose journal head matches this
        release's is appended to the main journal, then the rank journal is removed. Returns the records taken in.

        Called when a sharded run ends (rank 0 merges) and when an interrupted one is resumed (with any
        number of processes): a record a rank finished before the interruption is never recomputed.
        """
        head = _but_mapping(json.loads(json.dumps(self._head, default=_json_default)))
        taken = 0
        for path in sorted(self.partial.glob(RANK_JOURNAL_GLOB)):
            lines = path.read_text(encoding="utf-8").splitlines()
            same = False
            try:
                same = bool(lines) and _but_mapping(json.loads(lines[0])) == head
            except json.JSONDecodeError:
                pass
            new = []
            for line in lines[1:] if same else ():
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:
                    break                                # a torn last line: that record is redone
                if e["key"] in self.entries:
                    if self.entries[e["key"]]["name"] != e["name"]:
                        raise DataError(f"{path} and the journal both hold release record {e['key']!r}",
                                        fix=f"delete {self.partial} and start again")
                    continue
                if (self.partial / "images" / e["name"]).exists():
                    new.append(e)
            if new:
                with open(self.partial / JOURNAL, "a", encoding="utf-8") as f:
                    f.write("".join(json.dumps(e, default=_json_default) + "\n" for e in new))
                    f.flush()
                    os.fsync(f.fileno())
            for e in new:
                self.entries[e["key"]] = e
            path.unlink()                                # its records are in the main journal now
            taken += len(new)
        return taken

    def close(self) -> Path:
        """Write ``labels.csv`` and ``manifest.json``, the mapping if asked, and move into place."""
        try:
            return self._close()
        except BaseException as e:
            settle_pending_mapping(self.out, self.mapping)   # stopped while closing: release and mapping agree
            if isinstance(e, OSError):
                raise os_error(e, self.partial) from None
            raise
        finally:
            self.release_locks()

    def release_locks(self) -> None:
        """Give back the release's and the mapping's locks (done on close and on any failure; idempotent)."""
        self.lock.release()
        if self.mapping_lock is not None:
            self.mapping_lock.release()

    def _close(self) -> Path:
        if not self.entries:
            raise DataError(f"release {self.out} has no records", fix="check the input data and method settings")
        if self.source_now is not None and self.source.get("mode") in ("content", "memory") \
                and dict(self.source_now()) != self.source:
            # (by content only: a digest by listing, above its size limit, changes with a file's time alone)
            raise DataError(f"the source of release {self.out} changed while it was being made (its image files were "
                            "replaced or edited meanwhile): its records may mix the old and the new source, so it is "
                            f"not published (it stays in {self.partial})",
                            fix="run it again with overwrite once nothing writes the source (a resume is refused: "
                                "its journal holds the old source)")
        if self.out.exists():                            # files may have been added to the old release meanwhile
            check_replaceable(self.out, what="release", name="out")
        if self.mapping is not None and self.mapping.exists():
            if not (self.overwrite or self._mapping_existed):     # written by someone else while this run ran
                raise OutputExistsError(f"mapping {self.mapping} appeared while this release was being made",
                                        fix=f"pass another mapping path (the release stays in {self.partial}, and "
                                            "the same command with it resumes), or overwrite=True")
            check_replaceable(self.mapping, what="mapping", name="mapping")
        rows = sorted(self.entries.values(), key=lambda e: e["name"])
        views = (self.settings["params"].get("augmentation") or {}).get("views", 1)
        _check_each_source_once(rows, views=int(views or 1), out=self.out)
        foreign = _partial_foreign(self.partial)     # put there by someone else while this run wrote it
        written = {e["name"] for e in rows}
        foreign += sorted(f"images/{q.name}" for q in (self.partial / "images").glob("*.png") if q.name not in written)
        if foreign:
            raise OutputExistsError(f"{self.partial} holds {foreign[0]}"
                                    + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
                                    + ", which this run did not write: publishing the folder would publish it",
                                    fix=f"move it out of {self.partial}, then run the same command again (it resumes)")
        atomic_write_text(self.partial / "labels.csv", labels_csv(rows))
        atomic_write_text(self.partial / "manifest.json", manifest_json(
            rows, settings=self.settings, source=self.source, privacy=self.privacy, seeds=self.seeds,
            models=self.models, phantom=self.phantom))
        # the private journals leave the folder before it is published, but are kept until it is in place: a run
        # killed from here on resumes from them (restore_closing_journals) instead of finding a folder it cannot read
        closing = closing_folder(self.out)
        closing.mkdir(mode=0o700, exist_ok=True)
        pending = None
        if self.mapping is not None:                     # beside the mapping until the release is in place
            pending = note_pending_mapping(self.out, self.mapping)    # (noted: a later run settles it, any mapping)
            atomic_write_text(pending, mapping_json(rows, release=self.out.name, method=self.settings["method"],
                                                    source=self.source))
            os.chmod(pending, 0o600)                     # private: record -> source patients
        _shuffle(self.partial)
        for journal in (self.partial / JOURNAL, *self.partial.glob(RANK_JOURNAL_GLOB)):
            os.replace(journal, closing / journal.name)
        write_marker(self.partial, "release")           # its files and sizes: overwrite spares any edited since
        _stamp(self.partial)
        if self.out.exists():
            replace_output(self.out, self.partial)
        else:
            self.partial.rename(self.out)
        if pending is not None:                          # the old release's mapping goes only with it
            os.replace(pending, self.mapping)
        shutil.rmtree(closing)
        stale = stale_sibling_mapping(self.out, self.mapping)
        if stale is not None:
            warnings.warn(f"{stale} is the private mapping of an earlier release of {self.out}, which this release "
                          f"replaced{'' if self.mapping else ' without writing a mapping'}: it describes none of "
                          f"its records, and evaluating or auditing {self.out} would find it there; delete it",
                          UserWarning, stacklevel=user_stacklevel())
        return self.out

    def __enter__(self) -> ReleaseWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._remove_empty_partial()
            self.release_locks()
            if isinstance(exc, OSError) and self._writes(exc.filename):
                raise os_error(exc, self.partial if self._started else None) from None
            if isinstance(exc, DataError) and exc.files and self.entries and self.partial.is_dir():
                # a source found bad mid-run (images read as they are released): say what was kept and how the
                # fixes offered meet it (leaving the file out changes the sources, which a resume refuses)
                exc.fix = (f"{exc.fix + '; ' if exc.fix else ''}{self.partial} keeps {len(self.entries)} finished "
                           "record(s): once the file is replaced the same command resumes from them; to leave it "
                           "out instead, start over with overwrite=True")

    def _writes(self, filename) -> bool:
        """Whether an operating-system error on ``filename`` is this writer's (no file named: taken as one). A
        source that could not be read is not reported as a failed write."""
        if not filename:
            return True
        f = Path(os.fsdecode(filename)).absolute()
        mine = [m.absolute() for m in (self.out, self.partial, closing_folder(self.out), self.mapping) if m]
        # the folders written in (temporary files and locks beside an output count as the output's)
        return any(f == m or m in f.parents or f.parent == m.parent for m in mine)

    def _remove_empty_partial(self) -> None:
        """A run that failed before its first record was written (e.g. its first batch diverged) leaves nothing to
        resume: the ``OUT.partial`` it made is removed, so the corrected command starts afresh instead of being
        told of an interrupted release with other settings."""
        if not (self._started and self._made_partial) or self.entries or self._sharded:
            return                                      # (a torchrun job's other processes write into it)
        images = self.partial / "images"
        if (images.is_dir() and any(images.iterdir())) or any(self.partial.glob(RANK_JOURNAL_GLOB)):
            return
        shutil.rmtree(self.partial, ignore_errors=True)


