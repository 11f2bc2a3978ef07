"""Linkability (GMIA §3): identity verification on pairs, inner and outer risk, TAR at a fixed FAR.

A verification attacker scores a pair of images by the cosine similarity of their identity
embeddings (:mod:`medanon.models.identity`) and accepts the pair as "same patient" when the score
reaches a threshold. Standard definitions (ISO/IEC 19795-1), *not* the swapped ones of GMIA's code:

- FAR = impostor pairs accepted / impostor pairs;  TAR = genuine pairs accepted / genuine pairs;
- F1 and accuracy treat "genuine" as the positive class.

Protocol. The threshold is fixed on a **control** set where the attack is known to work, real
images of held-out patients (genuine pairs: two acquisitions of one patient; impostor pairs: two
patients), at ``FAR = target_far``; that threshold is then applied to

- **inner risk**: pairs of released records, genuine when the two records stand for a common patient;
- **outer risk**: pairs (real source image, released record), genuine when the record stands for
  the image's patient (GMIA pairs a real image with its own anonymised version).

Every pair set is balanced (all genuine pairs, as many impostor pairs drawn at random with a
seed), so accuracy 0.5 is chance. Which records stand for which patients comes from the release's
private mapping file: the attacker does not see it, the evaluator uses it as ground truth.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from medanon.evaluate.attacks.risk import success_rate
from medanon.evaluate.metrics import roc_auc

ASSUMPTIONS = ("attacker holds an identity network trained on real patients' repeated acquisitions and the real "
               "images it wants to link; threshold fixed at the target FAR on real held-out pairs; outer pairs use "
               "the exact source image (worst case)")


def threshold_at_far(impostor_scores, far: float) -> float:
    """The lowest threshold ``t`` (accept ``score >= t``) whose FAR on ``impostor_scores`` is at most ``far``."""
    s = np.sort(np.asarray(impostor_scores, np.float64).ravel())
    if len(s) == 0:
        raise ValueError("no impostor scores to fix a threshold on")
    if not 0 <= far <= 1:
        raise ValueError(f"far={far} must be in [0, 1]")
    allowed = int(np.floor(far * len(s) + 1e-9))
    cand = np.unique(s)
    accepted = len(s) - np.searchsorted(s, cand, side="left")         # impostors with score >= candidate
    ok = cand[accepted <= allowed]
    return float(ok[0]) if len(ok) else float(np.nextafter(s[-1], np.inf))


def verification_rates(scores, genuine, threshold: float, *, confidence: float = 0.95) -> dict:
    """TAR, FAR (with Wilson intervals), FRR, F1, accuracy and AUC of ``score >= threshold``."""
    sc = np.asarray(scores, np.float64).ravel()
    g = np.asarray(genuine, bool).ravel()
    if len(sc) != len(g) or g.sum() == 0 or (~g).sum() == 0:
        raise ValueError("need matching scores and labels with both genuine and impostor pairs")
    acc = sc >= threshold
    tp, fn = int((acc & g).sum()), int((~acc & g).sum())
    fp, tn = int((acc & ~g).sum()), int((~acc & ~g).sum())
    tar, far = success_rate(tp, tp + fn, confidence=confidence), success_rate(fp, fp + tn, confidence=confidence)
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    return {"TAR": tp / (tp + fn), "FAR": fp / (fp + tn), "FRR": fn / (tp + fn), "TAR_ci": list(tar.ci),
            "FAR_ci": list(far.ci), "F1": f1, "accuracy": (tp + tn) / len(g), "AUC": roc_auc(g, sc),
            "threshold": float(threshold), "genuine_pairs": int(g.sum()), "impostor_pairs": int((~g).sum())}


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a * b).sum(1)


def _balance(genuine: list[tuple[int, int]], impostor_fn, rng: np.random.Generator,
             max_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """All genuine pairs (at most ``max_pairs``, sampled) and as many impostor pairs from ``impostor_fn``."""
    gen = np.asarray(genuine, dtype=np.int64).reshape(-1, 2)
    if len(gen) > max_pairs:
        gen = gen[rng.choice(len(gen), max_pairs, replace=False)]
    imp = impostor_fn(len(gen))
    pairs = np.concatenate([gen, imp]) if len(imp) else gen
    return pairs, np.r_[np.ones(len(gen), bool), np.zeros(len(imp), bool)]


def _impostors(n: int, n_left: int, n_right: int, same, rng: np.random.Generator) -> np.ndarray:
    out: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    tries = 0
    while len(out) < n and tries < 50 * n + 1000:
        tries += 1
        i, j = int(rng.integers(n_left)), int(rng.integers(n_right))
        if (i, j) in seen or same(i, j):
            continue
        seen.add((i, j))
        out.append((i, j))
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def real_pairs(patients: Sequence[str], *, rng: np.random.Generator, max_pairs: int = 5000):
    """Balanced pairs among real images: genuine = same patient (i < j), impostor = different patients."""
    p = np.asarray(patients)
    gen = [(i, j) for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] == p[j]]
    pairs, lab = _balance(gen, lambda n: _impostors(n, len(p), len(p), lambda i, j: p[i] == p[j] or i == j, rng),
                          rng, max_pairs)
    return pairs, lab


def inner_pairs(record_patients: Sequence[frozenset], *, rng: np.random.Generator, max_pairs: int = 5000):
    """Balanced pairs of released records: genuine when they stand for a common patient."""
    rp = list(record_patients)
    owners: dict[str, list[int]] = {}
    for r, ps in enumerate(rp):
        for p in ps:
            owners.setdefault(p, []).append(r)
    gen = sorted({(a, b) for rs in owners.values() for ai, a in enumerate(rs) for b in rs[ai + 1:] if a != b})
    same = lambda i, j: i == j or bool(rp[i] & rp[j])   # noqa: E731
    return _balance(gen, lambda n: _impostors(n, len(rp), len(rp), same, rng), rng, max_pairs)


def outer_pairs(source_patient: Sequence[str], source_record: Sequence[int], record_patients: Sequence[frozenset],
                *, rng: np.random.Generator, max_pairs: int = 5000):
    """Balanced pairs (real source image i, released record r): genuine when r stands for i's patient."""
    gen = [(i, int(r)) for i, r in enumerate(source_record)]
    same = lambda i, r: source_patient[i] in record_patients[r]   # noqa: E731
    return _balance(gen, lambda n: _impostors(n, len(source_patient), len(record_patients), same, rng),
                    rng, max_pairs)


def linkability(*, control_emb: np.ndarray, control_patients: Sequence[str], release_emb: np.ndarray,
                record_patients: Sequence[frozenset], source_emb: np.ndarray, source_patients: Sequence[str],
                source_record: Sequence[int], target_far: float = 0.01, seed: int = 0,
                max_pairs: int = 5000, confidence: float = 0.95) -> dict:
    """GMIA's table: control (real held-out pairs), inner and outer risk, at the control's threshold."""
    rng = np.random.default_rng(seed)
    cp, cl = real_pairs(control_patients, rng=rng, max_pairs=max_pairs)
    if cl.sum() == 0 or (~cl).sum() == 0:
        raise ValueError("the control set needs held-out patients with two or more images")
    c_scores = _cos(control_emb[cp[:, 0]], control_emb[cp[:, 1]])
    thr = threshold_at_far(c_scores[~cl], target_far)
    out = {"target_far": target_far, "threshold": thr, "assumptions": ASSUMPTIONS,
           "control": verification_rates(c_scores, cl, thr, confidence=confidence)}
    ip, il = inner_pairs(record_patients, rng=rng, max_pairs=max_pairs)
    if il.sum() and (~il).sum():
        out["inner"] = verification_rates(_cos(release_emb[ip[:, 0]], release_emb[ip[:, 1]]), il, thr,
                                          confidence=confidence)
    else:
        out["inner"] = None
        out["inner_note"] = "no two released records stand for a common patient: inner risk is not defined"
    op, ol = outer_pairs(list(source_patients), list(source_record), list(record_patients), rng=rng,
                         max_pairs=max_pairs)
    if ol.sum() and (~ol).sum():
        out["outer"] = verification_rates(_cos(source_emb[op[:, 0]], release_emb[op[:, 1]]), ol, thr,
                                          confidence=confidence)
    else:
        out["outer"] = None
    return out
