"""The ``medanon`` command line: the root group and one module per command family."""

from __future__ import annotations

import sys

from medanon.cli import data, demo, phantom  # noqa: F401  (modules register their commands)
from medanon.cli.base import cli


def main() -> None:
    cli(prog_name="medanon")


__all__ = ["cli", "main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
