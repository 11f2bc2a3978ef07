"""A generic batched latent optimiser: Adam on a batch of independent latents.

``loss_fn(latents) -> (B,)`` gives one loss per item; their sum is minimised. Items never interact:
each latent's gradient comes from its own loss only, and Adam's moments are per element, so
optimising B items together gives the same result as B separate runs (up to floating point) while
the generator and the feature network see one batch. k-SALSA uses it with one latent per cluster;
any method that optimises latents (GMIA, projections) can reuse it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from medanon.errors import ConfigError


@dataclass
class LatentOptResult:
    latents: torch.Tensor                       # (B, ...) the latents after the last step (detached)
    history: torch.Tensor                       # (steps + 1, B) per-item loss before each step and at the end
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # last values of named loss terms, (B,) each


@torch.enable_grad()                 # gradients even inside a caller's torch.no_grad()
def optimize_latents(init: torch.Tensor, loss_fn: Callable[[torch.Tensor], torch.Tensor | tuple], *,
                     steps: int,                                   # Adam steps
                     lr: float = 0.1,                              # learning rate (k-SALSA: 0.1)
                     betas: tuple[float, float] = (0.9, 0.999),    # Adam betas (the official k-SALSA code)
                     callback: Callable[[int, torch.Tensor], None] | None = None) -> LatentOptResult:
    """Minimise ``loss_fn`` from ``init`` with Adam; returns the final latents and the loss history.

    ``loss_fn`` may also return ``(losses, terms)`` with ``terms`` a dict of (B,) tensors to report.
    ``callback(step, losses)`` is called after every step (progress bars).
    """
    if steps < 0:
        raise ConfigError(f"steps={steps} must not be negative")
    if lr <= 0:
        raise ConfigError(f"lr={lr} must be positive")
    w = init.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([w], lr=lr, betas=betas)
    history = []
    terms: dict[str, torch.Tensor] = {}
    for step in range(steps + 1):
        out = loss_fn(w)
        losses, terms = out if isinstance(out, tuple) else (out, {})
        if losses.ndim != 1 or losses.shape[0] != w.shape[0]:
            raise ValueError(f"loss_fn must return one loss per item, shape ({w.shape[0]},); got {tuple(losses.shape)}")
        history.append(losses.detach())
        if step == steps:
            break
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        opt.step()
        if callback is not None:
            callback(step, losses.detach())
    return LatentOptResult(w.detach(), torch.stack(history), {k: v.detach() for k, v in terms.items()})
