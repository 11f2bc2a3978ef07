"""What the command line does around every command: Ctrl-C, quiet mode, progress bars in logs (issue 13)."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from medanon.cli import cli

MEDANON = [sys.executable, "-c", "from medanon.cli import main; main()"]     # the command, in a process of its own


def test_ctrl_c_exits_130_with_a_message(tmp_path, monkeypatch):
    import medanon.phantoms.generate as gen

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gen, "generate", interrupted)
    r = CliRunner().invoke(cli, ["phantom", "--patients", "2", "--per-patient", "1", "--size", "16",
                                 "--out", str(tmp_path / "ph")])
    assert r.exit_code == 130, r.output
    assert "interrupted" in r.output and not (tmp_path / "ph").exists()


def test_quiet_mode_prints_no_progress_bars(tmp_path):
    """A real process, so that tqdm's state is its own: bars would write '%|' and carriage returns to stderr."""
    args = [*MEDANON, "-q", "phantom", "--patients", "3", "--per-patient", "1", "--size", "16",
            "--out", str(tmp_path / "ph")]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "%|" not in p.stderr and "\r" not in p.stderr
    assert "wrote 3" in p.stdout


def test_logs_that_are_not_a_terminal_get_no_carriage_returns(tmp_path):
    args = [*MEDANON, "phantom", "--patients", "3", "--per-patient", "1", "--size", "16", "--out", str(tmp_path / "ph")]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)   # stderr is a pipe, not a terminal
    assert p.returncode == 0, p.stderr
    assert "\r" not in p.stderr


def test_a_library_warning_is_printed_once(tmp_path):
    from medanon.config import PhantomConfig
    from medanon.phantoms.generate import generate

    data = generate(PhantomConfig(patients=6, per_patient=1, size=16, workers=1), tmp_path / "ph", progress=False)
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", str(data), "--k", "2", "--out", str(tmp_path / "rel")])
    assert r.exit_code == 0, r.output
    assert r.output.count("WARNING: k = 2") == 1, r.output
    assert "note: no --mapping given, so no private mapping was written" in r.output     # said, not silent
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", str(data), "--k", "1", "--out", str(tmp_path / "rel1")])
    assert r.exit_code == 2 and "x>=2" in r.output                     # a usage error, as --help's range says
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", str(data), "--set", "k=1", "--out", str(tmp_path / "rel1")])
    assert r.exit_code == 1 and "--k 1" in r.output and "use --k 5" in r.output


def test_results_printed_as_json_are_strict_json():
    """A metric that is NaN (no test example of a class) prints as null: `NaN` is not JSON."""
    import json

    from medanon.cli.base import to_json

    text = to_json({"kappa": float("nan"), "auc": [0.5, float("inf")], "n": 3})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard constant {c}")) == \
        {"kappa": None, "auc": [0.5, None], "n": 3}


def test_report_json_is_strict_json(tmp_path, monkeypatch):
    """report.json holds null where the evaluation has NaN (a numpy one too), so jq and JSON.parse read it."""
    import json

    import numpy as np

    from medanon.evaluate import report as report_module

    report = {"config": {}, "releases": [{"name": "r", "auc": np.float32("nan"), "ci": np.array([0.1, np.inf]),
                                          "fid": float("nan"), "n": np.int64(4)}]}
    jp = tmp_path / "report.json"
    monkeypatch.setattr(report_module, "render_html", lambda rep, grids: "")   # a bare report has no HTML
    report_module.write_report(tmp_path, report, {})
    got = json.loads(jp.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard constant {c}"))
    assert got["releases"][0] == {"name": "r", "auc": None, "ci": [0.1, None], "fid": None, "n": 4}


def test_phantom_workers_end_without_a_traceback(tmp_path):
    """Closing the rendering pool sends its workers SIGTERM; forked from the command line they inherited its
    SIGTERM handler, and every successful run printed a KeyboardInterrupt traceback per worker."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "medanon", "phantom", "--modality", "fundus", "--patients", "8",
                        "--size", "16", "--workers", "2", "--out", str(tmp_path / "p")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "KeyboardInterrupt" not in r.stderr, r.stderr


def test_an_unexpected_exception_is_said_to_be_a_bug_without_a_traceback(tmp_path, monkeypatch):
    """Only MedanonError and OSError were caught: any internal bug reached the user as a full traceback."""
    import medanon.phantoms.generate as gen

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(gen, "generate", broken)
    monkeypatch.delenv("MEDANON_TRACEBACK")
    r = CliRunner().invoke(cli, ["phantom", "--patients", "2", "--out", str(tmp_path / "p")])
    assert r.exit_code == 70 and "an unexpected ZeroDivisionError inside medanon: division by zero" in r.output
    assert "--log-level debug for the traceback" in r.output and "Traceback" not in r.output
    from medanon.runtime import setup_logging

    try:
        r = CliRunner().invoke(cli, ["--log-level", "debug", "phantom", "--patients", "2", "--out",
                                     str(tmp_path / "p")])
        assert isinstance(r.exception, ZeroDivisionError)              # the traceback on request
    finally:
        setup_logging("info")


def test_no_command_takes_one_option_name_twice():
    """Two options of one command under one flag (the X-ray views and k-Same's augmentation views were both
    --views): click keeps one of them, and the other is silently unreachable."""
    import click

    from medanon.cli import cli as root

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd

    for path, cmd in walk(root, []):
        flags = [f for p in cmd.params if isinstance(p, click.Option) for f in p.opts + p.secondary_opts]
        names = [p.name for p in cmd.params]
        assert len(flags) == len(set(flags)), (path, sorted(f for f in flags if flags.count(f) > 1))
        assert len(names) == len(set(names)), (path, sorted(n for n in names if names.count(n) > 1))


def test_a_commands_log_lines_name_its_flags(caplog):
    """The evaluation logs its notes in parameter names (fidelity.samples=10); the command's user reads its flag."""
    import logging

    from medanon.cli.evaluate import FLAGS
    from medanon.cli.words import speaks_flags

    @speaks_flags(FLAGS)
    def command():
        logging.getLogger("medanon.evaluate.harness").warning("use more held-out patients or fidelity.samples=%d", 10)
        logging.getLogger("other").warning("fidelity.samples=3 stays as another library said it")

    with caplog.at_level("WARNING"):
        command()
    assert "use more held-out patients or --fid-samples 10" in caplog.text, caplog.text
    assert "fidelity.samples=3 stays" in caplog.text
    logging.getLogger("medanon.evaluate.harness").warning("after: fidelity.samples=%d", 4)   # the command is over
    assert "after: fidelity.samples=4" in caplog.text
