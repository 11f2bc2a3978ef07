"""Concurrent runs and paths that reach a file another way: a lock file that is a link, an output inside another
live run's working folder, a temporary file beside a link's ``..``, a checkpoint replaced while it is loaded, a
working folder that is a link, a source changed or being written while a release is made."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import medanon
from medanon.config import PhantomConfig
from medanon.errors import DataError, OutputExistsError
from medanon.fsutil import atomic_write_bytes, sha256_file
from medanon.locks import ConcurrentRunError, OutputLock, refuse_inside_written
from medanon.outputs import UnsafeOutputError
from medanon.phantoms.generate import generate

CKPT = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def phantom(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=6, per_patient=1, size=16, workers=1),
                    tmp_path_factory.mktemp("concurrent") / "d", progress=False)


class _Holder:
    """Another process holding ``OutputLock(path)`` until closed (a live run, as far as the lock tells)."""

    def __init__(self, path: Path) -> None:
        code = textwrap.dedent(f"""
            import sys, time
            from medanon.locks import OutputLock
            lock = OutputLock({str(path)!r}).acquire()
            print("held", flush=True)
            sys.stdin.read()
        """)
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_a_lock_file_that_is_a_link_is_refused_and_never_written(tmp_path, phantom):
    """`ln DATA/labels.csv .rel.lock` (or a symlink): the lock's signature replaced the dataset's labels."""
    data = tmp_path / "d"
    shutil.copytree(phantom, data)
    before = (data / "labels.csv").read_bytes()
    for link in (lambda: os.link(data / "labels.csv", tmp_path / ".rel.lock"),
                 lambda: (tmp_path / ".rel.lock").symlink_to(data / "labels.csv")):
        link()
        with pytest.raises(UnsafeOutputError, match="is not a medanon lock file"):
            OutputLock(tmp_path / "rel").acquire()
        assert (data / "labels.csv").read_bytes() == before
        (tmp_path / ".rel.lock").unlink()
    (tmp_path / ".rel.lock").write_text("my notes")                  # a file of the user's under that name
    with pytest.raises(UnsafeOutputError, match="holds something else"):
        OutputLock(tmp_path / "rel").acquire()
    assert (tmp_path / ".rel.lock").read_text() == "my notes"


def test_an_output_inside_a_live_runs_working_folder_is_refused(tmp_path):
    """A mapping or release put into OUT.partial of a run writing OUT was published inside that release."""
    (tmp_path / "ob.partial").mkdir()
    with _Holder(tmp_path / "ob"):
        for inside in (tmp_path / "ob.partial" / "m.json", tmp_path / ".ob.closing" / "x",
                       tmp_path / ".ob.old-1" / "x", tmp_path / ".ob.abcd1234.partial" / "x"):
            with pytest.raises(ConcurrentRunError, match="as the working folder of ob"):
                refuse_inside_written(inside)
    refuse_inside_written(tmp_path / "ob.partial" / "m.json")        # nobody writes ob now: not refused


def test_a_file_put_into_a_release_folder_while_it_was_written_is_not_published(tmp_path, phantom):
    from test_release_safety import SETTINGS

    from medanon.data.layouts import scan
    from medanon.release import ReleaseWriter

    records = scan(phantom).records
    w = ReleaseWriter(tmp_path / "r", **SETTINGS, source={"sha256": "a"})
    for i, rec in enumerate(records[:2]):
        w.add(f"k{i}", torch.zeros(3, 16, 16), [rec])
    (w.partial / "m.json").write_text("{}")                          # another run's private mapping
    with pytest.raises(OutputExistsError, match="which this run did not write"):
        w.close()
    assert not (tmp_path / "r").exists() and (w.partial / "m.json").exists()


def test_temporary_files_are_made_where_the_system_resolves_the_path(tmp_path, monkeypatch):
    """LINK/../d/m.json is sub/d/m.json for the system; tempfile made its temporary file in d (beside LINK), inside
    a dataset of that name."""
    import tempfile

    (tmp_path / "sub" / "inner").mkdir(parents=True)
    (tmp_path / "sub" / "d").mkdir()
    (tmp_path / "d").mkdir()
    (tmp_path / "lnk").symlink_to(tmp_path / "sub" / "inner")
    made = []
    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a, **k: made.append(k["dir"]) or real(*a, **k))
    atomic_write_bytes(tmp_path / "lnk" / ".." / "d" / "m.json", b"x")
    assert (tmp_path / "sub" / "d" / "m.json").read_bytes() == b"x" and not any((tmp_path / "d").iterdir())
    assert Path(made[0]) == (tmp_path / "sub" / "d").resolve()


def test_a_checkpoint_replaced_while_it_is_loaded_gives_one_files_weights_and_digest(tmp_path, monkeypatch):
    """torch.load read the path, then sha256_file read it again: a training run's export renamed over it in between
    gave the weights of one file and the digest of the other (a release's manifest naming a model it was not made
    with)."""
    import medanon.checkpoint as checkpoint

    first, second = CKPT / "identity-fundus64.pt", CKPT / "identity-xray64.pt"
    path = tmp_path / "m.pt"
    shutil.copy(first, path)
    shutil.copy(second, tmp_path / "next.pt")
    real = torch.load

    def load(f, *a, **k):
        os.replace(tmp_path / "next.pt", path)                      # the export lands now
        return real(f, *a, **k)

    monkeypatch.setattr(checkpoint.torch, "load", load)
    blob = checkpoint.load_checkpoint(path)
    monkeypatch.undo()
    assert blob["sha256"] == sha256_file(first)
    assert blob["config"] == checkpoint.load_checkpoint(first)["config"] != checkpoint.load_checkpoint(path)["config"]


def test_a_working_folder_that_is_a_link_is_refused_before_any_work(tmp_path, phantom):
    from test_release_safety import SETTINGS

    from medanon.release import ReleaseWriter

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "r.partial").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputExistsError, match="is a link to"):
        ReleaseWriter(tmp_path / "r", **SETTINGS, source={"sha256": "a"})
    assert (tmp_path / "r.partial").is_symlink() and not any((tmp_path / "elsewhere").iterdir())


def test_a_source_changed_while_a_release_was_made_is_not_published(tmp_path, phantom):
    """The dataset replaced while a release read it: a mix of old and new images was published (exit 0)."""
    import warnings

    data = tmp_path / "d"
    shutil.copytree(phantom, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = medanon.anonymize.kpixel(medanon.open_dataset(data, size=16), k=2)
        made = rel.produce

        def produce(writer, progress):
            out = made(writer, progress)
            image = next((data / "images").iterdir())
            image.write_bytes(image.read_bytes() + b"\0")            # replaced meanwhile (a byte more)
            return out

        rel.produce = produce
        with pytest.raises(DataError, match="changed while it was being made"):
            rel.save(tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists() and (tmp_path / "r.partial").is_dir()


def test_a_dataset_being_written_is_not_read(tmp_path, phantom):
    with _Holder(phantom), pytest.raises(ConcurrentRunError, match=r"dataset .* is being written now"):
        medanon.open_dataset(phantom, size=16)
    assert len(medanon.open_dataset(phantom, size=16)) == 6


def test_a_mapping_being_published_by_a_live_run_is_named_not_called_stopped(tmp_path, phantom):
    """A second run checked a mapping another live run was publishing and was told that run had stopped, with the
    fix of deleting its pending mapping."""
    from test_release_safety import SETTINGS

    from medanon.release import ReleaseWriter

    mapping = tmp_path / "m.json"
    (tmp_path / ".m.json.pending").write_text(json.dumps({"format": "medanon-mapping", "release": "a",
                                                            "records": {"images/x.png": {}}}))
    with _Holder(mapping), pytest.raises(ConcurrentRunError, match="another medanon run is writing the mapping"):
        ReleaseWriter(tmp_path / "b", **SETTINGS, mapping=mapping, source={"sha256": "a"})


def test_a_lock_file_removed_by_its_holder_as_it_is_opened_is_opened_again(tmp_path, monkeypatch):
    """The holder finishing (and removing the file) between this run's open and its check left a file of no name:
    it was refused as "not a medanon lock file" with the fix of moving medanon's own lock away."""
    import medanon.locks as locks

    real, calls = os.open, []

    def opened_then_removed(path, *a, **k):
        fd = real(path, *a, **k)
        if str(path).endswith(".rel.lock") and not calls:
            calls.append(path)
            os.unlink(path)                                          # the holder's release, just now
        return fd

    monkeypatch.setattr(locks.os, "open", opened_then_removed)
    lock = OutputLock(tmp_path / "rel").acquire()
    assert calls and lock.held and (tmp_path / ".rel.lock").is_file()
    lock.release()
