"""CSV label tables: reading (plain or ``.csv.gz``, UTF-8 or Latin-1, sniffed delimiter), header
cleaning, column lookup by exact or case-insensitive name, and the header-only peeks used by detection.

Package-internal (see :mod:`medanon.data.layouts`): names without a leading underscore are shared by
the package's modules, not public API.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from medanon.errors import DataError


@dataclass
class Table:
    path: Path
    header: list[str]
    rows: list[tuple[int, list[str]]]          # (line number in the file, stripped cells)

    def col(self, name: str) -> int | None:
        """Index of a column: exact name first, then a unique case-insensitive match."""
        if name in self.header:
            return self.header.index(name)
        folded = [i for i, h in enumerate(self.header) if h.casefold() == name.casefold()]
        return folded[0] if len(folded) == 1 else None

    def require(self, name: str, *, fix: str) -> int:
        idx = self.col(name)
        if idx is None:
            raise DataError(f"{self.path.name} has no column {name!r}", files=[self.path],
                            fix=f"the CSV has columns {self.header}; {fix}")
        return idx

    @staticmethod
    def cell(row: list[str], idx: int | None) -> str:
        if idx is None or idx >= len(row):
            return ""
        return row[idx]


def _decode_bytes(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path.name} not found in {path.parent}", files=[path],
                        fix="check the dataset folder and layout=, or pass the CSV as labels_csv=") from None
    except OSError as e:
        raise DataError(f"cannot read {path.name}: {e.strerror or e}", files=[path],
                        fix="check that the file exists and is readable") from None
    if path.name.lower().endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise DataError(f"{path.name} is not a valid gzip file ({e})", files=[path],
                            fix="download it again, or decompress it and keep the plain .csv") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):   # UTF-16 with its byte-order mark (Excel's "Unicode text")
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError as e:
            raise DataError(f"{path.name} starts as UTF-16 but does not decode ({e})", files=[path],
                            fix="save it as a comma-separated UTF-8 CSV") from None
    if b"\x00" in raw[:65536]:                        # no text file holds NUL bytes: an image, an archive, ...
        kind = "a PNG image" if raw.startswith(b"\x89PNG") else "a JPEG image" if raw.startswith(b"\xff\xd8") \
            else "binary data"
        raise DataError(f"{path.name} is not a text CSV: it holds {kind}", files=[path],
                        fix="pass the labels CSV (a comma-separated text file with one header row)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Some exports are Latin-1 / Windows-1252; ids and numeric labels survive either way.
        return raw.decode("latin-1")


def _clean_header(cells: Iterable[str]) -> list[str]:
    return [c.replace("\ufeff", "").strip() for c in cells]


def _excel_sep(first_line: str) -> str | None:
    """The delimiter an Excel ``sep=;`` first line names (Excel writes it to say how the rest is split), or None."""
    line = first_line.lstrip("\ufeff").rstrip("\r\n").strip('"')     # not strip(): "sep=\t" names a tab
    return line[4] if len(line) == 5 and line.lower().startswith("sep=") else None


def _delimiter(first_line: str) -> str:
    if "," not in first_line:
        for d in (";", "\t"):
            if d in first_line:
                return d
    return ","


def read_table(path: Path) -> Table:
    text = _decode_bytes(path)
    first = text.split("\n", 1)[0]
    sep = _excel_sep(first)
    delim = sep or _delimiter(first)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim)
    try:
        header: list[str] | None = None
        rows: list[tuple[int, list[str]]] = []
        for cells in reader:
            if sep and reader.line_num == 1:        # Excel's "sep=;" line: not the header
                continue
            if header is None:
                header = _clean_header(cells)
                while header and not header[-1]:     # a trailing delimiter (Excel's "a,b,c,"): no column there
                    header.pop()
                continue
            values = [c.strip() for c in cells]
            if any(values):
                rows.append((reader.line_num, values))
    except csv.Error as e:
        raise DataError(f"{path.name} is not a readable CSV (line {reader.line_num}: {e})", files=[path],
                        fix="save it as a comma-separated UTF-8 CSV with one header row") from None
    if not header or not any(header):
        raise DataError(f"{path.name} is empty (no header row)", files=[path],
                        fix="the first line of the CSV must name its columns")
    _check_shape(path, header, rows)
    return Table(path, header, rows)


def _check_shape(path: Path, header: list[str], rows: list[tuple[int, list[str]]]) -> None:
    """Every row has the header's cells (extra cells only if empty: a trailing delimiter), and no column name is
    given twice: a row cut short would read its last cells as missing, or shift them into other columns (a
    truncated patient id joins another patient), and a second ``grade`` column would be ignored."""
    named = [h for h in header if h]
    twice = sorted({h for h in named if named.count(h) > 1})
    if twice:
        raise DataError(f"{path.name} names column(s) {twice} more than once: which one holds the values is "
                        "ambiguous", files=[path], fix="rename or remove the duplicate column(s)")
    n = len(header)
    bad = [line for line, cells in rows if len(cells) < n or any(cells[n:])]
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
        raise DataError(f"{path.name}: {len(bad)} row(s) do not have the header's {n} cells (line(s) {shown}); a "
                        "row cut short or with an extra delimiter would be read into the wrong columns",
                        files=[path], fix="correct those lines (a missing value is an empty cell between "
                                          "delimiters), or remove them")


def _read_header(path: Path) -> list[str]:
    """The header row only (used by layout detection); [] if the file cannot be read."""
    try:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rb") as b:
            utf16 = b.read(2) in (b"\xff\xfe", b"\xfe\xff")
        with opener(path, "rt", encoding="utf-16" if utf16 else "utf-8-sig", errors="replace", newline="") as f:
            first = f.readline()
            sep = _excel_sep(first)
            if sep:
                first = f.readline()
    except (OSError, EOFError):
        return []
    cells = next(csv.reader([first], delimiter=sep or _delimiter(first)), [])
    return _clean_header(cells)


def has_columns(path: Path, names: Iterable[str]) -> bool:
    """Whether a CSV's header has all ``names`` (ignoring case, as :meth:`Table.col` does)."""
    header = {h.casefold() for h in _read_header(path)}
    return all(n.casefold() in header for n in names)


def first_existing(root: Path, names: Sequence[str]) -> Path | None:
    for n in names:
        if (root / n).is_file():
            return root / n
    return None
