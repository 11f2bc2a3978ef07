"""Reading chest X-rays by view: ``xray_views=`` keeps some, and a folder mixing laterals in is named in a warning."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

import medanon
from medanon.cli import cli
from medanon.data.views import LateralViews, parse_views
from medanon.errors import ConfigError, DataError


def _with_views(tmp_path: Path, views: list[str]) -> Path:
    """An X-ray phantom whose images carry ``views`` in turn (the phantoms are PA: the labels are rewritten)."""
    root = medanon.make_phantom(tmp_path / "xr", modality="xray", patients=3, per_patient=2, size=16)
    rows = list(csv.DictReader((root / "labels.csv").open()))
    for i, row in enumerate(rows):
        row["view"] = views[i % len(views)]
    with (root / "labels.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return root


def test_views_select_and_every_image_is_read_by_default_with_a_warning(tmp_path):
    root = _with_views(tmp_path, ["PA", "LATERAL", "AP"])
    with pytest.warns(LateralViews, match=r"2 of the 6 images of .* are lateral views.*xray_views='frontal'"):
        assert len(medanon.open_dataset(root, size=16)) == 6
    frontal = medanon.open_dataset(root, size=16, xray_views="frontal")
    assert len(frontal) == 4 and frontal.read_options.xray_views == "frontal"
    assert {int(r.labels["view"]) for r in frontal.records} == {0, 1}                # PA and AP
    assert len(medanon.open_dataset(root, size=16, xray_views="pa")) == 2
    with pytest.raises(DataError, match="leaves no image"):
        medanon.open_dataset(root, size=16, xray_views="LL")


def test_frontal_keeps_images_whose_view_is_not_recorded_a_list_does_not(tmp_path):
    root = _with_views(tmp_path, ["", "LL"])
    assert len(medanon.open_dataset(root, size=16, xray_views="frontal")) == 3
    with pytest.raises(DataError, match=r"leaves no image .*unknown 3"):
        medanon.open_dataset(root, size=16, xray_views="PA,AP")


def test_an_unknown_view_is_refused_by_name():
    assert parse_views("") is None and parse_views(" PA , ap ") == {"PA", "AP"}
    with pytest.raises(ConfigError, match="names 'SIDE'"):
        parse_views("PA,side")
    with pytest.raises(ConfigError, match="xray_views="):
        medanon.open_dataset(".", xray_views="upright")


def test_the_cli_reads_views_in_every_data_command(tmp_path):
    root = _with_views(tmp_path, ["PA", "LATERAL"])
    r = CliRunner().invoke(cli, ["data", "summary", str(root), "--xray-views", "frontal"])
    assert r.exit_code == 0 and "images    3" in r.output, r.output
    r = CliRunner().invoke(cli, ["data", "split", str(root), "--xray-views", "frontal", "--out",
                                 str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    assert len((tmp_path / "s.csv").read_text().strip().splitlines()) == 1 + 3
    r = CliRunner().invoke(cli, ["data", "summary", str(root), "--xray-views", "top"])
    assert r.exit_code != 0 and "--xray-views frontal" in r.output and "Traceback" not in r.output
    # the split of the frontal views read without them: the laterals are named, with the flag that leaves them out
    r = CliRunner().invoke(cli, ["anonymize", "snow", str(root), "--p", "0.3", "--split", "train", "--splits",
                                 str(tmp_path / "s.csv"), "--out", str(tmp_path / "rel")])
    assert r.exit_code != 0 and "3 image(s) of the dataset are not in" in r.output, r.output
    assert "(all of them LATERAL views)" in r.output and "--xray-views frontal" in r.output, r.output
    assert "- P00001_02.png" in r.output, r.output


def test_a_release_records_the_views_it_was_made_from_and_the_evaluation_compares(tmp_path):
    from types import SimpleNamespace

    from medanon.evaluate.setting_notes import views_notes
    from medanon.release import read_release

    root = _with_views(tmp_path, ["PA", "LATERAL"])
    ds = medanon.open_dataset(root, size=16, xray_views="frontal")
    out = medanon.anonymize.snow(ds, p=0.3).save(tmp_path / "rel")
    manifest, rows = read_release(out)
    assert manifest["params"]["xray_views"] == "frontal" and len(rows) == 3
    whole = medanon.anonymize.snow(medanon.open_dataset(root, size=16, xray_views="PA,AP,LATERAL"), p=0.3)
    whole.save(tmp_path / "rel2")
    assert read_release(tmp_path / "rel2")[0]["params"]["xray_views"] == "AP,LATERAL,PA"
    rel = SimpleNamespace(name="rel", manifest=manifest)
    assert views_notes("frontal", [rel]) == []
    said = views_notes("", [rel])
    assert len(said) == 1 and "made from the images of xray_views='frontal'" in said[0]
    assert "--xray-views frontal on the command line" in said[0]
    spelled = SimpleNamespace(name="r", manifest={"params": {"xray_views": "AP,PA"}})
    assert views_notes("pa, ap", [spelled]) == []                     # one setting, however spelled


def test_the_summary_names_the_tables_read_and_the_views(tmp_path):
    root = _with_views(tmp_path, ["PA", "LATERAL"])
    r = CliRunner().invoke(cli, ["data", "summary", str(root), "--xray-views", "PA"])
    assert r.exit_code == 0 and "read from labels.csv" in r.output and ", X-ray views PA" in r.output, r.output


def test_a_generator_trains_on_the_views_asked_for(tmp_path, caplog):
    """`train gan` reads its data like every other command (--xray-views, layouts, --skip-bad); its messages
    name the flags it has."""
    import torch

    config = Path(__file__).resolve().parents[1] / "configs" / "stylegan" / "tiny32.yaml"
    root = _with_views(tmp_path, ["PA", "LATERAL"])
    run = tmp_path / "gan"
    base = ["train", "gan", str(root), "--config", str(config), "--set", "resolution=16", "--set", "channels=1",
            "--steps", "1", "--checkpoint-every", "1"]
    r = CliRunner().invoke(cli, [*base, "--xray-views", "frontal", "--out", str(run)])
    assert r.exit_code == 0, r.output
    blob = torch.load(run / "checkpoint.pt", weights_only=True)
    assert blob["extra"]["training_images"]["count"] == 3                    # the laterals left out
    import json

    data = json.loads((run / "manifest.json").read_text())["inputs"]["data"]  # the run names its data
    assert data["path"] == str(root) and data["images"] == 3 and data["reading"]["xray_views"] == "frontal", data
    r = CliRunner().invoke(cli, [*base, "--steps", "2", "--resume", "--out", str(run)])   # every view: other images
    assert r.exit_code != 0 and "data.reading.xray_views 'frontal' -> None" in r.output, r.output
    r = CliRunner().invoke(cli, [*base, "--split", "train", "--out", str(tmp_path / "g4")])   # one split only
    assert r.exit_code == 0, r.output
    train = medanon.split_dataset(medanon.open_dataset(root, size=16))["train"]
    assert torch.load(tmp_path / "g4" / "checkpoint.pt", weights_only=True)["extra"]["training_images"]["count"] \
        == len(train) < 6
    split = json.loads((tmp_path / "g4" / "manifest.json").read_text())["inputs"]["split"]
    assert split == {"split": "train", "recomputed_with_seed": 0}
    # its resume without --split: the split named as what changed, before any image is decoded
    r = CliRunner().invoke(cli, [*base, "--steps", "2", "--resume", "--out", str(tmp_path / "g4")])
    assert r.exit_code != 0 and "trained on other data than this resume reads" in r.output, r.output
    assert "split {'recomputed_with_seed': 0, 'split': 'train'} -> None" in r.output, r.output
    r = CliRunner().invoke(cli, [*base, "--size", "32", "--out", str(tmp_path / "g2")])
    assert r.exit_code != 0 and "--set resolution=32" in r.output and "Traceback" not in r.output, r.output
    with caplog.at_level("WARNING"):
        r = CliRunner().invoke(cli, [*base, "--out", str(tmp_path / "g3")])         # laterals named in its words
    assert r.exit_code == 0 and "--xray-views frontal" in caplog.text and "xray_views=" not in caplog.text, \
        caplog.text


def test_a_resume_reads_the_splits_file_by_content_not_by_its_path(tmp_path, monkeypatch):
    import shutil

    config = Path(__file__).resolve().parents[1] / "configs" / "stylegan" / "tiny32.yaml"
    root = _with_views(tmp_path, ["PA"])
    assert CliRunner().invoke(cli, ["data", "split", str(root), "--out", str(tmp_path / "s.csv")]).exit_code == 0
    base = ["train", "gan", str(root), "--config", str(config), "--set", "resolution=16", "--set", "channels=1",
            "--checkpoint-every", "1", "--split", "train", "--out", str(tmp_path / "g")]
    r = CliRunner().invoke(cli, [*base, "--steps", "1", "--splits", str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    shutil.copy(tmp_path / "s.csv", tmp_path / "moved.csv")           # the same file, elsewhere and relative
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, [*base, "--steps", "2", "--resume", "--splits", "moved.csv"])
    assert r.exit_code == 0, r.output


def test_views_given_for_fundus_photographs_are_said_to_change_nothing(tmp_path):
    from medanon.data.layouts import LayoutWarning

    root = medanon.make_phantom(tmp_path / "f", modality="fundus", patients=2, per_patient=1, size=16)
    with pytest.warns(LayoutWarning, match=r"xray_views='frontal' is given for .* fundus photographs"):
        assert len(medanon.open_dataset(root, size=16, xray_views="frontal")) == 2
