"""GMIA latent optimisation (Li et al. 2025, GMIA §2.2): move each image's latent away from its identity.

An image ``X_R`` is projected by the encoder of a StyleGAN codec to its latent ``W = E(X_R)``
(``ws``, (N, num_ws, w_dim); GMIA §2.1 co-trains E with the generator, a ReStyle codec also works).
The anonymised latent ``W_A`` starts at ``W`` and is **the only trainable tensor** (by default in
the paper's space W: one ``w_dim`` offset shared by every synthesis layer, ``W_A = W + 1 ⊗ δ`` with
δ trainable, which is the official code's single ``w`` copied to every layer when the encoder's
output is itself on that diagonal; ``latent_space="w+"`` moves every layer's vector on its own): the generator,
the encoder and both loss networks are frozen (eval mode, no gradients to their weights, batch-norm
statistics untouched). Adam minimises, per image,

    L = λ_id · max(0, cos(E_id(X_R), E_id(X_A)) − m)  +  λ_ut · ‖E_ut(X_R) − E_ut(X_A)‖₂,   X_A = clamp(G(W_A), −1, 1)

with ``E_id`` the project's identity network (ArcFace embeddings, :mod:`medanon.models.identity`)
and ``E_ut`` the penultimate (pooled) features of a classifier trained on the utility label
(:class:`~medanon.models.classifier.ResNet` ``.features``). The released image is ``X_A``.

Batching: the batch loss is the *sum* of the per-image losses, nothing in the frozen networks mixes
images (batch norm runs on its stored statistics) and Adam is element-wise, so every image follows
exactly the trajectory it would follow alone; the batch size changes speed, never the result.
The optimisation is deterministic (no random step): the same models and image give the same X_A.

The ablations of GMIA Table 2 are ``losses="ut"`` (L_ut only), ``"id"`` (L_id only) and ``"id+ut"``
(both, the method); ``steps=0`` releases the plain reconstructions ``G(E(X_R))`` (the X̂_R rows).

Privacy: **none is guaranteed.** The margin is a target for one network's similarity, not a bound
on what any other recogniser (or a person) can link; protection is what the linkability,
singling-out and membership attacks of ``medanon evaluate`` measure. See
:func:`medanon.anonymize.gmia_release.gmia_privacy` and docs/gmia.md.

The loss networks (:class:`IdentityEncoder`, :class:`UtilityEncoder`, :func:`frozen`) live in
:mod:`medanon.anonymize.gmia_networks` and are importable from here too.

Example (tiny untrained networks, shapes only):
    >>> from medanon.models.stylegan import Generator
    >>> from medanon.models.encoder import Encoder
    >>> from medanon.models.identity import IdentityConfig, IdentityNet
    >>> from medanon.models.classifier import ResNet, ResNetConfig
    >>> from medanon.codecs.stylegan import StyleGANCodec
    >>> _ = torch.manual_seed(0)
    >>> G = Generator(z_dim=16, w_dim=16, img_resolution=16, img_channels=1, channel_base=128, channel_max=16)
    >>> E = Encoder(16, 1, G.num_ws, G.w_dim, iterative=False, channel_base=128, channel_max=16, head_dim=16)
    >>> small = ResNetConfig(in_channels=1, widths=(8, 16), blocks=(1, 1))
    >>> E_id = IdentityEncoder(IdentityNet(IdentityConfig(small, embed_dim=8, image_size=16)))
    >>> E_ut = UtilityEncoder(ResNet(small), image_size=16)
    >>> gmia = GMIA(StyleGANCodec(G, E), identity=E_id, utility=E_ut, cfg=GMIAConfig(steps=3))
    >>> out = gmia.anonymise(torch.zeros(2, 1, 16, 16))
    >>> out.images.shape, out.ws.shape, out.id_cos.shape
    (torch.Size([2, 1, 16, 16]), torch.Size([2, 6, 16]), torch.Size([2]))
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from medanon.anonymize.gmia_networks import IdentityEncoder, UtilityEncoder, frozen
from medanon.anonymize.privacy import NotAnonymised, PrivacyWarning, WeakSetting
from medanon.errors import ConfigError

__all__ = ["COS_EPS", "GMIA", "LOSSES", "OPTIMISER", "SPACES", "GMIAConfig", "GMIAResult", "IdentityEncoder",
           "UtilityEncoder", "frozen", "summarise"]

log = logging.getLogger(__name__)

LOSSES = ("id+ut", "id", "ut")                  # GMIA Table 2: both (the method), L_id only, L_ut only
SPACES = ("w", "w+")                            # w: one w_dim vector for every layer (paper, official code); w+
OPTIMISER = "adam"
COS_EPS = 1e-8                                  # the ε of GMIA Eq. 1's cosine


@dataclass(kw_only=True)
class GMIAConfig:
    losses: str = "id+ut"                       # id+ut (GMIA) | id (L_id only) | ut (L_ut only): Table 2 ablations
    steps: int = 10                             # Adam steps on W_A (0 = release the reconstructions G(E(X_R)))
    lr: float = 0.03                            # Adam learning rate on W_A
    margin: float = 0.0                         # m: L_id is zero once cos(E_id(X_R), E_id(X_A)) <= m
    lambda_id: float = 1.0                      # weight of L_id
    lambda_ut: float = 0.05                     # weight of L_ut (a Euclidean distance of unnormalised features)
    latent_space: str = "w"                     # w: one shared w_dim offset for all layers (the paper's W) | w+
    batch_size: int = 16                        # images optimised together (speed; results agree to float rounding)

    def validate(self) -> None:
        if self.latent_space not in SPACES:
            raise ConfigError(f"latent_space={self.latent_space!r} is not one of {', '.join(SPACES)}",
                              fix="w (the paper's: one w for every layer) or w+ (one per layer)")
        if self.losses not in LOSSES:
            raise ConfigError(f"losses={self.losses!r} is not one of {', '.join(LOSSES)}",
                              fix="use id+ut (GMIA), id (identity loss only) or ut (utility loss only)")
        if self.steps < 0:
            raise ConfigError(f"steps={self.steps} must be >= 0", fix="e.g. steps=100; 0 releases the reconstructions")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"lr={self.lr} must be a positive number", fix="e.g. lr=0.01")
        if not -1.0 <= self.margin < 1.0:
            raise ConfigError(f"margin={self.margin} must be a cosine in [-1, 1)",
                              fix="e.g. margin=0 (identity embeddings orthogonal to the source's)")
        if not (0 <= self.lambda_id < math.inf and 0 <= self.lambda_ut < math.inf):
            raise ConfigError(f"lambda_id={self.lambda_id} and lambda_ut={self.lambda_ut} must be finite and >= 0",
                              fix="e.g. lambda_id=1, lambda_ut=0.05")
        if self.uses_id and self.lambda_id == 0:
            raise ConfigError(f"losses={self.losses} with lambda_id=0 switches the identity loss off",
                              fix="use losses='ut' for the utility-only ablation, or a positive lambda_id=")
        if self.uses_ut and self.lambda_ut == 0:
            raise ConfigError(f"losses={self.losses} with lambda_ut=0 switches the utility loss off",
                              fix="use losses='id' for the identity-only ablation, or a positive lambda_ut=")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={self.batch_size} must be at least 1")

    @property
    def uses_id(self) -> bool:
        return "id" in self.losses.split("+")

    @property
    def uses_ut(self) -> bool:
        return "ut" in self.losses.split("+")

    def params(self) -> dict[str, Any]:
        """What defines the result (the batch size does not): recorded in the release manifest."""
        d = asdict(self)
        d.pop("batch_size")
        return {**d, "optimiser": OPTIMISER}

    def warnings(self) -> list[tuple[str, type[PrivacyWarning]]]:
        """Settings under which little or no identity is removed, each with its warning class (the callers raise
        them)."""
        out: list[tuple[str, type[PrivacyWarning]]] = []
        if self.steps == 0:
            out.append(("steps=0: the release is the plain reconstruction G(E(X_R)); no identity is removed "
                        "(the reconstruction baseline, GMIA's X̂_R rows)", NotAnonymised))
        elif not self.uses_id:
            out.append(("losses=ut: no identity loss; the latent is only pulled towards the source's utility "
                        "features and identity is not removed (GMIA Table 2's L_ut ablation)", NotAnonymised))
        if self.uses_id and self.margin >= 0.5:
            out.append((f"margin={self.margin:g}: released images may keep an identity embedding with cosine up to "
                        f"{self.margin:g} to their source's; same-patient pairs of real images typically score in "
                        "that range, so the identity network may still link them", WeakSetting))
        return out



# ------------------------------------------------------------------------------------------- optimisation


@dataclass
class GMIAResult:
    """What :meth:`GMIA.optimise` returns; per-image tensors are on the CPU."""

    ws: torch.Tensor                            # optimised latents W_A (N, num_ws, w_dim)
    images: torch.Tensor                        # released images X_A = clamp(G(W_A)) (N, C, H, W)
    id_cos_start: torch.Tensor | None           # cos(E_id(X_R), E_id(G(W))) before optimisation (N,)
    id_cos: torch.Tensor | None                 # cos(E_id(X_R), E_id(X_A)) after (N,)
    ut_dist_start: torch.Tensor | None          # ‖E_ut(X_R) − E_ut(G(W))‖₂ before (N,)
    ut_dist: torch.Tensor | None                # ‖E_ut(X_R) − E_ut(X_A)‖₂ after (N,)
    history: list[dict[str, float]] = field(default_factory=list)  # per step: batch means of the terms


class GMIA:
    """Identity-removing latent optimisation through a StyleGAN codec (see the module docstring).

    ``codec`` needs ``encode(images) -> ws`` and a differentiable ``render(ws) -> images``
    (:class:`~medanon.codecs.stylegan.StyleGANCodec`). ``identity`` and ``utility`` are modules
    mapping images to (N, D) vectors (:class:`IdentityEncoder` and :class:`UtilityEncoder` adapt
    the project's networks; the cosine is taken as in Eq. 1). ``identity`` is required when the losses
    include L_id, ``utility`` when they include L_ut; a network given but not in the losses is
    still used to report its distance (e.g. the utility drift of the L_id-only ablation).
    Everything runs on the codec's device; the loss networks must be on it too.
    """

    def __init__(self, codec: Any, *,
                 identity: nn.Module | None,           # E_id: images -> embeddings (IdentityEncoder; needed for L_id)
                 utility: nn.Module | None,            # E_ut: images -> features (UtilityEncoder; needed for L_ut)
                 cfg: GMIAConfig | None = None):
        self.cfg = cfg or GMIAConfig()
        self.cfg.validate()
        if self.cfg.uses_id and identity is None:
            raise ConfigError(f"losses={self.cfg.losses} needs the identity network E_id",
                              fix="pass identity= (an identity network checkpoint, from `medanon train identity`)")
        if self.cfg.uses_ut and utility is None:
            raise ConfigError(f"losses={self.cfg.losses} needs the utility network E_ut",
                              fix="pass utility= (a classifier checkpoint trained on the utility label, grade or "
                                  "pneumonia: `medanon train classifier`)")
        for name in ("encode", "render"):
            if not callable(getattr(codec, name, None)):
                raise ConfigError(f"GMIA needs a StyleGAN codec with encode() and a differentiable render(); "
                                  f"{type(codec).__name__} has no {name}()",
                                  fix="pass a co-trained (or ReStyle) codec from medanon.codecs.stylegan.load_codec")
        self.codec, self.identity, self.utility = codec, identity, utility
        dev = self.device
        for what, net in (("identity", identity), ("utility", utility)):
            p = next(net.parameters(), None) if net is not None else None
            if p is not None and p.device != dev:
                raise ConfigError(f"the {what} network is on {p.device}, the codec on {dev}",
                                  fix="load every network onto the same device (map_location=, device=)")

    @classmethod
    def from_checkpoints(cls, model: str | Path, *,
                         identity: str | Path | None,    # kind "identity" checkpoint (E_id)
                         utility: str | Path | None,     # kind "classifier" checkpoint on the utility label (E_ut)
                         cfg: GMIAConfig | None = None,
                         device: torch.device | str = "cpu") -> GMIA:
        """Load the codec (co-trained or ReStyle), E_id and E_ut onto ``device`` (what the CLI and demo use)."""
        from medanon.codecs.stylegan import load_codec

        codec = load_codec(model, map_location=device)
        ident = IdentityEncoder.from_checkpoint(identity, map_location=device) if identity is not None else None
        util = UtilityEncoder.from_checkpoint(utility, map_location=device) if utility is not None else None
        return cls(codec, identity=ident, utility=util, cfg=cfg)

    @property
    def device(self) -> torch.device:
        dev = getattr(self.codec, "device", None)
        if dev is not None:
            return torch.device(dev)
        return next(self.codec.parameters()).device

    def anonymise(self, images: torch.Tensor) -> GMIAResult:
        """``X_R`` (N, C, H, W) in [-1, 1] -> :class:`GMIAResult` (encode, optimise in batches, render)."""
        if images.ndim != 4:
            raise ValueError(f"images must be (N, C, H, W), got shape {tuple(images.shape)}")
        parts = []
        for chunk in images.split(self.cfg.batch_size):
            x = chunk.to(self.device, torch.float32)
            parts.append(self.optimise(self.codec.encode(x), x))
        return _concat(parts)

    @torch.enable_grad()                 # gradients even inside a caller's torch.no_grad()
    def optimise(self, ws: torch.Tensor, sources: torch.Tensor) -> GMIAResult:
        """Optimise ``W_A`` from ``ws`` (not modified) against the sources ``X_R`` (one batch, any size)."""
        cfg = self.cfg
        x_r = sources.to(self.device, torch.float32)
        if ws.shape[0] != x_r.shape[0]:
            raise ValueError(f"{ws.shape[0]} latents for {x_r.shape[0]} source images")
        codec_module = self.codec if isinstance(self.codec, nn.Module) else None
        with frozen(codec_module, self.identity, self.utility):
            with torch.no_grad():
                id_r = self.identity(x_r) if self.identity is not None else None
                ut_r = self.utility(x_r) if self.utility is not None else None
            w0 = ws.detach().to(self.device, torch.float32)
            styles = style_rows(self.codec, w0.shape[1])
            if cfg.latent_space == "w":          # one w_dim offset shared by every layer: W_A = W + 1 ⊗ δ
                param = torch.zeros(w0.shape[0], 1, w0.shape[2], device=self.device).requires_grad_(True)
            else:                                # W+: every layer's style vector moves on its own
                param = w0[:, :styles].clone().requires_grad_(True)
            fmap = w0[:, styles:].clone().requires_grad_(True)   # a spatial map's rows (if any) move freely

            def current() -> torch.Tensor:
                w = w0[:, :styles] + param if cfg.latent_space == "w" else param
                return torch.cat([w, fmap], dim=1) if styles < w0.shape[1] else w

            w_a = current()
            opt = torch.optim.Adam([param, fmap] if styles < w0.shape[1] else [param], lr=cfg.lr)
            history: list[dict[str, float]] = []
            start: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)
            for step in range(cfg.steps + 1):
                report = step in (0, cfg.steps)             # measure both terms at the start and the end
                with torch.set_grad_enabled(step < cfg.steps):
                    w_a = current()
                    x_a = self.codec.render(w_a).clamp(-1, 1)
                    cos, dist = self._terms(x_a, id_r, ut_r, report)
                if step == 0:
                    start = (cos, dist)
                if step == cfg.steps:
                    break
                per_image = x_a.new_zeros(x_a.shape[0])
                if cfg.uses_id:
                    per_image = per_image + cfg.lambda_id * F.relu(cos - cfg.margin)
                if cfg.uses_ut:
                    per_image = per_image + cfg.lambda_ut * dist
                opt.zero_grad(set_to_none=True)
                per_image.sum().backward()      # a sum: each latent's gradient is its own image's
                opt.step()
                history.append(_step_stats(per_image, cos if cfg.uses_id else None, dist if cfg.uses_ut else None,
                                           cfg.margin))
        return GMIAResult(ws=w_a.detach().cpu(), images=x_a.detach().cpu(), id_cos_start=_cpu(start[0]),
                          id_cos=_cpu(cos), ut_dist_start=_cpu(start[1]), ut_dist=_cpu(dist), history=history)

    def _terms(self, x_a: torch.Tensor, id_r: torch.Tensor | None, ut_r: torch.Tensor | None,
               report: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Per-image identity cosine and utility distance of ``x_a``: with gradients for the terms in the
        loss, without for a network that only reports (at the first and last step)."""
        cos = dist = None
        if id_r is not None and (self.cfg.uses_id or report):
            with torch.set_grad_enabled(torch.is_grad_enabled() and self.cfg.uses_id):
                cos = F.cosine_similarity(id_r, self.identity(x_a), dim=1, eps=COS_EPS)
        if ut_r is not None and (self.cfg.uses_ut or report):
            with torch.set_grad_enabled(torch.is_grad_enabled() and self.cfg.uses_ut):
                dist = (ut_r - self.utility(x_a)).norm(dim=1)
        return cos, dist

    def describe(self) -> dict[str, Any]:
        """The networks behind this run, for the release manifest."""
        codec = self.codec.describe() if hasattr(self.codec, "describe") else {"name": type(self.codec).__name__}
        return {"codec": codec, "identity": _provenance(self.identity), "utility": _provenance(self.utility)}


def _provenance(net: nn.Module | None) -> dict[str, Any] | None:
    if net is None:
        return None
    return dict(getattr(net, "provenance", None) or {"module": type(net).__name__})


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().float().cpu()


def _step_stats(per_image: torch.Tensor, cos: torch.Tensor | None, dist: torch.Tensor | None,
                margin: float) -> dict[str, float]:
    out = {"loss": float(per_image.detach().mean())}
    if cos is not None:
        out["id_cos"] = float(cos.detach().mean())
        out["below_margin"] = float((cos.detach() <= margin).float().mean())
    if dist is not None:
        out["ut_dist"] = float(dist.detach().mean())
    return out


def _concat(parts: Sequence[GMIAResult]) -> GMIAResult:
    def cat(name: str) -> torch.Tensor | None:
        vals = [getattr(p, name) for p in parts]
        return None if not vals or vals[0] is None else torch.cat(vals)

    if not parts:
        raise ValueError("no images to anonymise")
    n = [p.images.shape[0] for p in parts]
    history = []                                # image-weighted means over the batches, step by step
    for s in range(len(parts[0].history)):
        keys = parts[0].history[s].keys()
        history.append({k: sum(p.history[s][k] * w for p, w in zip(parts, n, strict=True)) / sum(n) for k in keys})
    return GMIAResult(ws=cat("ws"), images=cat("images"), id_cos_start=cat("id_cos_start"), id_cos=cat("id_cos"),
                      ut_dist_start=cat("ut_dist_start"), ut_dist=cat("ut_dist"), history=history)


def summarise(result: GMIAResult, margin: float) -> dict[str, Any]:
    """Aggregate outcome (no per-image values): how far identity and utility features moved."""
    def q(t: torch.Tensor) -> dict[str, float]:
        a = t.double().numpy()
        return {"mean": round(float(a.mean()), 4), "median": round(float(np.median(a)), 4),
                "p90": round(float(np.quantile(a, 0.9)), 4), "max": round(float(a.max()), 4)}

    out: dict[str, Any] = {"images": int(result.images.shape[0])}
    if result.id_cos is not None:
        out["id_cos_before"] = q(result.id_cos_start)
        out["id_cos_after"] = q(result.id_cos)
        out["fraction_at_or_below_margin"] = round(float((result.id_cos <= margin).double().mean()), 4)
    if result.ut_dist is not None:
        out["ut_dist_before"] = q(result.ut_dist_start)
        out["ut_dist_after"] = q(result.ut_dist)
    return out


def style_rows(codec, rows: int) -> int:
    """How many of a latent's ``rows`` are styles: all of them, unless the codec's generator carries a spatial map
    (:mod:`medanon.codecs.stylegan`), whose rows follow the styles and are not W vectors."""
    g = getattr(codec, "generator", None)
    return int(g.num_ws) if g is not None and getattr(g, "map_rows", 0) else rows
