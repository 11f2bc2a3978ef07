"""Release folders whose privacy answer is known, to check the attacks against (``benchmarks/known_answers.py``,
``tests/test_known_answers.py``). Each stands for the source split, one record per source image, with its private
mapping, written by the real :class:`~medanon.release.ReleaseWriter`:

==========  ===============================================================  ==============
kind        what each record is                                              right answer
==========  ===============================================================  ==============
copy        the source image itself                                          detected
jpeg        the source image re-encoded as JPEG (quality 75)                 detected
shift       the source image moved by one pixel (edge rows repeated)         detected
mirror      the source image mirrored left-right                              detected
constant    one mid-grey image                                               not detected
noise       uniform noise (seeded)                                           not detected
others      a real image of another person (``other``: images of patients   not detected
            who are in no split of the evaluated data), of the source's
            label where one is given (:func:`matched_others`)
==========  ===============================================================  ==============

"Detected": the residual risk's interval lies above 0 and reaches 0.5, or, for the attribute attack, half of what it
reaches on held-out real images (:func:`copy_ceiling`; the evaluation's own calibration demands a point estimate
that high on its in-memory copies; a release folder of the same kind, written to PNG and read back, may
land just under it by chance); "not detected": the interval includes 0. An
attack may also answer ``valid: false`` (it failed the evaluation's own calibration): that is an honest answer;
a valid attack with the wrong answer is a defect (:func:`judge`).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from medanon.data.imageio import image_to_uint8
from medanon.evaluate.inputs import MAPPING_SUFFIX, RealData
from medanon.release import ReleaseWriter

KINDS = ("copy", "jpeg", "shift", "mirror", "constant", "noise", "others")
DETECTED = ("copy", "jpeg", "shift", "mirror")
COPY_MIN = 0.5              # a copy must be detected at least this strongly (times the attack's ceiling)


def copy_ceiling(row: str, attacks: dict) -> float | None:
    """The largest residual risk a copy of real images can give the attack of ``row``: None (1, a perfect match)
    for every attack but the attribute one, whose ceiling is its own residual on held-out real images, people it
    never saw as the copy's members are: ``(accuracy - majority) / (1 - majority)``, clipped to [0, 1]."""
    if row != "attribute":
        return None
    a = attacks.get("attribute") or {}
    acc, chance = a.get("heldout_real_accuracy"), a.get("heldout_chance")
    if acc is None or chance is None or chance >= 1:
        return None
    return min(max((acc - chance) / (1 - chance), 0.0), 1.0)


def copy_threshold(ceiling: float | None) -> float:
    """The residual risk a copy must reach: :data:`COPY_MIN` of the attack's ceiling (:func:`copy_ceiling`; None: 1)."""
    return COPY_MIN * (1.0 if ceiling is None else ceiling)


def _jpeg(img: torch.Tensor, quality: int = 75) -> torch.Tensor:
    buf = io.BytesIO()
    Image.fromarray(image_to_uint8(img)).save(buf, format="JPEG", quality=quality)
    with Image.open(buf) as im:
        a = np.asarray(im.convert("L" if img.shape[0] == 1 else "RGB"), np.float32)
    a = a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
    return torch.from_numpy(a / 127.5 - 1.0)


def known_images(kind: str, sources: torch.Tensor, *, seed: int = 0) -> torch.Tensor:
    """The released image of each source (N, C, H, W) for a ``kind`` made from the sources alone (not ``others``)."""
    if kind == "copy":
        return sources.clone()
    if kind == "jpeg":
        return torch.stack([_jpeg(x) for x in sources]) if len(sources) else sources.clone()
    if kind == "shift":
        return F.pad(sources, (1, 0, 1, 0), mode="replicate")[:, :, :-1, :-1]
    if kind == "mirror":
        return sources.flip(-1)
    if kind == "constant":
        return torch.zeros_like(sources)
    if kind == "noise":
        return torch.rand(sources.shape, generator=torch.Generator().manual_seed(seed), dtype=sources.dtype) * 2 - 1
    raise ValueError(f"kind={kind!r} is not one of {KINDS[:-1]}")


def matched_others(source_values: np.ndarray, other_values: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """For each source, the index of an image of another person with the same label value (``other_values``;
    cycling through a seeded order of the others of that value), or of any other person where none has it. A
    record of another person *of the same grade* must not read as its source's: an attack that takes a shared label
    (records of one grade, clusters stratified by grade) for identity fails this null, where one of a random other
    person would pass it on the label mix alone."""
    other_values = np.asarray(other_values, np.float64)
    n_other = len(other_values)
    if n_other == 0:
        raise ValueError("matched_others needs at least one other person's image")
    order = np.random.default_rng(seed).permutation(n_other)
    by_value: dict[float, np.ndarray] = {}
    for v in np.unique(other_values[~np.isnan(other_values)]):
        by_value[float(v)] = order[other_values[order] == v]
    out, used = np.empty(len(source_values), np.int64), dict.fromkeys(by_value, 0)
    for j, v in enumerate(np.asarray(source_values, np.float64)):
        pool = by_value.get(float(v)) if not np.isnan(v) else None
        if pool is None or len(pool) == 0:
            out[j] = order[j % n_other]
            continue
        out[j] = pool[used[float(v)] % len(pool)]
        used[float(v)] += 1
    return out


def unmatched(source_values: np.ndarray, other_values: np.ndarray) -> int:
    """How many sources :func:`matched_others` gives any other person, as none of the others has their value (or
    theirs is not known): the ``others`` release is matched on the label for the rest only.

    >>> unmatched(np.array([0.0, 1.0, 4.0, np.nan]), np.array([0.0, 1.0, 1.0]))
    2
    """
    have = set(np.unique(np.asarray(other_values, np.float64)[~np.isnan(np.asarray(other_values, np.float64))]))
    src = np.asarray(source_values, np.float64)
    return int(sum(np.isnan(v) or float(v) not in have for v in src))


def write_known_answer(kind: str, out: str | Path, real: RealData, *, split: str = "train", seed: int = 0,
                       other: torch.Tensor | None = None, other_values: np.ndarray | None = None,
                       match: str | None = None) -> Path:
    """Write the ``kind`` release of ``real``'s ``split`` into ``out`` (mapping at ``out.mapping.json``); ``others``
    draws from ``other``, matched on the label ``match`` (``other_values``: the others' values of it) where given."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS}")
    if kind == "others" and (other is None or len(other) == 0):
        raise ValueError("kind='others' needs other=: real images of people in no split of the evaluated data")
    if kind == "others" and match and (other_values is None or len(other_values) != len(other)):
        raise ValueError(f"match={match!r} needs other_values=: the others' {match}, one value per image of other=")
    out = Path(out)
    rows = real.rows(split)
    if kind == "others":
        order = (matched_others(real.label(match)[rows], other_values, seed=seed)
                 if match else np.random.default_rng(seed).permutation(len(other))[np.arange(len(rows)) % len(other)])
    labels = [n for n in ("grade", "pneumonia", "sex", "age") if n in real.label_names]
    with ReleaseWriter(out, method=f"known-answer-{kind}", params={}, labels=labels, seeds={"known_answer": seed},
                       privacy={"statement": f"known-answer release: {kind}"}, phantom=real.phantom,
                       mapping=out.with_name(out.name + MAPPING_SUFFIX)) as w:
        images = other[order] if kind == "others" else known_images(kind, real.images[rows], seed=seed)
        for n, i in enumerate(rows):
            w.add(f"k{n}", images[n], [real.records[i]])
    return out


def judge(kind: str, row: str, rr: dict, valid: bool, ceiling: float | None = None) -> bool | None:
    """Whether one valid residual-risk row gives ``kind``'s right answer; None for an invalid row and for a reverse
    attacker on a copy (it looks for releases pushed away from their sources: a copy has no answer for it).
    ``ceiling``: the most a copy can give this attack (:func:`copy_ceiling`; None: 1)."""
    if not valid or (row.endswith("(reverse)") and kind in DETECTED):
        return None
    if kind in DETECTED:                     # detected, and consistent with a residual of at least 0.5 x ceiling
        return rr["ci"][0] > 0 and rr["ci"][1] >= copy_threshold(ceiling)
    return rr["ci"][0] <= 0
