"""StyleGAN2-ADA in plain PyTorch: generator, residual discriminator, adaptive augmentation.

Modules: :mod:`.config` (``StyleGANConfig``), :mod:`.layers` (equalised-lr layers, modulated
convolution), :mod:`.mapping`, :mod:`.synthesis`, :mod:`.generator`, :mod:`.discriminator`,
:mod:`.augment`, :mod:`.projected` (a projected discriminator; :func:`make_discriminator`
picks one from the config). Training is in :mod:`medanon.train.gan`; ``load_generator`` there loads a
checkpoint's EMA generator.
"""

from medanon.models.stylegan.augment import AdaController, AugmentPipe
from medanon.models.stylegan.config import AUGMENTS, StyleGANConfig
from medanon.models.stylegan.discriminator import Discriminator
from medanon.models.stylegan.generator import Generator
from medanon.models.stylegan.mapping import MappingNetwork
from medanon.models.stylegan.projected import ProjectedDiscriminator
from medanon.models.stylegan.synthesis import SynthesisNetwork


def make_discriminator(cfg: StyleGANConfig) -> Discriminator | ProjectedDiscriminator:
    """The discriminator ``cfg.discriminator`` names: StyleGAN2's residual one, or the projected one."""
    if cfg.discriminator == "projected":
        return ProjectedDiscriminator.from_config(cfg)
    return Discriminator.from_config(cfg)


__all__ = ["AUGMENTS", "AdaController", "AugmentPipe", "Discriminator", "Generator", "MappingNetwork",
           "ProjectedDiscriminator", "StyleGANConfig", "SynthesisNetwork", "make_discriminator"]
