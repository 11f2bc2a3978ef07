"""What a StyleGAN2-ADA run writes, loaded back: the generator and discriminator of a ``stylegan2``
checkpoint (full training state or exported), the export that strips the training state for shipping, and
which config changes a resumed run accepts (:func:`resume_changes`: none silently; training settings with
``retune``, the batch included; never the architecture or seed).

Kept apart from the training loop (:mod:`medanon.train.gan`) so that code which only samples or inverts
a trained generator (:mod:`medanon.sampling`, the codecs) does not import the trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from medanon.checkpoint import load_checkpoint, load_weights, save_checkpoint, state_entry
from medanon.config import from_dict, to_dict, validate
from medanon.errors import ConfigError
from medanon.models.stylegan import Generator, StyleGANConfig, make_discriminator
from medanon.models.stylegan.config import ARCHITECTURE, MAP_FIELDS

__all__ = ["FIXED_ON_RESUME", "KIND", "config_diff", "export_checkpoint", "load_config", "load_discriminator",
           "load_generator", "resume_changes"]

KIND = "stylegan2"


def load_config(blob: dict[str, Any]) -> StyleGANConfig:
    cfg = from_dict(StyleGANConfig, blob["config"], where=f"checkpoint {blob.get('path', '')} config")
    validate(cfg)
    return cfg


def load_generator(path: str | Path, *, device: str | torch.device = "cpu") -> Generator:
    """The EMA generator of a ``stylegan2`` checkpoint (full or exported), in eval mode, without gradients."""
    blob = load_checkpoint(path, kind=KIND, map_location="cpu")   # weights copied into the modules, then moved
    G = Generator.from_config(load_config(blob))
    load_weights(G, state_entry(blob, "G_ema"), path)
    return G.to(device).eval().requires_grad_(False)


def load_discriminator(path: str | Path, *, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The discriminator of a ``stylegan2`` checkpoint, in eval mode (for fine-tuning or co-training)."""
    blob = load_checkpoint(path, kind=KIND, map_location="cpu")   # weights copied into the modules, then moved
    D = make_discriminator(load_config(blob))
    load_weights(D, state_entry(blob, "D"), path)
    return D.to(device).eval()


def export_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """Write a small copy of a training checkpoint: EMA generator, discriminator, config and statistics."""
    blob = load_checkpoint(src, kind=KIND)
    state = {"G_ema": state_entry(blob, "G_ema"), "D": state_entry(blob, "D")}
    extra = {k: v for k, v in blob["extra"].items() if k != "ada_state"}
    return save_checkpoint(dst, kind=KIND, config=blob["config"], state=state, step=blob["step"], extra=extra)


# What a resumed run keeps even when retuned: the networks' shapes and the seed (the random streams continue from the
# checkpoint's states). The batch may change with retune (e.g. a CPU run continued on a GPU): images seen are counted,
# not derived from steps.
FIXED_ON_RESUME = (*ARCHITECTURE, *MAP_FIELDS, "seed")


def config_diff(cfg: StyleGANConfig, blob: dict[str, Any]) -> list[str]:
    """The settings in which ``cfg`` differs from a checkpoint's; a setting the checkpoint predates counts as its
    default (e.g. ``discriminator``, added later: older runs used the StyleGAN2 one)."""
    return [c["field"] for c in _changes(cfg, blob)]


def _changes(cfg: StyleGANConfig, blob: dict[str, Any]) -> list[dict[str, Any]]:
    saved, new = to_dict(load_config(blob)), to_dict(cfg)
    return [{"step": int(blob["step"]), "field": k, "from": saved.get(k), "to": new[k]}
            for k in sorted(new) if saved.get(k) != new[k]]


def resume_changes(cfg: StyleGANConfig, blob: dict[str, Any], *, retune: bool) -> list[dict[str, Any]]:
    """The settings a resume changes, as ``{"step", "field", "from", "to"}`` records; refused unless ``retune``, and
    always for the fields in :data:`FIXED_ON_RESUME`."""
    changes = _changes(cfg, blob)
    diff = [c["field"] for c in changes]
    if not diff:
        return []
    fixed = [k for k in diff if k in FIXED_ON_RESUME]
    if fixed:
        raise ConfigError(f"the config differs from the run being resumed in {fixed}, which a run cannot change: "
                          f"they define the networks or the random streams",
                          fix="resume with the run's own values of these settings (its config.yaml), or start a "
                              "new run")
    if not retune:
        raise ConfigError(f"the config differs from the run being resumed in {diff}",
                          fix="resume with the run's own config (its config.yaml), or pass retune=True to change "
                              "these training settings from this step on (recorded in the checkpoint)")
    return changes
