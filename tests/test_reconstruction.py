"""Reconstruction metrics against scikit-image, pinned IW-SSIM values, and the properties they must have."""

from __future__ import annotations

import doctest
import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage
from skimage import data as skdata
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from medanon.evaluate import reconstruction
from medanon.evaluate.reconstruction import (
    FEATURE_DISTANCE_NAME,
    ReconstructionMetrics,
    collapse_laplacian,
    feature_distance_name,
    information_content_weights,
    iw_ssim,
    laplacian_pyramid,
    perceptual_distance,
    psnr,
    ssim,
)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def _pairs(rng: np.random.Generator, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Random and structured (scikit-image photo) reference/distorted batches in [-1, 1], float64."""
    shape = (2, channels, 41, 37)
    random_ref = rng.uniform(-1, 1, shape)
    photo = skdata.astronaut()[100:141, 200:237].transpose(2, 0, 1)[:channels] / 127.5 - 1
    structured_ref = np.stack([photo, photo[:, ::-1, ::-1]])
    ref = np.concatenate([random_ref, structured_ref])
    dist = np.clip(ref + rng.normal(0, 0.15, ref.shape) + 0.05, -1, 1)
    return ref, dist


@pytest.fixture(scope="module")
def camera() -> np.ndarray:
    """A 201×187 crop of scikit-image's camera man, 0..255 float64 (odd sizes on purpose)."""
    return skdata.camera().astype(np.float64)[17:218, 30:217]


def _unit(a: np.ndarray) -> torch.Tensor:
    """0..255 grey image -> (1, 1, H, W) tensor in [-1, 1]."""
    return _t(a / 127.5 - 1)[None, None]


def test_doctests():
    assert doctest.testmod(reconstruction).failed == 0


# -- PSNR and SSIM against scikit-image -----------------------------------------------------------

@pytest.mark.parametrize("channels", [1, 3])
def test_psnr_matches_skimage(channels):
    ref, dist = _pairs(np.random.default_rng(channels), channels)
    expected = [peak_signal_noise_ratio(r, d, data_range=2.0) for r, d in zip(ref, dist, strict=True)]
    np.testing.assert_allclose(psnr(_t(dist), _t(ref)).numpy(), expected, rtol=1e-12)
    assert psnr(_t(ref), _t(ref)).isinf().all()


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ssim_matches_skimage(channels, dtype):
    ref, dist = _pairs(np.random.default_rng(10 + channels), channels)
    expected = [structural_similarity(r + 1, d + 1, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                      data_range=2.0, channel_axis=0) for r, d in zip(ref, dist, strict=True)]
    ours = ssim(_t(dist).to(dtype), _t(ref).to(dtype)).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4 if dtype == torch.float32 else 1e-12)


def test_ssim_value_range_and_identity():
    x = torch.rand(2, 3, 24, 24, dtype=torch.float64)
    y = (x + 0.1 * torch.randn_like(x)).clamp(0, 1)
    torch.testing.assert_close(ssim(y * 255, x * 255, value_range=(0, 255)), ssim(y * 2 - 1, x * 2 - 1))
    torch.testing.assert_close(ssim(x, x), torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="too small"):
        ssim(x[..., :10, :10], y[..., :10, :10])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 0.5))
def test_ssim_symmetric_and_bounded(seed, noise):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(1, 1, 16, 16, generator=g, dtype=torch.float64) * 2 - 1
    y = (x + noise * torch.randn(x.shape, generator=g, dtype=torch.float64)).clamp(-1, 1)
    a, b = ssim(x, y), ssim(y, x)
    torch.testing.assert_close(a, b)
    assert (a <= 1 + 1e-12).all() and (a >= -1).all()


def test_ssim_is_differentiable():
    x = torch.rand(1, 1, 16, 16, dtype=torch.float64, requires_grad=True)
    (1 - ssim(x, torch.zeros_like(x))).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


# -- IW-SSIM --------------------------------------------------------------------------------------

# Values from Python-IW-SSIM (Jack-guo-xy), a port of the authors' iwssim.m validated against it,
# run in float64 with pyrtools 1.1.1's Laplacian pyramid on the same inputs.
IWSSIM_REFERENCE = {"blur": (0.9728156101577005, 0.957729643988897),
                    "contrast": (0.979441720803918, 0.9705184525108219),
                    "pattern": (0.9185739421014605, 0.873172015914733)}


def _distortions(camera: np.ndarray) -> dict[str, np.ndarray]:
    i, j = np.mgrid[: camera.shape[0], : camera.shape[1]]
    pattern = 12 * np.sin(0.9 * i + 0.37 * j * j % 7)
    return {"blur": ndimage.gaussian_filter(camera, 1.2), "contrast": camera * 0.8 + 20,
            "pattern": np.clip(camera + pattern, 0, 255)}


def test_iw_ssim_matches_reference_values(camera):
    names = list(IWSSIM_REFERENCE)
    dist = torch.cat([_unit(d) for d in _distortions(camera).values()])
    ref = _unit(camera).expand_as(dist)
    for scales, column in ((5, 0), (3, 1)):
        expected = [IWSSIM_REFERENCE[name][column] for name in names]
        np.testing.assert_allclose(iw_ssim(dist, ref, scales=scales).numpy(), expected, rtol=0, atol=1e-9)


def test_laplacian_pyramid_is_invertible(camera):
    bands = laplacian_pyramid(_t(camera)[None, None], 5)
    assert [tuple(b.shape[-2:]) for b in bands] == [(201, 187), (101, 94), (51, 47), (26, 24), (13, 12)]
    torch.testing.assert_close(collapse_laplacian(bands), _t(camera)[None, None])


def test_iw_ssim_identity_and_monotone_in_noise(camera):
    ref = _unit(camera[:192, :180])
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    levels = [0.0, 0.03, 0.1, 0.3]
    batch = torch.cat([(ref + s * noise).clamp(-1, 1) for s in levels])
    scores = iw_ssim(batch, ref.expand_as(batch)).tolist()
    assert scores[0] == pytest.approx(1.0, abs=1e-12)
    assert all(a > b for a, b in itertools.pairwise(scores)), scores


def test_iw_ssim_batch_channels_and_limits(camera):
    ref = _unit(camera[:176, :176])
    dist = _unit(ndimage.gaussian_filter(camera[:176, :176], 1.0))
    single = iw_ssim(dist, ref)
    rgb_dist, rgb_ref = torch.cat([dist, ref, dist], 1), ref.expand(-1, 3, -1, -1)
    both = iw_ssim(torch.cat([rgb_dist, rgb_ref]), torch.cat([rgb_ref, rgb_ref]))
    torch.testing.assert_close(both, torch.cat([(2 * single + 1) / 3, torch.ones(1, dtype=torch.float64)]))
    assert 0 < single.item() < 1
    with pytest.raises(ValueError, match="176"):
        iw_ssim(dist[..., :170, :], ref[..., :170, :])
    assert 0 < iw_ssim(dist[..., :44, :44], ref[..., :44, :44], scales=3).item() < 1


def test_information_content_is_higher_where_the_reference_has_structure():
    """Paper §III: the weights grow with the reference's local information (variance, GSM multiplier)."""
    g = torch.Generator().manual_seed(1)
    ref = torch.zeros(1, 1, 64, 64, dtype=torch.float64)
    ref[..., :, 32:] = 40 * torch.randn(1, 1, 64, 32, generator=g, dtype=torch.float64)   # textured half
    ref[..., :, :32] = 2 * torch.randn(1, 1, 64, 32, generator=g, dtype=torch.float64)    # nearly flat half
    dist = ref + 5 * torch.randn(ref.shape, generator=g, dtype=torch.float64)
    w = information_content_weights(ref, dist)
    assert w.shape == (1, 1, 62, 62) and (w >= 0).all()
    assert w[..., :, 33:].mean() > 1.5 * w[..., :, :29].mean()


def test_iw_pooling_discounts_distortion_in_flat_regions(camera):
    """Noise confined to a flat, low-information region hurts IW-SSIM less than mean-pooled SSIM."""
    ref = _unit(camera[:192, :192])
    ref[..., :, :96] = 0.2                                                  # flat left half
    g = torch.Generator().manual_seed(2)
    noisy = ref.clone()
    noisy[..., :, :96] += 0.05 * torch.randn(1, 1, 192, 96, generator=g, dtype=torch.float64)
    assert iw_ssim(noisy, ref).item() > iw_ssim(noisy, ref, weighted=False).item()


# -- feature distance -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def native_effnet():
    """EfficientNet-Lite0 at the images' own size: small inputs keep these tests fast."""
    from medanon.models.features import get_feature_network

    return get_feature_network("efficientnet-lite0", input_size=None)


def test_feature_distance_properties(native_effnet):
    g = torch.Generator().manual_seed(3)
    photo = _t(skdata.astronaut()[:64, 160:224].transpose(2, 0, 1) / 127.5 - 1).float()[None]
    noise = torch.randn(photo.shape, generator=g)
    noisy = torch.cat([(photo + s * noise).clamp(-1, 1) for s in (0.0, 0.05, 0.2, 0.5)])
    target = photo.expand_as(noisy)
    with torch.no_grad():
        d = perceptual_distance(noisy, target, network=native_effnet)
        d_swapped = perceptual_distance(target, noisy, network=native_effnet)
        d_grey = perceptual_distance(noisy[:2, :1], target[:2, :1], network=native_effnet)
    assert d.dtype == torch.float64 and d.shape == (4,)
    assert d[0].item() == pytest.approx(0.0, abs=1e-9)
    assert all(a < b for a, b in itertools.pairwise(d.tolist())), d
    torch.testing.assert_close(d, d_swapped)
    assert d_grey[0].item() == pytest.approx(0.0, abs=1e-9) and d_grey[1] > 0


def test_feature_distance_default_network():
    """Without ``network`` it loads EfficientNet-Lite0 at its 224-pixel input (images are resized)."""
    g = torch.Generator().manual_seed(4)
    x = torch.rand(1, 1, 40, 40, generator=g) * 2 - 1
    with torch.no_grad():
        d = perceptual_distance(torch.cat([x, -x]), torch.cat([x, x]))
    assert d[0].item() == pytest.approx(0.0, abs=1e-9) and 0 < d[1].item() < 4


def test_feature_distance_is_never_called_lpips():
    assert FEATURE_DISTANCE_NAME == "EfficientNet-Lite0 feature distance"
    assert "lpips" not in feature_distance_name().lower()
    assert "LPIPS" not in (perceptual_distance.__doc__ or "").replace("Not LPIPS", "")


# -- accumulation ---------------------------------------------------------------------------------

def test_reconstruction_metrics_accumulates_per_image_values(native_effnet):
    g = torch.Generator().manual_seed(5)
    ref = torch.rand(3, 3, 32, 32, generator=g, dtype=torch.float64) * 2 - 1
    dist = (ref + 0.1 * torch.randn(ref.shape, generator=g, dtype=torch.float64)).clamp(-1, 1)
    meter = ReconstructionMetrics(["psnr", "ssim", "feature_distance"], network=native_effnet)
    meter.update(dist[:2], ref[:2])
    meter.update(dist[2:], ref[2:])
    summary = meter.compute()
    expected = {"psnr": psnr(dist, ref), "ssim": ssim(dist, ref),
                "feature_distance": perceptual_distance(dist, ref, network=native_effnet)}
    for name, values in expected.items():
        torch.testing.assert_close(meter.values()[name], values)
        assert summary[name]["n"] == 3 and summary[name]["mean"] == pytest.approx(values.mean().item())
        assert summary[name]["std"] == pytest.approx(values.std().item())
    assert summary["feature_distance"]["label"] == FEATURE_DISTANCE_NAME
    meter.reset()
    assert meter.compute()["psnr"]["n"] == 0
    with pytest.raises(ValueError, match="lpips"):
        ReconstructionMetrics(["lpips"])
