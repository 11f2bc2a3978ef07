"""Attribute inference (VS-Snow §2.4): a sex classifier trained on real images, tested on the release.

"A hacker would train the gender classifier on available datasets with private information and
test on our released dataset to infer gender." The attacker is the small ResNet of
:mod:`medanon.models.classifier` trained on real images of the **attacker split**: patients who are
neither in the release nor among the held-out controls (the evaluation's ``attacks.attacker_split``,
``val`` by default). An attacker trained on the release's own source images would measure
memorisation of its training images, not what the released images reveal. It is
tested on

- the released images, against the truth of each record (the majority sex of its sources, from the
  private mapping; without a mapping, the release's own ``sex`` column);
- **Original**: the *same records'* real source images (the mean of the attacker's probability over a
  record's sources), so the release is compared with exactly the images it was made from;
- real images of held-out patients: what the attacker can do at all on people it never saw.

Baseline (not a control): guessing the most frequent class of the release's truth. The attack reads the
target's own released image, so there is no population of non-members to run it on; the residual risk is
``(accuracy - baseline) / (1 - baseline)``, named as against the baseline, and the share of the
Original's leak that survives is ``(release - baseline) / (original - baseline)`` (only where the Original's
interval lies above the baseline; NaN otherwise).

Intervals: Wilson over records and over held-out images, or, where the patients are given, patient cluster
bootstraps: records are resampled in clusters linked by a common source patient (``record_patients``, from
the mapping), held-out images by patient (``heldout_groups``). The AUROCs and the share of the leak kept get the
percentile interval over resamples of the same units (records, without patients).
"""

from __future__ import annotations

import numpy as np
import torch

from medanon.data.tensors import resize_to
from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES, cluster_summary, components, weighted_auc
from medanon.evaluate.attacks.risk import rate, risk_entry
from medanon.evaluate.metrics import roc_auc
from medanon.models.classifier import ResNet, predict_proba

ASSUMPTIONS = ("attacker trained a sex classifier on real images (with sex labels) of patients disjoint from the "
               "release and from the held-out controls, and applies it to each released image; truth = majority sex "
               "of the record's sources")


def scores(model: ResNet, images: torch.Tensor, size: int) -> np.ndarray:
    return predict_proba(model, resize_to(images.float(), size))[:, 1].numpy()


def attribute_inference(*, attacker: ResNet, image_size: int, release_images: torch.Tensor, release_truth: np.ndarray,
                        heldout_images: torch.Tensor, heldout_truth: np.ndarray, attribute: str = "sex",
                        confidence: float = 0.95, source_images: torch.Tensor | None = None,
                        record_sources: list[list[int]] | None = None, trained_on: str = "",
                        heldout_scores: np.ndarray | None = None, source_scores: np.ndarray | None = None,
                        record_patients: list[frozenset] | None = None, heldout_groups=None, seed: int = 0,
                        n_resamples: int = BOOT_RESAMPLES) -> dict:
    """Accuracy and AUROC of the attacker on the release, on the same records' sources (Original) and on
    held-out real images; the majority-class baseline; residual risk against that baseline.

    ``record_sources[r]`` indexes ``source_images`` rows of record ``r``'s sources (the private mapping).
    ``heldout_scores`` / ``source_scores``: the attacker's probabilities on those images, if already computed
    (an evaluation computes them once for all releases). ``record_patients[r]``: the patients record ``r``
    stands for; ``heldout_groups``: the patient of each held-out image (patient-level intervals)."""
    ok = ~np.isnan(release_truth)
    if ok.sum() == 0:
        raise ValueError(f"no released record has a known {attribute}")
    t = release_truth[ok].astype(int)
    p = scores(attacker, release_images[torch.from_numpy(ok)], image_size)
    pred = (p >= 0.5).astype(int)
    hk = ~np.isnan(heldout_truth)
    ht = heldout_truth[hk].astype(int)
    hp = (heldout_scores[hk] if heldout_scores is not None else
          scores(attacker, heldout_images[torch.from_numpy(hk)], image_size))
    majority = int(np.bincount(t, minlength=2).argmax())
    boot = {"confidence": confidence, "seed": seed, "n_resamples": n_resamples}
    rg = components([record_patients[i] for i in np.flatnonzero(ok)])[0] if record_patients is not None else None
    hg = np.asarray(heldout_groups)[hk] if heldout_groups is not None else None
    acc = rate(pred == t, groups=rg, stream=0, **boot)
    base = rate(t == majority, groups=rg, stream=0, **boot)
    held = rate((hp >= 0.5).astype(int) == ht, groups=hg, stream=1, **boot)
    units = rg if rg is not None else np.arange(len(t))             # resampled: record clusters, else records
    auroc, held_auroc = roc_auc(t, p), roc_auc(ht, hp)
    out = {"attribute": attribute, "accuracy": acc.raw, "accuracy_ci": list(acc.ci), "auroc": auroc,
           "auroc_ci": _auc_ci(t, p, auroc, units, stream=0, **boot),
           "chance": base.raw, "baseline": base.raw, "heldout_real_accuracy": held.raw,
           "heldout_real_accuracy_ci": list(held.ci), "heldout_real_auroc": held_auroc,
           "heldout_real_auroc_ci": _auc_ci(ht, hp, held_auroc, hg if hg is not None else np.arange(len(ht)),
                                            stream=1, **boot),
           "n": len(t),
           "n_heldout": len(ht), "heldout_chance": float(max(np.mean(ht == 0), np.mean(ht == 1))),
           "heldout_patients": held.patients,
           "attacker_trained_on": trained_on, "assumptions": ASSUMPTIONS,
           "interval": acc.method, "heldout_interval": held.method}
    if source_images is not None and record_sources is not None:
        flat = sorted({int(i) for rows in record_sources for i in rows})
        where = {i: j for j, i in enumerate(flat)}
        sp = (source_scores[flat] if source_scores is not None else
              scores(attacker, source_images[torch.as_tensor(flat, dtype=torch.long)], image_size))
        op = np.asarray([sp[[where[int(i)] for i in rows]].mean() for rows in record_sources])[ok]
        orig = rate((op >= 0.5).astype(int) == t, groups=rg, stream=0, **boot)
        orig_auroc = roc_auc(t, op)
        out.update(original_accuracy=orig.raw, original_accuracy_ci=list(orig.ci), original_auroc=orig_auroc,
                   original_auroc_ci=_auc_ci(t, op, orig_auroc, units, stream=0, **boot))
        gap = orig.raw - base.raw                                   # defined only where the Original leaks at all
        out["leak_kept"] = float((acc.raw - base.raw) / gap) if orig.ci[0] > base.raw else float("nan")
        out["leak_kept_ci"] = (_leak_ci(pred == t, (op >= 0.5).astype(int) == t, t == majority, out["leak_kept"],
                                        units, **boot) if orig.ci[0] > base.raw else [float("nan")] * 2)
    out["risk"] = risk_entry(acc, None, what=f"the attacker's {attribute} guess for a released record is right",
                             control_is="none: the attack reads the target's own released image, so it cannot be "
                                        "run on people outside the release",
                             baseline=base, baseline_is="guessing the most frequent class")
    return out


def _auc_ci(truth: np.ndarray, prob: np.ndarray, estimate: float, units, *, stream: int, **boot) -> list[float]:
    """The AUROC's (``estimate``'s) percentile interval over resamples of ``units`` (NaN with one class), widened
    where it reaches 0 or 1 (:func:`.auc.widened_at_edges`: the units of each class)."""
    from medanon.evaluate.attacks.auc import widened_at_edges

    if len(np.unique(truth)) < 2:
        return [float("nan"), float("nan")]
    ci = cluster_summary(weighted_auc(prob, truth == 1), units, estimate, stream=stream, **boot)["ci"]
    units = np.asarray(units).astype(str)
    return widened_at_edges(ci, estimate, len(np.unique(units[truth == 1])), len(np.unique(units[truth != 1])))[0]


def _leak_ci(release_right, original_right, baseline_right, estimate: float, units, **boot) -> list[float]:
    """The share of the Original's leak kept, ``(release - baseline) / (original - baseline)``, recomputed in each
    resample of the records (the same resamples as the accuracies'); a resample where the Original does not beat
    the baseline has no share and is left out."""
    r, o, b = (np.asarray(x, np.float64) for x in (release_right, original_right, baseline_right))

    def stat(w: np.ndarray) -> np.ndarray:
        n = w.sum(1)
        gap = (w @ o - w @ b) / n
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(gap > 0, ((w @ r - w @ b) / n) / gap, np.nan)
    return cluster_summary(stat, units, estimate, stream=0, **boot)["ci"]
