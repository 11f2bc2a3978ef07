"""GLOW (Kingma & Dhariwal 2018) in plain PyTorch: actnorm, LU 1x1 convolutions, affine coupling,
multi-scale squeeze/split with learned priors, exact log-likelihood, for 1- or 3-channel images."""

from medanon.models.glow.codec import GlowCodec
from medanon.models.glow.config import GlowConfig
from medanon.models.glow.dequantize import bits_per_dim, dequantize, flow_to_image, image_to_flow
from medanon.models.glow.model import Glow

__all__ = ["Glow", "GlowCodec", "GlowConfig", "bits_per_dim", "dequantize", "flow_to_image", "image_to_flow"]
