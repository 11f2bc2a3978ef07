"""Reconstruction quality: PSNR, SSIM, IW-SSIM and the EfficientNet-Lite0 feature distance.

Every metric is a pure function of two image batches ``(N, C, H, W)`` (medanon's contract:
values in ``[-1, 1]``; pass ``value_range`` otherwise) and returns one float64 value per image;
:class:`ReconstructionMetrics` accumulates them over batches. Multi-channel images are scored
per channel and averaged. Argument order follows torchmetrics, ``(preds, target)``; only
IW-SSIM is asymmetric (its weights come from ``target``, the reference).

SSIM and IW-SSIM see intensities mapped to ``[0, 1]`` and ``[0, 255]`` respectively: their
luminance term is not shift-invariant, and on raw ``[-1, 1]`` values mid-grey would sit at 0.

The feature distance is NOT LPIPS: it has no learned layer weights and uses EfficientNet-Lite0,
not AlexNet/VGG. Report it as "EfficientNet-Lite0 feature distance" (:data:`FEATURE_DISTANCE_NAME`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

ValueRange = tuple[float, float]
UNIT_RANGE: ValueRange = (-1.0, 1.0)

FEATURE_DISTANCE_NAME = "EfficientNet-Lite0 feature distance"
FEATURE_DISTANCE_LAYERS = ("block1", "block2", "block3", "block5", "block7")   # one per resolution, 112 → 7

# Wang & Li (2011), iwssim.m defaults: MS-SSIM scale weights (Wang et al. 2003), Gaussian window, GSM noise.
IWSSIM_SCALE_WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
IWSSIM_SIGMA_NSQ = 0.4
_IW_TOL = 1e-15
_BINOM5 = (1.0, 4.0, 6.0, 4.0, 1.0)   # matlabPyrTools 'binom5' is this / 16 * sqrt(2)


# -- shared helpers -------------------------------------------------------------------------------

def _check_pair(preds: torch.Tensor, target: torch.Tensor, *, min_size: int = 1) -> None:
    if preds.shape != target.shape or preds.ndim != 4:
        raise ValueError(f"expected two image batches (N, C, H, W) of the same shape, got "
                         f"{tuple(preds.shape)} and {tuple(target.shape)}")
    if min(preds.shape[-2:]) < min_size:
        raise ValueError(f"images of {tuple(preds.shape[-2:])} pixels are too small: this metric needs "
                         f"at least {min_size}×{min_size}")


def _rescale(x: torch.Tensor, value_range: ValueRange, peak: float) -> torch.Tensor:
    """float64 copy of ``x`` with ``value_range`` mapped onto ``[0, peak]``."""
    lo, hi = value_range
    if not hi > lo:
        raise ValueError(f"value_range must be (low, high) with high > low, got {value_range}")
    return (x.to(torch.float64) - lo) * (peak / (hi - lo))


def _per_image(values: torch.Tensor, n: int) -> torch.Tensor:
    """Average per-(image, channel) values ``(N·C,)`` over channels."""
    return values.view(n, -1).mean(dim=1)


def gaussian_kernel1d(sigma: float, *, truncate: float = 3.5, dtype=torch.float64, device=None) -> torch.Tensor:
    """Normalised 1-D Gaussian with radius ``int(truncate·sigma + 0.5)``, as scipy/scikit-image build it."""
    radius = int(truncate * sigma + 0.5)
    x = torch.arange(-radius, radius + 1, dtype=dtype, device=device)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


def _separable_valid(x: torch.Tensor, k1d: torch.Tensor) -> torch.Tensor:
    """'valid' correlation of ``(B, 1, H, W)`` with the outer product of ``k1d`` with itself."""
    x = F.conv2d(x, k1d.view(1, 1, 1, -1))
    return F.conv2d(x, k1d.view(1, 1, -1, 1))


def _moments(x: torch.Tensor, y: torch.Tensor, k1d: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Local means, variances and covariance under the window ``k1d ⊗ k1d`` ('valid' region)."""
    mx, my = _separable_valid(x, k1d), _separable_valid(y, k1d)
    vx = _separable_valid(x * x, k1d) - mx * mx
    vy = _separable_valid(y * y, k1d) - my * my
    cxy = _separable_valid(x * y, k1d) - mx * my
    return mx, my, vx, vy, cxy


# -- PSNR and SSIM --------------------------------------------------------------------------------

def psnr(preds: torch.Tensor, target: torch.Tensor, *, value_range: ValueRange = UNIT_RANGE) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB per image, peak = the width of ``value_range`` (inf if identical).

    >>> x = torch.zeros(2, 1, 8, 8)
    >>> psnr(x + torch.tensor([0.2, 0.02]).view(2, 1, 1, 1), x).round(decimals=3).tolist()  # errors: 10%, 1%
    [20.0, 40.0]
    """
    _check_pair(preds, target)
    diff = _rescale(preds, value_range, 1.0) - _rescale(target, value_range, 1.0)
    mse = diff.pow(2).mean(dim=(1, 2, 3))
    return -10.0 * torch.log10(mse)


def ssim(preds: torch.Tensor, target: torch.Tensor, *, value_range: ValueRange = UNIT_RANGE,
         sigma: float = 1.5, k1: float = 0.01, k2: float = 0.03) -> torch.Tensor:
    """Mean structural similarity per image with a Gaussian window (Wang et al. 2004), channel-averaged.

    Equals ``skimage.metrics.structural_similarity(t, p, gaussian_weights=True, sigma=sigma,
    use_sample_covariance=False, data_range=1, channel_axis=0)`` on each image mapped to [0, 1]:
    the window is truncated at 3.5σ (11×11 for σ = 1.5) and the map is averaged over the
    positions where the window fits inside the image (scikit-image's border crop).
    Differentiable; computed in float64.

    >>> x = torch.linspace(-1, 1, 32 * 32).view(1, 1, 32, 32)
    >>> ssim(x, x)
    tensor([1.], dtype=torch.float64)
    """
    k1d = gaussian_kernel1d(sigma, device=preds.device)
    _check_pair(preds, target, min_size=k1d.numel())
    n = preds.shape[0]
    x = _rescale(preds, value_range, 1.0).flatten(0, 1).unsqueeze(1)
    y = _rescale(target, value_range, 1.0).flatten(0, 1).unsqueeze(1)
    c1, c2 = k1 ** 2, k2 ** 2
    mx, my, vx, vy, cxy = _moments(x, y, k1d)
    s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return _per_image(s.mean(dim=(1, 2, 3)), n)


# -- IW-SSIM --------------------------------------------------------------------------------------

def _binom5_2d(dtype, device) -> torch.Tensor:
    b = torch.tensor(_BINOM5, dtype=dtype, device=device) / 16.0 * math.sqrt(2.0)
    return torch.outer(b, b).view(1, 1, 5, 5)   # sums to 2: the low-pass band carries 2× the local mean


def _pyr_down(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return F.conv2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), k)[..., ::2, ::2]


def _pyr_up(lo: torch.Tensor, k: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    up = lo.new_zeros(*lo.shape[:2], *size)
    up[..., ::2, ::2] = lo
    return F.conv2d(F.pad(up, (2, 2, 2, 2), mode="reflect"), k)


def laplacian_pyramid(x: torch.Tensor, levels: int) -> list[torch.Tensor]:
    """Laplacian pyramid of ``(B, 1, H, W)`` as matlabPyrTools' ``buildLpyr(x, levels)`` builds it.

    Returns ``levels`` bands, finest first; the last is the low-pass residual. Filters are
    ``binom5`` (sum √2 per axis, so band ``s`` is scaled by 2^s); edges are reflected without
    repeating the border sample ('reflect1'), also on the zero-interleaved up-sampled image,
    which reproduces pyrtools to ~1e-12 at any size. :func:`collapse_laplacian` inverts it.
    """
    k = _binom5_2d(x.dtype, x.device)
    bands = []
    for _ in range(levels - 1):
        lo = _pyr_down(x, k)
        bands.append(x - _pyr_up(lo, k, x.shape[-2:]))
        x = lo
    bands.append(x)
    return bands


def collapse_laplacian(bands: Sequence[torch.Tensor]) -> torch.Tensor:
    """Invert :func:`laplacian_pyramid`."""
    k = _binom5_2d(bands[0].dtype, bands[0].device)
    x = bands[-1]
    for band in reversed(bands[:-1]):
        x = band + _pyr_up(x, k, band.shape[-2:])
    return x


def _enlarge2(x: torch.Tensor) -> torch.Tensor:
    """``imenlarge2.m``: 2× bilinear upsampling aligned with the finer pyramid band, linear extrapolation at borders."""
    m, n = x.shape[-2:]
    t = x.new_zeros(*x.shape[:2], 4 * m - 1, 4 * n - 1)
    t[..., 1:-1, 1:-1] = F.interpolate(x, size=(4 * m - 3, 4 * n - 3), mode="bilinear", align_corners=False)
    t[..., 0, :] = 2 * t[..., 1, :] - t[..., 2, :]
    t[..., -1, :] = 2 * t[..., -2, :] - t[..., -3, :]
    t[..., :, 0] = 2 * t[..., :, 1] - t[..., :, 2]
    t[..., :, -1] = 2 * t[..., :, -2] - t[..., :, -3]
    return t[..., ::2, ::2]


def information_content_weights(ref: torch.Tensor, dist: torch.Tensor, parent: torch.Tensor | None = None, *,
                                sigma_nsq: float = IWSSIM_SIGMA_NSQ) -> torch.Tensor:
    """Information content weights of one pyramid band, ``(B, 1, H-2, W-2)`` (``info_content_weight_map.m``).

    The reference band is modelled as a Gaussian scale mixture over 3×3 neighbourhoods (plus
    the co-located parent coefficient), ``R = s·U``; the distorted band as ``D = g·R + V``
    with gain ``g`` and noise variance ``vv`` estimated in 3×3 windows; both pass through
    perceptual noise of variance ``sigma_nsq``. The weight is the information
    ``I(R;E|s) + I(D;F|s) − I(E;F|s)`` summed over the eigenvalues of the neighbourhood covariance.
    """
    box = torch.full((3,), 1.0 / 3.0, dtype=ref.dtype, device=ref.device)
    _, _, ss_x, ss_y, cov_xy = _moments(ref, dist, box)
    ss_x, ss_y = ss_x.clamp_min(0), ss_y.clamp_min(0)
    g = cov_xy / (ss_x + _IW_TOL)
    vv = ss_y - g * cov_xy
    flat_ref, flat_dist = ss_x < _IW_TOL, ss_y < _IW_TOL
    g = torch.where(flat_ref | flat_dist, 0.0, g)
    vv = torch.where(flat_dist, 0.0, torch.where(flat_ref, ss_y, vv))

    h, w = ref.shape[-2:]
    neighbours = [ref[..., dy:dy + h - 2, dx:dx + w - 2] for dy in range(3) for dx in range(3)]
    if parent is not None:
        neighbours.append(_enlarge2(parent)[..., 1:h - 1, 1:w - 1])
    y = torch.cat(neighbours, dim=1).flatten(2)                        # (B, K, P)
    k = y.shape[1]
    cov = y @ y.transpose(1, 2) / y.shape[2]                           # (B, K, K), zero-mean GSM
    eigval, eigvec = torch.linalg.eigh(cov)
    positive = eigval.clamp_min(0)
    total_pos = positive.sum(dim=1, keepdim=True)
    eigval = positive * eigval.sum(dim=1, keepdim=True) / torch.where(total_pos == 0, 1.0, total_pos)
    inv = torch.where(eigval > 0, 1.0 / torch.where(eigval > 0, eigval, 1.0), 0.0)   # pseudo-inverse
    z = eigvec.transpose(1, 2) @ y
    s2 = ((z * z) * inv.unsqueeze(2)).sum(dim=1) / k                   # ML estimate of the multiplier s²
    s2 = s2.view(-1, 1, h - 2, w - 2)
    lam = eigval.view(-1, k, 1, 1)
    info = torch.log2(1 + ((vv + (1 + g * g) * sigma_nsq) * s2 * lam + sigma_nsq * vv) / sigma_nsq ** 2)
    info = info.sum(dim=1, keepdim=True)
    return torch.where(info < _IW_TOL, 0.0, info)


def iw_ssim(preds: torch.Tensor, target: torch.Tensor, *, value_range: ValueRange = UNIT_RANGE,
            scales: int = 5, weighted: bool = True, scale_weights: Sequence[float] = IWSSIM_SCALE_WEIGHTS,
            sigma_nsq: float = IWSSIM_SIGMA_NSQ) -> torch.Tensor:
    """Information content weighted SSIM (Wang & Li, IEEE TIP 2011) per image; ``target`` is the reference.

    Follows the authors' ``iwssim.m``: both images (on a 0–255 scale) are decomposed into a
    ``scales``-level Laplacian pyramid; at each band the contrast-structure map (11×11 Gaussian
    window, σ = 1.5, K2 = 0.03) is pooled with the information content weights of the
    reference (:func:`information_content_weights`, parent coefficient included where one
    exists); the coarsest band uses unweighted SSIM with luminance (K1 = 0.01). Scale scores
    are combined as ``∏ score_s^{w_s}`` with the MS-SSIM weights renormalised over ``scales``.
    ``weighted=False`` gives the same pyramid SSIM with plain mean pooling.

    On grey images it reproduces the MATLAB code to ~1e-15 (checked against Python-IW-SSIM,
    a port validated against it, with pyrtools' ``buildLpyr``; pinned values in the tests).
    Departures, all in cases where the original is undefined or grey-only: colour images are
    scored per channel and averaged; a singular neighbourhood covariance (a perfectly flat
    reference band) uses its pseudo-inverse, and a band whose weights are all zero falls back
    to mean pooling; a negative pooled score counts as 0 (MATLAB would return a complex number).
    Images need at least 11·2^(scales−1) pixels per side (176 for 5 scales).
    """
    if not 1 <= scales <= len(scale_weights):
        raise ValueError(f"scales must be between 1 and {len(scale_weights)}, got {scales}")
    _check_pair(preds, target, min_size=11 * 2 ** (scales - 1))
    n = preds.shape[0]
    ref = _rescale(target, value_range, 255.0).flatten(0, 1).unsqueeze(1)
    dist = _rescale(preds, value_range, 255.0).flatten(0, 1).unsqueeze(1)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    window = gaussian_kernel1d(1.5, device=preds.device)
    crop = (window.numel() - 1) // 2 - 1   # info maps are 1 pixel inside each border, cs maps 5

    ref_bands, dist_bands = laplacian_pyramid(ref, scales), laplacian_pyramid(dist, scales)
    pooled = []
    for s, (r, d) in enumerate(zip(ref_bands, dist_bands, strict=True)):
        mr, md, vr, vd, cov = _moments(r, d, window)
        cs = (2 * cov + c2) / (vr.clamp_min(0) + vd.clamp_min(0) + c2)
        if s == scales - 1:
            cs = cs * (2 * mr * md + c1) / (mr * mr + md * md + c1)
            pooled.append(cs.mean(dim=(1, 2, 3)))
            continue
        if not weighted:
            pooled.append(cs.mean(dim=(1, 2, 3)))
            continue
        parent = ref_bands[s + 1] if s < scales - 2 else None   # the residual is no parent
        iw = information_content_weights(r, d, parent, sigma_nsq=sigma_nsq)
        if crop > 0:
            iw = iw[..., crop:-crop, crop:-crop]
        total = iw.sum(dim=(1, 2, 3))
        pooled.append(torch.where(total > 0, (cs * iw).sum(dim=(1, 2, 3)) / torch.where(total > 0, total, 1.0),
                                  cs.mean(dim=(1, 2, 3))))
    weights = torch.tensor(scale_weights[:scales], dtype=torch.float64, device=preds.device)
    weights = weights / weights.sum()
    score = torch.stack(pooled, dim=1).clamp_min(0).pow(weights).prod(dim=1)
    return _per_image(score, n)


# -- feature distance -----------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _default_feature_network():
    from medanon.models.features import get_feature_network

    return get_feature_network("efficientnet-lite0")


def feature_distance_name(network: Any | None = None) -> str:
    """How to report :func:`perceptual_distance` computed with ``network`` (never "LPIPS")."""
    if network is None or network.name == "efficientnet-lite0":
        return FEATURE_DISTANCE_NAME
    return f"{network.display_name} feature distance"


def perceptual_distance(preds: torch.Tensor, target: torch.Tensor, *, network: Any | None = None,
                        layers: Sequence[str] = FEATURE_DISTANCE_LAYERS) -> torch.Tensor:
    """EfficientNet-Lite0 feature distance per image (0 for identical images; symmetric). Not LPIPS.

    For each layer, the feature vector at every position is divided by its L2 norm over
    channels, the squared L2 distance between the two images' unit vectors is averaged over
    positions, and the layers' values are averaged. Default layers span the network's five
    resolutions (112 → 7 pixels at the 224-pixel input). ``network`` injects another
    :class:`~medanon.models.features.FeatureNetwork` (e.g. the user's VGG19); report the
    result under :func:`feature_distance_name`. Differentiable with respect to the images;
    wrap in ``torch.no_grad()`` when only evaluating.
    """
    _check_pair(preds, target)
    net = network if network is not None else _default_feature_network()
    n = preds.shape[0]
    feats = net(torch.cat([preds, target]), layers=list(layers))
    total = preds.new_zeros(n, dtype=torch.float64)
    for f in feats.values():
        f = f.to(torch.float64)
        f = f / (f.norm(dim=1, keepdim=True) + 1e-10)
        d = (f[:n] - f[n:]).pow(2).sum(dim=1)
        total = total + d.flatten(1).mean(dim=1)
    return total / len(feats)


# -- accumulation ---------------------------------------------------------------------------------

METRICS = {"psnr": psnr, "ssim": ssim, "iw_ssim": iw_ssim, "feature_distance": perceptual_distance}


class ReconstructionMetrics:
    """Accumulate per-image reconstruction metrics over batches (float64), torchmetrics style.

    >>> meter = ReconstructionMetrics(["psnr", "ssim"])
    >>> x = torch.linspace(-1, 1, 2 * 32 * 32).view(2, 1, 32, 32)
    >>> _ = meter.update(x + 0.02, x)
    >>> summary = meter.compute()
    >>> round(summary["psnr"]["mean"], 3), summary["psnr"]["n"]
    (40.0, 2)
    """

    def __init__(self, metrics: Sequence[str] = tuple(METRICS), *, value_range: ValueRange = UNIT_RANGE,
                 network: Any | None = None) -> None:
        unknown = [m for m in metrics if m not in METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {', '.join(METRICS)}")
        self.metrics = tuple(metrics)
        self.value_range = value_range
        self.network = network
        self.reset()

    def reset(self) -> None:
        self._values: dict[str, list[torch.Tensor]] = {m: [] for m in self.metrics}

    @torch.no_grad()
    def update(self, preds: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        """Score one batch; returns (and keeps) its per-image values."""
        out = {}
        for m in self.metrics:
            if m == "feature_distance":
                out[m] = perceptual_distance(preds, target, network=self.network)
            else:
                out[m] = METRICS[m](preds, target, value_range=self.value_range)
            self._values[m].append(out[m].detach().cpu())
        return out

    def values(self) -> dict[str, torch.Tensor]:
        """All per-image values so far (e.g. for bootstrap intervals)."""
        return {m: torch.cat(v) if v else torch.empty(0, dtype=torch.float64) for m, v in self._values.items()}

    def compute(self) -> dict[str, dict[str, Any]]:
        """Mean, sample standard deviation and count per metric, with the name to report it under."""
        summary = {}
        for m, v in self.values().items():
            n = v.numel()
            summary[m] = {"mean": v.mean().item() if n else math.nan,
                          "std": v.std().item() if n > 1 else math.nan, "n": n,
                          "label": feature_distance_name(self.network) if m == "feature_distance" else m}
        return summary
