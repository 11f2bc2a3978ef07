"""Random states in training checkpoints, restored on whatever device a run resumes on.

Checkpoints for resuming are loaded on the CPU (``load_state_dict`` moves weights and optimizer moments to the
model's device), because torch's random-state setters take CPU byte tensors only: before, a run that resumed on a
GPU loaded its random states onto the GPU and failed there. A generator that lives on the training device (CUDA
generators for latents and augmentations) cannot take a state saved on another kind of device (a CPU generator's
state is 5,056 bytes, a CUDA one's 16): :func:`restore_generator` then reseeds it, deterministically, and warns.
"""

from __future__ import annotations

import warnings

import torch

from medanon.errors import user_stacklevel

__all__ = ["restore_generator"]


def restore_generator(gen: torch.Generator, state: torch.Tensor, *, seed: int, step: int) -> bool:
    """Set ``gen`` to a saved state; a state saved on another kind of device instead reseeds ``gen`` with
    ``seed + step`` and warns: the run continues deterministically, on a new random stream. Returns whether the
    saved state was restored.

    >>> g = torch.Generator().manual_seed(3)
    >>> restore_generator(torch.Generator(), g.get_state(), seed=0, step=10)
    True
    """
    state = state.cpu()
    if state.numel() == gen.get_state().numel():
        gen.set_state(state)
        return True
    warnings.warn(f"the checkpoint's random state (step {step}) was saved on another kind of device than "
                  f"{gen.device.type}; its random stream restarts from seed {seed + step}",
                  stacklevel=user_stacklevel())
    gen.manual_seed(seed + step)
    return False
