"""The augmentation's image warp: grid_sample, twice differentiable in the images on any device (R1 through ADA)."""

import pytest
import torch
import torch.nn.functional as F

from medanon.models.stylegan import AugmentPipe
from medanon.models.stylegan.warp import warp


def _grid(n: int = 2, size: int = 6) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    theta = torch.eye(2, 3, dtype=torch.float64).repeat(n, 1, 1) + 0.3 * torch.randn(n, 2, 3, generator=g,
                                                                                        dtype=torch.float64)
    return F.affine_grid(theta, [n, 3, size, size], align_corners=False)


def test_warp_equals_grid_sample_with_its_first_and_second_derivatives():
    grid = _grid()
    x = torch.rand(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    ref = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    assert torch.equal(warp(x, grid), ref)
    assert torch.autograd.gradcheck(lambda t: warp(t, grid), (x,))
    assert torch.autograd.gradgradcheck(lambda t: warp(t, grid), (x,))
    # an R1-style penalty through a learnt map, differentiated once more: equal to the CPU reference's
    # (whose grid_sample falls back to differentiable ops; CUDA's has no second derivative)
    w = torch.randn(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)

    def r1_grad(sample):
        (g,) = torch.autograd.grad((sample(x) * w).tanh().sum(), x, create_graph=True)
        return torch.autograd.grad(g.square().sum(), w)[0]

    ours = r1_grad(lambda t: warp(t, grid))
    theirs = r1_grad(lambda t: F.grid_sample(t, grid, mode="bilinear", padding_mode="border", align_corners=False))
    assert torch.allclose(ours, theirs, atol=1e-12) and ours.abs().sum() > 0


def test_warp_refuses_a_grid_that_wants_a_gradient():
    with pytest.raises(ValueError, match="grid"):
        warp(torch.rand(1, 1, 4, 4), _grid(1, 4).float().requires_grad_())


def test_the_augment_pipe_warps_through_it():
    pipe = AugmentPipe(["rotate"], p=1.0)
    x = torch.rand(2, 3, 8, 8, requires_grad=True)
    y = pipe(x, torch.Generator().manual_seed(1))
    assert y.grad_fn is not None and "Warp" in type(y.grad_fn).__name__
