"""Where a co-training run starts (``medanon train autoencoder --generator``): a GAN's EMA generator and
discriminator, or a co-trained codec's generator and encoder. Layers the start has not (a spatial latent map's)
keep their initialisation, which for the generator's map input is zero, so step 0 renders as the start does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from medanon.checkpoint import load_checkpoint, state_entry
from medanon.codecs.stylegan import KIND_COTRAINED
from medanon.config import from_dict
from medanon.errors import ConfigError
from medanon.models.stylegan import Generator, StyleGANConfig
from medanon.train.encoder import GENERATOR_KINDS, generator_config
from medanon.train.gan import load_config


def init_from(path: str | Path, device: torch.device) -> dict[str, Any]:
    """Weights, config and provenance to start from: a ``stylegan2`` checkpoint's EMA generator and discriminator, or a
    co-trained codec's generator and encoder (and its discriminator if the file still holds one; an exported codec
    has none, so D starts fresh). A spatial map's layers, which the start has not, keep their initialisation."""
    blob = load_checkpoint(path, kind=GENERATOR_KINDS, map_location=device)
    from medanon.data.training_people import model_people

    provenance = {"path": str(path), "sha256": blob["sha256"], "step": blob["step"],
                  "trained_people": model_people(blob)}
    if blob["kind"] == KIND_COTRAINED:
        st = blob["state"]
        return {"G": st["G"], "D": st.get("D"), "E": st["E"], "ada_p": float(blob["extra"].get("ada_p", 0.0)),
                "config": from_dict(StyleGANConfig, generator_config(blob), where=f"{path} generator config"),
                "provenance": {**provenance, "kind": blob["kind"]}}
    return {"G": state_entry(blob, "G_ema"), "D": state_entry(blob, "D"), "E": None, "config": load_config(blob),
            "ada_p": float(blob["extra"].get("ada_p", 0.0)), "provenance": provenance}


def load_init_generator(G: Generator, state: dict[str, Any]) -> None:
    """Load a GAN's generator weights into ``G``; a spatial map's input layer, which a GAN has not, keeps its
    initialisation (zero: the map then changes nothing until trained)."""
    load_new_parts(G, state, "synthesis.map_in.", "generator")


def load_new_parts(module: torch.nn.Module, state: dict[str, Any], new: str, what: str) -> None:
    """``module.load_state_dict(state)`` where only the parameters under ``new`` may be missing from ``state``."""
    try:
        missing, unexpected = module.load_state_dict(state, strict=False)
    except RuntimeError as e:                   # a shape mismatch: another width
        raise ConfigError(f"the init {what}'s weights do not fit this architecture: {str(e).splitlines()[1:3]}",
                          fix="use the config the init checkpoint was trained with (its widths)") from None
    wrong = [k for k in missing if not k.startswith(new)] + list(unexpected)
    if wrong:
        raise ConfigError(f"the init {what}'s weights do not fit this architecture: {', '.join(wrong[:5])}",
                          fix="use the checkpoint the config was written for")
