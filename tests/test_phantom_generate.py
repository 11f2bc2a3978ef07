"""The phantom dataset writer: byte-level determinism, layout, and loading through the data layer."""

import csv
import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medanon.config import DataConfig, PhantomConfig
from medanon.data.dataset import open_dataset
from medanon.phantoms.generate import LABEL_COLUMNS, generate


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("modality", ["fundus", "xray"])
def test_same_seed_same_bytes_whatever_the_workers(tmp_path: Path, modality):
    cfg1 = PhantomConfig(modality=modality, patients=5, per_patient=2, size=32, seed=11, workers=1)
    cfg2 = PhantomConfig(modality=modality, patients=5, per_patient=2, size=32, seed=11, workers=2)
    a = tree_digest(generate(cfg1, tmp_path / "a", progress=False))
    b = tree_digest(generate(cfg2, tmp_path / "b", progress=False))
    assert a == b and len(a) == 5 * 2 * 2 + 4  # images + masks + labels.csv, dataset.yaml, phantom.json, marker
    c = tree_digest(generate(PhantomConfig(modality=modality, patients=5, per_patient=2, size=32, seed=12,
                                           workers=1), tmp_path / "c", progress=False))
    assert c["images/P00001_01.png"] != a["images/P00001_01.png"]


def test_layout_columns_and_masks(tmp_path: Path):
    out = generate(PhantomConfig(patients=4, per_patient=3, size=32, workers=1), tmp_path / "f", progress=False)
    rows = list(csv.DictReader((out / "labels.csv").open()))
    assert len(rows) == 12
    assert list(rows[0]) == ["image", "mask", "patient_id", "acquisition", *LABEL_COLUMNS["fundus"]]
    assert {r["patient_id"] for r in rows} == {"P00001", "P00002", "P00003", "P00004"}
    for r in rows:
        assert (out / r["image"]).exists() and (out / r["mask"]).exists()
        assert r["sex"] in ("F", "M") and r["laterality"] in ("L", "R")
        # a patient's grade, sex and laterality do not change between acquisitions
    for pid in {r["patient_id"] for r in rows}:
        mine = [r for r in rows if r["patient_id"] == pid]
        assert len({(r["grade"], r["sex"], r["laterality"], r["age"]) for r in mine}) == 1
    img = np.asarray(Image.open(out / rows[0]["image"]))
    mask = np.asarray(Image.open(out / rows[0]["mask"]))
    assert img.shape == (32, 32, 3) and mask.shape == (32, 32) and set(np.unique(mask)) <= {0, 255}


def test_phantoms_load_through_the_data_layer(tmp_path: Path):
    out = generate(PhantomConfig(modality="xray", patients=3, per_patient=2, size=32, workers=1), tmp_path / "x",
                   progress=False)
    ds = open_dataset(out, DataConfig(size=32))
    assert ds.layout == "medanon" and ds.modality == "xray" and ds.channels == 1 and len(ds) == 6
    item = ds[0]
    assert item["image"].shape == (1, 32, 32) and item["mask"].shape == (1, 32, 32)
    assert set(item["labels"]) >= {"pneumonia", "sex", "age", "situs_inversus", "marker_block"}


def test_interrupted_generation_leaves_nothing(tmp_path: Path, monkeypatch):
    import medanon.phantoms.generate as gen

    calls = {"n": 0}
    real = gen._png_bytes

    def failing(a):
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return real(a)

    monkeypatch.setattr(gen, "_png_bytes", failing)
    with pytest.raises(KeyboardInterrupt):
        generate(PhantomConfig(patients=3, per_patient=2, size=16, workers=1), tmp_path / "out", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    """A failed write names no file in Python's error ("No space left on device"); the phantom's now does, and the
    half-written folder is gone."""
    import errno

    from click.testing import CliRunner

    from medanon.cli import cli

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    out = tmp_path / "ph"
    r = CliRunner().invoke(cli, ["phantom", "--patients", "2", "--per-patient", "1", "--size", "16", "--workers", "1",
                                 "--out", str(out)])
    assert r.exit_code == 1 and "No space left on device" in r.output
    assert "the operating system refused " in r.output and ".png: No space" in r.output
    assert not out.exists() and list(tmp_path.iterdir()) == []
