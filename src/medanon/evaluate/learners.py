"""The utility protocol's learners: what is trained on a release and tested on held-out real images.

Two learners answer the same question (does a model fitted to the released images and labels predict the
label of real patients it has never seen?) at different costs:

- ``cnn`` (the full protocol, the papers' kind of model): a classifier trained from scratch on the images
  (:func:`medanon.train.classifier.train_classifier`; k-SALSA trains a ResNet-50, VS-Snow a ResNet, GMIA a
  DenseNet-121). One training per seed; the spread over seeds is the training's variance.
- ``probe`` (the fast preset): a **linear probe**, L2-regularised multinomial logistic regression
  (``sklearn.linear_model.LogisticRegression`` on standardised features) fitted to frozen ImageNet features
  of the images: EfficientNet-Lite0, its feature maps average-pooled at several depths (the shallow ones keep
  small lesions and texture, the pooled head keeps the image's layout). The network is never trained; its
  features of every real image are computed once per evaluation and each release's once, so a release's
  utility costs one forward pass of its images and a convex fit of about 1,700 weights per class. The
  fit is deterministic (lbfgs from zero): seeds change only the same-N real classifier's subsample.

Both have the same interface: :meth:`encode` turns images (N, C, H, W in [-1, 1]) into the learner's inputs
(the images themselves, or features), :meth:`fit` trains on encoded inputs and integer targets, :meth:`proba`
gives ``(N, num_classes)`` float64 probabilities (a class absent from the training set gets probability 0).
:meth:`describe` is what the report records (cache keys use the learner's config).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from medanon.config import to_dict
from medanon.errors import ConfigError

LEARNERS = ("cnn", "probe")


@dataclass
class ProbeConfig:
    network: str = "efficientnet-lite0"         # frozen feature network (medanon.models.features)
    input_size: int = 64                        # images are resized to this side before the network
    layers: tuple[str, ...] = ("block3", "block4", "block5", "block6", "pool")  # average-pooled, concatenated
    C: float = 0.1                              # inverse L2 strength on standardised features (sklearn's C)
    tol: float = 1e-3                           # lbfgs stopping tolerance: on the demo's fundus split, kappa
                                                # 0.8751 at 1e-3 and 0.8759 at sklearn's 1e-4, 3x fewer iterations
    max_iter: int = 2000                        # lbfgs iterations (a cap; tol stops it first)
    batch: int = 64                             # images per feature-network batch

    def validate(self) -> None:
        from medanon.models.features import FEATURE_NETWORKS

        net = FEATURE_NETWORKS.get(self.network)
        if net is None:
            raise ConfigError(f"utility.probe.network={self.network!r} is unknown",
                              fix=f"use one of {sorted(FEATURE_NETWORKS)}")
        bad = [la for la in self.layers if la not in net.layers or la == "logits"]
        if not self.layers or bad:
            raise ConfigError(f"utility.probe.layers={list(self.layers)} names no usable layer of {self.network} "
                              f"({bad})", fix=f"use layers among {[la for la in net.layers if la != 'logits']}")
        if self.input_size < 16 or self.C <= 0 or self.tol <= 0 or self.max_iter < 1 or self.batch < 1:
            raise ConfigError("utility.probe needs input_size >= 16, C > 0, tol > 0, max_iter >= 1, batch >= 1")


def _full_proba(classes: np.ndarray, p: np.ndarray, n: int, num_classes: int) -> np.ndarray:
    out = np.zeros((n, num_classes), np.float64)
    out[:, np.asarray(classes, np.int64)] = p
    return out


class _OneClass:
    """What a probe fitted to a single class is: that class with probability 1 (as sklearn cannot fit it)."""

    def __init__(self, label: int, num_classes: int) -> None:
        self.classes_, self.num_classes = np.array([int(label)]), num_classes

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.ones((len(x), 1))


class CNNLearner:
    """A classifier trained from scratch on the images (the full protocol)."""

    name = "cnn"
    deterministic = False                       # each seed trains another model

    def __init__(self, cfg, *, device: torch.device, progress: bool = False) -> None:
        self.cfg, self.device, self.progress = cfg, device, progress

    def describe(self) -> dict[str, Any]:
        return {"learner": "cnn", "classifier": to_dict(self.cfg)}

    def encode(self, images: torch.Tensor, desc: str = "") -> torch.Tensor:
        return images

    def fit(self, x: torch.Tensor, y: np.ndarray, *, num_classes: int, seed: int, desc: str = ""):
        from medanon.evaluate.context import with_seed
        from medanon.train.classifier import train_classifier

        return train_classifier(x, y, num_classes=num_classes, cfg=with_seed(self.cfg, seed), device=self.device,
                                progress=self.progress, desc=desc or "classifier")

    def proba(self, model, x: torch.Tensor) -> np.ndarray:
        from medanon.data.tensors import resize_to
        from medanon.models.classifier import predict_proba

        return predict_proba(model, resize_to(x, self.cfg.image_size)).double().numpy()


class ProbeLearner:
    """A linear probe on frozen pretrained features (the fast preset)."""

    name = "probe"
    deterministic = True                        # the fit ignores the seed: one fit serves every seed

    def __init__(self, cfg: ProbeConfig, *, device: torch.device, progress: bool = False) -> None:
        self.cfg, self.device, self.progress = cfg, device, progress
        self._net = None

    def describe(self) -> dict[str, Any]:
        net = self.network.describe()
        return {"learner": "probe", "probe": to_dict(self.cfg),
                "feature_network": {k: net[k] for k in ("display_name", "source_package", "package_version",
                                                         "weights_sha256") if k in net},
                "model": "sklearn LogisticRegression (multinomial, lbfgs, L2) on standardised features"}

    @property
    def network(self):
        if self._net is None:
            from medanon.models.features import get_feature_network

            self._net = get_feature_network(self.cfg.network, device=self.device, input_size=self.cfg.input_size)
        return self._net

    @torch.no_grad()
    def encode(self, images: torch.Tensor, desc: str = "") -> np.ndarray:
        """Average-pooled features of ``cfg.layers``, concatenated: ``(N, D)`` float32."""
        net, b = self.network, self.cfg.batch
        chunks = []
        for i in range(0, len(images), b):
            out = net(images[i:i + b].to(self.device, torch.float32), list(self.cfg.layers))
            chunks.append(torch.cat([v.mean((2, 3)) if v.ndim == 4 else v for v in out.values()], 1).float().cpu())
        return torch.cat(chunks).numpy() if chunks else np.zeros((0, 0), np.float32)

    def fit(self, x: np.ndarray, y: np.ndarray, *, num_classes: int, seed: int, desc: str = ""):
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        y = np.asarray(y, np.int64)
        if len(np.unique(y)) < 2:                   # one class seen: the only model there is predicts it
            return _OneClass(y[0] if len(y) else 0, num_classes)
        model = make_pipeline(StandardScaler(), LogisticRegression(C=self.cfg.C, tol=self.cfg.tol,
                                                                    max_iter=self.cfg.max_iter))
        model.fit(np.asarray(x, np.float64), y)
        model.num_classes = num_classes
        return model

    def proba(self, model, x: np.ndarray) -> np.ndarray:
        p = model.predict_proba(np.asarray(x, np.float64))
        return _full_proba(model.classes_, p, len(p), model.num_classes)


def make_learner(ucfg, *, device: torch.device, progress: bool = False):
    """The learner ``ucfg.learner`` names, with its settings from ``ucfg`` (a :class:`UtilityConfig`)."""
    if ucfg.learner == "probe":
        return ProbeLearner(ucfg.probe, device=device, progress=progress)
    return CNNLearner(ucfg.classifier, device=device, progress=progress)
