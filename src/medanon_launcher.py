"""The ``medanon`` command's entry point.

Loading medanon takes about two seconds (torch, the command modules); Ctrl-C in that time exits with status 130
and one line, as Ctrl-C at any later moment does (:class:`medanon.cli.base.MedanonGroup`), never a traceback.
It lives outside the package because importing anything inside it runs the package's imports first.

While the modules load, Ctrl-C ends the process at once (``os._exit``) rather than raising KeyboardInterrupt:
an exception raised inside a library's import can leave that library half-initialised (numpy's lazy attributes
then recurse without end), and the error that follows is not the interrupt. Nothing has been read or written
by then, so there is nothing to clean up.
"""

import os
import signal


def _stop_while_starting(signum, frame) -> None:
    os.write(2, b"interrupted while starting: nothing was read or written\n")
    os._exit(130)


def main() -> None:
    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler     # not where Ctrl-C is ignored (nohup,
    previous = signal.signal(signal.SIGINT, _stop_while_starting) if ours else None   # a background job)
    try:
        from medanon.cli import main as run
    finally:
        if ours:
            signal.signal(signal.SIGINT, previous)
    run()
