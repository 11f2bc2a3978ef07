"""Training the small ResNet classifier on in-memory images (utility evaluation, attribute attacker).

One function, :func:`train_classifier`: a fixed number of optimiser steps (so every release gets the
same training budget whatever its size), AdamW, a cosine learning-rate schedule, optional class
weighting or focal loss (Lin et al. 2017; VS-Snow uses class-weighted focal loss with gamma 0.6), and
light re-acquisition augmentation (translation, brightness, contrast; no flips, which would change
laterality or situs). Every random step draws from one ``torch.Generator`` seeded from
``cfg.seed``, so a run is reproducible on a given device.
"""

from __future__ import annotations

import math
import threading
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from medanon.data.tensors import resize_to
from medanon.errors import ConfigError
from medanon.models.classifier import PRESETS, ResNet, ResNetConfig
from medanon.runtime import map_in_parallel  # noqa: F401  (re-exported: its old home)
from medanon.train.distributed import Dist, local_shards, shard_rows, split_batch

LOSSES = ("ce", "weighted", "focal")
PRECISIONS = ("fp32", "bf16", "auto")   # auto: bf16 where native (see ClassifierTrainConfig.resolved)


@dataclass
class ClassifierTrainConfig:
    arch: str = "small"                         # small | resnet10 | resnet18 (see medanon.models.classifier)
    image_size: int = 64                        # images are area-resized to this side before training
    steps: int = 300                            # optimiser steps (same budget for every training set)
    batch: int = 32                             # images per step
    lr: float = 2e-3                            # AdamW peak learning rate (cosine decay to 0)
    weight_decay: float = 1e-4                  # AdamW weight decay
    loss: str = "ce"                            # ce | weighted (inverse class frequency) | focal (class-weighted)
    focal_gamma: float = 0.6                    # focal loss exponent (VS-Snow uses 0.6)
    augment: bool = True                        # random translation, brightness and contrast
    precision: str = "fp32"                     # fp32 | bf16 (autocast; 1.3-1.65x less CPU with AVX512-BF16) | auto
    seed: int = 0                               # weights, batches and augmentation

    def validate(self) -> None:
        if self.arch not in PRESETS:
            raise ConfigError(f"classifier arch={self.arch!r} is unknown", fix=f"use one of {sorted(PRESETS)}")
        if self.loss not in LOSSES:
            raise ConfigError(f"classifier loss={self.loss!r} is unknown", fix=f"use one of {', '.join(LOSSES)}")
        if self.steps < 1:
            raise ConfigError(f"classifier steps={self.steps} must be at least 1", fix="e.g. steps=150")
        if self.batch < 2:
            raise ConfigError(f"classifier batch={self.batch} must be at least 2 (batch norm)", fix="e.g. batch=16")
        if self.image_size < 8:
            raise ConfigError(f"classifier image_size={self.image_size} must be at least 8", fix="e.g. image_size=64")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"classifier precision={self.precision!r} must be one of {', '.join(PRECISIONS)}",
                              fix=f"use one of {', '.join(PRECISIONS)}")
        if self.lr <= 0 or self.weight_decay < 0 or self.focal_gamma < 0:
            raise ConfigError(f"classifier lr={self.lr} must be positive, weight_decay={self.weight_decay} and "
                              f"focal_gamma={self.focal_gamma} non-negative",
                              fix="e.g. the defaults: lr=0.002, weight_decay=0.0001, focal_gamma=0.6")

    def to_dict(self) -> dict:
        return asdict(self)

    def resolved(self, device: torch.device | str) -> ClassifierTrainConfig:
        """This config with ``precision="auto"`` made concrete for ``device``: bf16 where the device computes it
        natively (:func:`medanon.runtime.native_bf16`), else fp32; other precisions unchanged."""
        if self.precision != "auto":
            return self
        from medanon.runtime import native_bf16

        return replace(self, precision="bf16" if native_bf16(device) else "fp32")


def jitter(x: torch.Tensor, gen: torch.Generator, *, shift: float = 0.0625, light: float = 0.1) -> torch.Tensor:
    """Re-acquisition-like augmentation of a batch: translation by up to ``shift`` of the side
    (reflect-padded), brightness offset and contrast gain of up to ``light``."""
    n, _, h, w = x.shape
    p = max(1, round(shift * h))
    padded = F.pad(x, (p, p, p, p), mode="reflect")
    dx = torch.randint(0, 2 * p + 1, (n,), generator=gen).to(x.device)
    dy = torch.randint(0, 2 * p + 1, (n,), generator=gen).to(x.device)
    # every image's crop in one gather (a per-image slice and stack cost a launch per image on a GPU)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    out = padded[torch.arange(n, device=x.device)[:, None, None, None],
                 torch.arange(x.shape[1], device=x.device)[None, :, None, None], rows, cols]
    gain = 1.0 + light * (2 * torch.rand(n, 1, 1, 1, generator=gen) - 1)
    bias = light * (2 * torch.rand(n, 1, 1, 1, generator=gen) - 1)
    return (out * gain.to(x.device) + bias.to(x.device)).clamp(-1, 1)


def class_weights(targets: np.ndarray, num_classes: int) -> torch.Tensor:
    """Inverse class frequency, ``n / (C * count)`` (scikit-learn's "balanced"); absent classes get 0."""
    counts = np.bincount(targets, minlength=num_classes).astype(np.float64)
    w = np.where(counts > 0, len(targets) / (num_classes * np.maximum(counts, 1)), 0.0)
    return torch.tensor(w, dtype=torch.float32)


def focal_loss(logits: torch.Tensor, target: torch.Tensor, *, gamma: float,
               weight: torch.Tensor | None = None) -> torch.Tensor:
    """``mean_i  w_{y_i} (1 - p_{i,y_i})^gamma (-log p_{i,y_i})``; gamma = 0 and no weight is cross-entropy."""
    logp = torch.log_softmax(logits, dim=1).gather(1, target[:, None])[:, 0]
    loss = -((1.0 - logp.exp()) ** gamma) * logp
    if weight is not None:
        loss = loss * weight.to(loss.device)[target]
    return loss.mean()


_INIT_LOCK = threading.Lock()
def _sharded_step(net: torch.nn.Module, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor,
                  cfg: ClassifierTrainConfig, weight: torch.Tensor | None, dist: Dist, accumulation: int) -> None:
    """One optimiser step on this rank's shards of the batch (xb, yb); see :func:`train_classifier`."""
    shards = dist.world_size * accumulation
    w = None if weight is None else weight.to(xb.device)
    # the batch mean's denominator: weighted cross-entropy divides by the batch's total weight, the rest by its size
    norm = w[yb].sum() if w is not None and cfg.loss == "weighted" else torch.tensor(float(len(yb)))
    opt.zero_grad(set_to_none=True)
    mine = list(local_shards(dist, accumulation))
    for i, s in enumerate(mine):
        xs, ys = shard_rows(xb, s, shards), shard_rows(yb, s, shards)
        with nullcontext() if not dist.enabled or i == len(mine) - 1 else net.no_sync():
            with torch.autocast(xs.device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
                logits = net(xs).float()
            if cfg.loss == "focal":
                total = focal_loss(logits, ys, gamma=cfg.focal_gamma, weight=w) * len(ys)
            else:
                total = F.cross_entropy(logits, ys, weight=w, reduction="sum")
            (total * dist.world_size / norm.to(total.device)).backward()   # DDP averages over ranks
    opt.step()


def train_classifier(images: torch.Tensor, targets: np.ndarray | torch.Tensor, *, num_classes: int,
                     cfg: ClassifierTrainConfig | None = None, device: torch.device | str | None = None,
                     progress: bool = False, desc: str = "classifier", dist: Dist | None = None,
                     accumulation: int = 1) -> ResNet:
    """Train a :class:`ResNet` on ``images`` (N, C, H, W) in [-1, 1] with integer ``targets`` (N,).

    Runs on ``device`` (default: the device of ``images``). Returns the model in eval mode.

    Data-parallel (``dist`` from :func:`medanon.train.distributed.init_distributed`, every rank calls
    this) and gradient accumulation: each step's batch and its augmentation are drawn as in one
    process and split into ``world_size * accumulation`` shards; DDP sums the gradients, and the loss
    is normalised by the whole batch (for the weighted losses, by its total class weight), so the
    update is that of one process except for batch normalisation, whose statistics are a shard's
    (synchronised across GPUs with SyncBatchNorm on CUDA; per rank on CPU, where SyncBatchNorm does
    not run). Every rank returns the same model.
    """
    cfg = cfg or ClassifierTrainConfig()
    cfg.validate()
    y = np.asarray(targets.cpu() if isinstance(targets, torch.Tensor) else targets).astype(np.int64)
    if images.ndim != 4 or len(images) != len(y):
        raise ValueError(f"images {tuple(images.shape)} and targets ({len(y)}) do not match")
    if len(y) < 2:
        raise ValueError("at least two training images are needed")
    if y.min() < 0 or y.max() >= num_classes:
        raise ValueError(f"targets must be in 0..{num_classes - 1}, got {y.min()}..{y.max()}")
    dev = torch.device(device) if device is not None else images.device
    if dist is not None:
        dev = dist.device
    dist = dist or Dist(device=dev)
    cfg = cfg.resolved(dev)
    shards = dist.world_size * accumulation
    gen = torch.Generator().manual_seed(int(cfg.seed))
    with _INIT_LOCK:                                # weight initialisation draws from torch's global RNG
        torch.manual_seed(int(cfg.seed))
        model = ResNet(ResNetConfig.preset(cfg.arch, in_channels=images.shape[1], num_classes=num_classes)).to(dev)
    x_all = resize_to(images.float(), cfg.image_size)
    y_all = torch.from_numpy(y)
    weight = class_weights(y, num_classes) if cfg.loss in ("weighted", "focal") else None
    net: torch.nn.Module = model
    if dist.enabled:
        if dev.type == "cuda":
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) /
                                                                               cfg.steps)))
    model.train()
    bs = min(cfg.batch, len(y))
    if shards > 1:
        split_batch(bs, dist.world_size, accumulation, what="classifier batch")
    order = torch.randperm(len(y), generator=gen)
    pos = 0
    for _ in tqdm(range(cfg.steps), desc=desc, disable=not (progress and dist.is_main), unit="step", leave=False):
        if pos + bs > len(order):                   # epochs without replacement, reshuffled each time
            order, pos = torch.randperm(len(y), generator=gen), 0
        idx = order[pos:pos + bs]
        pos += bs
        xb = x_all[idx]
        if cfg.augment:
            xb = jitter(xb, gen)
        xb, yb = xb.to(dev), y_all[idx].to(dev)
        if shards > 1:
            _sharded_step(net, opt, xb, yb, cfg, weight, dist, accumulation)
            sched.step()
            continue
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
            logits = model(xb).float()
        if cfg.loss == "focal":
            loss = focal_loss(logits, yb, gamma=cfg.focal_gamma, weight=weight)
        else:
            loss = F.cross_entropy(logits, yb, weight=None if weight is None else weight.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return model.eval()
