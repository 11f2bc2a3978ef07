"""Procedural fundus phantoms: determinism, identity, vessel masks, lesions, markers, colour, attributes."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

from medanon.phantoms.common import PhantomParams, acquisition_rng, patient_rng
from medanon.phantoms.fundus import FundusPatient, render, sample_patient

SEED = 20240611
LABEL_KEYS = {"grade", "sex", "age", "laterality", "marker_block", "n_microaneurysms", "n_haemorrhages",
              "n_exudates", "n_cotton_wool", "neovascularisation"}
LESION_KEYS = ("n_microaneurysms", "n_haemorrhages", "n_exudates", "n_cotton_wool")


def _patient(i: int, params: PhantomParams | None = None, seed: int = SEED) -> FundusPatient:
    return sample_patient(patient_rng(seed, i), params or PhantomParams())


def _render(p: FundusPatient, i: int, a: int, size: int, seed: int = SEED):
    return render(p, acquisition_rng(seed, i, a), size)


def _fov(img: np.ndarray) -> np.ndarray:
    return img.astype(np.int64).sum(-1) > 30


def _one_grade(g: int, **kw) -> PhantomParams:
    w = [0.0] * 5
    w[g] = 1.0
    return PhantomParams(grade_weights=tuple(w), **kw)


@pytest.mark.parametrize("size", [16, 33, 64])
def test_output_shapes_dtypes_labels(size):
    p = _patient(0, PhantomParams(marker_rate=0.0))
    r = _render(p, 0, 0, size)
    assert r.image.shape == (size, size, 3) and r.image.dtype == np.uint8
    assert r.mask.shape == (size, size) and r.mask.dtype == np.bool_
    assert set(r.labels) == LABEL_KEYS
    assert all(isinstance(v, float) for v in r.labels.values())
    assert r.labels["grade"] in {0.0, 1.0, 2.0, 3.0, 4.0}
    assert r.labels["sex"] in {0.0, 1.0} and r.labels["laterality"] in {0.0, 1.0}
    assert r.labels["age"] == round(r.labels["age"], 1) and 25.0 <= r.labels["age"] <= 85.0
    # Circular field of view touching the borders: corners black, centre and edge midpoints bright.
    for y, x in [(0, 0), (0, size - 1), (size - 1, 0), (size - 1, size - 1)]:
        assert r.image[y, x].max() == 0
    h = size // 2
    for y, x in [(h, h), (h, 1), (1, h), (h, size - 2)]:
        assert int(r.image[y, x].sum()) > 60
    assert not r.mask[0, 0]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(8, 80), grade=st.integers(0, 4))
def test_any_seed_and_size_gives_a_consistent_phantom(seed, size, grade):
    p = sample_patient(patient_rng(seed, 0), _one_grade(grade, marker_rate=0.5))
    r = render(p, acquisition_rng(seed, 0, 0), size)
    assert r.image.shape == (size, size, 3) and r.image.dtype == np.uint8
    assert r.mask.shape == (size, size) and r.mask.dtype == np.bool_
    assert r.labels["grade"] == grade and r.labels["marker_block"] == float(p.marker_block)
    counts = [r.labels[k] for k in LESION_KEYS]
    assert all(c >= 0 and c == int(c) for c in counts)
    assert (sum(counts) == 0) == (grade == 0)
    assert r.labels["neovascularisation"] == float(grade == 4)


def test_rejects_bad_arguments():
    for weights in [(1.0, 0.0), (1, 1, 1, 1, -1), (0, 0, 0, 0, 0)]:
        with pytest.raises(ValueError, match="grade_weights must be 5 non-negative numbers"):
            sample_patient(patient_rng(0, 0), PhantomParams(grade_weights=weights))
    with pytest.raises(ValueError, match="age_range must be"):
        sample_patient(patient_rng(0, 0), PhantomParams(age_range=(50, 10)))
    with pytest.raises(ValueError):
        render(_patient(0), acquisition_rng(0, 0, 0), 4)


def test_deterministic_and_distinct():
    a = _render(_patient(3), 3, 1, 48)
    b = _render(_patient(3), 3, 1, 48)
    assert a.image.tobytes() == b.image.tobytes()
    assert a.mask.tobytes() == b.mask.tobytes()
    assert a.labels == b.labels
    other_patient = _render(_patient(4), 4, 1, 48)
    other_acq = _render(_patient(3), 3, 2, 48)
    assert np.abs(a.image.astype(int) - other_patient.image.astype(int)).mean() > 1.0
    assert np.abs(a.image.astype(int) - other_acq.image.astype(int)).mean() > 0.5
    for k in ("grade", "sex", "age", "laterality", "marker_block"):   # persistent per patient
        assert a.labels[k] == other_acq.labels[k]


def test_identity_persists_across_acquisitions():
    """Vessel masks of two acquisitions of a patient overlap more than masks of different patients."""
    n = 10
    masks = {}
    for i in range(n):
        p = _patient(i)
        masks[i] = [_render(p, i, a, 64).mask for a in (0, 1)]

    def iou(u, v):
        return (u & v).sum() / max(1, (u | v).sum())

    same = np.array([iou(*masks[i]) for i in range(n)])
    cross = np.array([[iou(masks[i][0], masks[j][1]) for j in range(n) if j != i] for i in range(n)])
    assert np.median(same) > 1.5 * np.median(cross)
    assert np.mean(same > np.median(cross, axis=1)) >= 0.8


def test_left_and_right_eyes_are_mirrored():
    """The optic disc (brightest blob) lies on the right of the image in right eyes, on the left in left eyes."""
    sides = {0: [], 1: []}
    for i in range(16):
        p = _patient(i, PhantomParams(marker_rate=0.0))
        img = _render(p, i, 0, 64).image.astype(float)
        lum = ndimage.uniform_filter(img.sum(-1), 5)
        x = np.unravel_index(np.argmax(lum), lum.shape)[1]
        sides[p.laterality].append(x)
    assert sides[0] and sides[1]
    assert max(sides[0]) < 32 < min(sides[1])


def test_vessel_mask_lies_on_drawn_vessels():
    for i in range(6):
        r = _render(_patient(i), i, 0, 64)
        fov = _fov(r.image)
        m = r.mask & fov
        assert not (r.mask & ~fov).any()
        assert 0.04 <= m.sum() / fov.sum() <= 0.16
        g = r.image[..., 1].astype(float)
        red = r.image[..., 0].astype(float) / np.maximum(g, 1.0)
        bg = (~r.mask & fov).astype(float)
        k = np.ones((7, 7))
        local_g = ndimage.convolve(g * bg, k) / np.maximum(ndimage.convolve(bg, k), 1.0)
        local_red = ndimage.convolve(red * bg, k) / np.maximum(ndimage.convolve(bg, k), 1.0)
        assert np.mean(g[m] < local_g[m]) > 0.9            # darker in green than the local background
        assert np.mean(red[m] > local_red[m]) > 0.8        # and redder (higher R/G)


def test_lesion_counts_rise_with_grade():
    totals = []
    for g in range(5):
        t, nv = [], []
        for i in range(12):
            p = _patient(100 * g + i, _one_grade(g))
            assert p.grade == g
            lab = _render(p, 100 * g + i, 0, 24).labels
            assert lab["grade"] == g
            t.append(sum(lab[k] for k in LESION_KEYS))
            nv.append(lab["neovascularisation"])
        if g == 0:
            assert max(t) == 0
        if g == 1:
            assert min(t) >= 1
        assert set(nv) == {1.0 if g == 4 else 0.0}
        totals.append(np.mean(t))
    assert all(b > a for a, b in itertools.pairwise(totals)), totals


def test_lesions_are_visible_in_the_image():
    """Removing a grade-3 patient's blood lesions brightens the green channel; exudates add yellow pixels."""
    i, p = next((i, p) for i, p in ((i, _patient(i, _one_grade(3))) for i in range(50)) if len(p.exudates))
    with_all = _render(p, i, 0, 64).image.astype(float)
    no_blood = _render(replace(p, microaneurysms=p.microaneurysms[:0], haemorrhages=()), i, 0, 64).image.astype(float)
    no_exu = _render(replace(p, exudates=p.exudates[:0]), i, 0, 64).image.astype(float)
    fov = _fov(with_all.astype(np.uint8))
    assert no_blood[..., 1][fov].mean() > with_all[..., 1][fov].mean() + 0.5
    diff = with_all - no_exu                                # exudates: bright, yellow (R and G up, B less)
    changed = np.abs(diff).sum(-1) > 10
    assert changed.sum() >= 2
    assert diff[changed][:, 1].mean() > diff[changed][:, 2].mean() > -1


def test_marker_rate_and_burned_in_block():
    assert not any(_patient(i, PhantomParams(marker_rate=0.0)).marker_block for i in range(10))
    assert all(_patient(i, PhantomParams(marker_rate=1.0)).marker_block for i in range(10))
    n = sum(_patient(i, PhantomParams(marker_rate=0.25), seed=SEED + 1).marker_block for i in range(160))
    assert 22 <= n <= 58                                    # expected 40 (binomial sd 5.5)
    # The block is drawn in image coordinates: identical in every acquisition of the patient.
    p = _patient(7, PhantomParams(marker_rate=1.0))
    m = p.marker
    size = 64
    ys = slice(round(m.y0 * size), round((m.y0 + m.h) * size))
    xs = slice(round(m.x0 * size), round((m.x0 + m.w) * size))
    a, b = (_render(p, 7, k, size) for k in (0, 1))
    assert a.labels["marker_block"] == 1.0
    assert np.array_equal(a.image[ys, xs], b.image[ys, xs])
    block = a.image[ys, xs].astype(int).sum(-1)
    assert block.max() > 600 and block.min() < 100           # bright and dark cells
    plain = _render(replace(p, marker=None), 7, 0, size)
    assert not np.array_equal(plain.image[ys, xs], a.image[ys, xs])


def test_colour_statistics_match_the_real_retina():
    from skimage import data
    from skimage.transform import resize

    size = 64
    real = (resize(data.retina(), (size, size), anti_aliasing=True) * 255).round().astype(np.uint8)
    fov = _fov(real)
    real_mean = real[fov].astype(float).mean(0)
    real_std = real[fov].astype(float).std(0)
    means, stds = [], []
    for i in range(12):
        img = _render(_patient(i), i, 0, size).image
        f = _fov(img)
        x = img[f].astype(float)
        assert x[:, 0].mean() > x[:, 1].mean() > x[:, 2].mean()   # R dominant, G moderate, B low
        assert 0.7 < f.mean() / fov.mean() < 1.3
        means.append(x.mean(0))
        stds.append(x.std(0))
    mean, std = np.mean(means, 0), np.mean(stds, 0)
    assert np.all(np.abs(mean - real_mean) < 0.12 * real_mean + 5), (mean, real_mean)
    assert np.all((std > 0.6 * real_std) & (std < 1.4 * real_std)), (std, real_std)


def test_age_changes_anatomy_and_lens():
    stats = {}
    for k, ages in enumerate([(25.0, 35.0), (75.0, 85.0)]):
        rows = []
        for i in range(25):
            p = _patient(i, PhantomParams(age_range=ages, grade_weights=(1, 0, 0, 0, 0)), seed=SEED + 10 + k)
            r = _render(p, i, 0, 64, seed=SEED + 10 + k)
            f = _fov(r.image)
            x = r.image[f].astype(float)
            rows.append((r.mask[f].mean(), x[:, 2].mean() / x[:, 0].mean()))
        stats[k] = np.array(rows).mean(0)
    young, old = stats[0], stats[1]
    assert old[0] < 0.95 * young[0]          # narrower arterioles, fewer fine vessels
    assert old[1] < 0.95 * young[1]          # yellower lens: less blue


def test_sex_changes_anatomy():
    frac = {0: [], 1: []}
    for i in range(100):
        p = _patient(i, PhantomParams(grade_weights=(1, 0, 0, 0, 0)), seed=SEED + 20)
        r = _render(p, i, 0, 64, seed=SEED + 20)
        f = _fov(r.image)
        frac[p.sex].append(r.mask[f].mean())
    assert len(frac[0]) > 30 and len(frac[1]) > 30
    assert np.mean(frac[1]) > 1.04 * np.mean(frac[0])   # males: wider vessels
