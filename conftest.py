"""Settings for every test the suite collects, the doctests in ``src/medanon`` included.

Temporary folders: examples such as ``medanon.make_phantom()`` write to a new temporary folder by design. Under
pytest that folder goes into the test's own ``tmp_path`` (which pytest prunes), so that a test run leaves nothing
behind in the system's temporary directory. Commands a test runs as processes of their own (``torchrun``, whose
rendezvous leaves a ``torchelastic_*`` folder, the docs' example scripts) find the same folder through ``TMPDIR``.

Commands: an unexpected exception is re-raised (``MEDANON_TRACEBACK``), not turned into the command line's
"medanon bug" message, so that every test that checks for no traceback still sees one.
"""

import os
import tempfile

import pytest

# an unexpected exception in a command reaches the test as itself (the command line would say "a medanon bug"):
# the suite's no-traceback checks keep seeing bugs
os.environ["MEDANON_TRACEBACK"] = "1"


@pytest.fixture(autouse=True)
def temporary_files_in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
