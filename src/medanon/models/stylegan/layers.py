"""Building blocks shared by the generator and the discriminator, in plain PyTorch.

Every weight uses the *equalised learning rate* of StyleGAN: it is stored as N(0, 1) / lr_mult and
scaled by ``lr_mult / sqrt(fan_in)`` at run time, so Adam sees every layer at the same scale.
Resampling uses the [1, 3, 3, 1] binomial filter of StyleGAN2 (bilinear upsampling is exactly that
filter; downsampling applies it as a strided depthwise convolution). No compiled ops.

Speed on CPUs: both resampling functions return *channels-last* tensors. PyTorch's bilinear
upsampling and depthwise convolution are several times faster in that memory format than in the
default one, and the convolutions and element-wise operations that follow keep it, so from the first
resampling on a whole network runs channels-last (same values up to float rounding; ``benchmarks/
inversion.py`` measures it). Element-wise work after each convolution is fused where PyTorch allows
(demodulation, noise and bias in one ``addcmul``; the activation's gain applied in place).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

LRELU_GAIN = math.sqrt(2.0)


def lrelu(x: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
    """Leaky ReLU (slope 0.2) scaled by sqrt(2) to keep the signal's second moment (times ``gain``).

    The scaling is done in place on the activation's own output (autograd-safe: leaky ReLU's
    backward reads its input), which saves one pass over the feature maps.
    """
    return F.leaky_relu(x, 0.2).mul_(LRELU_GAIN * gain)


def upsample2x(x: torch.Tensor) -> torch.Tensor:
    """2x upsampling with the separable [1, 3, 3, 1] / 4 filter (half-pixel bilinear interpolation).

    Returns a channels-last tensor: the CPU kernel is several times faster in that format.
    """
    x = x.contiguous(memory_format=torch.channels_last)
    return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)


def downsample2x(x: torch.Tensor) -> torch.Tensor:
    """2x downsampling: blur with the separable [1, 3, 3, 1] / 8 filter and keep every other pixel.

    Returns a channels-last tensor: the depthwise convolution is several times faster in that format.
    """
    c = x.shape[1]
    k = torch.tensor([1.0, 3.0, 3.0, 1.0], dtype=x.dtype, device=x.device)
    k = (k[:, None] * k[None, :]) / 64.0
    x = F.pad(x.contiguous(memory_format=torch.channels_last), (1, 1, 1, 1), mode="reflect")
    return F.conv2d(x, k.expand(c, 1, 4, 4), stride=2, groups=c)


def normalize_2nd_moment(x: torch.Tensor, dim: int = 1, eps: float = 1e-8) -> torch.Tensor:
    return x * (x.square().mean(dim=dim, keepdim=True) + eps).rsqrt()


class FullyConnected(nn.Module):
    """Equalised-learning-rate linear layer with optional leaky ReLU."""

    def __init__(self,
        in_features: int,                       # input dimensionality
        out_features: int,                      # output dimensionality
        activation: bool = False,               # apply the scaled leaky ReLU
        lr_mult: float = 1.0,                   # learning-rate multiplier
        bias_init: float = 0.0,                 # initial value of every bias
    ):
        super().__init__()
        self.activation = activation
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / lr_mult)
        self.bias = nn.Parameter(torch.full((out_features,), float(bias_init)))
        self.weight_gain = lr_mult / math.sqrt(in_features)
        self.bias_gain = lr_mult

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.linear(x, self.weight * self.weight_gain, self.bias * self.bias_gain)
        return lrelu(x) if self.activation else x


class Conv2d(nn.Module):
    """Equalised-learning-rate convolution ('same' padding) with optional 2x downsampling and leaky ReLU."""

    def __init__(self,
        in_channels: int,                       # input feature maps
        out_channels: int,                      # output feature maps
        kernel_size: int,                       # odd kernel side
        bias: bool = True,                      # add a learned bias
        activation: bool = True,                # apply the scaled leaky ReLU
        down: bool = False,                     # downsample 2x before the convolution
    ):
        super().__init__()
        self.activation = activation
        self.down = down
        self.padding = kernel_size // 2
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.weight_gain = 1.0 / math.sqrt(in_channels * kernel_size * kernel_size)

    def forward(self, x: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
        if self.down:
            x = downsample2x(x)
        x = F.conv2d(x, self.weight * self.weight_gain, self.bias, padding=self.padding)
        if self.activation:
            return lrelu(x, gain)
        return x * gain if gain != 1.0 else x


def modulated_conv2d(
    x: torch.Tensor,                            # input (N, I, H, W)
    weight: torch.Tensor,                       # shared weight (O, I, k, k), already gain-scaled
    styles: torch.Tensor,                       # per-sample input scales (N, I)
    demodulate: bool = True,                    # normalise each output feature map to unit variance
    up: bool = False,                           # upsample 2x before the convolution
    add: torch.Tensor | None = None,            # added to the result (bias, constant noise), broadcast
) -> torch.Tensor:
    """StyleGAN2 modulated convolution, computed as scale -> shared convolution -> rescale.

    Modulating the weight per sample, ``w'[n] = w * s[n]``, and demodulating it by
    ``1 / ||w'[n]||`` per output channel is the same linear map as scaling the input channels by
    ``s[n]``, convolving with the shared ``w`` and scaling the output channels by the demodulation
    coefficients. That form uses one ordinary batched convolution (fast on CPUs and GPUs alike)
    instead of a grouped convolution with one group per sample. The output scaling and ``add`` are
    one fused ``addcmul``.
    """
    x = x * styles[:, :, None, None]
    if up:
        x = upsample2x(x)
    x = F.conv2d(x, weight, padding=weight.shape[-1] // 2)
    if demodulate:
        dcoefs = styles.square() @ weight.square().sum(dim=[2, 3]).t()  # (N, O): ||w * s[n]||^2 per output
        scale = (dcoefs + 1e-8).rsqrt()[:, :, None, None]
        return x * scale if add is None else torch.addcmul(add, x, scale)
    return x if add is None else x + add
