"""The command line, end to end on tiny phantoms (as a user would run it)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from medanon.cli import cli


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


@pytest.mark.parametrize("modality", ["fundus", "xray"])
def test_phantom_then_summary(tmp_path: Path, runner, modality):
    out = tmp_path / modality
    r = runner.invoke(cli, ["phantom", "--modality", modality, "--patients", "6", "--per-patient", "2",
                            "--size", "32", "--out", str(out), "--workers", "1"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["data", "summary", str(out), "--size", "32", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["images"] == 12 and s["patients"] == 6 and s["layout"] == "medanon" and s["modality"] == modality
    assert s["images_per_patient"] == {"min": 2, "mean": 2.0, "max": 2}
    assert s["source_sizes"] == {"32x32": 12}
    key = "grade" if modality == "fundus" else "pneumonia"
    assert sum(s["labels"][key]["counts"].values()) == 12
    assert sum(s["labels"]["sex"]["counts"].values()) == 12
    r = runner.invoke(cli, ["data", "summary", str(out), "--size", "32"])
    assert r.exit_code == 0 and "patients 6" in r.output


def test_phantom_refuses_existing_output(tmp_path: Path, runner):
    out = tmp_path / "p"
    args = ["phantom", "--patients", "2", "--per-patient", "1", "--size", "16", "--out", str(out), "--workers", "1"]
    assert runner.invoke(cli, args).exit_code == 0
    r = runner.invoke(cli, args)
    assert r.exit_code == 1 and "already exists" in r.output and "--overwrite" in r.output
    assert runner.invoke(cli, [*args, "--overwrite"]).exit_code == 0


def test_split_command(tmp_path: Path, runner):
    out = tmp_path / "p"
    runner.invoke(cli, ["phantom", "--patients", "20", "--per-patient", "2", "--size", "16", "--out", str(out),
                        "--workers", "1"])
    r = runner.invoke(cli, ["data", "split", str(out), "--size", "16", "--out", str(tmp_path / "s.csv"),
                            "--stratify", "grade", "--test", "0.2", "--val", "0.2"])
    assert r.exit_code == 0, r.output
    rows = [line.split(",") for line in (tmp_path / "s.csv").read_text().splitlines()[1:]]
    assert len(rows) == 40
    owner = {}
    for _, patient, split, size in rows:
        assert owner.setdefault(patient, split) == split and int(size) > 0
    r = runner.invoke(cli, ["data", "split", str(out), "--size", "16", "--out", str(tmp_path / "t.csv"),
                            "--stratify", "nonsense"])
    assert r.exit_code == 1 and "nonsense" in r.output


@pytest.mark.parametrize("args, fragment", [
    (["data", "summary", "{tmp}/nowhere"], "does not exist"),
    (["data", "summary", "{tmp}/empty"], "empty"),
    (["data", "summary", "{tmp}/empty", "--size", "100"], "power of two"),
    (["phantom", "--out", "{tmp}/x", "--size", "8"], "8"),
    (["data", "summary", "{tmp}/empty", "--image-col", "x"], "--labels"),
    (["--device", "tpu", "demo", "--out", "{tmp}/demo"], "tpu"),
])
def test_bad_arguments_give_clear_errors(tmp_path: Path, runner, args, fragment):
    (tmp_path / "empty").mkdir()
    r = runner.invoke(cli, [a.format(tmp=tmp_path) for a in args])
    assert r.exit_code != 0
    assert fragment in r.output
    assert "Traceback" not in r.output


def test_demo_runs_and_resumes(tmp_path: Path, runner, monkeypatch):
    monkeypatch.chdir(tmp_path)                 # a relative --out, as the Makefile passes it
    out = Path("demo")
    # the evaluation has its own tests and takes minutes: here, the pipeline and its audits
    args = ["demo", "--out", str(out), "--patients", "40", "--per-patient", "2", "--ksalsa-steps", "2",
            "--gmia-steps", "2", "--skip-evaluation"]
    r = runner.invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert "PHANTOM" in r.output
    # the library's warnings speak the flags of the command the demo prints beside them
    assert "(--basis-from DIR)" in r.output and "pca_basis=" not in r.output
    for f in ("config.yaml", "manifest.json", "metrics.jsonl", "summary.json", "splits_fundus.csv",
              "splits_xray.csv", "releases/kpixel-k10/labels.csv", "releases/snow-p0.5/labels.csv",
              "releases/dpglow-eps1e1/labels.csv", "releases/ksalsa-k5/labels.csv", "releases/inverted/labels.csv",
              "releases/gmia/labels.csv",
              "releases/gmia-xray/labels.csv"):
        assert (out / f).exists(), f
    def params(rel: str) -> dict:
        return json.loads((out / "releases" / rel / "manifest.json").read_text())["params"]

    for rel in ("ksalsa-k5", "inverted"):                        # the shipped codecs with a spatial latent map
        assert params(rel)["codec"]["latent_space"] == "ws+map", rel
        assert params(rel)["codec"]["iterations"] == 2, rel                 # k-SALSA's kind: a ReStyle encoder
    for rel in ("gmia", "gmia-xray"):
        assert "spatial map (not in the paper) is optimised" in params(rel)["latent_space"], rel
    assert json.loads((out / "releases" / "inverted" / "manifest.json").read_text())["privacy"]["guarantee"] \
        .startswith("none")
    # the demo's X-ray patients are the first patients of the phantom the shipped flow was trained on: checked
    # image by image against that folder, so DP-GLOW's release states no guarantee; image LDP (no flow) keeps it
    dp = json.loads((out / "releases" / "dpglow-eps1e1" / "manifest.json").read_text())["privacy"]
    assert dp["guarantee"].endswith("released images are in the folder the flow was trained on"), dp["guarantee"]
    ldp = json.loads((out / "releases" / "ldp-image-eps1e1" / "manifest.json").read_text())["privacy"]
    assert ldp["guarantee"] == "epsilon-LDP"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seeds"]["phantoms"] == 0 and manifest["inputs"]["fundus_phantom"]["files"] == 80
    assert "PASSED" in r.output and "FAILED" not in r.output          # every release passed its audit
    # where the time went: each release made, and the audits, per modality
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    made = {r["modality"]: r["release_seconds"] for r in rows if r.get("step") == "anonymise"}
    assert set(made["fundus"]) >= {"kpixel-k2", "ksalsa-k10", "gmia", "vs-snow-p0.5"}, made
    assert set(made["xray"]) >= {"dpglow-eps1e1", "gmia-xray"}, made
    assert all(v > 0 for m in made.values() for v in m.values())
    assert {r["modality"] for r in rows if r.get("step") == "audit"} == {"fundus", "xray"}
    before = (out / "data" / "fundus" / "labels.csv").stat().st_mtime_ns
    r = runner.invoke(cli, args)
    assert r.exit_code == 0 and "(done already)" in r.output and "made again" not in r.output
    assert (out / "data" / "fundus" / "labels.csv").stat().st_mtime_ns == before  # reused, not regenerated
    assert set(json.loads((out / "releases.json").read_text())) == {"fundus", "xray"}   # what they were made with


def test_dataset_folder_positional_or_data_option(tmp_path: Path, runner):
    data = tmp_path / "p"
    assert runner.invoke(cli, ["phantom", "--patients", "3", "--per-patient", "1", "--size", "32", "--out", str(data),
                               "--workers", "1"]).exit_code == 0
    common = ["--p", "0.3", "--seed", "0", "--size", "32"]
    r1 = runner.invoke(cli, ["anonymize", "snow", str(data), *common, "--out", str(tmp_path / "a")])
    r2 = runner.invoke(cli, ["anonymize", "snow", "--data", str(data), *common, "--out", str(tmp_path / "b")])
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output

    def pixels(rel: Path) -> list[bytes]:
        return sorted(p.read_bytes() for p in rel.rglob("*.png"))

    assert len(pixels(tmp_path / "a")) == 3 and pixels(tmp_path / "a") == pixels(tmp_path / "b")
    r = runner.invoke(cli, ["anonymize", "snow", str(data), "--data", str(tmp_path), *common, "--out", "x"])
    assert r.exit_code == 2 and "given twice" in r.output
    r = runner.invoke(cli, ["anonymize", "kpixel", "--k", "2", "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "--data DIR" in r.output


def test_gmia_takes_the_data_as_its_first_argument_and_the_shipped_networks_by_default(tmp_path: Path, runner):
    """Like every other command: `anonymize gmia DIR` with no --model/--identity/--utility uses the modality's
    shipped codec, E_id and E_ut (`medanon models` marks them) and says which."""
    data = tmp_path / "f"
    assert runner.invoke(cli, ["phantom", "--patients", "2", "--per-patient", "1", "--size", "64", "--out", str(data),
                               "--workers", "1"]).exit_code == 0
    r = runner.invoke(cli, ["--device", "cpu", "anonymize", "gmia", str(data), "--steps", "1", "--out",
                            str(tmp_path / "g")])
    assert r.exit_code == 0, r.output
    for flag, name in (("--model", "cotrained-map-fundus64.pt"), ("--identity", "identity-fundus64.pt"),
                       ("--utility", "classifier-grade-fundus64.pt")):
        assert f"{flag}: {name}, the shipped" in r.output
    assert len(list((tmp_path / "g" / "images").rglob("*.png"))) == 2
    r = runner.invoke(cli, ["anonymize", "gmia", str(tmp_path / "missing"), "--out", str(tmp_path / "g2")])
    assert r.exit_code != 0 and "does not exist" in r.output and "ships no" not in r.output
