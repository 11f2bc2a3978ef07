"""Test-wide settings.

Tests run as 2 xdist workers on 2 cores; one torch thread per worker avoids threads spinning
against each other (measured ~10x slower wall-clock with the default thread count under load).
"""

import torch

torch.set_num_threads(1)
