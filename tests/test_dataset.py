"""The dataset over a folder: loading, and every bad-input case of the foundation issue."""

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from torch.utils.data import DataLoader

from medanon.config import DataConfig
from medanon.data.dataset import drop_records, open_dataset, verify_decoding
from medanon.data.summary import format_summary, summarize
from medanon.errors import DataError


def make_dataset(root: Path, n_patients=4, per=2, modality="fundus", gray_every=0) -> Path:
    """A medanon-layout folder with small disc-shaped 'fundus' images."""
    (root / "images").mkdir(parents=True)
    rows = ["image,patient_id,grade,sex,age"]
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:40, 0:48]
    disc = (xx - 24) ** 2 + (yy - 20) ** 2 <= 18**2
    k = 0
    for p in range(n_patients):
        for a in range(per):
            img = np.zeros((40, 48, 3), np.uint8)
            img[disc] = rng.integers(60, 255, size=3)
            name = f"images/P{p}_{a}.png"
            k += 1
            if gray_every and k % gray_every == 0:
                Image.fromarray(img[..., 0]).save(root / name)
            else:
                Image.fromarray(img).save(root / name)
            rows.append(f"{name},P{p},{p % 5},{'FM'[p % 2]},{40 + p}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    (root / "dataset.yaml").write_text(yaml.safe_dump({
        "format": "medanon-dataset", "version": 1, "modality": modality, "labels": "labels.csv",
        "image_col": "image", "patient_col": "patient_id", "label_cols": ["grade", "sex", "age"]}))
    return root


def test_items_and_collation(tmp_path: Path):
    ds = open_dataset(make_dataset(tmp_path / "d"), DataConfig(size=32))
    assert len(ds) == 8 and ds.channels == 3 and ds.crop == "fov" and ds.modality == "fundus"
    item = ds[0]
    assert item["image"].shape == (3, 32, 32) and item["image"].dtype == torch.float32
    assert item["image"].min() >= -1 and item["image"].max() <= 1
    assert item["fov"].shape == (1, 32, 32) and item["fov"].dtype == torch.bool
    assert item["labels"]["sex"] in (0.0, 1.0) and item["patient_id"] == "P0"
    assert item["record_id"].startswith("r") and "P0" not in item["record_id"]
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert batch["image"].shape == (4, 3, 32, 32) and batch["labels"]["grade"].shape == (4,)
    images, fov = ds.tensors(workers=2, progress=False)
    assert torch.equal(images[3], ds[3]["image"]) and fov.shape == (8, 1, 32, 32)


def test_summary_counts(tmp_path: Path):
    ds = open_dataset(make_dataset(tmp_path / "d"), DataConfig(size=32))
    s = summarize(ds)
    assert s["images"] == 8 and s["patients"] == 4
    assert s["images_per_patient"] == {"min": 2, "mean": 2.0, "max": 2}
    assert s["labels"]["grade"]["counts"] == {"0": 2, "1": 2, "2": 2, "3": 2}
    assert s["labels"]["sex"]["counts"] == {"F": 4, "M": 4}
    assert s["labels"]["age"]["mean"] == 41.5
    assert s["source_sizes"] == {"48x40": 8}
    text = format_summary(s)
    assert "patients 4" in text and "F: 4" in text


def test_grayscale_conversion_for_xray(tmp_path: Path):
    ds = open_dataset(make_dataset(tmp_path / "d", modality="xray"), DataConfig(size=16))
    assert ds.channels == 1 and ds.crop == "center" and ds[0]["image"].shape == (1, 16, 16)


def test_corrupt_image_is_named_then_skipped(tmp_path: Path):
    root = make_dataset(tmp_path / "d")
    (root / "images" / "P1_0.png").write_bytes(b"garbage")
    with pytest.raises(DataError, match=r"P1_0\.png") as e:
        open_dataset(root, DataConfig(size=32))
    assert "skip_bad=True" in str(e.value) and "unreadable" in str(e.value)
    ds = open_dataset(root, DataConfig(size=32, skip_bad=True))
    assert len(ds) == 7 and any("P1_0.png" in p.path for p in ds.skipped)


def test_truncated_pixels_found_by_decoding(tmp_path: Path):
    root = make_dataset(tmp_path / "d")
    big = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    Image.fromarray(big).save(root / "images" / "P2_1.png")
    data = (root / "images" / "P2_1.png").read_bytes()
    (root / "images" / "P2_1.png").write_bytes(data[: len(data) // 2])
    ds = open_dataset(root, DataConfig(size=32))            # the header is fine
    bad = verify_decoding(ds)
    assert [Path(p.path).name for p in bad] == ["P2_1.png"]
    assert len(drop_records(ds, bad)) == 7
    with pytest.raises(DataError, match=r"P2_1\.png"):
        ds[[r.path.name for r in ds.records].index("P2_1.png")]


def test_missing_image_is_named(tmp_path: Path):
    root = make_dataset(tmp_path / "d")
    (root / "images" / "P3_1.png").unlink()
    with pytest.raises(DataError, match=r"P3_1\.png") as e:
        open_dataset(root, DataConfig(size=32))
    assert "missing" in str(e.value)
    assert len(open_dataset(root, DataConfig(size=32, skip_bad=True))) == 7


def test_one_image_under_two_patient_ids_is_named_then_skipped(tmp_path: Path):
    """A copy of P0's image filed as P1's counts one person as two (a k = 2 group could release the image itself):
    the copy (or a hard link) is a problem naming both files and both ids, and skip_bad leaves out both (keeping
    either one may keep it under the wrong id, one person in two splits); the same image twice under one id, or
    a blank image (a failed capture shows nobody), is not."""
    import os
    import shutil

    root = make_dataset(tmp_path / "d")
    shutil.copyfile(root / "images" / "P0_0.png", root / "images" / "P1_1.png")
    with pytest.raises(DataError, match=r"P1_1\.png") as e:
        open_dataset(root, DataConfig(size=32))
    assert "duplicate" in str(e.value) and "P0_0.png" in str(e.value) and "'P0'" in str(e.value)
    assert "patient id" in e.value.fix and "skip_bad=True" in e.value.fix
    ds = open_dataset(root, DataConfig(size=32, skip_bad=True))
    assert len(ds) == 6 and sorted(Path(p.path).name for p in ds.skipped) == ["P0_0.png", "P1_1.png"]
    assert {"P0_0.png", "P1_1.png"}.isdisjoint(r.path.name for r in ds.records)

    same = make_dataset(tmp_path / "same")           # a copy within one patient, and blank images of two
    shutil.copyfile(same / "images" / "P0_0.png", same / "images" / "P0_1.png")
    for name in ("P1_0.png", "P2_1.png"):
        Image.new("RGB", (48, 40)).save(same / "images" / name)
    assert len(open_dataset(same, DataConfig(size=32))) == 8
    (same / "images" / "P2_0.png").unlink()          # a hard link across two
    os.link(same / "images" / "P3_0.png", same / "images" / "P2_0.png")
    with pytest.raises(DataError, match=r"P3_0\.png.*duplicate"):
        open_dataset(same, DataConfig(size=32))


def test_image_without_label_is_named(tmp_path: Path):
    root = make_dataset(tmp_path / "d")
    Image.new("RGB", (40, 40)).save(root / "images" / "stray.png")
    with pytest.raises(DataError, match=r"stray\.png") as e:
        open_dataset(root, DataConfig(size=32))
    assert "unlabelled" in str(e.value)
    ds = open_dataset(root, DataConfig(size=32, skip_bad=True))
    assert len(ds) == 8 and any("stray.png" in p.path for p in ds.skipped)


def test_mixed_channels_are_named_and_convertible(tmp_path: Path):
    root = make_dataset(tmp_path / "d", gray_every=3)
    with pytest.raises(DataError, match="mixed channel counts") as e:
        open_dataset(root, DataConfig(size=32))
    assert "channels=3" in str(e.value) and "P1_0.png" in str(e.value)
    ds = open_dataset(root, DataConfig(size=32, channels=3))
    assert all(ds[i]["image"].shape[0] == 3 for i in range(len(ds)))


def test_unknown_layout_and_missing_folder(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    with pytest.raises(DataError, match="empty"):
        open_dataset(tmp_path / "empty")
    with pytest.raises(DataError, match="does not exist"):
        open_dataset(tmp_path / "nowhere")


def test_too_small_source_image(tmp_path: Path):
    root = make_dataset(tmp_path / "d")
    Image.new("RGB", (4, 4)).save(root / "images" / "P0_0.png")
    with pytest.raises(DataError, match=r"P0_0\.png"):
        open_dataset(root, DataConfig(size=32))


def test_a_colour_folder_read_as_xrays_warns_once_and_grey_rgb_xrays_do_not(tmp_path: Path):
    """Colour fundus photographs whose dataset.yaml says modality: xray lose their colour: the dataset says so once
    per folder, naming a file, on the full-size and the reduced (draft-mode) decoding paths. X-rays saved as RGB
    JPEGs (three equal channels, as many exports are) are grey and read without a warning."""
    import io
    import warnings

    from medanon import make_phantom
    from medanon.data.decode import ColourReadAsGrey

    def declared_xray(folder: Path) -> Path:
        yml = folder / "dataset.yaml"
        yml.write_text(yml.read_text().replace("modality: fundus", "modality: xray"))
        return folder

    def said(folder: Path, size: int) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = open_dataset(folder, DataConfig(size=size))
            assert ds.channels == 1
            ds.tensors(progress=False)
        return [str(w.message) for w in caught if issubclass(w.category, ColourReadAsGrey)]

    fundus = declared_xray(make_phantom(tmp_path / "fundus", patients=3, per_patient=1, size=16))
    (msg,) = said(fundus, 16)
    assert "is a colour image" in msg and "modality='fundus'" in msg
    assert any(f.name in msg for f in (fundus / "images").iterdir())
    big = tmp_path / "big"                        # 512 px: decoded at 1/8 scale for a 16 px tensor
    big_rgb = declared_xray(make_phantom(big, patients=2, per_patient=1, size=16))
    for f in (big_rgb / "images").iterdir():
        Image.open(f).convert("RGB").resize((512, 512)).save(f)
    assert len(said(big_rgb, 16)) == 1
    xray = make_phantom(tmp_path / "xray", modality="xray", patients=3, per_patient=1, size=16)
    for f in (xray / "images").iterdir():
        grey = Image.open(f).convert("L").resize((512, 512))
        jpeg = io.BytesIO()                        # an RGB JPEG export of a grey image, with its rounding
        Image.merge("RGB", [grey] * 3).save(jpeg, format="JPEG", quality=90)
        Image.open(jpeg).save(f)
        assert Image.open(f).mode == "RGB"
    assert said(xray, 16) == [] and said(xray, 64) == []


def test_a_colour_file_in_an_xray_set_is_read_as_grey_not_refused(tmp_path: Path):
    """X-rays are grey: one RGBA PNG among them (the NIH download has a few) refused every command as "mixed channel
    counts" with advice for fundus sets; the modality says what to make of it, and a file in colour is named."""
    from medanon import make_phantom
    from medanon.data.decode import ColourReadAsGrey

    data = make_phantom(tmp_path / "xr", modality="xray", patients=3, per_patient=2, size=16)
    grey_rgba = sorted((data / "images").iterdir())[0]
    Image.open(grey_rgba).convert("RGBA").save(grey_rgba)           # a grey X-ray saved as RGBA: read as it is
    ds = open_dataset(data, DataConfig(size=16))
    assert ds.channels == 1 and all(ds[i]["image"].shape[0] == 1 for i in range(len(ds)))
    tinted = sorted((data / "images").iterdir())[1]
    rgb = np.asarray(Image.open(tinted).convert("RGB")).copy()
    rgb[..., 0] = 255 - rgb[..., 0]                                 # visibly in colour
    Image.fromarray(rgb).save(tinted)
    with pytest.warns(ColourReadAsGrey, match=tinted.name):
        ds = open_dataset(data, DataConfig(size=16))
        ds[1]
    assert ds.channels == 1


def test_the_folder_above_a_dataset_is_pointed_to_it(tmp_path: Path):
    """A download unpacks into a folder of its own (chexpert/CheXpert-v1.0-small/): given the folder above it, the
    error names the dataset folder inside instead of listing every layout's files alone."""
    from medanon import make_phantom

    inner = make_phantom(tmp_path / "outer" / "ph", modality="xray", patients=2, per_patient=1, size=16)
    (tmp_path / "outer" / "notes").mkdir()
    with pytest.raises(DataError, match=r"a folder in it holds a dataset \(.*ph: the medanon layout\)") as e:
        open_dataset(tmp_path / "outer")
    assert e.value.fix == f"pass that folder instead ({inner})"
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="cannot tell the layout") as e:
        open_dataset(tmp_path / "empty")
    assert "holds a dataset" not in str(e.value) and "layout=NAME" in e.value.fix
