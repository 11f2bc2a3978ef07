"""Synthetic releases for evaluation tests, written with the real ReleaseWriter (and its private mapping):

- ``unprotected``: every source image released as it is (the attacks must succeed);
- ``noise``: every source image replaced by uniform noise (the attacks must fail);
- ``k-same-pixel``: the pixel average of k images of k distinct patients (k-Same-Pixel, Newton et al. 2005),
  leftover images joining existing clusters so that every record stands for at least k people.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from medanon.evaluate.inputs import MAPPING_SUFFIX, RealData
from medanon.release import ReleaseWriter


def _labels(real: RealData) -> list[str]:
    return [n for n in ("grade", "pneumonia", "sex", "age") if n in real.label_names]


def _writer(out: Path, real: RealData, method: str, params: dict, privacy: dict,
            models: dict | None = None) -> ReleaseWriter:
    return ReleaseWriter(out, method=method, params=params, privacy=privacy, labels=_labels(real), models=models,
                         seeds={"fixture": 0}, phantom=real.phantom, mapping=out.with_name(out.name + MAPPING_SUFFIX))


def write_unprotected(out: Path, real: RealData, *, split: str | None = "train") -> Path:
    """The real images of ``split`` (None: of every patient) as a release, with its mapping beside it."""
    with _writer(out, real, "unprotected", {}, {"statement": "none: the real images themselves"}) as w:
        for i in (real.rows(split) if split is not None else range(len(real.images))):
            w.add(f"r{i}", real.images[i], [real.records[i]])
    return out


def write_noise(out: Path, real: RealData, *, split: str = "train", seed: int = 0) -> Path:
    g = torch.Generator().manual_seed(seed)
    c, s = real.images.shape[1], real.images.shape[-1]
    with _writer(out, real, "noise", {}, {"statement": "pure noise, labels kept"}) as w:
        for i in real.rows(split):
            w.add(f"r{i}", torch.rand(c, s, s, generator=g) * 2 - 1, [real.records[i]])
    return out


def k_clusters(patients: np.ndarray, k: int, seed: int = 0) -> list[list[int]]:
    """Groups of row indices, each with >= k distinct patients (one image per patient per group)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(patients))
    groups: list[list[int]] = []
    for i in order:
        for g in groups:
            if len(g) < k and patients[i] not in {patients[j] for j in g}:
                g.append(int(i))
                break
        else:
            groups.append([int(i)])
    full = [g for g in groups if len(g) >= k]
    for g in groups:
        if len(g) < k:
            for i in g:                                   # leftovers join a full cluster without their patient
                target = next(f for f in full if patients[i] not in {patients[j] for j in f})
                target.append(i)
    return full


def write_k_same_pixel(out: Path, real: RealData, *, k: int, split: str = "train", seed: int = 0) -> Path:
    rows = real.rows(split)
    privacy = {"k": k, "statement": f"each record averages >= {k} people"}
    with _writer(out, real, "k-same-pixel", {"k": k}, privacy) as w:
        for n, g in enumerate(k_clusters(real.patients[rows], k, seed)):
            idx = rows[g]
            w.add(f"c{n}", real.images[idx].mean(0), [real.records[i] for i in idx])
    return out


def write_copy(out: Path, real: RealData, *, split: str = "train", seed: int = 0) -> Path:
    """The sources themselves under random names, in random order: a release at maximal risk."""
    rows = real.rows(split)
    rng = np.random.default_rng(seed)
    with _writer(out, real, "copy", {}, {"statement": "none: the source images under random names"}) as w:
        for n, i in enumerate(rng.permutation(rows)):
            w.add(f"x{rng.integers(1 << 40):011x}{n}", real.images[i], [real.records[i]])
    return out


def write_unrelated(out: Path, real: RealData, other: torch.Tensor, *, split: str = "train") -> Path:
    """Images of *other* people (``other``: real images of unrelated patients, e.g. a phantom of another seed),
    each mapped to a source record: the release says nothing about its members (near-zero risk)."""
    rows = real.rows(split)
    order = np.random.default_rng(1).permutation(len(other))           # no patient structure carried over
    with _writer(out, real, "unrelated", {}, {"statement": "images of unrelated people"}) as w:
        for n, i in enumerate(rows):
            w.add(f"u{n}", other[int(order[n % len(other)])], [real.records[i]])
    return out



def write_nested_pair(small: Path, large: Path, real: RealData, *, k: int = 2, split: str = "train",
                      seed: int = 0, average=None, method: str = "k-same-pixel",
                      models: dict | None = None) -> tuple[Path, Path]:
    """Two releases of the same people at maximal differencing risk: ``small`` averages the first image of ``k``
    patients per record; ``large`` averages the same images and one more, another image of a patient of the next
    record, so that each pair of records differences into that one image (patients need two images or more).
    ``average``: images (n, C, H, W) -> the record (default: their mean; e.g. a codec's image of their mean
    latent, with the codec's digest in ``models``)."""
    average = average or (lambda x: x.mean(0))
    rows = real.rows(split)
    pats = real.patients[rows]
    first = np.asarray([int(np.flatnonzero(pats == p)[0]) for p in dict.fromkeys(pats)])
    second = {pats[i]: int(np.flatnonzero(pats == pats[i])[1]) for i in first}
    groups = [[int(first[j]) for j in g] for g in k_clusters(pats[first], k, seed)]
    for out, n_more in ((small, 0), (large, 1)):
        privacy = {"k": k + n_more, "statement": f"each record averages >= {k + n_more} people"}
        with _writer(out, real, method, {"k": k + n_more}, privacy, models) as w:
            for n, g in enumerate(groups):
                more = [second[pats[groups[(n + 1) % len(groups)][0]]]] * n_more
                idx = rows[[*g, *more]]
                w.add(f"g{n}", average(real.images[idx]), [real.records[i] for i in idx])
    return small, large
