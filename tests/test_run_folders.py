"""Training run folders across interruptions: a run killed before its first checkpoint leaves a folder a new run
can start in, afresh (never two runs' logs in one folder); a resume keeps the metrics up to its checkpoint and
survives a damaged metrics line."""

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.phantoms.generate import generate
from medanon.runtime import RunDir


@pytest.fixture(scope="module")
def phantom(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=12, per_patient=2, size=16, workers=1),
                    tmp_path_factory.mktemp("runs") / "fundus", progress=False)


def _dead_run(out: Path, command: str) -> None:
    """What a run of ``command`` killed before its first checkpoint leaves: its manifest, config, a metrics line and
    a sample grid (the process ended, so its lock is gone)."""
    run = RunDir(out, config={"a": 1}, command=command)
    run.log_metrics(step=10, loss=1.0, dead=True)
    (out / "samples").mkdir()
    (out / "samples" / "step-0000010.png").write_bytes(b"grid")
    run.lock.release()


def test_a_new_run_in_a_dead_runs_folder_starts_its_logs_afresh(tmp_path):
    _dead_run(tmp_path / "run", "train gan")
    RunDir(tmp_path / "run", config={"a": 1}, command="train gan", new_run=True).finish()
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "samples").exists()


def test_a_resume_drops_the_metrics_after_its_step_and_damaged_lines(tmp_path, caplog):
    out = tmp_path / "run"
    RunDir(out, config={}, command="train gan").finish()
    lines = [json.dumps({"step": s, "loss": 1.0}) for s in (10, 20, 30)]
    (out / "metrics.jsonl").write_text("\n".join([lines[0], "[1, 2]", lines[1], lines[2],
                                                  json.dumps({"step": "test"}), '{"step": 40, "lo']) + "\n")
    with caplog.at_level(logging.WARNING, logger="medanon"):
        RunDir(out, config={}, command="train gan", resume_step=20).finish()
    assert (out / "metrics.jsonl").read_text().splitlines() == lines[:2]
    assert "2 damaged lines (not a JSON object) dropped" in caplog.text


def test_a_segmenter_killed_in_its_first_epoch_can_be_started_again(tmp_path, phantom):
    """Its folder held config.yaml and manifest.json only: "not empty, pass --resume" and "no run to resume (last.pt
    is missing)" sent the user from one command to the other."""
    out = tmp_path / "seg"
    _dead_run(out, "train segmenter")
    args = ["--device", "cpu", "train", "segmenter", str(phantom), "--size", "16", "--epochs", "1", "--out", str(out)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert not any(json.loads(x).get("dead") for x in (out / "metrics.jsonl").read_text().splitlines())
    r = CliRunner().invoke(cli, args)                    # a finished run is not started over
    assert r.exit_code == 1 and "already holds a training run (last.pt)" in r.output, r.output


def test_a_fresh_identity_run_never_writes_over_a_users_file_named_like_its_state(tmp_path, phantom):
    """``OUT.partial`` holds an unfinished run's state and a finished run removes it: a user's file by that name was
    written over, then deleted, by ``--fresh``."""
    (tmp_path / "u.pt.partial").write_text("mine")
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "identity", str(phantom), "--size", "16", "--steps", "2",
                                 "--out", str(tmp_path / "u.pt"), "--fresh"])
    assert r.exit_code == 1 and "u.pt.partial exists and was not written by medanon" in r.output, r.output
    assert (tmp_path / "u.pt.partial").read_text() == "mine" and not (tmp_path / "u.pt").exists()


@pytest.mark.parametrize("command", [["gan", "--config", "configs/stylegan/tiny32.yaml"], ["encoder"], ["autoencoder"],
                                     ["segmenter"]])
def test_a_run_folder_in_the_wrong_state_is_refused_before_the_data_is_decoded(tmp_path, phantom, monkeypatch,
                                                                               command):
    """An existing run without --resume, or --resume without a run, was refused only after every image was decoded
    (minutes on a real dataset): the folder's state needs none."""
    from medanon.data.dataset import ImageDataset

    decoded = []
    monkeypatch.setattr(ImageDataset, "tensors", lambda self, *a, **k: decoded.append(1) or 1 / 0)
    root = Path(__file__).resolve().parents[1]
    kind, *rest = command
    rest = [str(root / r) if r.endswith(".yaml") else r for r in rest]
    held = tmp_path / "held"
    _dead_run(held, f"train {kind}")                     # a run of this command, with its state
    (held / ("last.pt" if kind == "segmenter" else "checkpoint.pt")).write_bytes(b"a run's state")
    base = ["--device", "cpu", "train", kind, str(phantom), *([] if kind == "gan" else ["--size", "16"]), *rest]
    r = CliRunner().invoke(cli, [*base, "--out", str(held)])
    assert r.exit_code == 1 and "already holds a training run" in r.output and decoded == [], r.output
    r = CliRunner().invoke(cli, [*base, "--out", str(tmp_path / "new"), "--resume"])
    assert r.exit_code == 1 and "no training run to resume" in r.output and decoded == [], r.output


def test_a_resumed_run_keeps_every_command_line_and_says_when_the_code_changed(tmp_path, caplog, monkeypatch):
    """Each resume overwrote the manifest's argv (the first part's --config and --generator were lost) and no part
    recorded which code ran: the version number stays 0.1.0 between changes."""
    import sys

    from medanon import runtime

    out = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["medanon", "train", "gan", "DATA", "--config", "a.yaml", "--out", "run"])
    RunDir(out, config={}, command="train gan", new_run=True).finish()
    monkeypatch.setattr(sys, "argv", ["medanon", "train", "gan", "DATA", "--out", "run", "--resume"])
    with caplog.at_level(logging.WARNING, logger="medanon"):
        RunDir(out, config={}, command="train gan", resume_step=20).finish()
    assert "code changed" not in caplog.text
    monkeypatch.setattr(runtime, "source_sha256", lambda: "f" * 64)          # the code changed since
    with caplog.at_level(logging.WARNING, logger="medanon"):
        RunDir(out, config={}, command="train gan", resume_step=40).finish()
    assert "medanon's code changed since this run last ran" in caplog.text
    segments = json.loads((out / "manifest.json").read_text())["segments"]
    assert [s["from_step"] for s in segments] == [0, 20, 40] and "--config" in segments[0]["argv"]
    assert segments[2]["medanon_source_sha256"] == "f" * 64 != segments[1]["medanon_source_sha256"]
    assert all(s["cwd"] for s in segments)


def test_a_job_that_continues_without_a_step_keeps_its_earlier_parts(tmp_path):
    """The demo resumes by reusing what earlier runs wrote: its rerun's manifest held only the rerun."""
    RunDir(tmp_path / "d", config={}, command="demo").finish()
    RunDir(tmp_path / "d", config={}, command="demo", continues=True).finish()
    assert len(json.loads((tmp_path / "d" / "manifest.json").read_text())["segments"]) == 2


def test_a_run_folders_files_are_its_owners_only(tmp_path):
    """design.md: a run's files are 0600; metrics.jsonl, appended with open(), followed the umask (0644)."""
    import os

    run = RunDir(tmp_path / "r", config={}, command="train gan", new_run=True)
    run.log_metrics(step=1)
    run.finish()
    assert {f.name: oct(os.stat(f).st_mode & 0o777) for f in (tmp_path / "r").iterdir() if not f.name.startswith(".")} \
        == {"config.yaml": "0o600", "manifest.json": "0o600", "metrics.jsonl": "0o600"}
