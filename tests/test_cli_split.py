"""`medanon anonymize ... --split NAME --splits CSV`: one split is released, and evaluating that release against
the same --splits works; privacy parameters have no default on the command line."""

import csv

import pytest
from click.testing import CliRunner

import medanon
from medanon.cli import cli


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("split")
    root = medanon.make_phantom(tmp / "ph", patients=14, per_patient=2, size=16)
    res = CliRunner().invoke(cli, ["data", "split", str(root), "--out", str(tmp / "splits.csv"), "--stratify", ""])
    assert res.exit_code == 0, res.output
    with open(tmp / "splits.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return tmp, root, {r["record_id"] for r in rows if r["split"] == "train"}


@pytest.mark.parametrize("command", [["kpixel", "--k", "2"], ["snow", "--p", "0.3"], ["ldp-image", "--epsilon", "1"]])
def test_every_anonymize_command_releases_one_split(data, command):
    tmp, root, train = data
    out = tmp / f"rel-{command[0]}"
    res = CliRunner().invoke(cli, ["anonymize", *command, "--data", str(root), "--size", "16", "--split", "train",
                                   "--splits", str(tmp / "splits.csv"), "--out", str(out),
                                   "--mapping", str(tmp / f"{command[0]}.json")])
    assert res.exit_code == 0, res.output
    rel = medanon.open_dataset(root, size=16)
    import json

    mapping = json.loads((tmp / f"{command[0]}.json").read_text())
    sources = {s for rec in mapping["records"].values() for s in rec["sources"]}
    assert sources and sources <= train and len(rel) > len(train)


@pytest.mark.slow
def test_release_of_train_split_evaluates_against_the_same_splits(data):
    tmp, root, _ = data
    out = tmp / "rel-k2"
    res = CliRunner().invoke(cli, ["anonymize", "kpixel", "--data", str(root), "--size", "16", "--k", "2",
                                   "--split", "train", "--splits", str(tmp / "splits.csv"), "--out", str(out),
                                   "--mapping", str(tmp / "rel-k2.mapping.json")])
    assert res.exit_code == 0, res.output
    result = medanon.evaluate(real=root, releases=[out], splits=tmp / "splits.csv", preset="tiny", size=32,
                              progress=False)
    assert [r["name"] for r in result.releases] == ["rel-k2"] and result.summary()


def test_privacy_parameters_have_no_default_on_the_command_line(data):
    tmp, root, _ = data
    res = CliRunner().invoke(cli, ["anonymize", "kpixel", "--data", str(root), "--out", str(tmp / "no-k")])
    assert res.exit_code != 0 and "--k is required" in res.output and not (tmp / "no-k").exists()
    assert "[default: 5]" not in CliRunner().invoke(cli, ["anonymize", "kpixel", "--help"]).output
    res = CliRunner().invoke(cli, ["anonymize", "kpixel", "--data", str(root), "--out", str(tmp / "bad"),
                                   "--split", "all", "--splits", str(tmp / "splits.csv"), "--k", "2"])
    assert res.exit_code != 0 and "--splits is only used with --split" in res.output


def test_data_split_stratifies_by_the_modalitys_own_label_by_default(tmp_path):
    """The default stratified by grade, which X-ray data lack: `medanon data split XRAYS` failed unless told
    --stratify pneumonia."""
    for modality, label in (("xray", "pneumonia"), ("fundus", "grade")):
        root = medanon.make_phantom(tmp_path / modality, modality=modality, patients=8, per_patient=1, size=16)
        res = CliRunner().invoke(cli, ["data", "split", str(root), "--out", str(tmp_path / f"{modality}.csv")])
        assert res.exit_code == 0 and f"stratified by {label}" in res.output, res.output
    res = CliRunner().invoke(cli, ["data", "split", str(tmp_path / "xray"), "--stratify", "grade", "--out",
                                   str(tmp_path / "g.csv")])
    assert res.exit_code == 1 and "'grade' is not a label" in res.output          # asked for by name: refused
