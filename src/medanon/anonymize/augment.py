"""Latent augmentation (k-SALSA supplement E): several views of each released average.

Each cluster's final latent ``w`` (k-SALSA or k-Centroid) gives ``views`` images: the average itself
and ``views − 1`` noisy copies ``w + σ·s⊙ε``, one Gaussian ``ε`` (w_dim,) per copy shared by all
``num_ws`` style inputs (a shift in W, which keeps the copies on the generator's W+ diagonal
rather than scattering each layer), ``s`` the per-dimension standard deviation of the generator's
own prior ``mapping(z)`` (:func:`prior_w_std`, computed from random z, not from any private image)
and ``σ`` the relative noise level (default 0.05, measured against the encoder's latent spread in
docs/ksalsa.md: a view moves about half as far as the nearest other cluster's average lies, instead
of three times as far at the former 0.25).

Privacy: the noise is drawn independently of the data, from secret randomness
(:func:`medanon.anonymize.ksame.secret_generator`: 128 bits from the operating system, recorded nowhere),
so given the released average the views carry no further information about the sources (the
supplement's argument) and nobody can regenerate the noise to test a guess of the members; each
view stands for the same ≥ k people as its average. The views are not independent records: a downstream user
must not count them as separate people, which the release's ``n_people`` column makes explicit.

With a codec whose latent also carries a spatial map (``ws+map``, :mod:`medanon.codecs.stylegan`), only the
``style_rows`` style rows get the shift; the map rows are left as they are (the prior's W spread says nothing
about the map's scale).
"""

from __future__ import annotations

import numpy as np
import torch

from medanon.errors import ConfigError


def prior_w_std(generator, *, samples: int = 10000, seed: int = 0, batch: int = 1000) -> torch.Tensor:
    """Per-dimension standard deviation (w_dim,) of ``generator.mapping(z)``, z ~ N(0, I), seeded."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    dev = generator.w_avg.device
    ws = []
    with torch.no_grad():
        for n in range(0, samples, batch):
            z = torch.randn(min(batch, samples - n), generator.z_dim, generator=g).to(dev)
            ws.append(generator.mapping(z)[:, 0].double())
    return torch.cat(ws).std(0).float()


def latent_views(ws: torch.Tensor, *, views: int, sigma: float, scale: torch.Tensor,
                 generator: torch.Generator | np.random.Generator, style_rows: int | None = None) -> torch.Tensor:
    """``views`` latents per item: (B, rows, w_dim) -> (B, views, rows, w_dim), view 0 unchanged.

    ``scale`` (w_dim,) or a number multiplies the noise per dimension; ``generator`` (a CPU torch generator, or a
    numpy one: a release's secret noise) draws it. Only the first ``style_rows`` rows (default: all) are shifted;
    the rest (a spatial map's) are copied unchanged.
    """
    if views < 1:
        raise ConfigError(f"views={views} must be at least 1 (1 = the average only)")
    if sigma < 0:
        raise ConfigError(f"augmentation noise sigma={sigma} must not be negative")
    b, rows, w_dim = ws.shape
    style_rows = rows if style_rows is None else style_rows
    shape = (b, views - 1, 1, w_dim)
    eps = (torch.from_numpy(generator.standard_normal(shape, dtype=np.float32)) if isinstance(generator,
           np.random.Generator) else torch.randn(*shape, generator=generator)).to(ws)
    mask = (torch.arange(rows, device=ws.device) < style_rows).to(ws)[None, None, :, None]
    noisy = ws[:, None] + sigma * torch.as_tensor(scale).to(ws) * eps * mask
    return torch.cat([ws[:, None], noisy], dim=1)
