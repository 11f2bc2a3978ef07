"""``StyleGANConfig``: architecture and training settings of a StyleGAN2-ADA model, in one dataclass.

The YAML files in ``configs/stylegan/`` hold named presets (``tiny32`` for tests, ``cpu64`` for a CPU
workstation, ``gpu256``/``gpu512`` for a GPU). A checkpoint stores the config as a plain dict, so a
model is always rebuilt from its checkpoint alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from medanon.errors import ConfigError

DISCRIMINATORS = ("stylegan", "projected")
GAN_LOSSES = ("nonsaturating", "hinge")             # train/gan_loss.py
GAN_PRECISIONS = ("fp32", "bf16")                   # of the training's forward passes (train/gan.py)
AUGMENTS = ("xflip", "rotate90", "translate", "scale", "rotate", "brightness", "contrast", "saturation", "cutout")
# The fields that define the networks' shapes and parametrisation (mapping_lr_mult scales the mapping's stored
# weights): a checkpoint's weights fit only a config with the same values.
ARCHITECTURE = ("resolution", "channels", "z_dim", "w_dim", "mapping_layers", "mapping_lr_mult", "channel_base",
                "channel_max", "mbstd_group", "discriminator")
MAP_FIELDS = ("map_resolution", "map_channels")    # the spatial latent map of co-trained codecs


@dataclass
class StyleGANConfig:
    # architecture
    resolution: int = 64                        # image side in pixels (power of two, 8..1024)
    channels: int = 3                           # image channels: 1 (X-ray) or 3 (fundus)
    z_dim: int = 512                            # input latent (z) dimensionality
    w_dim: int = 512                            # intermediate latent (w) dimensionality
    mapping_layers: int = 2                     # fully connected layers in the mapping network
    channel_base: int = 16384                   # feature maps at resolution r: min(channel_base // r, channel_max)
    channel_max: int = 512                      # most feature maps in any layer
    mbstd_group: int = 4                        # minibatch standard deviation group size (0 = no mbstd layer)
    # a spatial latent map (co-trained codecs; models/stylegan/synthesis.py): 0 = styles only, as in StyleGAN2
    map_resolution: int = 0                     # side of the map, added to the synthesis features at that resolution
    map_channels: int = 0                       # channels of the map; map_channels * map_resolution**2 % w_dim == 0
    # optimisation
    batch: int = 32                             # images per step (real and generated)
    g_lr: float = 0.0025                        # generator Adam learning rate
    d_lr: float = 0.0025                        # discriminator Adam learning rate
    mapping_lr_mult: float = 0.01               # learning-rate multiplier of the mapping network
    r1_gamma: float = 1.0                       # R1 regularisation weight
    r1_interval: int = 16                       # lazy regularisation: R1 every this many steps
    style_mixing: float = 0.9                   # probability of mixing two latents in a generated batch
    ema_kimg: float = 10.0                      # half-life of the generator EMA, in thousands of images
    ema_rampup: float = 0.05                    # EMA half-life at most this fraction of images seen (0 = off)
    # adaptive discriminator augmentation
    augment: tuple[str, ...] = ("translate", "scale", "rotate", "brightness", "contrast", "saturation")
    augment_p: float = 0.0                      # initial augmentation probability
    ada_target: float = 0.6                     # target of r_t = E[sign(D(real))]; 0 keeps p fixed at augment_p
    ada_interval: int = 4                       # steps between updates of p
    ada_kimg: float = 100.0                     # thousands of images for p to move from 0 to 1 at the most
    loss: str = "nonsaturating"                 # nonsaturating (StyleGAN2) | hinge (Projected GANs; train/gan_loss.py)
    discriminator: str = "stylegan"              # stylegan (residual) | projected (frozen EfficientNet-Lite0
                                                # features, Sauer et al. 2021; models/stylegan/projected.py)
    precision: str = "fp32"                     # fp32 | bf16: training's G and D forward passes under bf16 autocast;
                                                # weights, Adam, EMA, augmentation and R1's gradient stay float32
    seed: int = 0                               # seeds weights, latents and augmentations

    def validate(self) -> None:
        r = self.resolution
        if r < 8 or r > 1024 or r & (r - 1):
            raise ConfigError(f"resolution={r} must be a power of two between 8 and 1024",
                              fix="set resolution= to 8, 16, 32, 64, 128, 256, 512 or 1024")
        if self.channels not in (1, 3):
            raise ConfigError(f"channels={self.channels} must be 1 (grayscale) or 3 (RGB)",
                              fix="set channels= to 1 for chest X-rays, 3 for fundus photographs")
        for name in ("z_dim", "w_dim", "mapping_layers", "channel_base", "channel_max", "batch", "r1_interval",
                     "ada_interval"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be at least 1")
        check_map(self.map_resolution, self.map_channels, resolution=r, w_dim=self.w_dim)
        if self.channel_base // r < 1:
            raise ConfigError(f"channel_base={self.channel_base} gives no feature maps at resolution {r}",
                              fix=f"use channel_base >= {r}")
        if self.mbstd_group < 0:
            raise ConfigError(f"mbstd_group={self.mbstd_group} must be 0 (off) or a group size")
        for name in ("g_lr", "d_lr", "mapping_lr_mult", "ema_kimg", "ada_kimg"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be positive")
        if self.r1_gamma < 0 or self.ema_rampup < 0:
            raise ConfigError("r1_gamma and ema_rampup must not be negative")
        for name in ("style_mixing", "augment_p", "ada_target"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be in [0, 1]")
        if self.loss not in GAN_LOSSES:
            raise ConfigError(f"loss={self.loss!r} is unknown", fix=f"use one of {GAN_LOSSES}")
        if self.discriminator not in DISCRIMINATORS:
            raise ConfigError(f"discriminator={self.discriminator!r} is unknown", fix=f"use one of {DISCRIMINATORS}")
        if self.precision not in GAN_PRECISIONS:
            raise ConfigError(f"precision={self.precision!r} is unknown", fix=f"use one of {GAN_PRECISIONS}")
        unknown = sorted(set(self.augment) - set(AUGMENTS))
        if unknown:
            raise ConfigError(f"unknown augmentation(s) {unknown}", fix=f"choose from {', '.join(AUGMENTS)}")

    @property
    def map_rows(self) -> int:
        """Rows of ``w_dim`` values that the spatial map adds to the latent (0 without a map)."""
        return self.map_channels * self.map_resolution ** 2 // self.w_dim if self.map_resolution else 0

    def channels_at(self, res: int) -> int:
        """Feature maps of the layers working at resolution ``res``."""
        return min(self.channel_base // res, self.channel_max)


def check_map(map_resolution: int, map_channels: int, *, resolution: int, w_dim: int) -> None:
    """Refuse a spatial latent map that the synthesis network cannot take (see ``StyleGANConfig``)."""
    if map_resolution == 0 and map_channels == 0:
        return
    r = map_resolution
    if r < 4 or r > resolution or r & (r - 1):
        raise ConfigError(f"map_resolution={r} must be 0 (no map) or a power of two between 4 and the image "
                          f"resolution {resolution}")
    if map_channels < 1 or (map_channels * r * r) % w_dim:
        raise ConfigError(f"map_channels={map_channels} at map_resolution={r} gives {map_channels * r * r} values, "
                          f"not a multiple of w_dim={w_dim}",
                          fix=f"choose map_channels so that map_channels * {r * r} is a multiple of {w_dim}")
