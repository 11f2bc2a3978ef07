"""Test-wide settings.

Tests run as 2 xdist workers on 2 cores; one torch thread per worker avoids threads spinning
against each other (measured ~10x slower wall-clock with the default thread count under load).
Tiny models also run fastest on one thread. The fixture puts the count back after every test, so a
test that changes it (e.g. to exercise a multi-threaded path) cannot slow the ones after it.
"""

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def one_torch_thread():
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)
