"""Segmentation quality: Dice of binary masks and AUROC of vessel probabilities, inside the field of view.

Both are computed over the pixels inside the field of view only (outside it there are no vessels
and every method is trivially right), as is usual for DRIVE. Dice is reported as the mean over
images (each image weighs the same whatever its vessel area) and AUROC pooled over all pixels of
all images (scikit-learn's ``roc_auc_score``, the reference implementation).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def _np(x: torch.Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def dice_per_image(pred, target, fov=None) -> np.ndarray:
    """Dice 2|P∩T| / (|P| + |T|) of boolean (N, 1, H, W) masks, per image; 1 when both are empty."""
    p, t = _np(pred).astype(bool), _np(target).astype(bool)
    if p.shape != t.shape:
        raise ValueError(f"prediction {p.shape} and target {t.shape} masks differ in shape")
    if fov is not None:
        f = np.broadcast_to(_np(fov).astype(bool), p.shape)
        p, t = p & f, t & f
    axes = tuple(range(1, p.ndim))
    inter = (p & t).sum(axis=axes).astype(np.float64)
    total = (p.sum(axis=axes) + t.sum(axis=axes)).astype(np.float64)
    return np.where(total > 0, 2 * inter / np.maximum(total, 1), 1.0)


def dice(pred, target, fov=None) -> float:
    """Mean Dice over images (see :func:`dice_per_image`)."""
    return float(dice_per_image(pred, target, fov).mean())


def auroc(prob, target, fov=None) -> float:
    """Area under the ROC curve of pixel probabilities against the boolean target, pooled over images."""
    from sklearn.metrics import roc_auc_score

    s, t = _np(prob).astype(np.float64), _np(target).astype(bool)
    if fov is not None:
        f = np.broadcast_to(_np(fov).astype(bool), t.shape)
        s, t = s[f], t[f]
    if t.all() or not t.any():
        raise ValueError("AUROC needs vessel and background pixels in the target")
    return float(roc_auc_score(t.ravel(), s.ravel()))


def best_threshold(prob, target, fov=None, *, grid: Sequence[float] | None = None) -> tuple[float, float]:
    """The threshold on ``prob`` (in [0, 1]) that maximises the mean Dice, and that Dice (for calibration
    on a validation split, never on the test split)."""
    grid = np.round(np.linspace(0.05, 0.95, 19), 4) if grid is None else grid
    p = _np(prob)
    scores = [(dice(p >= g, target, fov), float(g)) for g in grid]
    best_dice, best_g = max(scores)
    return best_g, best_dice
