"""Every command that writes, against every way of pointing its outputs at the user's data (issue 13).

The rule (``medanon.outputs``): never write into, over, or as a parent of an input; never replace an
existing file or folder without ``--overwrite``; never replace anything medanon did not write, even with it.
Each case must end in a clean error (no traceback), before any work, with the inputs byte-for-byte unchanged.
"""

import hashlib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.phantoms.generate import generate

CKPT = Path(__file__).resolve().parents[1] / "checkpoints"

# command -> argv with {data}, {out}, {map}; "map" only where the command writes a private mapping
COMMANDS = {
    "data split": (["data", "split", "{data}", "--out", "{out}"], "file"),
    "anonymize kpixel": (["anonymize", "kpixel", "{data}", "--k", "2", "--out", "{out}", "--mapping", "{map}"], "dir"),
    "anonymize kpca": (["anonymize", "kpca", "{data}", "--k", "2", "--out", "{out}", "--mapping", "{map}"], "dir"),
    "anonymize kcentroid": (["anonymize", "kcentroid", "{data}", "--k", "2", "--model",
                             str(CKPT / "restyle-fundus64.pt"), "--out", "{out}", "--mapping", "{map}"], "dir"),
    "anonymize ksalsa": (["anonymize", "ksalsa", "{data}", "--k", "2", "--model", str(CKPT / "restyle-fundus64.pt"),
                          "--out", "{out}", "--mapping", "{map}"], "dir"),
    "anonymize inverted": (["anonymize", "inverted", "{data}", "--model", str(CKPT / "restyle-fundus64.pt"),
                            "--out", "{out}", "--mapping", "{map}"], "dir"),
    "anonymize snow": (["anonymize", "snow", "{data}", "--p", "0.3", "--seed", "0", "--out", "{out}",
                        "--mapping", "{map}"], "dir"),
    "anonymize vs-snow": (["anonymize", "vs-snow", "{data}", "--p", "0.3", "--seed", "0", "--vessels", "frangi",
                           "--out", "{out}", "--mapping", "{map}"], "dir"),
    "anonymize gmia": (["anonymize", "gmia", "--data", "{data}", "--model", str(CKPT / "cotrained-fundus64.pt"),
                        "--identity", str(CKPT / "identity-fundus64.pt"),
                        "--utility", str(CKPT / "classifier-grade-fundus64.pt"),
                        "--out", "{out}", "--mapping", "{map}"], "dir"),
    "anonymize dpglow": (["anonymize", "dpglow", "{data}", "--flow", str(CKPT / "glow-fundus64.pt"),
                          "--epsilon", "100", "--out", "{out}", "--mapping", "{map}"], "dir"),
    "anonymize ldp-image": (["anonymize", "ldp-image", "{data}", "--epsilon", "100", "--out", "{out}",
                             "--mapping", "{map}"], "dir"),
    "train gan": (["train", "gan", "--data", "{data}", "--config", "configs/stylegan/tiny32.yaml", "--steps", "1",
                   "--out", "{out}"], "dir"),
    "train flow": (["train", "flow", "{data}", "--config", "configs/glow/tiny32.yaml", "--steps", "1",
                    "--out", "{out}"], "dir"),
    "train encoder": (["train", "encoder", "--data", "{data}", "--generator", str(CKPT / "stylegan2-fundus64.pt"),
                       "--steps", "1", "--out", "{out}"], "dir"),
    "train identity": (["train", "identity", "--data", "{data}", "--steps", "1", "--out", "{out}"], "file"),
    "train classifier": (["train", "classifier", "--data", "{data}", "--label", "grade", "--steps", "1",
                          "--out", "{out}"], "file"),
    "train segmenter": (["train", "segmenter", "{data}", "--epochs", "1", "--out", "{out}"], "dir"),
}
CASES = ["out is the dataset", "out inside the dataset", "out contains the dataset", "mapping over the labels",
         "foreign out with --overwrite", "existing out without --overwrite"]
NO_OVERWRITE_FLAG = {"train gan", "train flow", "train encoder", "train identity", "train classifier",
                     "train segmenter"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=4, per_patient=1, size=32, workers=1),
                    tmp_path_factory.mktemp("safety") / "data", progress=False)


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _applies(command: str, case: str) -> bool:
    """Every case but two applies to every command: a mapping can be written over the labels only by a command
    that writes a mapping, and training runs resume an existing run folder (tested in the trainers' tests)."""
    if case == "mapping over the labels":
        return "{map}" in COMMANDS[command][0]
    return not (case == "existing out without --overwrite" and command in NO_OVERWRITE_FLAG)


@pytest.mark.parametrize("command, case", [(c, k) for c in sorted(COMMANDS) for k in CASES if _applies(c, k)])
def test_no_command_destroys_its_input(tmp_path, dataset, command, case):
    argv, kind = COMMANDS[command]
    data = tmp_path / "data"
    shutil.copytree(dataset, data)                      # the dataset lives inside tmp_path: tmp_path contains it
    out, mapping = tmp_path / ("rel" if kind == "dir" else "out.csv"), tmp_path / "map.json"
    foreign = None
    if case == "out is the dataset":
        out = data
    elif case == "out inside the dataset":
        out = data / ("rel" if kind == "dir" else "splits.csv")
    elif case == "out contains the dataset":
        out = tmp_path
    elif case == "mapping over the labels":
        mapping = data / "labels.csv"
    elif case == "foreign out with --overwrite":
        if kind == "dir":
            out.mkdir()
            foreign = out / "thesis.docx"
        else:
            foreign = out
        foreign.write_text("years of work")
    elif case == "existing out without --overwrite":
        if kind == "dir":
            out.mkdir()
            (out / "manifest.json").write_text('{"format": "medanon-release", "software": {"medanon": "0"}}')
        else:
            out.write_text("record_id,patient_id,split\n")
    before = _tree_digest(data)
    args = [a.format(data=data, out=out, map=mapping) for a in argv]
    if case != "existing out without --overwrite" and command not in NO_OVERWRITE_FLAG:
        args.append("--overwrite")
    r = CliRunner().invoke(cli, args)
    assert r.exit_code != 0, f"{command} accepted {case}: {r.output}"
    assert r.exception is None or isinstance(r.exception, SystemExit), f"traceback: {r.exception!r}"
    assert any(why in r.output for why in ("never writes into", "already exists", "not written by medanon",
                                           "Invalid value for '--out'")), \
        f"{command} refused {case} for another reason: {r.output}"
    assert _tree_digest(data) == before, f"{command} changed its input ({case})"
    if foreign is not None:
        assert foreign.read_text() == "years of work"


def test_phantom_never_replaces_a_foreign_folder(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    args = ["phantom", "--patients", "2", "--per-patient", "1", "--size", "16", "--out", str(tmp_path / "out")]
    r = CliRunner().invoke(cli, [*args, "--overwrite"])
    assert r.exit_code != 0 and "not written by medanon" in r.output
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"
    r = CliRunner().invoke(cli, ["phantom", "--patients", "2", "--per-patient", "1", "--size", "16",
                                 "--out", str(tmp_path / "ph")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["phantom", "--patients", "2", "--per-patient", "1", "--size", "16",
                                 "--out", str(tmp_path / "ph"), "--overwrite"])
    assert r.exit_code == 0, r.output                   # medanon's own output: replaced with --overwrite


def test_a_public_checkpoint_is_never_replaced_even_under_another_name(tmp_path, dataset):
    """`train classifier --out COPY --overwrite` replaced a copy of a shipped checkpoint (the search path's default for
    GMIA's utility network): later runs asking for it by name used a 1-step model trained on private patients."""
    copy = tmp_path / "mine"                                   # any name: the guard reads its content
    shutil.copy(CKPT / "classifier-grade-fundus64.pt", copy)
    before = copy.read_bytes()
    r = CliRunner().invoke(cli, ["train", "classifier", "--data", str(dataset), "--label", "grade", "--steps", "1",
                                 "--out", str(copy), "--overwrite"])
    assert r.exit_code != 0 and "public checkpoint classifier-grade-fundus64.pt" in r.output, r.output
    assert copy.read_bytes() == before


def test_split_file_needs_overwrite(tmp_path, dataset):
    out = tmp_path / "splits.csv"
    args = ["data", "split", str(dataset), "--out", str(out)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    first = out.read_text()
    r = CliRunner().invoke(cli, [*args, "--seed", "1"])
    assert r.exit_code != 0 and "already exists" in r.output and out.read_text() == first
    assert CliRunner().invoke(cli, [*args, "--seed", "1", "--overwrite"]).exit_code == 0


def test_demo_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("mine")
    r = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path / "d")])
    assert r.exit_code != 0 and "not written by medanon" in r.output
    assert (tmp_path / "d" / "x.txt").read_text() == "mine"


@pytest.mark.parametrize("where", ["the real data", "inside the release", "the release", "a foreign folder"])
def test_evaluate_never_writes_over_what_it_reads(tmp_path, dataset, where):
    data = tmp_path / "data"
    shutil.copytree(dataset, data)
    release = tmp_path / "rel"
    release.mkdir()
    (release / "manifest.json").write_text('{"format": "medanon-release"}')
    out = {"the real data": data, "inside the release": release / "report", "the release": release,
           "a foreign folder": tmp_path / "mine"}[where]
    if where == "a foreign folder":
        out.mkdir()
        (out / "notes.txt").write_text("keep")
    before = _tree_digest(tmp_path)
    r = CliRunner().invoke(cli, ["evaluate", "--real", str(data), "--release", str(release), "--out", str(out)])
    assert r.exit_code != 0 and ("never writes into" in r.output or "not written by medanon" in r.output), r.output
    assert _tree_digest(tmp_path) == before


def test_what_counts_as_medanons_own_output(tmp_path):
    from medanon.checkpoint import save_checkpoint
    from medanon.outputs import is_medanon_output

    run = tmp_path / "run"                         # a resumable state copied into a fresh folder: resumable
    run.mkdir()
    save_checkpoint(run / "checkpoint.pt", kind="stylegan2", config={}, state={})
    assert is_medanon_output(run) and is_medanon_output(run / "checkpoint.pt")
    (tmp_path / "empty").mkdir()
    assert is_medanon_output(tmp_path / "empty")   # nothing to lose
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "checkpoint.pt").write_bytes(b"PK not really")
    (tmp_path / "notes.json").write_text('{"records": 1}')
    (tmp_path / "labels.csv").write_text("image,grade\n")
    for p in ("other", "notes.json", "labels.csv"):
        assert not is_medanon_output(tmp_path / p), p


def test_an_output_file_that_is_a_pipe_is_refused_not_read(tmp_path):
    """A named pipe given as an output file with --overwrite hung the output check (it read the pipe)."""
    import os

    from medanon.outputs import UnsafeOutputError, check_output

    os.mkfifo(tmp_path / "p")
    with pytest.raises(UnsafeOutputError, match="is not a plain file"):
        check_output(tmp_path / "p", kind="file", overwrite=True)
