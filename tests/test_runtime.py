import json
from pathlib import Path

import pytest
import torch

from medanon.config import RunConfig
from medanon.errors import ConfigError, OutputExistsError
from medanon.fsutil import atomic_dir, atomic_write_text, sha256_file
from medanon.outputs import UnsafeOutputError
from medanon.runtime import RunDir, files_digest, resolve_device, seed_everything


def test_resolve_device():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA"):
            resolve_device("cuda")


def test_a_mistyped_gpu_is_named_on_a_machine_with_one(monkeypatch):
    """On a GPU machine "cuda:x" reached torch as "Invalid device string" (a traceback), and "cuda:7" of one GPU
    failed later; on a CPU machine the typo read as "no CUDA GPU"."""
    from click.testing import CliRunner

    from medanon.cli import cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for typo in ("cuda:x", "cuda 0", "gpu"):
        with pytest.raises(ConfigError, match="is not understood"):
            resolve_device(typo)
    with pytest.raises(ConfigError, match="names GPU 7, but this machine has 1 \\(cuda:0\\)"):
        resolve_device("cuda:7")
    r = CliRunner().invoke(cli, ["--device", "tpu", "phantom", "--help"])
    assert r.exit_code == 2 and "'tpu' is not a device" in r.output and "Traceback" not in r.output


def test_seed_everything_makes_torch_repeatable():
    seed_everything(5)
    a = torch.rand(3)
    seed_everything(5)
    assert torch.equal(a, torch.rand(3))


def test_run_dir_contents(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"hello")
    run = RunDir(tmp_path / "run", config=RunConfig(), command="test", seeds={"x": 3})
    run.record_input("data", data, files=[data / "a.bin"])
    run.log_metrics(step=1, loss=0.5)
    run.log_metrics(step=2, loss=0.25)
    run.finish()
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert m["seeds"] == {"x": 3} and m["software"]["medanon"]
    assert m["inputs"]["data"]["files"] == 1 and m["inputs"]["data"]["mode"] == "content"
    assert m["finished"] is not None
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["loss"] for x in lines] == [0.5, 0.25]
    assert "size: 64" in (tmp_path / "run" / "config.yaml").read_text()


def test_files_digest_changes_with_content(tmp_path: Path):
    f = tmp_path / "a"
    f.write_bytes(b"1")
    d1 = files_digest([f], root=tmp_path)["sha256"]
    f.write_bytes(b"2")
    assert files_digest([f], root=tmp_path)["sha256"] != d1


def test_atomic_dir_leaves_nothing_on_failure(tmp_path: Path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_dir(out) as tmp:
        (tmp / "half.txt").write_text("x")
        raise RuntimeError("interrupted")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_refuses_then_overwrites(tmp_path: Path):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(OutputExistsError, match="overwrite=True"), atomic_dir(out):
        pass
    with atomic_dir(out, overwrite=True) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == [".medanon-output.json", "b"]     # b, and medanon's marker
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    (out / ".medanon-output.json").unlink()               # no longer recognisable as medanon's: never replaced
    with pytest.raises(UnsafeOutputError, match="not written by medanon"), atomic_dir(out, overwrite=True):
        pass
    assert (out / "b").read_text() == "2"


def test_atomic_write_text(tmp_path: Path):
    p = tmp_path / "sub" / "f.txt"
    atomic_write_text(p, "abc")
    assert p.read_text() == "abc"
    assert len(sha256_file(p)) == 64
    assert [x.name for x in p.parent.iterdir()] == ["f.txt"]


def test_software_versions_match_the_modules_without_importing_them():
    """The manifest's versions are the modules' own ``__version__``; reading them imports none of the libraries
    (scikit-learn and SciPy alone cost about 1.7 s to import)."""
    import subprocess
    import sys

    code = ("import sys\nfrom medanon.runtime import software_versions\nbefore = set(sys.modules)\n"
            "v = software_versions()\n"
            "late = [m for m in ('sklearn', 'scipy', 'skimage', 'pydicom') if m in set(sys.modules) - before]\n"
            "assert 'sklearn' not in before, 'the test needs a library medanon.runtime does not import'\n"
            "import importlib\nnow = {m: importlib.import_module(m).__version__ for m in "
            "('torch', 'numpy', 'scipy', 'skimage', 'sklearn', 'PIL', 'pydicom')}\n"
            "assert not late, late\nassert all(v[m] == now[m] for m in now), (v, now)\nprint('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_a_file_digest_is_read_once_and_never_stale(tmp_path: Path, monkeypatch):
    """sha256_file keeps the digest of a settled file (unchanged for two seconds) and reads it again after any
    change: an in-place write of the same size, a replacement by rename, a write just after hashing."""
    import hashlib
    import os
    import time

    import medanon.fsutil as fs

    def truth(p: Path) -> str:
        return hashlib.new("sha256", p.read_bytes()).hexdigest()

    p = tmp_path / "a.bin"
    p.write_bytes(b"a" * 4096)
    assert fs.sha256_file(p) == truth(p)
    with open(p, "r+b") as f:                       # at once, same size: the file is not settled, so it is re-read
        f.write(b"b")
    assert fs.sha256_file(p) == truth(p)
    monkeypatch.setattr(fs, "_SETTLED_NS", 0)         # as if two seconds had passed
    hashed = []
    real = hashlib.sha256
    monkeypatch.setattr(fs.hashlib, "sha256", lambda *a: hashed.append(1) or real(*a))
    first = fs.sha256_file(p)
    assert fs.sha256_file(p) == first == truth(p)
    assert len(hashed) == 1                           # the second call came from the cache
    time.sleep(0.01)
    q = tmp_path / "b.bin"
    q.write_bytes(b"c" * 4096)
    os.replace(q, p)                                  # another file under the same name: another inode
    assert fs.sha256_file(p) == truth(p) != first
    with open(p, "r+b") as f:
        f.write(b"d")
    assert fs.sha256_file(p) == truth(p)


def test_a_run_removes_the_half_written_files_a_killed_run_left(tmp_path):
    """kill -9 during an atomic write leaves .NAME.XXXXXXXX.tmp in the run folder (a torn checkpoint of megabytes);
    the next run of the folder removes it once it holds the lock, and nothing else."""
    from medanon.runtime import RunDir

    run = RunDir(tmp_path / "run", config={"a": 1}, command="test")
    run.finish()
    torn = tmp_path / "run" / ".checkpoint.pt.k2j_9xq1.tmp"
    torn.write_bytes(b"\0" * 100)
    mine = tmp_path / "run" / ".notes.tmp"                            # not the pattern of an atomic write
    mine.write_text("keep")
    RunDir(tmp_path / "run", config={"a": 1}, command="test").finish()
    assert not torn.exists() and mine.read_text() == "keep"


def test_a_run_checks_its_folder_again_once_it_holds_the_lock(tmp_path):
    """A trainer checks its folder, works for minutes, then locks it: a run that started or finished there meanwhile
    must not have its logs cleared and its checkpoint overwritten (two new runs a few seconds apart did), nor a
    resumed state be replaced by an older one."""
    import torch

    from medanon.checkpoint import save_checkpoint
    from medanon.errors import ConfigError
    from medanon.runtime import RunDir
    from medanon.train.loop import check_run_state, recheck_run_state

    out = tmp_path / "run"
    check_run_state(out, resume=False)                       # the first look: empty
    other = RunDir(out, config={"a": 1}, command="train flow", new_run=True)      # another run, meanwhile
    other.log_metrics(step=1, loss=0.5)
    save_checkpoint(out / "checkpoint.pt", kind="glow-training", config={}, state={"m": {"w": torch.zeros(1)}},
                    step=3)
    other.finish()
    with pytest.raises(ConfigError, match="already holds a training run"):
        RunDir(out, config={"a": 1}, command="train flow", new_run=True, recheck=recheck_run_state(out, None))
    assert (out / "metrics.jsonl").read_text().count("loss") == 1 and not (out / ".run.lock").exists()
    with pytest.raises(ConfigError, match="is at step 3, not the step 2 this run read"):
        RunDir(out, config={"a": 1}, command="train flow", resume_step=2,
               recheck=recheck_run_state(out, 2))
    RunDir(out, config={"a": 1}, command="train flow", resume_step=3,
           recheck=recheck_run_state(out, 3)).finish()
