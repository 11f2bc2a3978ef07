"""Runtime plumbing: device resolution, seeding, logging, run directories and their manifest.

A run directory holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (one JSON object
per line, appended as the run goes) and ``manifest.json`` (software versions, seeds, input
checksums, command line, timing). Library code never picks a device itself; the CLI resolves
``--device`` here and passes tensors on.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import functools
import hashlib
import json
import logging
import os
import platform
import random
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from medanon import __version__
from medanon.config import dump_yaml
from medanon.errors import ConfigError
from medanon.fsutil import atomic_write_text, remove_torn_writes, sha256_file

log = logging.getLogger("medanon")

# Above this many bytes of input, dataset checksums hash the file listing (path, size, mtime)
# instead of every byte; the manifest records which was done.
CONTENT_HASH_LIMIT = 2 * 1024**3


def check_device_name(name: str | None) -> str:
    """``name`` normalised (``auto``, ``cpu``, ``cuda`` or ``cuda:N``), or a ConfigError saying what is accepted; no
    GPU is looked for (:func:`resolve_device` does that).

    >>> check_device_name(" CUDA:1 ")
    'cuda:1'
    """
    import re

    name = "auto" if name is None else str(name).strip().lower()
    if name not in ("auto", "cpu") and not re.fullmatch(r"cuda(:\d+)?", name):
        raise ConfigError(f"device={name!r} is not understood",
                          fix="use 'auto', 'cpu', 'cuda' or 'cuda:N' (N a GPU's index, e.g. 'cuda:0')")
    return name


def resolve_device(name: str = "auto"):
    """``auto`` -> cuda if available else cpu; ``cuda`` without a GPU is an error, not a silent fallback."""
    import torch

    name = check_device_name(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} was asked for but no CUDA GPU is available",
                          fix="use device='cpu' (or 'auto')")
    count = torch.cuda.device_count()
    if ":" in name and int(name.split(":")[1]) >= count:
        raise ConfigError(f"device={name!r} names GPU {name.split(':')[1]}, but this machine has {count} "
                          f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})",
                          fix="use 'cuda' (the first GPU) or the index of one of them")
    configure_cuda()
    return torch.device(name)


def configure_cuda() -> None:
    """The CUDA settings every GPU run of medanon uses (once a CUDA device is resolved).

    - float32 matrix products in TF32 (``torch.set_float32_matmul_precision("high")``; cuDNN's convolutions
      already use TF32 by PyTorch's default): about 1e-3 relative error per product, far below what the
      methods' optimisations and the evaluation's statistics resolve; ``MEDANON_STRICT_FP32=1`` keeps full
      float32 (products and convolutions) for bit-level comparisons with the CPU;
    - ``cudnn.benchmark`` stays off: cuDNN's search for the fastest algorithm runs once per new input shape, and
      the evaluation trains and applies many small networks on batches of varying shape, so the searches cost
      more than they save (one H200, the fast-preset evaluation of two releases on a 48-image phantom, twice in
      one process: 55.5 s with it, of which convolutions 18.0 s; then 18.0 s without, convolutions 0.7 s; the
      first run also paid about 10 s of imports; ``benchmarks/profile_evaluate.py``). Long runs of one shape
      (GAN training at 256 px) may gain from it: ``MEDANON_CUDNN_BENCHMARK=1`` turns it on.

    Privacy guarantees are not affected: the noise is drawn from exact samplers in float64, and TF32 only touches
    deterministic maps before the clipping that bounds sensitivity and after the noise (post-processing).
    """
    import os

    import torch

    strict = os.environ.get("MEDANON_STRICT_FP32", "") not in ("", "0")
    torch.set_float32_matmul_precision("highest" if strict else "high")
    torch.backends.cudnn.allow_tf32 = not strict
    torch.backends.cudnn.benchmark = os.environ.get("MEDANON_CUDNN_BENCHMARK", "") not in ("", "0")


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch global generators (library code still takes explicit generators)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (as :data:`logging.lastResort` does), so
    commands run one after another in one process with their output redirected each log to their own stream."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:           # StreamHandler.__init__ assigns it; the property ignores it
        pass


def setup_logging(level: str = "info") -> None:
    """The command line's logging: records at ``level`` and above go to the current ``sys.stderr``. A root logger
    that already has handlers (configured by the caller) is left as it is."""
    lvl = getattr(logging, level.upper(), None)
    if not isinstance(lvl, int):
        raise ConfigError(f"level={level!r} is not a logging level", fix="use debug, info, warning or error")
    root = logging.getLogger()
    if not root.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    if any(isinstance(h, _CurrentStderr) for h in root.handlers):
        root.setLevel(lvl)
    for chatty in ("PIL", "matplotlib", "urllib3", "fsspec"):    # other libraries' debug output (PIL logs each
        logging.getLogger(chatty).setLevel(max(lvl, logging.INFO))   # chunk it reads): medanon's debug only
    logging.getLogger("medanon").setLevel(lvl)


def silence_progress_bars() -> None:
    """Turn every tqdm progress bar of this process off (quiet mode, or a log file that is not a terminal,
    where bars become lines of carriage returns). tqdm reads its ``TQDM_DISABLE`` variable only when it is
    imported, so the default is changed on the class instead."""
    from tqdm import std

    if getattr(std.tqdm.__init__, "_medanon_silenced", False):
        return
    original = std.tqdm.__init__

    def init(self, *args, **kwargs):
        kwargs["disable"] = True
        original(self, *args, **kwargs)

    init._medanon_silenced = True
    std.tqdm.__init__ = init


# module -> its distribution on PyPI (the manifest names the module)
_DISTRIBUTIONS = {"torch": "torch", "numpy": "numpy", "scipy": "scipy", "skimage": "scikit-image",
                  "sklearn": "scikit-learn", "PIL": "pillow", "pydicom": "pydicom"}


@functools.cache
def source_sha256() -> str:
    """One SHA-256 over medanon's own source files (every ``.py`` of the package, by relative path and content): the
    code that ran, exactly, where the version number (``__version__``) stays the same between changes."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def software_versions() -> dict[str, str]:
    """The versions of Python and the libraries a manifest records: a module already imported by its
    ``__version__`` (what ran), any other by its installed metadata (importing scikit-learn and SciPy only to
    read a version cost about 1.7 s of the first release a process saves)."""
    from importlib import metadata

    versions = {"medanon": __version__, "medanon_source_sha256": source_sha256(), "python": platform.python_version()}
    for mod, dist in _DISTRIBUTIONS.items():
        if mod in sys.modules:
            versions[mod] = str(getattr(sys.modules[mod], "__version__", "?"))
            continue
        try:
            versions[mod] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[mod] = "not installed"
    return versions


def files_digest(paths: Iterable[Path], root: Path | None = None) -> dict[str, Any]:
    """A single checksum over many files, by content if small enough, else by listing.

    Each file is named by its path relative to ``root`` as the dataset names it (``images/a.png``, even when
    ``images`` is a symlink; ``../x.png`` for a file outside that the user allowed), and hashed by the content
    it leads to, so a symlinked folder or a file outside ``root`` digests like any other."""
    paths = sorted(Path(os.path.abspath(p)) for p in paths)
    root = Path(os.path.abspath(root)) if root is not None else None
    total = sum(p.stat().st_size for p in paths)
    mode = "content" if total <= CONTENT_HASH_LIMIT else "listing"
    h = hashlib.sha256()
    for p in paths:
        rel = os.path.relpath(p, root) if root else str(p)
        h.update(rel.encode() + b"\0")
        if mode == "content":
            h.update(bytes.fromhex(sha256_file(p)))
        else:
            st = p.stat()
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    return {"files": len(paths), "bytes": total, "mode": mode, "sha256": h.hexdigest()}


_RUN_INPUTS: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("medanon_run_inputs",
                                                                                   default=None)


@contextlib.contextmanager
def recording_inputs(**entries: Any):
    """The inputs a command read (``name -> record``: a dataset's folder, layout, reading and records digest; a
    checkpoint's path and sha256), which every :class:`RunDir` made inside the block records in its manifest's
    ``inputs``: a run folder then names its training data, not only its command line."""
    token = _RUN_INPUTS.set({**(_RUN_INPUTS.get() or {}), **{k: v for k, v in entries.items() if v is not None}})
    try:
        yield
    finally:
        _RUN_INPUTS.reset(token)


class RunDir:
    """A run directory: ``config.yaml``, ``metrics.jsonl``, ``manifest.json``.

    The manifest is rewritten atomically whenever it changes, so it is always complete. One run writes a
    folder at a time (:mod:`medanon.locks`): a second is refused at once, until the first calls :meth:`finish`
    or ends.
    """

    def __init__(self, path: str | Path, *, config: Any, command: str, seeds: dict[str, int] | None = None,
                 new_run: bool = False, resume_step: int | None = None, continues: bool = False,
                 recheck: Callable[[], Any] | None = None):
        """``new_run``: a training run starting afresh (not resumed) in a folder where a run of the same command
        may have died before its first checkpoint: that run's metrics and sample grids are removed once the folder
        is locked, so the folder never mixes two runs' logs. ``resume_step``: a resumed run's step; metric lines
        written after it (the run repeats those steps) are dropped. ``continues``: a job that resumes by reusing
        what its earlier runs wrote (the demo), with no step to resume at: their segments are kept all the same.
        ``recheck``: called once the folder's lock is held, before anything is written or removed (a trainer checks
        its folder's state again: another run may have started, finished or resumed there since it first looked)."""
        from medanon.locks import OutputLock
        from medanon.outputs import check_output, check_run_folder

        self.path = Path(path)
        check_output(self.path, existing_ok=True, kind="dir")     # a resumed run's own folder, never a foreign one
        check_run_folder(self.path, command)
        self.lock = OutputLock(self.path, name="--out").acquire()  # one run per folder, until finish()
        if recheck is not None:
            try:
                recheck()
            except BaseException:
                self.lock.release()
                raise
        segment = {"argv": sys.argv[1:], "cwd": os.getcwd(), "from_step": resume_step or 0,
                   "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                   "medanon_source_sha256": source_sha256()}
        self.manifest: dict[str, Any] = {
            "command": command,
            "argv": sys.argv[1:],
            "segments": [*(self._earlier_segments() if resume_step is not None or continues else []), segment],
            "software": software_versions(),
            "platform": platform.platform(),
            "seeds": dict(seeds or {}),
            # a resumed run keeps what its earlier parts read (a generator given only at the start), updated
            "inputs": {**(self._earlier_inputs() if resume_step is not None or continues else {}),
                       **(_RUN_INPUTS.get() or {})},
            "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "finished": None,
        }
        self.path.mkdir(parents=True, exist_ok=True)
        swept = remove_torn_writes(self.path)            # a killed run's half-written checkpoint or manifest
        if swept:
            log.info("%s: removed %d temporary file(s) a killed run left", self.path, swept)
        if new_run:
            self._clear_dead_run()
        elif resume_step is not None:
            keep_metrics_until(self.metrics_path, resume_step)
        self._write_manifest()            # first: a folder interrupted now is still recognised as this run's
        atomic_write_text(self.path / "config.yaml", dump_yaml(config))

    def _earlier_inputs(self) -> dict[str, Any]:
        """The inputs a resumed run's earlier parts recorded (none where its manifest is unreadable)."""
        try:
            old = json.loads((self.path / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return dict(old.get("inputs") or {}) if isinstance(old, dict) else {}

    def _earlier_segments(self) -> list[dict[str, Any]]:
        """The command lines a resumed run ran before (its manifest's ``segments``; a manifest from before they were
        kept gives its one ``argv``), with a warning when medanon's code changed since the last of them."""
        try:
            old = json.loads((self.path / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        earlier = old.get("segments") or [{"argv": old.get("argv"), "started": old.get("started"),
                                           "medanon_source_sha256": (old.get("software") or {}).get(
                                               "medanon_source_sha256")}]
        was = earlier[-1].get("medanon_source_sha256")
        if was != source_sha256():
            log.warning("%s: medanon's code changed since this run last ran (source sha256 %s, now %s): the resumed "
                        "steps may not reproduce an uninterrupted run; the manifest's segments record each part",
                        self.path, (was or "not recorded")[:12], source_sha256()[:12])
        return earlier

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def _clear_dead_run(self) -> None:
        """The metrics and sample grids of a run of this command that died before its first checkpoint (the
        trainers refuse a new run over a checkpoint before they get here)."""
        import shutil

        stale = [p for p in (self.metrics_path, self.path / "samples") if p.exists()]
        if stale:
            log.info("%s: a run that stopped before its first checkpoint left %s; this new run starts them afresh",
                     self.path, " and ".join(p.name for p in stale))
        for p in stale:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()

    def record_input(self, name: str, path: str | Path, files: Iterable[Path] | None = None) -> None:
        """Checksum an input file, or a set of files under a directory, into the manifest."""
        path = Path(path)
        if files is not None:
            entry = {"path": str(path), **files_digest(files, root=path)}
        else:
            entry = {"path": str(path), "sha256": sha256_file(path), "bytes": path.stat().st_size}
        self.manifest["inputs"][name] = entry
        self._write_manifest()

    def log_metrics(self, **metrics: Any) -> None:
        line = json.dumps(metrics, sort_keys=True, default=_json_default)
        fd = os.open(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)   # as the run's other files
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def update(self, **fields: Any) -> None:
        self.manifest.update(fields)
        self._write_manifest()

    def finish(self) -> None:
        self.manifest["finished"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        self._write_manifest()
        self.lock.release()

    def _write_manifest(self) -> None:
        atomic_write_text(self.path / "manifest.json",
                          json.dumps(self.manifest, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def physical_memory() -> int | None:
    """Bytes of physical memory, or None where the system does not say (non-POSIX)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
        return None


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")       # x86 instructions that compute bfloat16 natively


def native_bf16(device="cpu", *, cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether ``device`` computes bfloat16 natively, so that bf16 autocast is faster than float32 there.

    CUDA: ``torch.cuda.is_bf16_supported()``. CPU: the processor advertises AVX512-BF16 or AMX-BF16 (read from
    ``/proc/cpuinfo``; False where that file does not exist). Elsewhere bf16 autocast is emulated and slower than
    float32, so callers choosing a precision for speed (``precision="auto"``) keep float32 there.

    >>> native_bf16("cpu", cpuinfo="/nonexistent")
    False
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if dev.type != "cpu":
        return False
    try:
        flags = Path(cpuinfo).read_text(errors="replace").split()
    except OSError:
        return False
    return any(f in flags for f in CPU_BF16_FLAGS)


T = TypeVar("T")
R = TypeVar("R")


def map_in_parallel(fn: Callable[[T], R], items: Sequence[T], *, device="cpu") -> list[R]:
    """``[fn(i) for i in items]``, on a CPU run side by side in threads with one torch thread each.

    Small networks use two CPU cores poorly inside one operation: training the evaluation's two seeds
    of the "small" ResNet side by side is 1.44x faster than one after the other on the 2-core machine
    (`python benchmarks/evaluation.py`); GMIA's image batches run side by side too (k-SALSA's larger batches stay
    on both threads of one process). Each call
    must be independent and seeded on its own (:func:`~medanon.train.classifier.train_classifier` is: its
    batches use its own generator and its weight initialisation is serialised); results equal the sequential
    ones up to float rounding. On a GPU, with one item or with one torch thread (also inside a call of this
    function), the calls run in order. Results come back in the order of ``items``."""
    import torch

    threads = torch.get_num_threads()
    if len(items) < 2 or threads < 2 or torch.device(device).type != "cpu":
        return [fn(i) for i in items]
    try:
        torch.set_num_threads(1)
        with ThreadPoolExecutor(max_workers=min(len(items), threads)) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)


def keep_metrics_until(path: Path, step: int) -> None:
    """On resume (said in the log, with the step it continues from), drop metric lines written after the
    checkpoint (the run repeats those steps). A line that is not a JSON object (a run killed mid-write, a full disk,
    an edit) is dropped with a warning: the metrics are a log, and the checkpoint the run resumes from is whole."""
    log.info("resuming %s at step %d", path.parent, step)
    if not path.exists():
        return
    kept, damaged = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            damaged += 1
            continue
        at = entry.get("step", 0)
        if isinstance(at, int | float) and at <= step:      # a final line ("step": "test") came after it
            kept.append(line)
    if damaged:
        log.warning("%s: %d damaged line%s (not a JSON object) dropped; the run resumes from its checkpoint", path,
                    damaged, "s" if damaged != 1 else "")
    atomic_write_text(path, "".join(line + "\n" for line in kept))
