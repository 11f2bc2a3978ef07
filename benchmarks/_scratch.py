"""The scratch folder a benchmark writes (``--work DIR``): made fresh for each run, and only ever removed where an
earlier run of a benchmark made it (its marker file is there), never a folder a user named by mistake."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

MARKER = ".medanon-benchmark-scratch"


def fresh_work(path: Path) -> Path:
    """``path`` as an empty folder: created, or emptied where a benchmark made it; exits with a message naming the
    folder where it holds anything else."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        sys.exit(f"--work {path}: not a folder; give a new folder for the benchmark's scratch files")
    if path.is_dir() and any(path.iterdir()):
        if not (path / MARKER).is_file():
            sys.exit(f"--work {path} exists and was not made by a medanon benchmark: it is never emptied; give a new "
                     "folder, or remove it yourself")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("scratch folder of a medanon benchmark: removed by the next run\n", encoding="utf-8")
    return path
