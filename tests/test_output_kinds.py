"""A run writes only into its own folder and a trainer replaces only a model of its own kind: a release, a phantom
or another command's run is never written into, and a checkpoint is never replaced by another kind of model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_output_safety import _tree_digest

from medanon import make_phantom
from medanon.checkpoint import save_checkpoint
from medanon.cli import cli
from medanon.outputs import UnsafeOutputError, check_output, check_run_folder
from medanon.runtime import RunDir

TINY = Path(__file__).resolve().parents[1] / "configs" / "stylegan" / "tiny32.yaml"


@pytest.fixture
def release(tmp_path) -> Path:
    rel = tmp_path / "release"
    (rel / "images").mkdir(parents=True)
    (rel / "manifest.json").write_text(json.dumps({"format": "medanon-release", "privacy": {"k": 5}}))
    (rel / "labels.csv").write_text("image,grade\n")
    return rel


def test_a_run_never_writes_into_a_release_a_phantom_or_another_commands_run(tmp_path, release):
    data = make_phantom(tmp_path / "fundus", patients=2, per_patient=1, size=16)
    for folder in (release, data):
        before = _tree_digest(folder)
        with pytest.raises(UnsafeOutputError, match="a run writes only into its own folder"):
            RunDir(folder, config={"a": 1}, command="train flow", seeds={})
        assert _tree_digest(folder) == before
    run = RunDir(tmp_path / "gan-run", config={"a": 1}, command="medanon train gan", seeds={})
    run.finish()
    with pytest.raises(UnsafeOutputError, match="holds a run of train gan, not of evaluate"):
        check_run_folder(tmp_path / "gan-run", "evaluate")
    check_run_folder(tmp_path / "gan-run", "train gan")      # the CLI's and the library's names are one command
    RunDir(tmp_path / "gan-run", config={"a": 1}, command="train gan", seeds={}).finish()


def test_cli_trainers_refuse_a_release_as_their_run_folder(tmp_path, release):
    data = make_phantom(tmp_path / "fundus", patients=2, per_patient=2, size=32)
    before = _tree_digest(release)
    r = CliRunner().invoke(cli, ["train", "gan", "--data", str(data), "--config", str(TINY),
                                 "--steps", "1", "--out", str(release)])
    assert r.exit_code != 0 and "release folder, not a run folder" in r.output, r.output
    assert _tree_digest(release) == before


@pytest.mark.parametrize("held, wanted", [("identity", "classifier"), ("glow", "stylegan2"),
                                          ("stylegan2", "vessel-segmenter")])
def test_a_checkpoint_is_never_replaced_by_another_kind_of_model(tmp_path, held, wanted):
    path = save_checkpoint(tmp_path / "model.pt", kind=held, config={}, state={})
    before = path.read_bytes()
    for existing_ok, overwrite in ((True, False), (False, True)):
        with pytest.raises(UnsafeOutputError, match=f"is a medanon {held} checkpoint, not a {wanted} one"):
            check_output(path, kind="file", name="out", what=f"checkpoint:{wanted}", existing_ok=existing_ok,
                         overwrite=overwrite)
    assert path.read_bytes() == before
    check_output(path, kind="file", name="out", what=f"checkpoint:{held}", existing_ok=True)


def test_cli_trainers_check_the_kind_of_the_model_they_would_replace(tmp_path):
    data = make_phantom(tmp_path / "fundus", patients=2, per_patient=2, size=32)
    flow = save_checkpoint(tmp_path / "glow.pt", kind="glow", config={}, state={})
    ident = save_checkpoint(tmp_path / "identity.pt", kind="identity", config={}, state={})
    before = {p: p.read_bytes() for p in (flow, ident)}
    runs = [["train", "classifier", "--data", str(data), "--label", "grade", "--steps", "1", "--out", str(ident),
             "--overwrite"],
            ["train", "identity", "--data", str(data), "--steps", "1", "--out", str(flow)],
            ["train", "gan", "--data", str(data), "--config", str(TINY), "--steps", "1",
             "--out", str(tmp_path / "run"), "--resume", "--export", str(flow)]]
    for args in runs:
        r = CliRunner().invoke(cli, args)
        assert r.exit_code != 0 and "never replaced by another kind of model" in r.output, (args, r.output)
    assert {p: p.read_bytes() for p in before} == before


def test_overwrite_spares_a_release_file_edited_since(tmp_path):
    import medanon

    data = make_phantom(tmp_path / "fundus", patients=3, per_patient=1, size=16)
    out = tmp_path / "release"
    medanon.anonymize.snow(data, p=0.3).save(out, progress=False)
    with open(out / "labels.csv", "a") as f:
        f.write("# my note\n")
    with pytest.raises(UnsafeOutputError, match=r"labels\.csv, which medanon did not write there"):
        medanon.anonymize.snow(data, p=0.3).save(out, overwrite=True, progress=False)
    assert (out / "labels.csv").read_text().endswith("# my note\n")


def test_an_evaluation_refused_for_its_inputs_leaves_no_output(tmp_path):
    data = make_phantom(tmp_path / "fundus", patients=3, per_patient=1, size=16)
    r = CliRunner().invoke(cli, ["evaluate", "--real", str(data), "--release", str(data), "--out",
                                 str(tmp_path / "report"), "--preset", "tiny", "--no-inception"])
    assert r.exit_code != 0 and "not a medanon release" in r.output, r.output
    assert not (tmp_path / "report").exists()


def test_a_demo_too_small_for_its_k_is_refused_before_any_work(tmp_path):
    from medanon.demo import run_demo
    from medanon.errors import ConfigError

    r = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path / "d"), "--patients", "5", "--skip-evaluation"])
    assert r.exit_code == 2 and "x>=20" in r.output, r.output                 # --help's range
    r = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path / "d"), "--patients", "25"])
    assert r.exit_code == 1 and "at least 30 patients" in r.output and "--patients 30" in r.output, r.output
    with pytest.raises(ConfigError, match="at least 20 patients"):
        run_demo(tmp_path / "d", patients=5, evaluation=False)
    assert not (tmp_path / "d").exists()


def test_resuming_a_run_that_does_not_exist_says_so(tmp_path):
    data = make_phantom(tmp_path / "fundus", patients=2, per_patient=2, size=32)
    r = CliRunner().invoke(cli, ["train", "gan", "--data", str(data), "--config", str(TINY), "--steps", "1",
                                 "--out", str(tmp_path / "new"), "--resume"])
    assert r.exit_code != 0 and "holds no training run to resume" in r.output and "without --resume" in r.output
    assert not (tmp_path / "new").exists()


def test_a_finished_classifier_is_replaced_only_with_overwrite(tmp_path):
    data = make_phantom(tmp_path / "fundus", patients=4, per_patient=2, size=32)
    out = tmp_path / "grade.pt"
    args = ["train", "classifier", "--data", str(data), "--label", "grade", "--steps", "1", "--split", "all",
            "--out", str(out)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    before = out.read_bytes()
    r = CliRunner().invoke(cli, [*args, "--seed", "1"])
    assert r.exit_code != 0 and "already exists" in r.output and "--overwrite" in r.output, r.output
    assert out.read_bytes() == before
    assert CliRunner().invoke(cli, [*args, "--seed", "1", "--overwrite"]).exit_code == 0
    assert out.read_bytes() != before


def test_a_resumed_run_replaces_only_its_own_export(tmp_path):
    """--resume --export replaces the file only when this run exported it (by content): never another run's export
    of the same kind, nor this run's export edited since."""
    data = make_phantom(tmp_path / "fundus", patients=2, per_patient=2, size=32)

    def gan(run: str, export: Path, steps: int, *resume: str):
        return CliRunner().invoke(cli, ["train", "gan", "--data", str(data), "--config", str(TINY), "--steps",
                                        str(steps), "--out", str(tmp_path / run), "--export", str(export), *resume])

    mine, theirs = tmp_path / "mine.pt", tmp_path / "theirs.pt"
    for run, export in (("a", mine), ("b", theirs)):
        r = gan(run, export, 1)
        assert r.exit_code == 0, r.output
    before = theirs.read_bytes()
    r = gan("a", theirs, 2, "--resume")
    assert r.exit_code != 0 and "is not an export of the run in" in r.output and "Traceback" not in r.output, r.output
    assert theirs.read_bytes() == before
    backup = tmp_path / "backup.pt"                                    # a copy of the run's export, elsewhere
    backup.write_bytes(mine.read_bytes())
    r = gan("a", backup, 2, "--resume")
    assert r.exit_code != 0 and "is not an export of the run in" in r.output, r.output
    assert backup.read_bytes() == mine.read_bytes()
    r = gan("a", mine, 2, "--resume")
    assert r.exit_code == 0, r.output                                  # its own export: replaced by the new one
    assert torch_step(mine) == 2
    with open(mine, "ab") as f:                                        # changed since: no longer provably the run's
        f.write(b"\0")
    edited = mine.read_bytes()
    r = gan("a", mine, 3, "--resume")
    assert r.exit_code != 0 and "is not an export of the run in" in r.output, r.output
    assert mine.read_bytes() == edited


def torch_step(path: Path) -> int:
    import torch

    return int(torch.load(path, map_location="cpu", weights_only=True)["step"])


def test_a_run_interrupted_while_opening_its_folder_can_be_run_again(tmp_path, monkeypatch):
    """RunDir writes its manifest before anything else: a run killed right after it (e.g. while config.yaml is
    written) leaves a folder the same command recognises as its own, not one it must refuse as foreign."""
    import medanon.runtime as runtime

    write = runtime.atomic_write_text

    def killed(path, text):
        if path.name == "config.yaml":
            raise KeyboardInterrupt
        write(path, text)

    monkeypatch.setattr(runtime, "atomic_write_text", killed)
    with pytest.raises(KeyboardInterrupt):
        RunDir(tmp_path / "run", config={"a": 1}, command="train gan", seeds={})
    monkeypatch.undo()
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["manifest.json"]
    RunDir(tmp_path / "run", config={"a": 1}, command="train gan", seeds={}).finish()
    with pytest.raises(UnsafeOutputError, match="holds a run of train gan"):
        RunDir(tmp_path / "run", config={"a": 1}, command="train flow", seeds={})


def test_nothing_is_written_inside_a_release_or_a_dataset_through_the_api(tmp_path):
    """Through Python as at the command line: a release, a mapping, an evaluation, its cache or a phantom inside
    another release or a dataset is refused, and EvaluationResult.to_html never replaces a file it did not write."""
    import medanon
    from medanon import EvaluationResult

    data = make_phantom(tmp_path / "fundus", patients=3, per_patient=1, size=16)
    rel = medanon.anonymize.snow(data, p=0.3).save(tmp_path / "r2", progress=False)
    before = {p: _tree_digest(p) for p in (data, rel)}
    for call in (lambda: medanon.anonymize.snow(data, p=0.3).save(rel / "nested", progress=False),
                 lambda: medanon.anonymize.snow(data, p=0.3).save(tmp_path / "r4", mapping=rel / "m.json",
                                                                   progress=False),
                 lambda: make_phantom(data / "images" / "sub", patients=2, per_patient=1, size=16),
                 lambda: medanon.evaluate(real=data, releases=[rel], out=data / "report", preset="tiny"),
                 lambda: medanon.evaluate(real=data, releases=[rel], out=tmp_path / "rep", cache_dir=rel / "cache",
                                          preset="tiny")):
        with pytest.raises(UnsafeOutputError, match="medanon never writes into"):
            call()
    assert {p: _tree_digest(p) for p in (data, rel)} == before and not (tmp_path / "r4").exists()
    result = EvaluationResult(releases=[{"path": str(rel)}], controls={}, real={"path": str(data)}, phantom=True,
                              notes=[], seconds=0.0, report={}, html="<html>report</html>")
    for target in (data / "labels.csv", data / "report.html", rel / "report.html"):
        with pytest.raises(UnsafeOutputError):
            result.to_html(target)
    assert {p: _tree_digest(p) for p in (data, rel)} == before
    (tmp_path / "notes.html").write_text("mine")
    with pytest.raises(UnsafeOutputError, match="not a medanon report"):
        result.to_html(tmp_path / "notes.html", overwrite=True)
    assert (tmp_path / "notes.html").read_text() == "mine"
    # an image folder the evaluation read outside the dataset's folder (an opened dataset's linked images)
    pacs = tmp_path / "pacs"
    pacs.mkdir()
    result.reads = [pacs]
    with pytest.raises(UnsafeOutputError, match="medanon never writes into"):
        result.to_html(pacs / "report.html")
    assert not (pacs / "report.html").exists()


def test_a_demo_too_small_for_its_evaluation_is_refused_before_any_work(tmp_path):
    """25 patients release at k = 10 (17 training patients: one record), but FID and the attacks need two records
    per release: the evaluation failed after every release was made."""
    r = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path / "d"), "--patients", "25", "--no-inception"])
    assert r.exit_code != 0 and "at least 30 patients" in r.output and "--patients 30" in r.output, r.output
    assert not (tmp_path / "d").exists()


def test_a_dangling_link_as_output_is_named_as_such(tmp_path):
    """An --out that is a link to nothing is refused as a dangling link (not as "not a folder"), and the place it
    points to is not created."""
    link = tmp_path / "dl"
    link.symlink_to(tmp_path / "elsewhere")
    for kind in ("dir", "file"):
        with pytest.raises(UnsafeOutputError, match=r"is a link to .*elsewhere, which does not exist"):
            check_output(link, inputs=[], kind=kind, name="--out")
    assert not (tmp_path / "elsewhere").exists() and link.is_symlink()


def test_no_export_path_lies_in_the_run_folder(tmp_path):
    """--export into the run folder is refused before any work (not as an input), for the trainers that export: a
    segmenter run's --export OUT/last.pt replaced the state it resumes from, and OUT/manifest.json its manifest."""
    data = make_phantom(tmp_path / "fundus", patients=4, per_patient=1, size=32)
    run = tmp_path / "run"
    for cmd in (["train", "gan", "--data", str(data), "--config", str(TINY), "--steps", "1"],
                ["train", "segmenter", str(data), "--epochs", "1"]):
        r = CliRunner().invoke(cli, [*cmd, "--out", str(run), "--export", str(run / "checkpoint.pt")])
        assert r.exit_code == 1 and "lies inside the run folder" in r.output, r.output
        assert not run.exists()
    seg = ["train", "segmenter", str(data), "--epochs", "1", "--width", "4", "--batch", "2", "--size", "32",
           "--out", str(run)]
    assert CliRunner().invoke(cli, seg).exit_code == 0
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    (tmp_path / "into").symlink_to(run)
    for name in ("last.pt", "manifest.json"):
        for export in (run / name, tmp_path / "into" / name):
            r = CliRunner().invoke(cli, [*seg, "--resume", "--export", str(export)])
            assert r.exit_code == 1 and f"is the run's own {name}" in r.output, r.output
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
