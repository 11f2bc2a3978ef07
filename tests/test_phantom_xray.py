"""Behaviour of the procedural chest X-ray phantoms (medanon.phantoms.xray).

Everything is deterministic given the seeds, so the statistical tests below cannot flake; their
margins were chosen so that a regression of the modelled effect (not a new random draw) fails them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage, stats

from medanon.phantoms.common import PhantomParams, acquisition_rng, patient_rng
from medanon.phantoms.xray import XrayPatient, marker_pixel_box, render, sample_patient

LABEL_KEYS = {"pneumonia", "sex", "age", "marker_block", "situs_inversus", "view", "n_opacities"}
PLAIN = PhantomParams(pneumonia_rate=0.0, marker_rate=0.0, situs_inversus_rate=0.0)


def _patient(seed: int, i: int, params: PhantomParams = PLAIN) -> XrayPatient:
    return sample_patient(patient_rng(seed, i), params)


def _acq(p: XrayPatient, seed: int, i: int, a: int, size: int):
    return render(p, acquisition_rng(seed, i, a), size)


# ------------------------------------------------------------------------------------------------
# shapes, types, labels, determinism

@pytest.mark.parametrize("size", [16, 32, 48, 64])
def test_shapes_dtypes_and_labels(size):
    p = _patient(0, 1)
    out = _acq(p, 0, 1, 0, size)
    assert out.image.dtype == np.uint8 and out.image.shape == (size, size)
    assert out.mask is not None and out.mask.dtype == bool and out.mask.shape == (size, size)
    assert set(out.labels) == LABEL_KEYS
    assert all(isinstance(v, float) for v in out.labels.values())
    assert out.labels["view"] == 0.0
    assert out.labels["sex"] in (0.0, 1.0) and out.labels["sex"] == p.sex
    assert out.labels["age"] == round(out.labels["age"], 1) == p.age
    lo, hi = PhantomParams().age_range
    assert lo <= out.labels["age"] <= hi
    # the lungs are a sizeable, not total, part of the image and lie in both halves
    assert 0.08 < out.mask.mean() < 0.6
    assert out.mask[:, : size // 2].any() and out.mask[:, size // 2:].any()
    # a radiograph: black outside the body (top corners), bright mediastinum/abdomen
    assert out.image[: size // 10, : size // 10].mean() < 60
    assert out.image.max() > 140


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), size=st.integers(16, 72))
def test_any_seed_and_size_renders_valid_images(seed, size):
    params = PhantomParams(pneumonia_rate=0.5, marker_rate=0.5, situs_inversus_rate=0.5)
    p = sample_patient(np.random.default_rng(seed), params)
    out = render(p, np.random.default_rng(seed + 1), size)
    assert out.image.shape == out.mask.shape == (size, size)
    assert out.image.dtype == np.uint8 and out.mask.dtype == bool
    assert out.labels["n_opacities"] == p.n_opacities
    assert (out.labels["n_opacities"] > 0) == (out.labels["pneumonia"] == 1.0)
    assert 0 < int(out.image.std())


def test_deterministic_given_generators():
    params = PhantomParams(pneumonia_rate=0.5, marker_rate=0.5, situs_inversus_rate=0.5)
    for i in range(3):
        a = _acq(_patient(5, i, params), 5, i, 2, 48)
        b = _acq(_patient(5, i, params), 5, i, 2, 48)
        assert np.array_equal(a.image, b.image)
        assert np.array_equal(a.mask, b.mask)
        assert a.labels == b.labels
    # ... and a different acquisition generator gives a different image of the same patient
    p = _patient(5, 0, params)
    assert not np.array_equal(_acq(p, 5, 0, 0, 48).image, _acq(p, 5, 0, 1, 48).image)


def test_render_rejects_tiny_size():
    with pytest.raises(ValueError):
        render(_patient(0, 0), np.random.default_rng(0), 2)


def test_geometry_scales_with_size():
    """The same acquisition at 32 and 128 px shows the same anatomy (block-averaged 128 ~ 32)."""
    for i in range(3):
        p = _patient(9, i)
        small = _acq(p, 9, i, 0, 32)
        big = _acq(p, 9, i, 0, 128)
        down = big.image.astype(float).reshape(32, 4, 32, 4).mean(axis=(1, 3))
        r = np.corrcoef(down.ravel(), small.image.astype(float).ravel())[0, 1]
        assert r > 0.95
        mdown = big.mask.reshape(32, 4, 32, 4).mean(axis=(1, 3)) > 0.5
        iou = (mdown & small.mask).sum() / (mdown | small.mask).sum()
        assert iou > 0.85


# ------------------------------------------------------------------------------------------------
# identity

def _features(img: np.ndarray) -> np.ndarray:
    f = ndimage.gaussian_filter(img.astype(float), 1.0).ravel()
    return (f - f.mean()) / f.std()


def test_identity_persists_across_acquisitions():
    n, size = 14, 48
    a0, a1 = [], []
    for i in range(n):
        p = _patient(21, i, PhantomParams())
        a0.append(_features(_acq(p, 21, i, 0, size).image))
        a1.append(_features(_acq(p, 21, i, 1, size).image))
    a0, a1 = np.array(a0), np.array(a1)
    d = ((a0[:, None] - a1[None]) ** 2).mean(-1)          # acquisition 0 of i vs acquisition 1 of j
    same = np.diag(d)
    other = np.where(np.eye(n, dtype=bool), np.nan, d)
    # every patient's two acquisitions are closer than the typical distance to other patients ...
    assert np.all(same < np.nanmedian(other, axis=1))
    assert same.mean() < 0.6 * np.nanmean(other)
    # ... and plain nearest-neighbour matching re-identifies most of them (chance: 1/14)
    assert (d.argmin(axis=1) == np.arange(n)).mean() >= 0.5


def test_patients_differ_in_anatomy():
    ps = [_patient(3, i) for i in range(6)]
    assert len({round(p.chest_hw, 6) for p in ps}) == 6
    assert len({p.rib_y.shape[1] for p in [_patient(3, i) for i in range(30)]}) >= 2   # rib count varies
    assert len({round(p.heart_a, 6) for p in ps}) == 6


# ------------------------------------------------------------------------------------------------
# lungs and pathology

def test_lung_mask_lies_on_dark_lung_fields():
    size = 64
    for i in range(6):
        p = _patient(4, i, PhantomParams())
        for a in range(2):
            out = _acq(p, 4, i, a, size)
            img, m = out.image.astype(float), out.mask
            rows = np.where(m.any(axis=1))[0]
            mid = size // 2
            mediastinum = np.zeros_like(m)
            mediastinum[rows.min():rows.max() + 1, mid - size // 16: mid + size // 16] = True
            mediastinum &= ~m
            # body outside the lungs: lateral chest wall and abdomen, not the black background
            body = (ndimage.binary_dilation(m, iterations=size // 10) & ~ndimage.binary_dilation(m, iterations=2))
            body[: rows.min()] = False
            assert img[m].mean() + 40 < img[mediastinum].mean()
            assert img[m].mean() + 15 < img[body].mean()
            assert np.percentile(img[m], 90) < np.median(img[mediastinum])


def test_mask_follows_the_pose():
    p = _patient(8, 2)
    masks = [_acq(p, 8, 2, a, 64).mask for a in range(4)]
    assert any(not np.array_equal(masks[0], m) for m in masks[1:])
    for m in masks[1:]:                                          # same lungs, moved a little
        assert (masks[0] & m).sum() / (masks[0] | m).sum() > 0.7


def test_pneumonia_brightens_the_lungs_and_only_the_lungs():
    size = 48
    sick = PhantomParams(pneumonia_rate=1.0, marker_rate=0.0, situs_inversus_rate=0.0)
    gains = []
    for i in range(10):
        healthy_p = sample_patient(patient_rng(6, i), PLAIN)
        sick_p = sample_patient(patient_rng(6, i), sick)
        # pathology is drawn after anatomy: same patient with and without pneumonia
        assert np.array_equal(healthy_p.rib_y, sick_p.rib_y) and healthy_p.heart_a == sick_p.heart_a
        assert healthy_p.n_opacities == 0 and not healthy_p.pneumonia
        assert sick_p.pneumonia and sick_p.n_opacities >= 1
        h = _acq(healthy_p, 6, i, 0, size)
        s = _acq(sick_p, 6, i, 0, size)
        assert h.labels["pneumonia"] == 0.0 and h.labels["n_opacities"] == 0.0
        assert s.labels["pneumonia"] == 1.0 and s.labels["n_opacities"] == sick_p.n_opacities
        assert np.array_equal(h.mask, s.mask)
        diff = s.image.astype(float) - h.image.astype(float)
        gains.append(diff[h.mask].mean())
        # opacities sit inside the lungs: far from the lung fields nothing changes
        far = ~ndimage.binary_dilation(h.mask, iterations=4)
        assert np.abs(diff[far]).max() <= 2
        assert diff.max() > 20                                      # a visible patch somewhere
    assert min(gains) > 1.0 and np.mean(gains) > 5.0


def test_pneumonia_population_difference():
    """Unpaired: patchy opacities make the lung fields of pneumonia patients more heterogeneous
    (a signal a classifier can learn from single images, without a healthy reference)."""
    size = 32
    params = PhantomParams(pneumonia_rate=0.5, marker_rate=0.0, situs_inversus_rate=0.0)
    vals = {0: [], 1: []}
    for i in range(60):
        p = _patient(12, i, params)
        out = _acq(p, 12, i, 0, size)
        img = out.image.astype(float)
        vals[int(p.pneumonia)].append(np.percentile(img[out.mask], 90) - np.median(img[out.mask]))
    assert len(vals[0]) > 15 and len(vals[1]) > 15
    assert stats.ttest_ind(vals[1], vals[0]).statistic > 3.0


def test_pneumonia_rate_is_respected():
    params = PhantomParams(pneumonia_rate=0.3)
    flags = [sample_patient(patient_rng(2, i), params).pneumonia for i in range(300)]
    assert 0.2 < np.mean(flags) < 0.4


# ------------------------------------------------------------------------------------------------
# identifying markers

def _heart_side_contrast(img: np.ndarray, mask: np.ndarray) -> float:
    """Brightness of the lower mediastinum right of the thorax centre minus left of it (image sides).

    The centre is the midpoint of the lateral lung edges, so the measure ignores the pose.
    """
    s = img.shape[0]
    cols = np.where(mask.any(axis=0))[0]
    c = 0.5 * (cols.min() + cols.max())
    rows = slice(int(0.55 * s), int(0.70 * s))
    k = np.arange(0.03 * s, 0.2 * s)
    left = np.floor(c - k).astype(int)                 # mirror-symmetric column sets about c
    right = np.ceil(c + k).astype(int)
    return img[rows][:, right].astype(float).mean() - img[rows][:, left].astype(float).mean()


def test_situs_inversus_puts_the_heart_on_the_other_side():
    size = 64
    mirrored = PhantomParams(pneumonia_rate=0.0, marker_rate=0.0, situs_inversus_rate=1.0)
    for i in range(8):
        normal = _patient(13, i)
        situs = sample_patient(patient_rng(13, i), mirrored)
        assert situs.situs_inversus and not normal.situs_inversus
        n_img = _acq(normal, 13, i, 0, size)
        s_img = _acq(situs, 13, i, 0, size)
        assert n_img.labels["situs_inversus"] == 0.0 and s_img.labels["situs_inversus"] == 1.0
        assert _heart_side_contrast(n_img.image, n_img.mask) > 10   # heart on the image right
        assert _heart_side_contrast(s_img.image, s_img.mask) < -10  # mirrored
        # the lung mask is mirrored too: the smaller (left) lung moves to the image left
        half = size // 2
        assert n_img.mask[:, :half].sum() > n_img.mask[:, half:].sum()
        assert s_img.mask[:, :half].sum() < s_img.mask[:, half:].sum()


def test_marker_block_is_burned_in_iff_flagged():
    size = 64
    marked = PhantomParams(pneumonia_rate=0.0, marker_rate=1.0, situs_inversus_rate=0.0)
    patterns = []
    for i in range(6):
        with_m = sample_patient(patient_rng(14, i), marked)
        without = sample_patient(patient_rng(14, i), PLAIN)
        assert with_m.marker_block and not without.marker_block
        assert marker_pixel_box(without, size) is None
        r0, r1, c0, c1 = marker_pixel_box(with_m, size)
        patches = []
        for a in range(3):
            out = _acq(with_m, 14, i, a, size)
            assert out.labels["marker_block"] == 1.0
            patch = out.image[r0:r1, c0:c1]
            assert (patch[0] == 255).all() and (patch[-1] == 255).all()  # solid bright frame
            assert (patch[:, 0] == 255).all() and (patch[:, -1] == 255).all()
            assert set(np.unique(patch)) <= {40, 255} and (patch == 40).any()  # a pattern inside
            patches.append(patch)
        # burned in: identical in every acquisition, whatever the pose and exposure
        assert all(np.array_equal(patches[0], q) for q in patches[1:])
        plain = _acq(without, 14, i, 0, size)
        assert plain.labels["marker_block"] == 0.0
        assert not (plain.image[r0:r1, c0:c1] == 255).all()
        assert plain.image[r0:r1, c0:c1].std() > 0 or plain.image[r0:r1, c0:c1].max() < 100
        patterns.append((r0, c0, patches[0].tobytes()))
    assert len(set(patterns)) == len(patterns)                 # patient-specific position/pattern


def test_marker_and_situs_rates():
    params = PhantomParams(marker_rate=0.2, situs_inversus_rate=0.1)
    ps = [sample_patient(patient_rng(15, i), params) for i in range(400)]
    assert 0.13 < np.mean([p.marker_block for p in ps]) < 0.27
    assert 0.05 < np.mean([p.situs_inversus for p in ps]) < 0.15


# ------------------------------------------------------------------------------------------------
# attributes

def _attribute_features(n: int, size: int):
    sex, age, breast, ribs, heart, area = [], [], [], [], [], []
    for i in range(n):
        p = _patient(11, i)
        out = _acq(p, 11, i, 0, size)
        img, m = out.image.astype(float), out.mask
        rows = np.where(m.any(axis=1))[0]
        lo = rows.min() + (rows.max() - rows.min()) * 2 // 3
        lower = m.copy()
        lower[:lo] = False
        gaps = []
        for r in range(lo, rows.max() + 1):
            cols = np.where(m[r])[0]
            left, right = cols[cols < size // 2], cols[cols >= size // 2]
            if len(left) and len(right):
                gaps.append(right.min() - left.max())
        sex.append(p.sex)
        age.append(p.age)
        breast.append(img[lower].mean() - img[m & ~lower].mean())   # lower-zone shadows
        ribs.append((img - ndimage.gaussian_filter(img, 2.0))[m].std())  # bone texture in the lungs
        heart.append(np.mean(gaps))                                   # cardiac width
        area.append(m.mean())
    return tuple(np.array(x, dtype=float) for x in (sex, age, breast, ribs, heart, area))


def test_sex_and_age_change_anatomy():
    sex, age, breast, ribs, heart, area = _attribute_features(70, 64)
    assert 20 < sex.sum() < 50
    # women: breast shadows over the lower lung fields, smaller lungs
    assert stats.ttest_ind(breast[sex == 0], breast[sex == 1]).statistic > 4.0
    assert stats.ttest_ind(area[sex == 1], area[sex == 0]).statistic > 2.0
    # age: fainter ribs (bone density), larger heart
    assert stats.spearmanr(age, ribs).statistic < -0.25
    assert stats.spearmanr(age, heart).statistic > 0.2
