"""The ``medanon`` command line: the root group and one module per command family.

Each module listed in :data:`COMMAND_MODULES` registers its commands on a group from
:mod:`medanon.cli.base` when imported; add a new command family by adding its module here.
"""

from __future__ import annotations

import importlib
import sys

from medanon.cli.base import cli

COMMAND_MODULES = (
    "anonymize_dp",
    "anonymize_gmia",
    "anonymize_ksame",
    "anonymize_snow",
    "audit",
    "data",
    "demo",
    "evaluate",
    "generate",
    "models",
    "phantom",
    "train_identity",
    "train_segmenter",
    "train_encoder",
    "train_gan",
    "train_flow",
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"medanon.cli.{_name}")


def _terminated(signum, frame) -> None:
    raise KeyboardInterrupt                      # SIGTERM (kill, a scheduler's time limit) ends a run as Ctrl-C does


def main() -> None:
    import signal

    from medanon.cli.library import install_warning_display

    install_warning_display()
    signal.signal(signal.SIGTERM, _terminated)   # temporary files removed, locks released, the partial release kept
    cli(prog_name="medanon")


__all__ = ["cli", "main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
