"""The ``medanon`` command's entry point.

Loading medanon takes about two seconds (torch, the command modules); Ctrl-C in that time exits with status 130
and one line, as Ctrl-C at any later moment does (:class:`medanon.cli.base.MedanonGroup`), never a traceback.
It lives outside the package because importing anything inside it runs the package's imports first.
"""

import sys


def main() -> None:
    try:
        from medanon.cli import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted while starting: nothing was read or written\n")
        sys.exit(130)
    run()
