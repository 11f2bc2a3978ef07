"""Local style loss: Grams, batched loss against the per-patch reference, ablation modes, alignment."""

import itertools

import numpy as np
import pytest
import torch

from medanon.anonymize.style import StyleConfig, patch_grams, reference_style_loss, source_grams, style_loss
from medanon.errors import ConfigError

MODES = [StyleConfig(align=a, match=m, distance=d)
         for a, m, d in itertools.product(("local", "none", "global"), ("cos", "mse"), ("mse", "cos"))]


def test_patch_grams_match_numpy():
    rng = np.random.default_rng(0)
    f = rng.standard_normal((2, 3, 9, 10))
    g = patch_grams(torch.from_numpy(f), 4).numpy()
    assert g.shape == (2, 16, 3, 3)
    for n, r, q in itertools.product(range(2), range(4), range(4)):
        patch = f[n, :, 2 * r:2 * r + 2, 2 * q:2 * q + 2].reshape(3, -1)          # 9 // 4 = 10 // 4 = 2
        np.testing.assert_allclose(g[n, 4 * r + q], patch @ patch.T / 4, rtol=1e-12)
    with pytest.raises(ConfigError, match="a 3x3 feature map cannot be cut into a 4x4 grid"):
        patch_grams(torch.zeros(1, 2, 3, 3), 4)


@pytest.mark.parametrize("cfg", MODES, ids=lambda c: f"{c.align}-{c.match}-{c.distance}")
def test_batched_loss_and_gradient_match_reference(cfg):
    torch.manual_seed(0)
    sizes = [3, 5, 4]                                          # clusters of different sizes: padded to 5
    b, s, c, h = len(sizes), max(sizes), 6, 12
    src = torch.randn(b, s, c, h, h, dtype=torch.float64).relu()
    weights = torch.zeros(b, s, dtype=torch.float64)
    for i, n in enumerate(sizes):
        weights[i, :n] = torch.rand(n, dtype=torch.float64) + 0.5
    target = torch.randn(b, c, h, h, dtype=torch.float64).relu().requires_grad_(True)
    batched = style_loss(target, source_grams(src, weights, cfg), cfg)
    batched.sum().backward()
    grad = target.grad.clone()
    for i, n in enumerate(sizes):
        t = target[i].detach().clone().requires_grad_(True)
        ref = reference_style_loss(t, [src[i, j] for j in range(n)], weights[i, :n].tolist(), cfg)
        ref.backward()
        assert float(batched[i].detach()) == pytest.approx(float(ref.detach()), rel=1e-9)
        torch.testing.assert_close(grad[i], t.grad, rtol=1e-7, atol=1e-12)


def test_local_alignment_tolerates_moved_patches():
    """A target made of the source's patches in other places has zero local loss, not zero without alignment."""
    torch.manual_seed(1)
    src = torch.rand(1, 1, 4, 8, 8, dtype=torch.float64)
    blocks = src[0, 0].reshape(4, 4, 2, 4, 2).permute(1, 3, 0, 2, 4).reshape(16, 4, 2, 2)
    moved = blocks[torch.randperm(16)].reshape(4, 4, 4, 2, 2).permute(2, 0, 3, 1, 4).reshape(1, 4, 8, 8)
    w = torch.ones(1, 1, dtype=torch.float64)
    local, none = StyleConfig(), StyleConfig(align="none")
    assert float(style_loss(moved, source_grams(src, w, local), local)) == pytest.approx(0, abs=1e-12)
    assert float(style_loss(moved, source_grams(src, w, none), none)) > 0.05
    assert float(style_loss(src[:, 0], source_grams(src, w, none), none)) == pytest.approx(0, abs=1e-12)


def test_scale_free_and_weights_normalised():
    torch.manual_seed(2)
    src, tgt = torch.rand(2, 3, 4, 8, 8), torch.rand(2, 4, 8, 8)
    cfg = StyleConfig()
    base = style_loss(tgt, source_grams(src, torch.ones(2, 3), cfg), cfg)
    scaled = style_loss(10 * tgt, source_grams(10 * src, 7 * torch.ones(2, 3), cfg), cfg)
    torch.testing.assert_close(base, scaled, rtol=1e-4, atol=1e-6)


def test_config_is_validated():
    with pytest.raises(ConfigError, match="align"):
        StyleConfig(align="diagonal").validate()
    with pytest.raises(ConfigError, match="match"):
        StyleConfig(match="l1").validate()
    assert StyleConfig(align="global").patches_per_side == 1
