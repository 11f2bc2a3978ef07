"""Reduced decoding (JPEG draft mode, box averages) against the full-decode path, EXIF orientation, and
decoding once per dataset. Speed is measured by benchmarks/decode.py, never here."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import ndimage

from medanon.config import DataConfig
from medanon.data import dataset as dataset_module
from medanon.data import imageio
from medanon.data.dataset import open_dataset
from medanon.data.decode import choose_scale, decode
from medanon.data.layouts import GenericOptions
from medanon.data.transforms import detect_fov, preprocess

W, H = 2048, 1536          # scale 8 at 32 px: 1536 / 8 = 192 >= 4 x 32


def fundus_like(w: int = W, h: int = H, seed: int = 0) -> np.ndarray:
    """A smooth orange disc (cut at top and bottom, like EyePACS) with dark curved 'vessels', uint8 RGB."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    cx, cy, r = w / 2 + 37.3, h / 2 - 11.6, 0.54 * h
    d = np.hypot(xx - cx, yy - cy)
    inside = np.clip((r - d) / 6.0, 0, 1)
    vessels = np.zeros((h, w), np.float32)
    for k in range(6):
        phase = rng.uniform(0, 6)
        vessels += np.exp(-((yy - cy - 0.5 * r * np.sin(xx / (150 + 40 * k) + phase)) / 9.0) ** 2)
    rgb = np.stack([0.8 - 0.25 * d / r, 0.4 - 0.15 * d / r, 0.15 + 0 * d], -1) * (1 - 0.4 * np.clip(vessels, 0, 1))[
        ..., None]
    return (np.clip(rgb * inside[..., None], 0, 1) * 255).astype(np.uint8)


@pytest.fixture(scope="module")
def big_jpeg(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "eye.jpeg"
    Image.fromarray(fundus_like()).save(path, quality=92)
    return path


def test_jpeg_is_decoded_reduced_by_draft_mode(big_jpeg: Path):
    red = imageio.read_reduced(big_jpeg, 8)
    assert red.scale == 8 and (red.width, red.height) == (W, H)
    assert red.image.shape == (H // 8, W // 8, 3)
    full = imageio.read(big_jpeg)
    block_means = full.reshape(H // 8, 8, W // 8, 8, 3).mean(axis=(1, 3))
    assert np.abs(red.image - block_means).mean() < 2 / 255       # DCT scaling = block means, up to JPEG error
    assert choose_scale(W, H, 32) == 8 and choose_scale(W, H, 256) == 1 and choose_scale(64, 48, 32) == 1


def test_png_reduced_is_the_exact_box_average(tmp_path: Path):
    a = (np.random.default_rng(1).random((37, 50, 3)) * 255).astype(np.uint8)
    Image.fromarray(a).save(tmp_path / "a.png")
    red = imageio.read_reduced(tmp_path / "a.png", 4)
    assert red.scale == 4 and red.image.shape == (10, 13, 3)
    f = a / 255.0
    assert np.allclose(red.image[3, 5], f[12:16, 20:24].reshape(-1, 3).mean(0), atol=1e-6)
    assert np.allclose(red.image[-1, -1], f[36:37, 48:50].reshape(-1, 3).mean(0), atol=1e-6)   # partial block


@pytest.mark.parametrize("crop", ["center", "pad", "none"])
def test_reduced_path_within_one_level_of_full_decode(big_jpeg: Path, crop: str):
    ref = preprocess(imageio.read(big_jpeg), size=32, channels=3, crop=crop)
    new = decode(big_jpeg, size=32, channels=3, crop=crop)
    diff = np.abs(new.image - ref.image) / 2          # tensors are in [-1, 1]; images in [0, 1]
    assert diff.max() <= 1 / 255
    assert np.array_equal(new.fov, ref.fov)


def test_reduced_fov_crop_close_to_full_decode(big_jpeg: Path):
    full = imageio.read(big_jpeg)
    ref = preprocess(full, size=32, channels=3, crop="fov")
    new = decode(big_jpeg, size=32, channels=3, crop="fov")
    assert new.fov_found and np.array_equal(new.fov, ref.fov)
    diff = (np.abs(new.image - ref.image) / 2).max(axis=0)
    assert diff.mean() <= 1 / 255
    # away from the FOV's border (where JPEG's half-resolution colour, decoded at 1/16, blurs the edge)
    assert diff[ndimage.binary_erosion(ref.fov, iterations=2)].max() <= 2 / 255
    # the FOV's edges, fitted on the 1/8 image, land within 2 source pixels of full-resolution thresholding
    red = imageio.read_reduced(big_jpeg, 8)
    a, b = detect_fov(full), detect_fov(red.image, scale=8, width=W, height=H)
    assert abs(a.cx - b.cx) <= 2 and abs(a.cy - b.cy) <= 2 and abs(a.radius - b.radius) <= 2


def test_small_images_decode_exactly_as_before(tmp_path: Path):
    a = fundus_like(96, 80)
    Image.fromarray(a).save(tmp_path / "s.png")
    for crop in ("fov", "center"):
        ref = preprocess(imageio.read(tmp_path / "s.png"), size=32, channels=3, crop=crop)
        new = decode(tmp_path / "s.png", size=32, channels=3, crop=crop)
        assert np.array_equal(new.image, ref.image) and np.array_equal(new.fov, ref.fov)


def test_exif_orientation_is_applied(tmp_path: Path):
    a = np.zeros((40, 64, 3), np.uint8)
    a[:, :16] = 255                                   # stored: white band on the left
    im = Image.fromarray(a)
    exif = im.getexif()
    exif[0x0112] = 6                                  # "rotate 90 CW to display"
    im.save(tmp_path / "o.jpg", exif=exif, quality=95)
    info = imageio.probe(tmp_path / "o.jpg")
    assert (info.width, info.height) == (40, 64)
    shown = imageio.read(tmp_path / "o.jpg")
    assert shown.shape == (64, 40, 3)
    assert shown[:16].mean() > 0.9 and shown[24:].mean() < 0.1     # the band is now on top
    red = imageio.read_reduced(tmp_path / "o.jpg", 2)
    assert (red.width, red.height) == (40, 64) and red.image.shape[:2] == (32, 20)


def _jpeg_folder(root: Path, n: int) -> GenericOptions:
    (root / "img").mkdir(parents=True)
    rows = ["file,patient"]
    for i in range(n):
        Image.fromarray(fundus_like(320, 240, seed=i)).save(root / "img" / f"{i}.jpg", quality=90)
        rows.append(f"img/{i}.jpg,p{i}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return GenericOptions(labels_csv=root / "labels.csv", image_col="file", patient_col="patient")


@pytest.fixture
def counted(tmp_path: Path, monkeypatch):
    """A 3-image JPEG dataset, and the list of paths the dataset has decoded so far."""
    generic = _jpeg_folder(tmp_path, 3)
    calls: list[Path] = []
    real = dataset_module.decode
    monkeypatch.setattr(dataset_module, "decode", lambda path, **kw: calls.append(path) or real(path, **kw))
    return open_dataset(tmp_path, DataConfig(size=32, modality="fundus"), generic=generic), calls


def test_each_image_is_decoded_once_per_dataset(counted):
    ds, calls = counted
    first, _ = ds.tensors(workers=2, progress=False)
    second, _ = ds.tensors(workers=2, progress=False)
    assert len(calls) == 3 and torch.equal(first, second)
    item = ds.load(0)
    item["image"].zero_()                             # a caller writing into its item cannot corrupt the cache
    assert torch.equal(ds.load(0)["image"], first[0])


def test_cache_budget_is_respected(counted):
    ds, calls = counted
    ds.cache_bytes = 0
    ds.tensors(workers=1, progress=False)
    ds.tensors(workers=1, progress=False)
    assert len(calls) == 6


@pytest.mark.parametrize("crop", ["fov", "center", "pad", "none"])
def test_render_at_full_scale_is_preprocess(crop: str):
    """The reduced path's crop plan and resampling, run on the full image, reproduce preprocess."""
    from medanon.data.transforms import plan_crop, render

    img = fundus_like(150, 110).astype(np.float32) / 255
    ref = preprocess(img, size=32, channels=3, crop=crop)
    new = render(img, plan_crop(img, crop), scale=1, width=150, height=110, size=32, channels=3)
    assert new.fov_found == ref.fov_found and np.array_equal(new.fov, ref.fov)
    assert np.abs(new.image - ref.image).max() < 1e-5


@pytest.mark.parametrize("crop", ["center", "pad", "none"])
def test_crop_between_reduced_pixels_within_one_level(tmp_path: Path, crop: str):
    """A 16-bit TIFF whose crop edges fall inside reduced pixels (1203 x 1001: x0 = 101, not a multiple of 4; the
    last reduced row and column average fewer than 4 source pixels)."""
    import tifffile

    yy, xx = np.mgrid[0:1001, 0:1203]
    arr = (20000 + 15000 * np.sin(xx / 37.0) * np.cos(yy / 51.0) + 10 * xx).astype(np.uint16)
    tifffile.imwrite(tmp_path / "x.tif", arr)
    assert choose_scale(1203, 1001, 32) == 4
    ref = preprocess(imageio.read(tmp_path / "x.tif"), size=32, channels=1, crop=crop)
    new = decode(tmp_path / "x.tif", size=32, channels=1, crop=crop)
    assert np.abs(new.image - ref.image).max() / 2 <= 1 / 255
    assert np.array_equal(new.fov, ref.fov)


def test_probe_reads_only_the_header(tmp_path: Path, monkeypatch):
    """A header check must not decode pixels (Pillow decodes a whole PNG to look for EXIF after its pixels)."""
    Image.fromarray(fundus_like(64, 48)).save(tmp_path / "a.png")
    loads = []
    real_load = Image.Image.load
    monkeypatch.setattr(Image.Image, "load", lambda self: loads.append(1) or real_load(self))
    from PIL import ImageFile

    real_file_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: loads.append(1) or real_file_load(self))
    info = imageio.probe(tmp_path / "a.png")
    assert (info.width, info.height) == (64, 48) and loads == []
