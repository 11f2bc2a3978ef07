"""Filesystem helpers: atomic writes, checksums.

Every output medanon writes goes to a temporary sibling first and is renamed into place,
so an interrupted run never leaves a half-written file or directory under the final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

_DIGESTS: dict[tuple[int, ...], str] = {}     # file identity and change stamps -> its SHA-256, this process
_DIGESTS_MAX = 200_000
_SETTLED_NS = 2_000_000_000      # a file changed this recently may change again within one timestamp tick: not kept


def _stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def sha256_of(f, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of what is left to read of the open binary file ``f``."""
    h = hashlib.sha256()
    while block := f.read(chunk):
        h.update(block)
    return h.hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes. A file hashed before in this process, unchanged since (same device, inode,
    size, modification and change times: any write or rename of it moves its change time), is not read again: a
    checkpoint named by a command and then loaded, or images compared and then digested, are read once. A file
    changed in the last two seconds is always read (a second write within one timestamp tick would keep its
    times, as git's "racily clean" entries)."""
    with open(path, "rb") as f:
        before = _stamp(os.fstat(f.fileno()))
        if before in _DIGESTS:
            return _DIGESTS[before]
        digest = sha256_of(f, chunk)
        after = _stamp(os.fstat(f.fileno()))
    settled = time.time_ns() - max(after[3], after[4]) > _SETTLED_NS
    if before == after and settled:                 # not written to while it was read, nor just before
        if len(_DIGESTS) >= _DIGESTS_MAX:
            _DIGESTS.clear()
        _DIGESTS[before] = digest
    return digest


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def naming(e: OSError, path: str | os.PathLike) -> OSError:
    """``e`` with ``path`` as its file where it names none (a failed write, a full disk: Python names no file)."""
    return type(e)(e.errno, e.strerror, str(path)) if e.filename is None and e.errno is not None else e


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """``Path(path).write_bytes(data)`` (no temporary file, no fsync: for files inside a folder that is itself
    published by a rename), whose error names the file."""
    try:
        Path(path).write_bytes(data)
    except OSError as e:
        raise naming(e, path) from e


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # in the folder the system resolves (tempfile makes ``dir`` absolute as text: LINK/../x would be beside LINK)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=os.path.realpath(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise naming(e, path) from e
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


_TORN = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")    # atomic_write_bytes' temporary names: .NAME.XXXXXXXX.tmp


def remove_torn_writes(folder: str | os.PathLike) -> int:
    """Remove the temporary files that atomic writes of a killed run left in ``folder`` (called by its next run
    once it holds the folder's lock, so no live writer's file is touched); the number removed."""
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if _TORN.match(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed += 1
    return removed


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike, *, overwrite: bool = False, marker: str = "folder") -> Iterator[Path]:
    """Yield a temporary directory that becomes ``out`` only if the block finishes.

    On an exception (including KeyboardInterrupt) the temporary directory is removed and ``out`` is left as
    it was. With ``overwrite`` an existing ``out`` is replaced at the end, but only if it is medanon's output of
    the kind ``marker`` holding nothing but what medanon wrote there (:func:`medanon.outputs.check_output`,
    checked before the block and again before the replacement); the finished folder carries medanon's marker,
    which lists its files, so that a later ``overwrite`` recognises them. One writer at a time per ``out``.
    """
    from medanon.locks import OutputLock
    from medanon.outputs import check_output, check_replaceable, write_marker

    out = Path(out)
    check_output(out, overwrite=overwrite, kind="dir", what=marker)
    with OutputLock(out):
        check_output(out, overwrite=overwrite, kind="dir", what=marker)   # again: another run may have written it
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=os.path.realpath(out.parent)))
        try:
            claim_working_path(out, tmp)               # inside: a full disk here must not leave tmp behind
            yield tmp
            write_marker(tmp, marker)
            if out.exists():
                if not overwrite:                      # made meanwhile, by something outside medanon's lock
                    check_output(out, overwrite=False, kind="dir", what=marker)
                check_replaceable(out, what=marker)    # nothing of yours was put there meanwhile
                replace_output(out, tmp)
            else:
                os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            with contextlib.suppress(OSError):        # a record naming a path that is gone harms nothing
                forget_working_path(out, tmp)


def replace_output(out: Path, new: Path) -> None:
    """Put ``new`` in the place of the existing ``out``: ``out`` is moved aside to ``.OUT.old-PID`` (recorded as
    this run's working path, so that a run killed meanwhile has it removed by the next), ``new`` renamed into
    place, the old one removed."""
    trash = claim_working_path(out, out.with_name(f".{out.name}.old-{os.getpid()}"))
    os.replace(out, trash)
    os.replace(new, out)
    remove_replaced(trash)
    forget_working_path(out, trash)


def remove_replaced(trash: Path) -> None:
    """Remove an output that was just replaced (moved to ``trash``): a folder with what it holds, a link as a link
    (what it pointed at is not medanon's to remove)."""
    if trash.is_symlink() or trash.is_file():
        trash.unlink(missing_ok=True)
    else:
        shutil.rmtree(trash, ignore_errors=True)


def _working_record(out: Path) -> Path:
    return out.with_name(f".{out.name}.working.json")


def _working_names(out: Path) -> set[str]:
    import json

    try:
        names = json.loads(_working_record(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _write_working_names(out: Path, names: set[str]) -> None:
    import json

    if names:
        atomic_write_text(_working_record(out), json.dumps(sorted(names)) + "\n")
    else:
        _working_record(out).unlink(missing_ok=True)


def claim_working_path(out: Path, path: Path) -> Path:
    """Record ``path``, a temporary sibling of ``out`` this run makes (``.OUT.*.partial``, ``.OUT.old-PID``), in
    ``.OUT.working.json``: only paths recorded there are ever removed as a killed run's leftovers, so a folder of
    the user's that merely has such a name (the run's own input, say) is never touched. Returns ``path``."""
    _write_working_names(out, _working_names(out) | {path.name})
    return path


def forget_working_path(out: Path, path: Path) -> None:
    """``path`` is gone or has become ``out``: no longer a leftover to remove."""
    if path.name in (names := _working_names(out)):
        _write_working_names(out, names - {path.name})


def remove_leftovers(out: Path) -> None:
    """Remove what killed runs left beside ``out``: the ``.OUT.*.partial`` folders and ``.OUT.old-*`` replaced
    outputs they recorded in ``.OUT.working.json`` (:func:`claim_working_path`), nothing else. Called by the holder
    of ``out``'s lock: no live run writes those names."""
    if not out.parent.is_dir():
        return
    name = re.escape(out.name)                   # exactly the names atomic_dir and the release writer give them:
    ours = re.compile(rf"\.{name}\.(?:[a-z0-9_]{{8}}\.partial|old-\d+)")   # never another output's ('r.x' for 'r')
    for left in sorted(_working_names(out)):
        if ours.fullmatch(left):
            remove_replaced(out.parent / left)
    _write_working_names(out, set())


def read_json_object(path: str | os.PathLike, *, what: str, fix: str) -> dict:
    """The JSON object in ``path``; a :class:`~medanon.errors.DataError` naming the file, ``what`` it should be and
    the ``fix`` when it is unreadable, not UTF-8, not JSON or not an object."""
    import json

    from medanon.errors import DataError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path} is not {what}: {e}", fix=fix) from None
    if not isinstance(data, dict):
        raise DataError(f"{path} is not {what}: it holds a JSON {type(data).__name__}, not an object", fix=fix)
    return data


def strict_json(obj, *, indent: int | None = 2, default=None) -> str:
    """``obj`` as strict JSON (RFC 8259): a NaN or infinite float, e.g. a metric with no test example of a class,
    becomes ``null``, which every JSON reader accepts (``NaN`` is Python's extension, refused by ``jq`` and
    JavaScript's ``JSON.parse``). ``default`` converts what ``json`` cannot (numpy scalars and arrays, paths) first.

    >>> strict_json({"auc": float("nan"), "n": [1, float("inf")]}, indent=None)
    '{"auc": null, "n": [1, null]}'
    """
    import json
    import math

    def clean(v):
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if default is not None and not isinstance(v, (str, int, bool, type(None))):
            return clean(default(v))
        return v

    return json.dumps(clean(obj), indent=indent, allow_nan=False)
