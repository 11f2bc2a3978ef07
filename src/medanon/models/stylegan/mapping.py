"""The mapping network: z (N, z_dim) -> ws (N, num_ws, w_dim), with a tracked average for truncation."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from medanon.models.stylegan.layers import FullyConnected, normalize_2nd_moment


class MappingNetwork(nn.Module):
    """An MLP from z to w, broadcast to the ``num_ws`` styles the synthesis network consumes.

    ``w_avg`` is a running mean of w over training (updated only when asked, by the training
    loop); truncation pulls every w towards it: ``w_avg + psi * (w - w_avg)``.
    """

    def __init__(self,
        z_dim: int,                             # input latent (z) dimensionality
        w_dim: int,                             # intermediate latent (w) dimensionality
        num_ws: int,                            # styles to broadcast w to
        num_layers: int = 2,                    # fully connected layers
        lr_mult: float = 0.01,                  # learning-rate multiplier of every layer
        w_avg_beta: float = 0.995,              # decay of the tracked w average
    ):
        super().__init__()
        self.z_dim = z_dim
        self.w_dim = w_dim
        self.num_ws = num_ws
        self.w_avg_beta = w_avg_beta
        dims = [z_dim] + [w_dim] * num_layers
        self.layers = nn.Sequential(*[FullyConnected(i, o, activation=True, lr_mult=lr_mult)
                                      for i, o in itertools.pairwise(dims)])
        self.register_buffer("w_avg", torch.zeros(w_dim))

    def forward(self, z: torch.Tensor, c: torch.Tensor | None = None, truncation_psi: float = 1.0, *,
                update_emas: bool = False) -> torch.Tensor:
        """Map ``z`` (N, z_dim) to ``ws`` (N, num_ws, w_dim).

        ``c`` is accepted for call compatibility with NVlabs code and must be ``None`` (these
        models are unconditional). ``update_emas`` moves ``w_avg`` towards this batch's mean.
        """
        if c is not None:
            raise ValueError("this StyleGAN is unconditional: pass c=None")
        w = self.layers(normalize_2nd_moment(z.to(torch.float32)))
        if update_emas:
            with torch.no_grad():
                # float32 under autocast too (w is bf16 there; lerp refuses mixed dtypes)
                self.w_avg.copy_(w.detach().float().mean(dim=0).lerp(self.w_avg, self.w_avg_beta))
        if truncation_psi != 1:
            w = self.w_avg.lerp(w, truncation_psi)
        return w[:, None, :].repeat(1, self.num_ws, 1)
