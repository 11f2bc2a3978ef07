"""StyleGAN2-ADA losses as small functions, reusable by any loop that trains against the discriminator.

Non-saturating logistic loss (Goodfellow et al. 2014) with R1 regularisation on real images
(Mescheder et al. 2018), applied lazily: every ``r1_interval`` steps with its weight multiplied by
the interval. The discriminator always sees images through the augmentation pipe, real and fake alike.

``amp=torch.bfloat16`` runs the discriminator's forward passes under autocast (its convolutions and matrix
products in bfloat16); the augmentation, the logits, the losses and R1's gradient with respect to the images
stay in float32. bf16 has float32's range, so no loss scaling is needed.

``loss="hinge"`` selects the hinge loss instead (Lim & Ye 2017; the loss of Projected GANs, Sauer et al.
2021): D minimises ``relu(1 - D(real)) + relu(1 + D(fake))``, G minimises ``-D(fake)``. D gains nothing
from logits beyond the margin. (On the fundus phantoms this alone did not tame the projected discriminator:
its logits still reached 50-90 within 50 steps; docs/experiments.md.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from medanon.errors import ConfigError
from medanon.models.stylegan import AdaController, AugmentPipe, Discriminator, Generator
from medanon.models.stylegan.config import GAN_LOSSES


def sample_ws(G: Generator, z: torch.Tensor, *, style_mixing: float = 0.0, generator: torch.Generator | None = None,
              update_emas: bool = False) -> torch.Tensor:
    """``G.mapping(z)``, with the styles from a random layer on taken from a second latent (probability
    ``style_mixing`` per batch); this mixing regularisation keeps neighbouring styles decorrelated."""
    return mix_styles(G, G.mapping(z, update_emas=update_emas), z, style_mixing=style_mixing, generator=generator)


def mix_styles(G: Generator, ws: torch.Tensor, z: torch.Tensor, *, style_mixing: float = 0.0,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """The style-mixing half of :func:`sample_ws`, for callers that map ``z`` themselves."""
    if style_mixing > 0:
        u = torch.rand((), device=z.device, generator=generator)
        cutoff = torch.randint(1, G.num_ws, (), device=z.device, generator=generator)
        if u < style_mixing:
            z2 = torch.randn(z.shape, device=z.device, generator=generator)
            ws2 = G.mapping(z2, update_emas=False)
            layer = torch.arange(G.num_ws, device=z.device)[None, :, None]
            ws = torch.where(layer < cutoff, ws, ws2)
    return ws


def _check(loss: str) -> None:
    if loss not in GAN_LOSSES:
        raise ConfigError(f"GAN loss={loss!r} is unknown", fix=f"use one of {', '.join(GAN_LOSSES)}")


def logits_of(D: Discriminator, x: torch.Tensor, amp: torch.dtype | None = None) -> torch.Tensor:
    """``D(x)`` in float32; with ``amp`` (``torch.bfloat16``) D's forward pass runs under autocast."""
    if amp is None:
        return D(x)
    with torch.autocast(x.device.type, dtype=amp):
        return D(x).float()


def generator_loss(D: Discriminator, augment: AugmentPipe, fake: torch.Tensor,
                   generator: torch.Generator | None = None, *, loss: str = "nonsaturating",
                   amp: torch.dtype | None = None) -> torch.Tensor:
    """Non-saturating loss ``softplus(-D(aug(G(z))))`` (or, for ``loss="hinge"``, ``-D(aug(G(z)))``), averaged."""
    _check(loss)
    logits = logits_of(D, augment(fake.float(), generator), amp)
    return -logits.mean() if loss == "hinge" else F.softplus(-logits).mean()


def discriminator_loss(D: Discriminator, augment: AugmentPipe, real: torch.Tensor, fake: torch.Tensor, *,
                       r1_weight: float = 0.0, generator: torch.Generator | None = None, loss: str = "nonsaturating",
                       amp: torch.dtype | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``softplus(D(aug(fake))) + softplus(-D(aug(real)))`` (``loss="hinge"``: ``relu(1 + D(aug(fake))) +
    relu(1 - D(aug(real)))``) plus ``r1_weight / 2 * ||dD/dreal||^2``.

    Returns the loss and detached statistics: ``real_logits`` (for the ADA heuristic), ``loss_fake``,
    ``loss_real`` and, when ``r1_weight > 0``, ``r1`` (the unweighted penalty). The R1 gradient is taken
    with respect to the images before augmentation, as in StyleGAN2-ADA.
    """
    _check(loss)
    fake_logits = logits_of(D, augment(fake.detach().float(), generator), amp)
    real = real.detach().requires_grad_(r1_weight > 0)
    real_logits = logits_of(D, augment(real, generator), amp)
    if loss == "hinge":
        loss_fake, loss_real = F.relu(1 + fake_logits).mean(), F.relu(1 - real_logits).mean()
    else:
        loss_fake, loss_real = F.softplus(fake_logits).mean(), F.softplus(-real_logits).mean()
    total = loss_fake + loss_real
    stats = {"real_logits": real_logits.detach(), "loss_fake": loss_fake.detach(), "loss_real": loss_real.detach()}
    if r1_weight > 0:
        (grad,) = torch.autograd.grad(real_logits.sum(), real, create_graph=True)
        r1 = grad.square().sum(dim=[1, 2, 3]).mean()
        total = total + r1 * (r1_weight / 2)
        stats["r1"] = r1.detach()
    return total, stats


def finish_discriminator_step(D: Discriminator, opt_D: torch.optim.Optimizer, ada: AdaController,
                              real_logits: list[torch.Tensor], dist) -> torch.Tensor:
    """After every shard's discriminator backward: sum D's gradients over ranks, step, and feed ADA the
    real logits of all shards of all ranks (``dist``: a :class:`medanon.train.distributed.Dist`).
    Returns those logits."""
    dist.sum_gradients(D.parameters())
    opt_D.step()
    logits = dist.all_gather_cat(torch.cat(real_logits))
    ada.accumulate(logits)
    ada.step()
    return logits


def discriminator_step(D: Discriminator, opt_D: torch.optim.Optimizer, augment: AugmentPipe, ada: AdaController,
                       real: torch.Tensor, fake: torch.Tensor, *, step: int, r1_gamma: float, r1_interval: int,
                       generator: torch.Generator | None = None, loss: str = "nonsaturating",
                       amp: torch.dtype | None = None) -> dict[str, float]:
    """One discriminator update (R1 on the steps that are multiples of ``r1_interval``), then ADA bookkeeping.

    Returns ``loss_D``, ``D_real`` (mean logit on reals) and, on R1 steps, ``r1``. The caller freezes
    whatever produced ``fake``.
    """
    do_r1 = r1_gamma > 0 and step % r1_interval == 0
    D.requires_grad_(True)
    total, stats = discriminator_loss(D, augment, real, fake, r1_weight=r1_gamma * r1_interval if do_r1 else 0.0,
                                      generator=generator, loss=loss, amp=amp)
    opt_D.zero_grad(set_to_none=True)
    total.backward()
    opt_D.step()
    ada.accumulate(stats["real_logits"])
    ada.step()
    out = {"loss_D": float(total.detach()), "D_real": float(stats["real_logits"].mean())}
    if do_r1:
        out["r1"] = float(stats["r1"])
    return out
