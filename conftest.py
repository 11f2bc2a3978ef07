"""Settings for every test the suite collects, the doctests in ``src/medanon`` included.

Temporary folders: examples such as ``medanon.make_phantom()`` write to a new temporary folder by design. Under
pytest that folder goes into the test's own ``tmp_path`` (which pytest prunes), so that a test run leaves nothing
behind in the system's temporary directory.
"""

import tempfile

import pytest


@pytest.fixture(autouse=True)
def temporary_files_in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
