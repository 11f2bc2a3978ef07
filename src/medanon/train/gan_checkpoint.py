"""What a StyleGAN2-ADA run writes, loaded back: the generator and discriminator of a ``stylegan2``
checkpoint (full training state or exported), and the export that strips the training state for shipping.

Kept apart from the training loop (:mod:`medanon.train.gan`) so that code which only samples or inverts
a trained generator (:mod:`medanon.sampling`, the codecs) does not import the trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from medanon.checkpoint import load_checkpoint, save_checkpoint
from medanon.config import from_dict, validate
from medanon.models.stylegan import Generator, StyleGANConfig, make_discriminator

__all__ = ["KIND", "export_checkpoint", "load_config", "load_discriminator", "load_generator"]

KIND = "stylegan2"


def load_config(blob: dict[str, Any]) -> StyleGANConfig:
    cfg = from_dict(StyleGANConfig, blob["config"], where=f"checkpoint {blob.get('path', '')} config")
    validate(cfg)
    return cfg


def load_generator(path: str | Path, *, device: str | torch.device = "cpu") -> Generator:
    """The EMA generator of a ``stylegan2`` checkpoint (full or exported), in eval mode, without gradients."""
    blob = load_checkpoint(path, kind=KIND, map_location=device)
    G = Generator.from_config(load_config(blob))
    G.load_state_dict(blob["state"]["G_ema"])
    return G.to(device).eval().requires_grad_(False)


def load_discriminator(path: str | Path, *, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The discriminator of a ``stylegan2`` checkpoint, in eval mode (for fine-tuning or co-training)."""
    blob = load_checkpoint(path, kind=KIND, map_location=device)
    D = make_discriminator(load_config(blob))
    D.load_state_dict(blob["state"]["D"])
    return D.to(device).eval()


def export_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """Write a small copy of a training checkpoint: EMA generator, discriminator, config and statistics."""
    blob = load_checkpoint(src, kind=KIND)
    state = {"G_ema": blob["state"]["G_ema"], "D": blob["state"]["D"]}
    extra = {k: v for k, v in blob["extra"].items() if k != "ada_state"}
    return save_checkpoint(dst, kind=KIND, config=blob["config"], state=state, step=blob["step"], extra=extra)
