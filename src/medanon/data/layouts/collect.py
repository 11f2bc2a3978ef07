"""The folder index (one cached ``os.scandir`` per folder), resolution of the image a CSV cell names,
and the collector that merges CSV rows into records and problems; also the label-cell encoding and
message helpers every reader uses.

Package-internal (see :mod:`medanon.data.layouts`): names without a leading underscore are shared by
the package's modules, not public API.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from medanon.data.labels import NAN, spec
from medanon.data.layouts.common import IMAGE_EXTENSIONS
from medanon.data.records import Problem, Record, Scan, make_record_id

# --------------------------------------------------------------------------------------------
# Folder listings (one os.scandir per folder, cached) and image resolution


def file_ext(name: str) -> str:
    _, dot, ext = name.rpartition(".")
    return "." + ext.lower() if dot else ""


class Dirs:
    def __init__(self) -> None:
        self._cache: dict[Path, tuple[set[str], dict[str, list[str]], list[str]]] = {}
        self._alike: dict[Path, dict[str, list[str]]] = {}     # by _alike_key, built when a name is missing

    def _get(self, d: Path) -> tuple[set[str], dict[str, list[str]], list[str]]:
        """The files of ``d``, its images by stem, and its sub-folders (not links to folders): one scandir."""
        got = self._cache.get(d)
        if got is None:
            names: set[str] = set()
            stems: dict[str, list[str]] = {}
            subdirs: list[str] = []
            try:
                with os.scandir(d) as it:
                    for e in it:
                        try:
                            if not e.is_file():
                                if e.is_dir(follow_symlinks=False):
                                    subdirs.append(e.name)
                                continue
                        except OSError:
                            continue
                        names.add(e.name)
                        stem = e.name.rpartition(".")[0]
                        if stem and file_ext(e.name) in IMAGE_EXTENSIONS:
                            stems.setdefault(stem, []).append(e.name)
            except OSError:
                pass
            got = self._cache[d] = (names, stems, subdirs)
        return got

    def has(self, path: Path) -> bool:
        return path.name in self._get(path.parent)[0]

    def spelled_alike(self, path: Path) -> list[str]:
        """The files of ``path``'s folder whose names differ from its name only in the case of the extension
        (``10_left.JPEG`` for ``10_left.jpeg``) or in Unicode normalisation (``Zoë`` composed or decomposed)."""
        alike = self._alike.get(path.parent)
        if alike is None:
            alike = self._alike[path.parent] = {}
            for n in self._get(path.parent)[0]:
                alike.setdefault(_alike_key(n), []).append(n)
        return sorted(n for n in alike.get(_alike_key(path.name), []) if n != path.name)

    def by_stem(self, d: Path, stem: str) -> list[str]:
        return self._get(d)[1].get(stem, [])

    def images(self, d: Path) -> list[str]:
        return sorted(n for n in self._get(d)[0] if file_ext(n) in IMAGE_EXTENSIONS and not n.startswith("."))

    def tree(self, top: Path) -> list[Path]:
        """``top`` and every folder below it, hidden folders and links to folders left out (as ``os.walk`` does);
        each folder is listed once, sharing the listings that resolving the CSV's cells already made."""
        found, stack = [], [top]
        while stack:
            d = stack.pop()
            found.append(d)
            stack.extend(d / n for n in self._get(d)[2] if not n.startswith("."))
        return found


def _alike_key(name: str) -> str:
    """A file name with its Unicode composed (NFC) and its extension in lower case: names a CSV and a disk spell
    alike (a CSV written on Windows, files copied from a Mac)."""
    import unicodedata

    stem, dot, ext = unicodedata.normalize("NFC", name).rpartition(".")
    return f"{stem}.{ext.lower()}" if dot else name


def resolve(dirs: Dirs, bases: Sequence[Path], value: str,
            prefer: Sequence[str] = IMAGE_EXTENSIONS) -> Path | None:
    """Find the file a CSV cell names: ``base/value`` as is, or the one file spelled alike (another case of the
    extension, another Unicode normalisation: :meth:`Dirs.spelled_alike`), or, if it has no image extension,
    ``base/value.<ext>`` for any of IMAGE_EXTENSIONS (any case; ``prefer`` orders ties)."""
    value = value.strip().replace("\\", "/")
    if not value:
        return None
    for base in bases:
        target = Path(os.path.normpath(base / value))     # "a/../b.png" and "b.png" are one file
        if dirs.has(target):
            return target
        alike = dirs.spelled_alike(target) if file_ext(target.name) in IMAGE_EXTENSIONS else []
        if len(alike) == 1:                             # 10_left.jpeg in the CSV, 10_left.JPEG on disk
            return target.parent / alike[0]
        if file_ext(target.name) not in IMAGE_EXTENSIONS:
            found = dirs.by_stem(target.parent, target.name)
            if found:
                order = list(prefer) + list(IMAGE_EXTENSIONS)
                return target.parent / min(found, key=lambda n: (order.index(file_ext(n)), n))
    return None


# --------------------------------------------------------------------------------------------
# Collecting records and problems


@dataclass
class Entry:
    path: Path
    rel: str
    patient_id: str
    labels: dict[str, float]
    line: int
    mask_path: Path | None = None
    bad: bool = False
    table: str = ""           # the labels table ``line`` is a row of (readers that read several tables)


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _show(name: str, v: float) -> str:
    try:
        return spec(name).decode(v)
    except (IndexError, ValueError, TypeError):
        return f"{v:g}"


@dataclass
class Collector:
    root: Path
    csv_name: str
    entries: dict[Path, Entry] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    image_dirs: set[Path] = field(default_factory=set)   # folders to check for unlabelled images
    scope: list[Path] = field(default_factory=list)      # besides root, folders whose images must be labelled
    patients_known: bool = True                          # False: no patient ids, each image its own "patient"
    real: dict[Path, Path] = field(default_factory=dict)  # resolved file -> the path it was first listed as
    listed: set[Path] = field(default_factory=set)       # every path a row names (links included)
    trees: set[Path] = field(default_factory=set)        # folders whose every sub-folder's images must be labelled
    tables: list[str] = field(default_factory=list)      # every labels table read (start_table), in order

    def start_table(self, name: str) -> None:
        """Read the rows of another labels table: messages about its rows name it, and those about the whole
        dataset (an image no row names) name every table read."""
        self.csv_name = name
        if name not in self.tables:
            self.tables.append(name)

    def all_tables(self, join: str = " or ") -> str:
        return join.join(self.tables) if self.tables else self.csv_name

    def row_of(self, e: Entry) -> str:
        """Where an entry's row is: "train.csv row 12"."""
        return f"{e.table or self.csv_name} row {e.line}"

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return Path(os.path.relpath(path, self.root)).as_posix()

    def problem(self, path: Path | str, kind: str, detail: str) -> None:
        self.problems.append(Problem(self.rel(path) if isinstance(path, Path) else path, kind, detail))

    def row_problem(self, line: int, detail: str) -> None:
        self.problems.append(Problem(f"{self.csv_name}:{line}", "label",
                                     f"{self.csv_name} row {line}: {detail}"))

    def missing(self, expected: Path, line: int, what: str = "image", looked: str = "") -> None:
        if expected.is_dir():
            self.problem(expected, "unreadable", f"{what} listed in {self.csv_name} row {line} is a folder, "
                                                 "not an image file")
            return
        if expected.is_symlink() or os.path.lexists(expected):     # there, but no file: a FIFO, a device, a loop
            if expected.is_symlink() and not expected.exists():
                how, kind = "is a link that leads nowhere (or through a loop of links)", "unreadable"
            elif expected.is_file():                                # a file its folder's listing did not show
                how, kind = "is there, but its folder could not be listed (not readable)", "denied"
            else:
                how, kind = "is not a plain file (a pipe, a device or a socket)", "unreadable"
            self.problem(expected, kind, f"{what} listed in {self.csv_name} row {line} {how}")
            return
        self.problem(expected, "missing", f"{what} listed in {self.csv_name} row {line} is not on disk"
                     + (f" ({looked})" if looked else ""))

    def add(self, path: Path, patient_id: str, labels: dict[str, float], line: int, *,
            errors: Sequence[str] = (), mask_path: Path | None = None) -> Entry:
        """Record one CSV row for ``path``; rows of the same image are merged if they agree, also where they name it
        by two paths (a link to it): one file is one image, whatever it is called."""
        self.image_dirs.add(path.parent)
        self.listed.add(path)
        path = self.real.setdefault(Path(os.path.realpath(path)), path)
        rel = self.rel(path)
        for err in errors:
            self.problem(path, "label", f"{self.csv_name} row {line}: {err}")
        old = self.entries.get(path)
        if old is None:
            entry = Entry(path, rel, patient_id, dict(labels), line, mask_path, bool(errors), self.csv_name)
            self.entries[path] = entry
            return entry
        conflicts = []
        if old.patient_id != patient_id:
            conflicts.append("different patient ids")
        if old.mask_path != mask_path:
            conflicts.append("different masks")
        for name, v in labels.items():
            w = old.labels.get(name, NAN)
            if math.isnan(w):
                old.labels[name] = v
            elif not math.isnan(v) and not same(v, w):
                conflicts.append(f"{name} {_show(name, w)} vs {_show(name, v)}")
        if conflicts:
            rows = (f"{self.csv_name} rows {old.line} and {line}" if old.table in ("", self.csv_name)
                    else f"{self.row_of(old)} and {self.csv_name} row {line}")
            self.problem(path, "label", f"{rows} describe the same image but disagree: {'; '.join(conflicts)}")
        old.bad = old.bad or bool(errors) or bool(conflicts)
        return old

    def check_unlabelled(self, dirs: Dirs, extra_referenced: Iterable[Path] = ()) -> None:
        referenced = set(self.entries) | self.listed | {e.mask_path for e in self.entries.values() if e.mask_path}
        referenced |= set(extra_referenced)
        scope = [Path(os.path.normpath(r)) for r in [self.root, *self.scope]]

        def inside(d: Path) -> bool:    # not a folder outside the dataset that a ../ path reaches
            norm = Path(os.path.normpath(d))
            return any(norm == r or norm.is_relative_to(r) for r in scope)

        folders = {d for d in self.image_dirs if inside(d)}
        for top in self.trees:      # also the folders that hold no listed image (a new patient's, a new study's)
            if inside(top):
                folders.update(dirs.tree(top))
        said = self.all_tables()
        for d in sorted(folders):
            for name in dirs.images(d):
                p = d / name
                if p not in referenced:
                    self.problem(p, "unlabelled", f"no row of {said} mentions this image")

    def records(self) -> list[Record]:
        good = sorted((e for e in self.entries.values() if not e.bad), key=lambda e: e.rel)
        return [Record(path=e.path, patient_id=e.patient_id, labels=dict(e.labels),
                       record_id=make_record_id(e.rel), mask_path=e.mask_path, patient_known=self.patients_known)
                for e in good]

    def scan(self, layout: str, modality: str | None) -> Scan:
        from medanon.data.layouts.patient_ids import check_patient_ids

        check_patient_ids(self)
        return Scan(layout=layout, root=self.root, records=self.records(), problems=list(self.problems),
                    modality=modality)


def encode(labels: dict[str, float], errors: list[str], name: str, column: str, raw: str,
           decoder: Callable[[str], float] | None = None) -> None:
    """Encode one cell into ``labels[name]``; on failure store nan and note the error."""
    try:
        labels[name] = decoder(raw) if decoder else spec(name).encode(raw)
    except ValueError as e:
        labels[name] = NAN
        errors.append(f"column {column!r}: {e}")


_BLANK = {"", "nan", "na", "n/a", "none", "null", "unknown", "?"}   # as LabelSpec.encode treats them


def is_blank(raw: str) -> bool:
    return raw.strip().lower() in _BLANK


def where_looked(value: str, bases: Sequence[Path], root: Path) -> str:
    where = " or ".join(Path(os.path.relpath(b, root)).as_posix() + "/" for b in bases)
    if file_ext(value) in IMAGE_EXTENSIONS:
        return f"looked in {where}"
    return f"looked for {value}.* ({', '.join(IMAGE_EXTENSIONS)}) in {where}"


def expected_path(bases: Sequence[Path], value: str, default_ext: str) -> Path:
    value = value.strip().replace("\\", "/")
    return bases[0] / (value if file_ext(value) in IMAGE_EXTENSIONS or not default_ext
                       else value + default_ext)
