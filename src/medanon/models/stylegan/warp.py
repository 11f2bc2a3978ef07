"""Bilinear image warping that can be differentiated twice with respect to the images, on every device.

The augmentation pipe's geometric transforms resample images with :func:`torch.nn.functional.grid_sample`,
and the discriminator's R1 penalty differentiates *through its gradient* (``||dD(aug(x))/dx||^2`` is trained by
backpropagation). PyTorch's CUDA ``grid_sample`` has no second derivative ("derivative for
aten::grid_sampler_2d_backward is not implemented"; its CPU version falls back to differentiable ops), so a GPU run
crashed at the first R1 step after ADA raised ``p`` above 0. StyleGAN2-ADA's official code works around the same gap
with a custom operator; this module needs none, because the sampling grid here never requires a gradient (the
augmentation parameters are random draws): then ``x -> grid_sample(x, grid)`` is a fixed linear map ``A x``, its
gradient ``g -> A^T g`` is linear too, and the gradient of that is ``A`` again, i.e. ``grid_sample`` itself.
:func:`warp` builds exactly that pair of autograd functions from public calls only.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["warp"]

_MODE = {"mode": "bilinear", "padding_mode": "border", "align_corners": False}


class _Warp(torch.autograd.Function):
    """``A x``: grid sampling of the images ``x`` on a fixed ``grid``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(grid)
        ctx.shape = x.shape
        return F.grid_sample(x, grid, **_MODE)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (grid,) = ctx.saved_tensors
        return _WarpTranspose.apply(grad, grid, ctx.shape), None


class _WarpTranspose(torch.autograd.Function):
    """``A^T g``: the gradient of :class:`_Warp` with respect to its images, itself differentiable in ``g``."""

    @staticmethod
    def forward(ctx: Any, grad: torch.Tensor, grid: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        ctx.save_for_backward(grid)
        with torch.enable_grad():               # a first derivative, which every device implements
            probe = torch.zeros(shape, dtype=grad.dtype, device=grad.device, requires_grad=True)
            (out,) = torch.autograd.grad(F.grid_sample(probe, grid.detach(), **_MODE), probe, grad)
        return out

    @staticmethod
    def backward(ctx: Any, grad2: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (grid,) = ctx.saved_tensors
        return _Warp.apply(grad2, grid), None, None


def warp(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """``grid_sample(x, grid)`` (bilinear, border padding, ``align_corners=False``), differentiable any number of
    times in ``x`` on CPU and GPU. ``grid`` (N, H, W, 2) must not require a gradient.

    >>> x = torch.rand(1, 1, 4, 4, dtype=torch.float64)
    >>> grid = F.affine_grid(torch.eye(2, 3, dtype=torch.float64)[None], [1, 1, 4, 4], align_corners=False)
    >>> torch.allclose(warp(x, grid), x)
    True
    """
    if grid.requires_grad:
        raise ValueError("warp differentiates only with respect to the images; the grid must not require a gradient")
    return _Warp.apply(x, grid)
