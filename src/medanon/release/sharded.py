"""One release written by several processes (``torchrun``): each computes a disjoint share, rank 0 writes it.

Every method hands its records to a writer through its producer, and every producer asks the writer
``done(key)`` before it computes a record, so that an interrupted release resumes
(:mod:`medanon.release.release`). Under torchrun, :func:`open_release` gives each process a
:class:`ShardWriter` that also answers "done" for the records of the *other* processes' shares, so
each process computes only its own:

* **Shares.** A record's unit of work is its key up to the first ``/`` (a k-Same cluster's views
  ``c…/0``, ``c…/1`` are one unit: the average is computed once; record ids hold no ``/``). The
  n-th unit a producer asks about (not already in the release) goes to rank ``n mod world_size``.
  Producers ask in the same order on every rank (their plan is deterministic), which is checked when
  the run ends: the ranks compare a digest of the units in the order they were assigned, and a
  mismatch stops the run before anything is merged.
* **Writing.** Rank 0 opens the one :class:`~medanon.release.writer.ReleaseWriter` (all checks, the
  discard or resume of ``OUT.partial``) before any process computes; the others wait, then write
  their images under secret random names into the same ``OUT.partial/images`` (atomically) and
  their journal lines into ``OUT.partial/.journal.rank<R>.jsonl``. When every process is done, rank
  0 takes the rank journals into the main one and closes the writer: labels, manifest, mapping, the
  secret random file order and the atomic rename, exactly as in one process.
* **Resume.** A job that is killed leaves ``OUT.partial`` with every finished record in one of the
  journals; a new run, with any number of processes (or none), takes the rank journals in
  (:meth:`~medanon.release.writer.ReleaseWriter.absorb_rank_journals`) and computes only the rest.
* **Randomness.** File names and the final file order come from the operating system (``secrets``);
  secret noise (DP-GLOW, image LDP, k-SALSA's views) is drawn by the process that computes the
  record. Nothing seeded depends on the rank.

The processes meet in a gloo group (only small Python objects are exchanged), whatever device they
compute on; a CUDA run puts rank r on ``cuda:LOCAL_RANK`` (:func:`medanon.train.distributed.bind_local_gpu`).
"""

from __future__ import annotations

import atexit
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medanon.data.records import Record
from medanon.errors import DataError
from medanon.release.files import write_record
from medanon.release.writer import JOURNAL, ReleaseWriter, launched_by_torchrun
from medanon.train.distributed import Dist, init_distributed, shutdown

__all__ = ["ShardWriter", "open_release", "release_group", "unit_of"]


def unit_of(key: str) -> str:
    """The unit of work a record key belongs to: the key up to its first ``/`` (one k-Same cluster's views)."""
    return key.split("/", 1)[0]


def release_group() -> Dist:
    """This process's place among the processes torchrun started (a gloo group), or one process.

    A group created here stays up for later releases of the same process (joining again would need a new
    rendezvous) and is left when the process exits: a gloo group still up at interpreter exit aborts.
    """
    if not launched_by_torchrun():
        return Dist()
    if not torch.distributed.is_initialized():
        d = init_distributed("cpu")              # objects only: gloo, whatever device the models use
        atexit.register(shutdown, d)
        return d
    return init_distributed("cpu")


class ShardWriter:
    """The writer interface (``done``, ``add``, ``entries``, ``privacy``, ``settings``, ``len``) of one process.

    ``done(key)`` is true for records already in the release (resumed) and for records of units other
    processes compute; ``add`` writes this process's records (rank 0 through the release writer itself,
    the others into their rank journal).
    """

    def __init__(self, d: Dist, *, partial: Path, settings: Mapping[str, Any], privacy: dict[str, Any],
                 resumed: Mapping[str, dict[str, Any]], head_line: str, main: ReleaseWriter | None = None):
        self.dist, self.partial, self.main = d, partial, main
        self.settings = main.settings if main is not None else dict(settings)
        self.privacy = main.privacy if main is not None else privacy       # rank 0's is the manifest's
        self.entries: dict[str, dict[str, Any]] = main.entries if main is not None else dict(resumed)
        self.journal = f".journal.rank{d.rank}.jsonl"
        self.owner: dict[str, int] = {}          # unit -> rank, in the order producers asked
        self.written: list[str] = []             # keys this process wrote in this run
        if main is None:
            (partial / self.journal).write_text(head_line, encoding="utf-8")

    def _owner(self, key: str) -> int:
        unit = unit_of(key)
        if unit not in self.owner:
            self.owner[unit] = len(self.owner) % self.dist.world_size
        return self.owner[unit]

    def done(self, key: str) -> bool:
        """Whether ``key`` is already in the release, or is another process's to compute."""
        return key in self.entries or self._owner(key) != self.dist.rank

    def mine(self, key: str) -> bool:
        return self._owner(key) == self.dist.rank

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, key: str, image: torch.Tensor | np.ndarray, sources: Sequence[Record], *,
            quality: Mapping[str, Any] | None = None) -> str:
        if not self.mine(key):
            raise ValueError(f"release record {key!r} belongs to rank {self._owner(key)}, not {self.dist.rank}")
        if key in self.entries:
            raise ValueError(f"release record {key!r} was already written")
        if self.main is not None:
            name = self.main.add(key, image, sources, quality=quality)
        else:
            entry = write_record(self.partial, self.journal, key, image, sources, self.settings["labels"],
                                 quality=quality)
            self.entries[key] = entry
            name = entry["name"]
        self.written.append(key)
        return name

    def gather(self, obj: Any) -> list[Any]:
        """Every process's ``obj``, in rank order (for summaries that need all of them)."""
        return self.dist.gather_objects(obj)

    def plan_digest(self) -> str:
        """A digest of the units in the order they were assigned: equal on every rank when the plans agree."""
        return hashlib.sha256("\n".join(self.owner).encode()).hexdigest()


def _open_on_rank0(d: Dist, out: Path, kw: dict[str, Any]) -> tuple[ReleaseWriter | None, dict[str, Any]]:
    """Rank 0 opens the release writer (checks, discard or resume); every rank learns the outcome."""
    main, info = None, None
    if d.is_main:
        try:
            main = ReleaseWriter(out, **kw, sharded=True)
            with open(main.partial / JOURNAL, encoding="utf-8") as f:
                head = f.readline()
            info = {"partial": str(main.partial), "resumed": main.entries, "privacy": main.privacy,
                    "settings": main.settings, "head": head}
        except Exception as e:       # every rank must learn it, or the others wait for rank 0 forever
            info = {"error": f"{type(e).__name__}: {e}", "exception": e}
            d.gather_objects({k: v for k, v in info.items() if k != "exception"})
            raise
    info = d.gather_objects(info)[0]
    if "error" in info:
        raise DataError(f"rank 0 could not open the release {out}: {info['error']}", fix="see rank 0's message")
    return main, info


@contextmanager
def open_release(out: str | Path, **kw: Any) -> Iterator[ReleaseWriter | ShardWriter]:
    """The writer for a release ``out``: a :class:`~medanon.release.writer.ReleaseWriter` in one process, a
    :class:`ShardWriter` in each process of a torchrun job; ``kw`` are the release writer's arguments.

    On a clean exit the release is finalised (in a job, by rank 0 once every process is done, and every
    process returns only when it is in place); on an exception the partial folder is kept for a resume.
    """
    d = release_group()
    if not d.enabled:
        with ReleaseWriter(out, **kw) as writer:
            yield writer
        return
    out = Path(out)
    main, info = _open_on_rank0(d, out, kw)
    d.barrier()                                  # rank 0 has discarded or cleaned OUT.partial: now write
    writer = ShardWriter(d, partial=Path(info["partial"]), settings=info["settings"], privacy=dict(info["privacy"]),
                         resumed=info["resumed"], head_line=info["head"], main=main)
    try:
        yield writer
        _finish(d, writer, out)
    except BaseException:
        if main is not None:                     # rank 0 gives back the release's and the mapping's locks
            main.release_locks()
        raise


def _finish(d: Dist, writer: ShardWriter, out: Path) -> None:
    """Every process is done: rank 0 checks that the shares were one plan, merges and closes; all wait for it."""
    reports = d.gather_objects({"plan": writer.plan_digest(), "units": len(writer.owner),
                                "written": len(writer.written)})
    error = None
    if d.is_main:
        try:
            if len({r["plan"] for r in reports}) != 1:
                raise DataError(
                    f"the processes planned different work for {out} (units per rank: "
                    f"{[r['units'] for r in reports]}): their inputs or models differ, so their records cannot "
                    "form one release", fix=f"make every process read the same data and models, or delete "
                                            f"{writer.partial} and run in one process")
            taken = writer.main.absorb_rank_journals()
            others = sum(r["written"] for r in reports[1:])
            if taken != others:
                raise DataError(f"rank 0 found {taken} records of the other processes, they wrote {others}",
                                fix=f"rerun the same command to resume from {writer.partial}")
            writer.main.close()
        except Exception as e:
            error = e
    result = d.gather_objects(None if error is None else f"{type(error).__name__}: {error}")[0]
    if error is not None:
        raise error
    if result is not None:
        raise DataError(f"rank 0 could not finish the release {out}: {result}", fix="see rank 0's message")
