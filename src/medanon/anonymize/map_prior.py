"""A structure prior for codecs whose latent carries a spatial map: the maps of a generator's own samples.

The paper's k-SALSA starts each cluster at its centroid in StyleGAN2's W+, and the GAN's prior makes
that centroid render as one plausible fundus with one vessel tree. A codec with a **spatial map**
(``latent_space: ws+map``, e.g. ``restyle-map-fundus64.pt``: 10 style rows and a 32 × 32 × 2 map)
draws each image's vessels from its map, and the generator has no prior over maps: the mean of k
members' maps is a blend of k vessel trees, which renders as faint fragments (docs/ksalsa.md).

The map prior (``map_init="synthetic"``, an option: it costs the grade, docs/ksalsa.md) restores what the
paper relied on for realism. ``samples`` images are drawn from a GAN (the
unconditional generator of the data's modality, random per-layer noise, seeded), inverted by the
codec, and their map rows kept. Each cluster then starts from its centroid's **style rows** and the
**map of the synthetic image nearest to its centroid's map** (Euclidean, over the map rows), a map of
nobody: no member's vessel tree enters the record through the map. The choice depends on the
cluster's centroid only, so every record is still a function of its own cluster (k-anonymity holds
as without the prior). The optimisation then starts there: with ``rows="all"`` (the default) the style loss also
moves the map, where lesion textures are drawn; with ``rows="styles"`` the chosen map stays as drawn.

What it assumes: the generator was trained on images of people other than those released (a public
set), or its memorisation is accepted as outside the guarantee, as for the codec itself.

    >>> import torch
    >>> prior = MapPrior(maps=torch.zeros(3, 2, 4), style_rows=1, provenance={})
    >>> prior.maps[1] += 1.0
    >>> w0 = torch.cat([torch.zeros(1, 1, 4), torch.full((1, 2, 4), 0.9)], 1)   # a centroid near map 1
    >>> idx, start = prior.start(w0)
    >>> idx.tolist(), start[0, 1:].mean().item(), start[0, 0].abs().sum().item()
    ([1], 1.0, 0.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from medanon.errors import ConfigError


@dataclass
class MapPrior:
    maps: torch.Tensor                          # (M, map_rows, w_dim) the map rows of M synthetic images' inversions
    style_rows: int                             # latent rows before the map (the codec's num_ws)
    provenance: dict[str, Any]                  # generator file and sha256, samples, seed

    def start(self, w0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For centroids ``w0`` (B, rows, w_dim): the index of the nearest synthetic map of each, and the start
        latents: ``w0``'s style rows with that map."""
        if w0.shape[1] != self.style_rows + self.maps.shape[1] or w0.shape[2] != self.maps.shape[2]:
            raise ValueError(f"centroids of shape {tuple(w0.shape[1:])} do not fit maps of shape "
                             f"{tuple(self.maps.shape[1:])} after {self.style_rows} style rows")
        maps = self.maps.to(w0.device)
        d = torch.cdist(w0[:, self.style_rows:].flatten(1).float(), maps.flatten(1).float())
        idx = d.argmin(1)
        return idx, torch.cat([w0[:, :self.style_rows], maps[idx].to(w0.dtype)], 1)

    def describe(self) -> dict[str, Any]:
        return {"source": "the map rows of synthetic images (GAN samples inverted by the codec); each cluster takes "
                          "the one nearest to its centroid's map", "candidates": int(self.maps.shape[0]),
                **self.provenance}


def has_map(codec) -> bool:
    """Whether the codec's latent carries a spatial map after its style rows."""
    g = codec.generator
    return int(getattr(g, "num_rows", g.num_ws)) > int(g.num_ws)


@torch.no_grad()
def build_map_prior(codec, generator: torch.nn.Module, *, samples: int, seed: int, batch: int = 64,
                    provenance: dict[str, Any] | None = None) -> MapPrior:
    """Draw ``samples`` images from ``generator`` (seeded, random per-layer noise, as ``medanon generate``), invert
    them with ``codec`` and keep their map rows."""
    from medanon.sampling import sample_images

    if not has_map(codec):
        raise ConfigError("the codec's latent has no spatial map: a map prior has nothing to replace",
                          fix="use map_init='centroid' with this codec")
    g = codec.generator
    if (generator.img_resolution, generator.img_channels) != (g.img_resolution, g.img_channels):
        raise ConfigError(f"the map generator draws {generator.img_channels}×{generator.img_resolution} px images, the "
                          f"codec inverts {g.img_channels}×{g.img_resolution} px",
                          fix="pass a map generator trained at the codec's size and channels")
    if samples < 1:
        raise ConfigError(f"map_samples={samples} must be at least 1")
    images = sample_images(generator, samples, seed=seed, batch=batch)
    ws = torch.cat([codec.encode(images[i:i + batch]) for i in range(0, samples, batch)])
    return MapPrior(maps=ws[:, g.num_ws:].cpu(), style_rows=int(g.num_ws),
                    provenance={"samples": samples, "seed": seed, **(provenance or {})})


_LAST: dict[tuple, MapPrior] = {}               # the last prior built from checkpoint files, reused in one process


def cached_map_prior(codec, generator: torch.nn.Module, *, samples: int, seed: int,
                     provenance: dict[str, Any]) -> MapPrior:
    """:func:`build_map_prior`, reusing the last prior of the same codec and generator files (by sha256), size and
    seed: the releases of one process (the demo's k = 2, 5, 10) draw the same candidates once."""
    codec_sha = (codec.describe().get("checkpoint") or {}).get("sha256")
    key = (codec_sha, provenance.get("sha256"), samples, seed)
    if codec_sha and provenance.get("sha256") and key in _LAST:
        return _LAST[key]
    prior = build_map_prior(codec, generator, samples=samples, seed=seed, provenance=provenance)
    if codec_sha and provenance.get("sha256"):
        _LAST.clear()
        _LAST[key] = prior
    return prior


# ---------------------------------------------------------------- the k-SALSA release's use of it

def resolve_map_generator(cfg, ds, codec, value, device, used: dict[str, Any]):
    """k-SALSA's map prior generator as ``(loaded generator, provenance)``, or None where no prior applies (another
    method, ``map_init="centroid"``, or a codec without a spatial map). Resolved before any work."""
    if cfg.method != "ksalsa" or cfg.salsa.map_init != "synthetic" or codec is None or not has_map(codec):
        if value is not None and cfg.method == "ksalsa":          # given, and nothing would read it
            why = ("map_init='centroid' starts from the members' mean map" if cfg.salsa.map_init != "synthetic"
                   else "the codec has no spatial map")
            shown = repr(str(value)) if isinstance(value, (str, Path)) else f"<{type(value).__name__}>"
            raise ConfigError(f"map_generator={shown} is not used: {why}",
                              fix="leave map_generator= out (it applies to a spatial-map codec with "
                                  "map_init='synthetic')")
        return None
    if isinstance(value, torch.nn.Module):
        return value.to(device).eval().requires_grad_(False), {"generator": type(value).__name__}
    from medanon.api._inputs import model_arg
    from medanon.checkpoint import load_checkpoint
    from medanon.models_registry import default_model
    from medanon.sampling import load_any_generator

    if value is None and default_model("ksalsa-map-generator", ds.modality) is None:
        raise ConfigError(f"ksalsa with a spatial-map codec starts from synthetic maps, and no map generator ships for "
                          f"{ds.modality or 'these'} images",
                          fix="pass map_generator= a GAN checkpoint of this modality and size, or "
                              "map_init='centroid' to start from the members' mean map")
    path = model_arg(value, role="ksalsa-map-generator", ds=ds, argument="map_generator", method="ksalsa", used=used)
    from medanon.data.training_people import model_people

    blob = load_checkpoint(path, map_location="cpu")
    # its training people (a `medanon train gan` run records digests of them), compared with the released patients
    # like the codec's; private: not for the public params (map_prior_params leaves it out)
    people = model_people({**blob, "path": str(path)})
    return load_any_generator(path, device=device), {"generator": Path(path).name, "sha256": blob["sha256"],
                                                     **({"_trained_people": people} if people else {})}


def map_prior_params(cfg, codec, prior_gen) -> Any:
    """What the manifest's ``params.salsa.map_prior`` says."""
    if prior_gen is not None:
        from medanon.data.training_people import public_people

        people = public_people(prior_gen[1].get("_trained_people") or [])     # keyed, as the codec's
        return {"candidates": cfg.salsa.map_samples, "seed": cfg.seed,
                **{k: v for k, v in prior_gen[1].items() if not k.startswith("_")},
                **({"trained_people": people} if people else {}),
                "choice": "each cluster starts from its centroid's styles and the map of the synthetic image (a GAN "
                          "sample inverted by the codec) nearest to its centroid's map"}
    if codec is not None and not has_map(codec):
        return "none: the codec has no spatial map"
    return "none: map_init='centroid' (the start's map is the members' mean map)"


def map_prior_statement(privacy: dict[str, Any], prior_gen) -> dict[str, Any]:
    """The k-Same privacy statement with what the map prior adds (nothing without one)."""
    if prior_gen is None:
        return privacy
    privacy["guarantee"] += ("; with k-SALSA's map prior a record's spatial map is that of one of the map generator's "
                             "seeded samples, chosen by the cluster's centroid alone")
    privacy["assumptions"].append(
        f"the map generator ({prior_gen[1].get('generator')}) was trained on images of people other than those "
        "released, or what it memorised is outside this guarantee: each record's spatial map is one of its samples "
        "(benchmarks/map_prior_memorisation.py measures how close its samples come to its training patients)")
    return privacy
