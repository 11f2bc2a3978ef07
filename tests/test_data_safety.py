"""Inputs that must never crash or be misread: decompression bombs, symlinks and paths that leave the
dataset, corrupt pixels under skip_bad, folders named like images, implausible continuous labels."""

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medanon.config import DataConfig
from medanon.data import imageio
from medanon.data.dataset import open_dataset
from medanon.data.labels import spec
from medanon.data.layouts import GenericOptions, scan
from medanon.errors import DataError
from medanon.runtime import files_digest


def png_claiming(path: Path, width: int, height: int) -> Path:
    """A tiny, valid-looking PNG whose header claims ``width`` x ``height`` 1-bit pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) +
                     chunk(b"IEND", b""))
    return path


def write_png(path: Path, seed: int = 0, size: int = 24) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    a = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(a).save(path)
    return path


def generic_dataset(root: Path, cells: list[str], *, n_images: int = 3) -> GenericOptions:
    """root/images/{0..n}.png plus labels.csv whose image column holds ``cells``."""
    for i in range(n_images):
        write_png(root / "images" / f"{i}.png", i)
    (root / "labels.csv").write_text("file,patient,age\n" + "".join(f"{c},p{i},{40 + i}\n"
                                                                   for i, c in enumerate(cells)))
    return GenericOptions(labels_csv=root / "labels.csv", image_col="file", patient_col="patient",
                          label_cols=("age",))


@pytest.mark.parametrize("w,h", [(20000, 20000), (60000, 60000), (9000, 9000)])
def test_decompression_bombs_are_named_bad_files(tmp_path: Path, w: int, h: int):
    bomb = png_claiming(tmp_path / "bomb.png", w, h)
    assert bomb.stat().st_size < 100
    for read in (imageio.probe, imageio.read):
        with pytest.raises(imageio.TooLarge, match=r"bomb\.png") as e:
            read(bomb)
        assert "raise max_pixels" in str(e.value) and "skip_bad=True" in str(e.value)
        assert f"{w * h:,}" in str(e.value)


def test_max_pixels_limits_and_allows(tmp_path: Path):
    img = write_png(tmp_path / "a.png", size=24)
    with pytest.raises(imageio.TooLarge, match="576"):
        imageio.read(img, max_pixels=500)
    assert imageio.read(img, max_pixels=576).shape == (24, 24, 3)


def test_bomb_in_a_dataset_fails_then_is_skipped(tmp_path: Path):
    generic = generic_dataset(tmp_path, ["images/0.png", "images/1.png", "images/bomb.png"], n_images=2)
    png_claiming(tmp_path / "images" / "bomb.png", 20000, 20000)
    with pytest.raises(DataError, match="1 large") as e:
        open_dataset(tmp_path, DataConfig(size=16), generic=generic)
    assert "bomb.png" in str(e.value) and "max_pixels" in str(e.value)
    ds = open_dataset(tmp_path, DataConfig(size=16, skip_bad=True), generic=generic)
    assert len(ds) == 2 and [p.kind for p in ds.skipped] == ["large"]


def test_an_image_this_user_may_not_read_is_not_called_corrupt(tmp_path: Path, monkeypatch):
    """chmod 000 on one image gave "not a recognised image ([Errno 13] Permission denied)" and the fix "replace the
    corrupt file". (Simulated: the suite may run as root, whom no mode stops.)"""
    generic = generic_dataset(tmp_path, [f"images/{i}.png" for i in range(3)])
    opened = Image.open

    def open_(path, *a, **k):
        if Path(path).name == "1.png":
            raise PermissionError(13, "Permission denied", str(path))
        return opened(path, *a, **k)

    monkeypatch.setattr(imageio.Image, "open", open_)
    with pytest.raises(DataError) as e:
        open_dataset(tmp_path, DataConfig(size=16), generic=generic)
    text = str(e.value)
    assert "1.png: denied (permission denied)" in text and "make the file readable" in text and "corrupt" not in text
    assert len(open_dataset(tmp_path, DataConfig(size=16, skip_bad=True), generic=generic)) == 2


def test_corrupt_pixels_are_skipped_with_skip_bad(tmp_path: Path):
    generic = generic_dataset(tmp_path, [f"images/{i}.png" for i in range(3)])
    big = write_png(tmp_path / "images" / "2.png", 2, size=64)
    data = big.read_bytes()
    big.write_bytes(data[: len(data) // 2])           # header fine, pixels truncated
    ds = open_dataset(tmp_path, DataConfig(size=16), generic=generic)
    with pytest.raises(DataError, match=r"2\.png") as e:
        ds.tensors(progress=False)
    assert "skip_bad=True" in str(e.value)
    ds = open_dataset(tmp_path, DataConfig(size=16, skip_bad=True), generic=generic)
    assert len(ds) == 2 and [Path(p.path).name for p in ds.skipped] == ["2.png"]
    images, _ = ds.tensors(progress=False)
    assert images.shape == (2, 3, 16, 16)


def test_paths_escaping_the_dataset_are_refused_unless_allowed(tmp_path: Path):
    root = tmp_path / "ds"
    outside = write_png(tmp_path / "elsewhere" / "x.png", 7)
    write_png(tmp_path / "y.png", 8)                        # the parent's own images are not the dataset's
    other = write_png(tmp_path / "elsewhere" / "z.png", 9)
    generic = generic_dataset(root, ["images/0.png", "../elsewhere/x.png", str(other)], n_images=1)
    sc = scan(root, generic=generic)
    assert [r.path.name for r in sc.records] == ["0.png"]
    kinds = sorted((p.kind, p.path) for p in sc.problems)
    assert kinds == [("outside", "../elsewhere/x.png"), ("outside", "../elsewhere/z.png")]
    assert not [p for p in sc.problems if p.kind == "unlabelled"]
    with pytest.raises(DataError, match="outside") as e:
        open_dataset(root, DataConfig(size=16), generic=generic)
    assert "allow_outside=True" in str(e.value)
    # allowed: read, and the run's input digest names the file as the dataset does (no ValueError)
    ds = open_dataset(root, DataConfig(size=16), generic=generic, allow_outside=True)
    assert sorted(r.path.name for r in ds.records) == ["0.png", "x.png", "z.png"]
    dig = files_digest([r.path for r in ds.records], root=root)
    assert dig["files"] == 3 and len(dig["sha256"]) == 64
    assert outside.read_bytes()                             # nothing was touched


def test_one_file_named_two_ways_is_one_image(tmp_path: Path):
    generic = generic_dataset(tmp_path, ["images/0.png", "images/../images/0.png"], n_images=1)
    sc = scan(tmp_path, generic=generic)
    assert [r.path.name for r in sc.records] == []           # p0 and p1 claim the same image: a label conflict
    assert [p.kind for p in sc.problems] == ["label"] and "disagree" in sc.problems[0].detail


def test_symlinks_inside_are_followed_outside_refused(tmp_path: Path):
    root = tmp_path / "aptos"
    real = root / "store"
    for i in range(2):
        write_png(real / f"id{i}.png", i)
    (root / "train_images").symlink_to(real, target_is_directory=True)        # a linked folder inside
    (root / "train.csv").write_text("id_code,diagnosis\nid0,0\nid1,1\nid2,2\n")
    pacs = write_png(tmp_path / "pacs" / "id2.png", 2)
    (real / "id2.png").symlink_to(pacs)                                       # a linked file leading out
    sc = scan(root)
    assert sorted(r.path.name for r in sc.records) == ["id0.png", "id1.png"]
    assert [(p.kind, p.path) for p in sc.problems] == [("outside", "train_images/id2.png")]
    assert "symlink" in sc.problems[0].detail
    ds = open_dataset(root, DataConfig(size=16), allow_outside=True)
    assert len(ds) == 3
    dig = files_digest([r.path for r in ds.records], root=root)
    assert dig["files"] == 3
    # the digest names files by their dataset path, and hashes the content they lead to
    pacs.write_bytes(write_png(tmp_path / "other.png", 99).read_bytes())
    assert files_digest([r.path for r in ds.records], root=root)["sha256"] != dig["sha256"]


def test_folder_named_like_an_image_is_not_reported_missing(tmp_path: Path):
    generic = generic_dataset(tmp_path, ["images/0.png", "images/x.png"], n_images=1)
    (tmp_path / "images" / "x.png").mkdir()
    sc = scan(tmp_path, generic=generic)
    (p,) = sc.problems
    assert p.kind == "unreadable" and "is a folder, not an image file" in p.detail
    with pytest.raises(DataError, match="is a folder"):
        imageio.read(tmp_path / "images" / "x.png")


@pytest.mark.parametrize("raw", ["-5", "inf", "-inf", "131"])
def test_implausible_ages_are_label_errors(raw: str):
    with pytest.raises(ValueError, match="age"):
        spec("age").encode(raw)


def test_bad_age_row_is_named_and_skippable(tmp_path: Path):
    generic = generic_dataset(tmp_path, ["images/0.png", "images/1.png"], n_images=2)
    (tmp_path / "labels.csv").write_text("file,patient,age\nimages/0.png,p0,40\nimages/1.png,p1,-5\n")
    sc = scan(tmp_path, generic=generic)
    (p,) = sc.problems
    assert p.kind == "label" and "row 3" in p.detail and "'age'" in p.detail
    assert spec("age").encode("0") == 0.0 and spec("age").encode("") != spec("age").encode("")   # nan


def test_a_symlinked_dataset_folder_is_read_as_itself(tmp_path: Path):
    real = tmp_path / "mnt" / "export"
    generic = generic_dataset(real, ["images/0.png", "images/1.png"], n_images=2)
    link = tmp_path / "ds"
    link.symlink_to(real, target_is_directory=True)
    ds = open_dataset(link, DataConfig(size=16), generic=GenericOptions(**{**generic.__dict__,
                                                                          "labels_csv": link / "labels.csv"}))
    assert len(ds) == 2 and not ds.skipped
    assert files_digest([r.path for r in ds.records], root=link) == \
        files_digest([real / "images" / f"{i}.png" for i in range(2)], root=real)


def test_pickled_checkpoint_refusal_says_why_and_never_advises_unsafe_loading(tmp_path: Path):
    import torch

    from medanon.checkpoint import load_checkpoint
    from medanon.errors import ConfigError

    torch.save({"format": "medanon-checkpoint", "obj": object()}, tmp_path / "pickled.pt")
    with pytest.raises(ConfigError) as e:
        load_checkpoint(tmp_path / "pickled.pt")
    text = str(e.value)
    assert "arbitrary code execution" in text and "pickled.pt" in text
    assert "weights_only=False" not in text and "re-run" not in text.lower()
