"""StyleGAN2-ADA in plain PyTorch: generator, residual discriminator, adaptive augmentation.

Modules: :mod:`.config` (``StyleGANConfig``), :mod:`.layers` (equalised-lr layers, modulated
convolution), :mod:`.mapping`, :mod:`.synthesis`, :mod:`.generator`, :mod:`.discriminator`,
:mod:`.augment`. Training is in :mod:`medanon.train.gan`; ``load_generator`` there loads a
checkpoint's EMA generator.
"""

from medanon.models.stylegan.augment import AdaController, AugmentPipe
from medanon.models.stylegan.config import AUGMENTS, StyleGANConfig
from medanon.models.stylegan.discriminator import Discriminator
from medanon.models.stylegan.generator import Generator
from medanon.models.stylegan.mapping import MappingNetwork
from medanon.models.stylegan.synthesis import SynthesisNetwork

__all__ = ["AUGMENTS", "AdaController", "AugmentPipe", "Discriminator", "Generator", "MappingNetwork",
           "StyleGANConfig", "SynthesisNetwork"]
