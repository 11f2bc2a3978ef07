"""Attribute inference (VS-Snow §2.4): a sex classifier trained on real images, tested on the release.

"A hacker would train the gender classifier on available datasets with private information and
test on our released dataset to infer gender." The attacker here is the small ResNet of
:mod:`medanon.models.classifier` trained on the real images of the release's source split with
their sex labels (a worst case: those are the originals of the released images). It is tested on

- the released images, against the truth of each record (the majority sex of its sources, from the
  private mapping; without a mapping, the release's own ``sex`` column);
- real images of held-out patients: the attack on un-protected images it never saw (VS-Snow's
  "original" column), the reference for what the attacker can do at all.

Control: guessing the most frequent class of the release's truth (chance). The residual risk is
``(accuracy - chance) / (1 - chance)``, with Wilson intervals on both rates.
"""

from __future__ import annotations

import numpy as np
import torch

from medanon.evaluate.attacks.risk import risk_entry, success_rate
from medanon.evaluate.metrics import roc_auc
from medanon.models.classifier import ResNet, predict_proba
from medanon.train.classifier import resize_to

ASSUMPTIONS = ("attacker trained a sex classifier on the real images (with sex labels) of the release's source "
               "split and applies it to each released image; truth = majority sex of the record's sources")


def _scores(model: ResNet, images: torch.Tensor, size: int) -> np.ndarray:
    return predict_proba(model, resize_to(images.float(), size))[:, 1].numpy()


def attribute_inference(*, attacker: ResNet, image_size: int, release_images: torch.Tensor, release_truth: np.ndarray,
                        heldout_images: torch.Tensor, heldout_truth: np.ndarray, attribute: str = "sex",
                        confidence: float = 0.95) -> dict:
    """Accuracy and AUROC of the attacker on the release and on held-out real images; chance; residual risk."""
    ok = ~np.isnan(release_truth)
    if ok.sum() == 0:
        raise ValueError(f"no released record has a known {attribute}")
    t = release_truth[ok].astype(int)
    p = _scores(attacker, release_images[torch.from_numpy(ok)], image_size)
    pred = (p >= 0.5).astype(int)
    hk = ~np.isnan(heldout_truth)
    ht = heldout_truth[hk].astype(int)
    hp = _scores(attacker, heldout_images[torch.from_numpy(hk)], image_size)
    majority = int(np.bincount(t, minlength=2).argmax())
    acc = success_rate(int((pred == t).sum()), len(t), confidence=confidence)
    chance = success_rate(int((t == majority).sum()), len(t), confidence=confidence)
    held = success_rate(int(((hp >= 0.5).astype(int) == ht).sum()), len(ht), confidence=confidence)
    return {"attribute": attribute, "accuracy": acc.raw, "accuracy_ci": list(acc.ci), "auroc": roc_auc(t, p),
            "chance": chance.raw, "heldout_real_accuracy": held.raw, "heldout_real_accuracy_ci": list(held.ci),
            "heldout_real_auroc": roc_auc(ht, hp), "n": len(t), "n_heldout": len(ht),
            "assumptions": ASSUMPTIONS,
            "risk": risk_entry(acc, chance, what=f"the attacker's {attribute} guess for a released record is right",
                               control_is="guessing the most frequent class")}
