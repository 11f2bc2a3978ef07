import numpy as np
import skimage.data
from PIL import Image

from medanon.data.transforms import circle_mask, crop_square, detect_fov, preprocess, resize, to_channels


def synthetic_fundus(h=300, w=400, cx=210, cy=150, r=130):
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3), np.float32)
    inside = (xx - cx) ** 2 + (yy - cy) ** 2 <= r**2
    img[inside] = (0.8, 0.35, 0.1)
    return img


def test_fov_on_synthetic_disc():
    fov = detect_fov(synthetic_fundus())
    assert fov.found
    assert abs(fov.cx - 210) <= 1.5 and abs(fov.cy - 150) <= 1.5 and abs(fov.radius - 130) <= 1.5


def test_fov_when_frame_cuts_top_and_bottom():
    # the circle is taller than the frame (EyePACS style): radius comes from the width
    img = synthetic_fundus(h=200, w=400, cx=200, cy=100, r=150)
    fov = detect_fov(img)
    assert abs(fov.radius - 150) <= 1.5 and abs(fov.cy - 100) <= 1.5


def test_fov_when_cut_on_one_side():
    img = synthetic_fundus(h=300, w=400, cx=200, cy=120, r=140)  # top cut at row 0 (120 - 140 < 0)
    fov = detect_fov(img)
    assert abs(fov.cy - 120) <= 1.5 and abs(fov.radius - 140) <= 1.5


def test_fov_on_real_retina():
    img = skimage.data.retina().astype(np.float32) / 255
    fov = detect_fov(img)
    h, w = img.shape[:2]
    assert fov.found
    assert abs(fov.cx - w / 2) < 0.03 * w and abs(fov.cy - h / 2) < 0.03 * h
    assert 0.45 * w < fov.radius < 0.52 * w


def test_no_fov_in_black_image():
    assert not detect_fov(np.zeros((50, 60, 3), np.float32)).found


def test_preprocess_fov_crop_and_range():
    out = preprocess(synthetic_fundus(), size=32, channels=3, crop="fov")
    assert out.image.shape == (3, 32, 32) and out.image.dtype == np.float32
    assert out.image.min() >= -1 and out.image.max() <= 1
    # outside the FOV is black (-1), the centre has the fundus colour
    assert np.all(out.image[:, ~out.fov] == -1.0)
    assert np.allclose(out.image[:, 16, 16], np.array([0.8, 0.35, 0.1]) * 2 - 1, atol=0.02)
    assert 0.7 < out.fov.mean() < 0.8  # pi/4 of the square


def test_other_crops_keep_what_they_say():
    """A 40 x 120 image of three bands (black, grey, white): ``center`` keeps the grey middle square, ``none``
    squashes all three into the square, ``pad`` keeps all three between black padding rows."""
    img = np.repeat(np.repeat(np.array([[0.0, 0.5, 1.0]], np.float32), 40, 0), 40, 1)       # (40, 120)
    center = preprocess(img, size=12, channels=1, crop="center").image[0]
    assert center.shape == (12, 12) and np.allclose(center, 0.0, atol=1e-3)
    none = preprocess(img, size=12, channels=1, crop="none").image[0]
    assert np.allclose(none[:, 0], -1, atol=1e-3) and np.allclose(none[:, 5:7], 0, atol=0.05) \
        and np.allclose(none[:, -1], 1, atol=1e-3)
    pad = preprocess(img, size=12, channels=1, crop="pad")
    assert np.allclose(pad.image[0, :3], -1, atol=0.02) and not pad.fov[:3].any() and pad.fov[5:7].all()
    assert np.allclose(pad.image[0, 6, 0], -1, atol=1e-3) and np.allclose(pad.image[0, 6, -1], 1, atol=1e-3)


def test_pad_keeps_the_whole_image_and_marks_padding():
    img = np.ones((20, 40), np.float32)
    out = preprocess(img, size=40, channels=1, crop="pad")
    assert out.fov[:10].sum() == 0 and out.fov[10:30].all() and out.fov[30:].sum() == 0


def test_channel_conversion_matches_pillow():
    rgb = (np.random.default_rng(1).random((8, 8, 3)) * 255).astype(np.uint8)
    ours = to_channels(rgb.astype(np.float32) / 255, 1)[..., 0]
    ref = np.asarray(Image.fromarray(rgb).convert("L"), np.float32) / 255
    assert np.abs(ours - ref).max() <= 1 / 255 + 1e-6
    assert to_channels(ours, 3).shape == (8, 8, 3)


def test_resize_is_antialiased():
    # a 1-pixel checkerboard must average to grey, not alias to a pattern
    cb = (np.indices((256, 256)).sum(0) % 2).astype(np.float32)[..., None]
    small = resize(cb, 16)
    assert np.allclose(small, 0.5, atol=0.02)


def test_crop_square_pads_outside():
    img = np.ones((10, 10), np.float32)
    sq = crop_square(img, 0, 0, 5)
    assert sq.shape == (10, 10) and sq[:5, :5].sum() == 0 and sq[5:, 5:].sum() == 25


def test_circle_mask_area():
    assert abs(circle_mask(200).mean() - np.pi / 4) < 0.01
