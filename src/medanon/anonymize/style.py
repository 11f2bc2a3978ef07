"""Local style alignment (k-SALSA §3.2, Eqs. 1–3 and 7) and its ablations, batched over clusters.

The feature map F (C, H, W) of an early layer is cut into a ``grid`` × ``grid`` grid of patches
(p = grid² patches; the ``H mod grid`` last rows and columns are left out, as in the official
code). Each patch j gives a local style feature, its Gram matrix S_j = F_j F_jᵀ / |patch| (C × C;
Eq. 1 divided by the number of positions, a constant that keeps the scale independent of the
image size). Every source patch is matched to the target (average) patch most similar to it
(Eq. 3: cosine similarity of the vectorised Grams) and the loss is the squared Frobenius distance
of matched pairs (Eq. 7).

Normalisation (a documented departure): Eq. 7 sums over the k sources and p patches, one term per image;
here each source carries a weight (1/k, or 1/(k·n_images of its patient) for patients with several
images, so every person counts the same), patches are averaged, and the result is divided by the
weighted mean ‖S_source‖²_F of the cluster. Where every patient has one image, this is Eq. 7 times a constant
within a cluster, so the minimiser and the matching are unchanged; where patients have several images, the loss
weighs people, not images (Eq. 7 would pull the average towards the patient with the most images), and its
minimiser differs from Eq. 7's. The scale makes the loss about 1 for an unrelated target, so that λ means the same
for any feature layer, channel count or resolution.

Modes (:class:`StyleConfig`), the ablations of Table 4 and supplement D:

- ``align="local"``: the method; ``align="none"``: source patch j is compared with target patch j
  (no spatial flexibility); ``align="global"``: one Gram of the whole map (grid 1);
- ``match`` (how pairs are formed) and ``distance`` (loss on a pair) each ``"cos"`` or ``"mse"``:
  COS-MSE is the method, COS-COS and MSE-MSE the ablations of supplement D.

Efficiency: source Grams are computed once per cluster (:func:`source_grams`); the matching of all
sources of all clusters of a batch is one batched matrix product; :func:`reference_style_loss`
is the faithful per-cluster, per-source, per-patch loop used to test it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from medanon.errors import ConfigError

ALIGNS = ("local", "none", "global")
METRICS = ("cos", "mse")


@dataclass(frozen=True)
class StyleConfig:
    grid: int = 4                               # patches per side (the paper: 4, i.e. 16 patches)
    align: str = "local"                        # local (matched) | none (same position) | global (whole map)
    match: str = "cos"                          # pairing of source and target patches: cos | mse
    distance: str = "mse"                       # loss on a pair: mse (squared Frobenius) | cos (1 - cosine)

    def validate(self) -> None:
        if self.grid < 1:
            raise ConfigError(f"style grid={self.grid} must be at least 1")
        if self.align not in ALIGNS:
            raise ConfigError(f"style align={self.align!r} must be one of {', '.join(ALIGNS)}")
        for name in ("match", "distance"):
            if getattr(self, name) not in METRICS:
                raise ConfigError(f"style {name}={getattr(self, name)!r} must be cos or mse")

    @property
    def patches_per_side(self) -> int:
        return 1 if self.align == "global" else self.grid

    def describe(self) -> dict[str, object]:
        return {"grid": self.patches_per_side, "align": self.align, "match": self.match, "distance": self.distance,
                "gram": "F_j F_j^T / positions per patch", "normalisation": "divided by the weighted mean "
                "||S_source||_F^2 of the cluster; patches averaged, sources weighted (each person equally)"}


def patch_grams(feat: torch.Tensor, grid: int) -> torch.Tensor:
    """Gram matrices of a ``grid`` × ``grid`` patch grid: (N, C, H, W) -> (N, grid², C, C).

    Patches are numbered row-major (j = row · grid + column).
    """
    n, c, h, w = feat.shape
    ph, pw = h // grid, w // grid
    if ph < 1 or pw < 1:
        raise ConfigError(f"a {h}x{w} feature map cannot be cut into a {grid}x{grid} grid",
                          fix=f"use grid= of at most {min(h, w)}, or an earlier (larger) feature layer")
    f = feat[:, :, :ph * grid, :pw * grid].reshape(n, c, grid, ph, grid, pw)
    f = f.permute(0, 2, 4, 1, 3, 5).reshape(n, grid * grid, c, ph * pw)
    return f @ f.transpose(-1, -2) / (ph * pw)


@dataclass
class SourceStyle:
    """The constant side of the loss for a batch of B clusters of at most S sources each."""

    grams: torch.Tensor                         # (B, S, p, C*C) vectorised source Grams
    weights: torch.Tensor                       # (B, S) source weights, each row summing to 1 (0 = padding)
    scale: torch.Tensor                         # (B,) weighted mean squared Frobenius norm of the source Grams


def source_grams(feats: torch.Tensor, weights: torch.Tensor, cfg: StyleConfig) -> SourceStyle:
    """Source side, once per cluster: ``feats`` (B, S, C, H, W) of the sources, ``weights`` (B, S)."""
    b, s = feats.shape[:2]
    g = patch_grams(feats.flatten(0, 1), cfg.patches_per_side)
    g = g.reshape(b, s, g.shape[1], -1).detach()
    w = weights.to(g.dtype)
    w = w / w.sum(1, keepdim=True)
    scale = (w * g.square().sum(-1).mean(-1)).sum(1).clamp_min(torch.finfo(g.dtype).tiny)
    return SourceStyle(g, w, scale)


def style_loss(target_feat: torch.Tensor, src: SourceStyle, cfg: StyleConfig) -> torch.Tensor:
    """Style loss of each cluster's target: ``target_feat`` (B, C, H, W) -> (B,).

    All source patches of all clusters are matched with one batched matrix product; matching is
    not differentiated (as in the paper: the argmax is a constant of each step).
    """
    tg = patch_grams(target_feat, cfg.patches_per_side).flatten(2)              # (B, p, C²)
    b, s, p, d = src.grams.shape
    sg = src.grams.reshape(b, s * p, d)                                           # (B, S·p, C²)
    if cfg.align == "local":
        with torch.no_grad():
            t = tg.detach()
            if cfg.match == "cos":
                score = F.normalize(sg, dim=-1) @ F.normalize(t, dim=-1).transpose(1, 2)   # (B, S·p, p)
            else:                                                                   # nearest by squared distance
                score = 2 * sg @ t.transpose(1, 2) - t.square().sum(-1)[:, None, :]
            idx = score.argmax(-1)                                                 # first maximum on ties
        matched = torch.gather(tg, 1, idx[..., None].expand(-1, -1, d))
    else:                                                                          # same position (or global p=1)
        matched = tg.repeat(1, s, 1)
    if cfg.distance == "mse":
        per = (sg - matched).square().sum(-1) / src.scale[:, None]
    else:
        per = 1 - F.cosine_similarity(sg, matched, dim=-1, eps=1e-12)
    per = per.reshape(b, s, p).mean(-1)
    return (src.weights * per).sum(1)


def reference_style_loss(target_feat: torch.Tensor, source_feats: list[torch.Tensor], weights: list[float],
                         cfg: StyleConfig) -> torch.Tensor:
    """The same loss for one cluster, written as the paper describes it: loops over sources, patches
    and candidate target patches, one Gram and one cosine at a time. ``target_feat`` (C, H, W),
    ``source_feats`` k maps (C, H, W), ``weights`` k numbers. Slow; for tests and the benchmark."""
    grid = cfg.patches_per_side
    c, h, w = target_feat.shape
    ph, pw = h // grid, w // grid

    def gram(f: torch.Tensor, j: int) -> torch.Tensor:
        r, q = divmod(j, grid)
        patch = f[:, r * ph:(r + 1) * ph, q * pw:(q + 1) * pw].reshape(c, -1)
        return (patch @ patch.T) / (ph * pw)

    p = grid * grid
    targets = [gram(target_feat, j) for j in range(p)]
    total_w = sum(weights)
    scale = sum(wi / total_w * sum(float(gram(f, j).square().sum()) for j in range(p)) / p
                for f, wi in zip(source_feats, weights, strict=True))
    loss = target_feat.new_zeros(())
    for f, wi in zip(source_feats, weights, strict=True):
        per_source = target_feat.new_zeros(())
        for j in range(p):
            sj = gram(f, j).detach()
            if cfg.align == "local":
                best, best_score = 0, -float("inf")
                for jj in range(p):
                    tj = targets[jj].detach()
                    if cfg.match == "cos":
                        score = float(F.cosine_similarity(sj.flatten(), tj.flatten(), dim=0, eps=1e-12))
                    else:
                        score = -float((sj - tj).square().sum())
                    if score > best_score:
                        best, best_score = jj, score
            else:
                best = j if cfg.align == "none" else 0
            tj = targets[best]
            if cfg.distance == "mse":
                per_source = per_source + (sj - tj).square().sum() / scale
            else:
                per_source = per_source + 1 - F.cosine_similarity(sj.flatten(), tj.flatten(), dim=0, eps=1e-12)
        loss = loss + wi / total_w * per_source / p
    return loss
