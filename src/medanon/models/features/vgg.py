"""VGG19 in plain torch, for user-supplied weights in torchvision's ``state_dict`` format.

The k-SALSA paper computes its style and content losses on ImageNet VGG19. Those weights are not
obtainable offline (docs/design.md §4), so medanon never ships or downloads them: a user who has the
file (torchvision's ``vgg19-dcbb9e9d.pth``) points to it with ``features_weights=PATH`` (``--features-weights PATH``)
(``medanon anonymize ksalsa --features vgg19``) or the environment variable
``MEDANON_VGG19_WEIGHTS`` (every command, including training). Without it, the offline substitute is
EfficientNet-Lite0, and outputs must say so.

``features`` is numbered exactly as ``torchvision.models.vgg19().features`` (conv, ReLU, ...,
max-pool), so the ``features.*`` entries of a torchvision file load as they are; ``classifier.*``
entries are ignored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from medanon.errors import ConfigError, a_type
from medanon.models.features.base import FeatureNetwork, freeze, imagenet_normalise
from medanon.models.features.weights import FeatureNetworkUnavailable, file_sha256, verify_sha256

ENV_VAR = "MEDANON_VGG19_WEIGHTS"
TORCHVISION_FILE = "vgg19-dcbb9e9d.pth"     # torchvision's IMAGENET1K_V1 weights
TORCHVISION_SHA256_PREFIX = "dcbb9e9d"      # torch.hub names files <name>-<first hex digits of sha256>.pth

# torchvision's configuration "E": channels per conv layer, "M" for 2×2 max-pooling.
VGG19_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M")

_HUB_HASH = re.compile(r"-([0-9a-f]{8,64})\.[A-Za-z0-9]+$")

HOW_TO_GET = (f"on a machine with internet access, save torchvision's ImageNet VGG19 weights ({TORCHVISION_FILE}: "
              "torchvision.models.vgg19(weights='IMAGENET1K_V1') caches it under ~/.cache/torch/hub/checkpoints/), "
              f"copy the file here and pass features='vgg19', features_weights=PATH (k-SALSA) or set "
              f"{ENV_VAR}=PATH (every command, training included); or use the offline "
              "network 'efficientnet-lite0' and report that substitution")


def _relu_names() -> dict[int, str]:
    """Index in torchvision's ``features`` of each ReLU, and its name (``relu1_1`` ... ``relu5_4``)."""
    names: dict[int, str] = {}
    index, block, conv = 0, 1, 0
    for item in VGG19_CFG:
        if item == "M":
            index, block, conv = index + 1, block + 1, 0
        else:
            conv += 1
            names[index + 1] = f"relu{block}_{conv}"
            index += 2
    return names


RELU_NAMES = _relu_names()


def build_vgg19_features() -> nn.Sequential:
    """VGG19's convolutional part, numbered as ``torchvision.models.vgg19().features``."""
    modules: list[nn.Module] = []
    c_in = 3
    for item in VGG19_CFG:
        if item == "M":
            modules.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            modules += [nn.Conv2d(c_in, int(item), kernel_size=3, padding=1), nn.ReLU()]
            c_in = int(item)
    return nn.Sequential(*modules)


def resolve_vgg19_weights(weights: str | os.PathLike | None) -> Path:
    """The weights path from the argument, else ``$MEDANON_VGG19_WEIGHTS``; a clear error if neither exists."""
    source = "the weights argument (features_weights=)"
    if weights is None and os.environ.get(ENV_VAR):
        weights, source = os.environ[ENV_VAR], ENV_VAR
    if weights is None:
        raise FeatureNetworkUnavailable(
            "feature network 'vgg19' needs ImageNet VGG19 weights, which medanon cannot ship or download",
            fix=HOW_TO_GET)
    path = Path(weights).expanduser()
    if not path.is_file():
        raise FeatureNetworkUnavailable(f"VGG19 weights file {path} (from {source}) does not exist", fix=HOW_TO_GET)
    return path


def _features_state(path: Path, expected: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for corrupt or unsafe files
        raise ConfigError(f"VGG19 weights {path} cannot be loaded safely: {type(e).__name__}: {e}",
                          fix="pass a state_dict saved with torch.save (torchvision format)") from None
    if not isinstance(blob, dict):
        raise ConfigError(f"VGG19 weights {path} hold {a_type(blob)}, not a state_dict", fix=HOW_TO_GET)
    state = {k[len("features."):]: v for k, v in blob.items() if isinstance(k, str) and k.startswith("features.")}
    missing = sorted(set(expected) - set(state))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(state[k].shape) != tuple(expected[k]))
    if missing or wrong:
        detail = "; ".join(part for part in (f"missing features.{', features.'.join(missing)}" if missing else "",
                                             f"wrong shape for features.{', features.'.join(wrong)}" if wrong else "")
                           if part)
        raise ConfigError(f"{path} is not a torchvision VGG19 state_dict ({detail})", fix=HOW_TO_GET)
    return {k: state[k] for k in expected}


class VGG19Features(FeatureNetwork):
    """VGG19 ReLU outputs ``relu1_1`` ... ``relu5_4`` and ``pool`` (spatial mean of ``relu5_4``, N×512).

    Inputs are mapped to [0, 1] and normalised with torchvision's ImageNet mean and std.
    A file named the torch.hub way (``<name>-<hex>.pth``) must have a SHA-256 starting with
    that hex; the torchvision ImageNet file is recognised by its prefix.
    """

    name = "vgg19"
    display_name = "VGG19"
    layers = (*RELU_NAMES.values(), "pool")
    embedding_layer = "pool"
    default_input_size = 224

    def __init__(self, *, weights: str | os.PathLike | None = None, input_size: int | None = 224) -> None:
        path = resolve_vgg19_weights(weights)
        match = _HUB_HASH.search(path.name)
        if match:  # checked before unpickling anything from the file
            verify_sha256(path, match.group(1), what="VGG19 weights",
                          fix="the file is damaged or was renamed; copy it again from its source")
        digest = file_sha256(path)
        features = build_vgg19_features()
        features.load_state_dict(_features_state(path, {k: v.shape for k, v in features.state_dict().items()}))
        known = digest.startswith(TORCHVISION_SHA256_PREFIX)
        super().__init__(input_size=input_size, source={
            "source_package": None, "package_version": None,
            "weights_file": str(path), "weights_sha256": digest,
            "weights_origin": "torchvision IMAGENET1K_V1" if known else "user-supplied, origin not recognised",
            "preprocessing": "antialiased bilinear resize; grey repeated to RGB; [0,1] then ImageNet mean/std",
        })
        self.display_name = "VGG19 (ImageNet, torchvision)" if known else "VGG19 (user-supplied weights)"
        self.features = freeze(features)

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        return imagenet_normalise((x + 1.0) * 0.5)

    def _walk(self, x: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
        for index, module in enumerate(self.features[: max(RELU_NAMES) + 1]):
            x = module(x)
            if index in RELU_NAMES:
                yield RELU_NAMES[index], x
        yield "pool", x.mean(dim=(2, 3))
