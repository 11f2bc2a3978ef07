"""Test-wide settings.

Tests run as 2 xdist workers on 2 cores; one torch thread per worker avoids threads spinning
against each other (measured ~10x slower wall-clock with the default thread count under load).
Tiny models also run fastest on one thread. The fixture puts the count back after every test, so a
test that changes it (e.g. to exercise a multi-threaded path) cannot slow the ones after it.
"""

import contextlib

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def one_torch_thread():
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


@pytest.fixture
def interrupted_after(monkeypatch):
    """``with interrupted_after(n):`` the n-th record a release writer adds raises KeyboardInterrupt (the ones before
    it are written), as Ctrl-C in the middle of a release; the writer is itself again after the block."""
    from medanon.release import ReleaseWriter

    real = ReleaseWriter.add

    @contextlib.contextmanager
    def arm(n: int):
        calls = []

        def add(self, key, image, sources):
            calls.append(key)
            if len(calls) == n:
                raise KeyboardInterrupt
            return real(self, key, image, sources)

        monkeypatch.setattr(ReleaseWriter, "add", add)
        try:
            yield
        finally:
            monkeypatch.setattr(ReleaseWriter, "add", real)

    return arm
