"""A repository script (benchmarks/, docs/) loaded as a module under its own name, for tests of its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str):
    """``load_script("benchmarks/audit.py")``: the file executed as a fresh module named after its stem."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
