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

        def add(self, key, image, sources, **kw):
            calls.append(key)
            if len(calls) == n:
                raise KeyboardInterrupt
            return real(self, key, image, sources, **kw)

        monkeypatch.setattr(ReleaseWriter, "add", add)
        try:
            yield
        finally:
            monkeypatch.setattr(ReleaseWriter, "add", real)

    return arm


def smallest_eval_config(size: int):
    """The fast evaluation preset at its smallest: no Inception, one utility seed, 5-step classifiers and identity
    network, 50 pairs. It checks that an evaluation runs end to end in seconds; its numbers measure nothing."""
    from dataclasses import replace

    from medanon.evaluate.config import EvalConfig

    cfg = EvalConfig.fast(size=size)
    clf = replace(cfg.utility.classifier, steps=5, batch=8)
    return replace(cfg, fidelity=replace(cfg.fidelity, inception=False, bootstrap=2, kid_subsets=2, samples=2),
                   utility=replace(cfg.utility, seeds=(0,), classifier=clf),
                   attacks=replace(cfg.attacks, attribute_classifier=clf, max_pairs=50,
                                   identity=replace(cfg.attacks.identity, steps=5, batch=8)))
