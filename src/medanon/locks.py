"""One writer at a time per output: an exclusive lock held while a command writes ``out``.

The lock is an advisory ``flock`` on a hidden file next to the output (``.OUT.lock``), taken before anything
is created and given back when the writer finishes or fails. The kernel gives it back when a process dies, so
a run killed with ``kill -9`` never blocks the next one; the file itself is removed by the next run that
finishes. A second run on the same output is refused at once, naming the output.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "release"
>>> with OutputLock(out):
...     try:
...         OutputLock(out, reentrant=False).acquire()
...     except ConcurrentRunError as e:
...         print(str(e).split(" (")[0])
another medanon run is writing release
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import warnings
from pathlib import Path

from medanon.errors import MedanonError

try:
    import fcntl
except ImportError:                                   # pragma: no cover - Windows: an O_EXCL lock file instead
    fcntl = None


class ConcurrentRunError(MedanonError):
    """Another process is writing the same output."""


_SIGNATURE = b"process "                              # how a lock holder's line starts (:meth:`OutputLock._sign`)
_HELD: dict[str, OutputLock] = {}                     # lock file -> the lock of this process that holds it


class OutputLock:
    """An exclusive, non-blocking lock on the output ``out`` (a folder or a file); a context manager.

    Another process holding it means a refusal. Within one process a later writer of the same output takes the
    lock over from an earlier one that was never released (a run that failed in a notebook), unless
    ``reentrant=False``.
    """

    def __init__(self, out: str | os.PathLike, *, name: str = "out", reentrant: bool = True) -> None:
        self.out = Path(out)
        self.name = name
        self.reentrant = reentrant
        self.path = lock_path(self.out)
        self._fd: int | None = None
        self._made: Path | None = None                   # the highest folder this lock created (removed if empty)

    def _refuse(self) -> None:
        holder = _holder(self.path)
        raise ConcurrentRunError(f"another medanon run is writing {self.out.name} ({self.out}) now"
                                 + (f": {holder}" if holder else ""),
                                 fix=f"wait for it to finish, or choose another {self.name}; two runs on one "
                                     "output would write each other's records")

    def _sign(self) -> None:
        """Write who holds the lock into its file (pid, host, start, command line), for another run's refusal."""
        import datetime
        import socket
        import sys

        text = (f"{_SIGNATURE.decode()}{os.getpid()} on {socket.gethostname()}, started "
                f"{datetime.datetime.now().astimezone().isoformat(timespec='seconds')}: "
                f"{' '.join([os.path.basename(sys.argv[0] or 'python'), *sys.argv[1:]])[:300]}")
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text.encode(errors="replace"), 0)

    def acquire(self) -> OutputLock:
        if self._fd is not None:
            return self
        key = os.path.abspath(self.path)
        before = _HELD.get(key)
        if before is not None and before._fd is not None and before is not self:
            if not self.reentrant:
                self._refuse()
            self._fd, before._fd = before._fd, None      # this process's own earlier run (e.g. one that failed in
            _HELD[key] = self                            # a notebook and was never closed): taken over
            return self
        missing = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._made = missing[-1] if missing else None
        if fcntl is None:                             # pragma: no cover
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                self._refuse()
            return self
        for _ in range(100):
            fd = self._open_own()
            if fd is None:                            # removed by its holder as this run opened it: again
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._refuse()
            except OSError as e:                      # a file system without locks (some network shares)
                warnings.warn(f"{self.path.parent} does not support file locks ({e.strerror}): medanon cannot stop "
                              f"a second run from writing {self.out.name} at the same time; run one at a time",
                              UserWarning, stacklevel=2)
                self._fd = fd
                _HELD[key] = self
                return self
            try:                                      # the previous holder may have removed the file meanwhile
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                _HELD[key] = self
                self._sign()
                return self
            os.close(fd)
        self._refuse()
        return self

    def _open_own(self) -> int | None:
        """The lock file, opened for writing: never through a link (``O_NOFOLLOW``), never a file with other names
        (hard links) or other contents than a holder's line: its signature would be written over it (a dataset's
        labels.csv linked as the lock file was replaced by a command line). None: the file was removed as it was
        opened (its holder finished): open it again."""
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as e:
            self._not_a_lock(f"it is a link ({e.strerror})")
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:     # its holder finished and removed it meanwhile
            os.close(fd)
            return None
        why = ("it is not a plain file" if not stat.S_ISREG(st.st_mode) else
               f"it has {st.st_nlink} names (hard links)" if st.st_nlink != 1 else
               "it holds something else than a lock holder's line" if st.st_size and
               not os.pread(fd, len(_SIGNATURE), 0).startswith(_SIGNATURE) else None)
        if why is not None:
            os.close(fd)
            self._not_a_lock(why)
        return fd

    def _not_a_lock(self, why: str) -> None:
        from medanon.outputs import UnsafeOutputError

        raise UnsafeOutputError(f"{self.path}, where medanon keeps the lock of {self.out.name}, is not a medanon lock "
                                f"file: {why}; medanon writes its lock there and would write over it",
                                fix=f"move {self.path} away (it is not medanon's), then run again")

    def release(self) -> None:
        if self._fd is None:
            return
        if _HELD.get(os.path.abspath(self.path)) is self:
            del _HELD[os.path.abspath(self.path)]
        with contextlib.suppress(OSError):
            if os.fstat(self._fd).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
        self._remove_made_folders()

    def _remove_made_folders(self) -> None:
        """The folders the lock created for the output, if nothing was written into them (a refused run)."""
        if self._made is None:
            return
        folder = self.path.parent
        while True:
            try:
                folder.rmdir()                           # only an empty folder goes
            except OSError:
                break
            if folder == self._made:
                break
            folder = folder.parent
        self._made = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


def lock_path(out: str | os.PathLike) -> Path:
    """The lock file of ``out``: one per file, whatever path (a link, ``..``) reaches it."""
    real = Path(os.path.realpath(out))
    return real.with_name(f".{real.name}.lock")


def writer_of(out: str | os.PathLike) -> str | None:
    """Who holds ``out``'s writer's lock in another process now ("" where it did not sign), or None: nobody (or this
    process, or a file system without locks)."""
    path = lock_path(out)
    if fcntl is None or not path.is_file():
        return None
    held = _HELD.get(os.path.abspath(path))
    if held is not None and held.held:                          # this process writes it itself
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(path)
    except OSError:
        return None                             # a file system without locks: nothing to tell
    finally:
        os.close(fd)
    return None


def refuse_while_written(out: str | os.PathLike, *, what: str = "release") -> None:
    """A reader's check: refuse ``out`` while another process holds its writer's lock (a release being written or
    replaced: its manifest, labels, images and mapping change under the reader). Checked when the reader starts."""
    holder = writer_of(out)
    if holder is not None:
        raise ConcurrentRunError(f"{what} {out} is being written now" + (f" by {holder}" if holder else ""),
                                 fix=f"read it once that run has finished: a {what} read while it is written or "
                                     "replaced mixes two versions of it")


def refuse_inside_written(out: str | os.PathLike, *, name: str = "out") -> None:
    """A writer's check: refuse an output inside a folder another process is writing now (a demo's or an
    evaluation's folder, a release): its own run may replace or remove what is put there. Each folder above ``out``
    (as the system resolves it) is checked by its lock file only, so an unlocked tree costs a few ``stat`` calls."""
    for folder in Path(os.path.realpath(out)).parents:
        if folder.parent == folder:
            break
        for owner in (folder, *_owners(folder)):    # a working folder of an output is covered by that output's lock
            holder = writer_of(owner)
            if holder is not None:
                raise ConcurrentRunError(f"{name} {out} is inside {folder}, which another medanon run is writing now"
                                         + (f" ({holder})" if holder else "")
                                         + (f", as the working folder of {owner.name}" if owner != folder else ""),
                                         fix=f"choose a {name} outside it, or wait for that run to finish")


_WORKING = (re.compile(r"\.(?P<out>.+)\.[a-z0-9_]{8}\.partial"), re.compile(r"(?P<out>.+)\.partial"),
            re.compile(r"\.(?P<out>.+)\.closing"), re.compile(r"\.(?P<out>.+)\.old-\d+"))


def _owners(folder: Path) -> list[Path]:
    """The outputs whose working folder ``folder`` may be by its name (``OUT.partial``, ``.OUT.closing``,
    ``.OUT.<8>.partial``, ``.OUT.old-N``): what is put there is published with, or removed with, that output."""
    return [folder.with_name(m["out"]) for pattern in _WORKING if (m := pattern.fullmatch(folder.name))]


def _holder(path: Path) -> str:
    """Who holds the lock file ``path``, as its holder wrote it ("" where it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()[:400]
    except OSError:
        return ""


def export_lock(export: str | os.PathLike | None, dist, *, name: str = "--export"):
    """``export``'s lock, held by the writing process from the start of a training run to its end (None: no export;
    a context manager): a second run exporting to the same new path is refused at once, not after its training."""
    return main_rank_lock(export, dist, name=name) if export is not None else contextlib.nullcontext()


def main_rank_lock(out: str | os.PathLike, dist, *, name: str = "out"):
    """``out``'s lock held by the process that writes it (rank 0 of a torchrun job, or the only process); the other
    ranks write nothing and take no lock. A context manager."""
    return OutputLock(out, name=name) if dist.is_main else contextlib.nullcontext()


def release_state(path: str | Path, mapping: str | Path | None) -> tuple:
    """What changes when a release folder or its mapping is replaced or rewritten: the folder's identity, and its
    manifest's and mapping's identity, size and time (a reader compares it before and after it reads a release:
    readers take no lock)."""
    def stat(p: Path) -> tuple | None:
        try:
            st = os.stat(p)
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    folder = Path(path)
    return stat(folder), stat(folder / "manifest.json"), stat(Path(mapping or f"{folder}.mapping.json"))
