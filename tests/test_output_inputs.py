"""Whatever the path, an input is never written (issue 30): checkpoints, second datasets, linked image folders,
bind mounts, a concurrent second run, a foreign file in an old release, a changed labels file on resume, a full
disk, arguments checked before anything is created, and PNGs checked byte by byte by the audit.

Each refusal must be a clean error (no traceback) and leave every input byte-for-byte unchanged.
"""

import errno
import os
import shutil
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from test_output_safety import _tree_digest

from medanon import open_dataset
from medanon.checkpoint import load_checkpoint, save_checkpoint
from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.errors import ConfigError
from medanon.outputs import UnsafeOutputError, check_output
from medanon.phantoms.generate import generate
from medanon.release import ReleaseWriter, audit_release
from medanon.release.release import source_digest

SETTINGS = dict(method="toy", params={"p": 0.1}, privacy={}, labels=["grade"])


@pytest.fixture(scope="module")
def phantom(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=6, per_patient=2, size=32, workers=1),
                    tmp_path_factory.mktemp("inputs") / "data", progress=False)


def _run(args) -> tuple[int, str]:
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), f"traceback: {r.exception!r}\n{r.output}"
    return r.exit_code, r.output


def _linked(tmp_path: Path, phantom: Path) -> tuple[Path, Path]:
    """A dataset whose ``images`` folder is a link to a real folder elsewhere: (dataset, real image folder)."""
    real = tmp_path / "pacs" / "images"
    shutil.copytree(phantom / "images", real)
    ds = tmp_path / "ds"
    ds.mkdir()
    for name in ("labels.csv", "dataset.yaml", "phantom.json"):
        shutil.copy(phantom / name, ds / name)
    shutil.copytree(phantom / "masks", ds / "masks")
    (ds / "images").symlink_to(real, target_is_directory=True)
    return ds, real


def test_a_checkpoint_being_read_is_never_replaced(tmp_path):
    folder = tmp_path / "ck"
    folder.mkdir()
    ck = save_checkpoint(folder / "glow.pt", kind="toy", config={}, state={"w": torch.ones(2)})
    before = ck.read_bytes()
    sha = load_checkpoint(ck)["sha256"]                 # the loader notes the file it read
    for out, mapping, why in ((tmp_path / "rel", ck, "is the input"), (folder, None, "contains the input"),
                              (ck, None, "is the input")):
        with pytest.raises(UnsafeOutputError, match=why):
            ReleaseWriter(out, **SETTINGS, models={"glow": sha}, mapping=mapping, overwrite=True)
    assert ck.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["glow.pt"]


def test_a_file_of_another_kind_is_never_replaced(tmp_path, phantom):
    splits = tmp_path / "splits.csv"
    assert _run(["data", "split", phantom, "--out", splits])[0] == 0
    before = splits.read_bytes()
    code, out = _run(["anonymize", "kpixel", phantom, "--k", "2", "--out", tmp_path / "rel", "--mapping", splits,
                      "--overwrite"])
    assert code != 0 and "not a mapping" in out and splits.read_bytes() == before


@pytest.mark.parametrize("where", ["out inside the linked folder", "mapping inside the linked folder",
                                   "out is the linked folder", "out holds the linked folder"])
def test_a_linked_image_folder_is_an_input(tmp_path, phantom, where):
    ds, real = _linked(tmp_path, phantom)
    out, mapping = tmp_path / "rel", tmp_path / "map.json"
    if where == "out inside the linked folder":
        out = real / "rel"
    elif where == "mapping inside the linked folder":
        mapping = real / "map.json"
    elif where == "out is the linked folder":
        out = real
    else:
        out = real.parent
    before = _tree_digest(real.parent)
    code, msg = _run(["anonymize", "kpixel", ds, "--allow-outside", "--k", "2", "--out", out, "--mapping", mapping,
                      "--overwrite"])
    assert code != 0 and "never writes into" in msg, msg
    assert _tree_digest(real.parent) == before


def test_a_bind_mounted_dataset_is_the_same_dataset(tmp_path, phantom):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a bind mount needs root and mount(8)")
    data, view = tmp_path / "data", tmp_path / "view"
    shutil.copytree(phantom, data)
    view.mkdir()
    if subprocess.run(["mount", "--bind", str(data), str(view)], capture_output=True).returncode != 0:
        pytest.skip("this machine does not allow bind mounts (no CAP_SYS_ADMIN)")
    try:
        before = _tree_digest(data)
        code, msg = _run(["anonymize", "kpixel", data, "--k", "2", "--out", view / "rel"])
        assert code != 0 and "never writes into" in msg, msg
        assert _tree_digest(data) == before and not (data / "rel").exists()
    finally:
        subprocess.run(["umount", str(view)], check=False)


def test_a_second_run_on_the_same_out_is_refused_at_once(tmp_path, phantom):
    out = tmp_path / "rel"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from medanon.locks import OutputLock; "
                               f"lock = OutputLock({str(out)!r}).acquire(); print('held', flush=True); "
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:                                                # another process is writing this release
        assert holder.stdout.readline().strip() == "held"
        code, msg = _run(["anonymize", "ldp-image", phantom, "--epsilon", "1", "--out", out])
    finally:
        holder.kill()
        holder.wait()
    assert code != 0 and "another medanon run is writing" in msg
    assert f"process {holder.pid} on " in msg, msg        # the holder named: a paused job can be found
    assert not out.exists() and not Path(f"{out}.partial").exists()
    assert _run(["anonymize", "ldp-image", phantom, "--epsilon", "1", "--out", out])[0] == 0
    assert not (tmp_path / ".rel.lock").exists()        # the lock file goes with the run


def test_a_file_system_without_locks_is_said_not_taken_for_another_run(tmp_path, monkeypatch):
    """flock failing with ENOLCK (some network shares) is not 'another run is writing': the run goes on, warned."""
    import fcntl

    from medanon import locks

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.warns(UserWarning, match="does not support file locks"):
        lock = locks.OutputLock(tmp_path / "out").acquire()
    assert lock.held
    lock.release()
    assert not lock.held
    from medanon.evaluate.cache import Cache

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / ".x.npy.abcdefgh.tmp").write_bytes(b"?")   # maybe a running evaluation's: kept
    cache = Cache(tmp_path / "cache")
    cache.save_json("r", {"a": 1})
    assert cache.load_json("r") == {"a": 1} and cache.swept == 0
    assert (tmp_path / "cache" / ".x.npy.abcdefgh.tmp").exists()


def test_overwrite_never_deletes_a_file_you_added(tmp_path, phantom):
    out = tmp_path / "rel"
    args = ["anonymize", "kpixel", phantom, "--k", "2", "--out", out]
    assert _run(args)[0] == 0
    (out / "NOTES.txt").write_text("my notes")
    code, msg = _run([*args, "--overwrite"])
    assert code != 0 and "NOTES.txt" in msg and "never deletes your files" in msg
    assert (out / "NOTES.txt").read_text() == "my notes"
    (out / "NOTES.txt").unlink()
    assert _run([*args, "--overwrite"])[0] == 0         # its own files only: replaced


def test_a_copied_marker_proves_nothing(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.docx").write_text("years of work")
    (mine / ".medanon-output.json").write_text('{"written_by": "medanon", "kind": "release", "files": {}}')
    with pytest.raises(UnsafeOutputError, match=r"thesis\.docx"):
        check_output(mine, overwrite=True, what="release")
    assert (mine / "thesis.docx").read_text() == "years of work"


def test_resume_notices_a_changed_patient_id_or_label(tmp_path, phantom):
    data = tmp_path / "data"
    shutil.copytree(phantom, data)
    ds = open_dataset(data, size=32)
    out = tmp_path / "rel"
    with pytest.raises(KeyboardInterrupt):              # killed after one record
        with ReleaseWriter(out, **SETTINGS, source=source_digest(ds)) as w:
            w.add("0", torch.zeros(3, 8, 8), [ds.records[0]])
            raise KeyboardInterrupt
    lines = [line.split(",") for line in (data / "labels.csv").read_text().splitlines()]
    col = lines[0].index("patient_id")
    lines[1][col] = "P00099"                            # one patient id changed, images untouched
    (data / "labels.csv").write_text("\n".join(",".join(cells) for cells in lines) + "\n")
    changed = open_dataset(data, size=32)
    assert [r.path for r in changed.records] == [r.path for r in ds.records]
    with pytest.raises(ConfigError, match=r"other sources: the source images' ids, patient ids or labels \(labels"
                                          r"\.csv edited, or other label columns\) changed since") as e:
        ReleaseWriter(out, **SETTINGS, source=source_digest(changed))
    assert "content" not in str(e.value)                  # the images are the same: only what changed is named


def test_arguments_are_checked_before_anything_is_created(tmp_path, phantom):
    out = tmp_path / "rel"
    code, msg = _run(["anonymize", "kpixel", phantom, "--k", "50", "--out", out])
    assert code != 0 and not out.exists() and not Path(f"{out}.partial").exists(), msg
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert _run(["anonymize", "kpixel", phantom, "--k", "2", "--out", out])[0] == 0   # no --overwrite needed


def test_a_full_disk_is_one_clear_error_and_the_run_resumes(tmp_path, phantom, monkeypatch):
    import medanon.release.files as files

    real = files.atomic_write_bytes
    calls = {"n": 0}

    def full(path, data):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(files, "atomic_write_bytes", full)
    out = tmp_path / "rel"
    args = ["anonymize", "ldp-image", phantom, "--epsilon", "1", "--out", out]
    code, msg = _run(args)
    assert code == 1 and "No space left on device" in msg and ".partial" in msg, msg
    assert len(list((tmp_path / "rel.partial" / "images").iterdir())) == 3
    monkeypatch.setattr(files, "atomic_write_bytes", real)
    code, msg = _run(args)
    assert code == 0, msg
    assert len(list((out / "images").iterdir())) == 12


def _chunk(kind: bytes, data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")


@pytest.mark.parametrize("leak", ["bytes after IEND", "private chunk"])
def test_the_audit_reads_every_png_byte_by_byte(tmp_path, phantom, leak):
    out = tmp_path / "rel"
    assert _run(["anonymize", "kpixel", phantom, "--k", "2", "--out", out])[0] == 0
    png = sorted((out / "images").iterdir())[0]
    data = png.read_bytes()
    if leak == "bytes after IEND":
        data += b"P00001"
    else:
        data = data[:33] + _chunk(b"prVt", b"P00001") + data[33:]     # after IHDR (8 + 25 bytes)
    st = png.stat()
    png.write_bytes(data)
    os.utime(png, ns=(st.st_atime_ns, st.st_mtime_ns))  # the release's one timestamp, as a careful leaker would
    rep = audit_release(out)
    failed = [c for c in rep.checks if not c.passed]
    assert [c.name for c in failed] == ["every PNG holds only image chunks (IHDR, IDAT, IEND), nothing after IEND"]
    assert png.name in failed[0].detail


def test_seeded_noise_is_not_called_secret(tmp_path, phantom):
    import json

    out = tmp_path / "rel"
    assert _run(["anonymize", "ldp-image", phantom, "--epsilon", "1", "--seed", "3", "--out", out])[0] == 0
    privacy = json.loads((out / "manifest.json").read_text())["privacy"]
    text = json.dumps(privacy)
    assert "recorded nowhere" not in text and "no seed exists" not in text
    assert privacy["guarantee"].startswith("none")


def _interruptible() -> None:
    """In the child before it starts: Ctrl-C at its default, whatever this test run inherited (a CI job started in
    the background or under nohup ignores SIGINT, and the launcher rightly keeps an ignored SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_medanon_loads_exits_130_without_a_traceback():
    """Ctrl-C at several moments of the start: inside numpy's or scipy's imports too, where an exception raised
    there once left numpy half-initialised and ended in a RecursionError, not in the interrupt."""
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    interrupted = 0
    for delay in (0.15, 0.3, 0.45, 0.6, 0.75, 0.9):    # torch alone takes longer than this to load
        p = subprocess.Popen([sys.executable, "-c", "import medanon_launcher; medanon_launcher.main()", "--help"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=_interruptible)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        if p.returncode == 0:
            continue                                    # it loaded before the signal arrived
        assert p.returncode == 130 and b"Traceback" not in err, (delay, err.decode())
        assert err.decode().strip() == "interrupted while starting: nothing was read or written", err.decode()
        interrupted += 1
    if not interrupted:
        pytest.skip("medanon loaded before every signal arrived (nothing to test on this machine)")


_INTERRUPT_INSIDE_A_LIBRARY = """
import os, signal, sys, time
import medanon_launcher

class Interrupting:                     # Ctrl-C inside scipy.ndimage's import, as a library that turns
    def find_spec(self, name, path=None, target=None):    # the interrupt into its own error meets it
        if name == "scipy.ndimage":
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            except KeyboardInterrupt:
                raise RuntimeError("half-initialised library")
        return None

sys.meta_path.insert(0, Interrupting())
medanon_launcher.main()
"""


def test_ctrl_c_inside_a_library_import_is_not_turned_into_that_librarys_error():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    p = subprocess.run([sys.executable, "-c", _INTERRUPT_INSIDE_A_LIBRARY, "--help"], capture_output=True,
                       env=env, timeout=120, preexec_fn=_interruptible)
    assert p.returncode == 130, p.stderr.decode()
    assert p.stderr.decode().strip() == "interrupted while starting: nothing was read or written"


def test_a_labels_file_named_by_dataset_yaml_is_read_from_inside_only(tmp_path, phantom):
    data = tmp_path / "data"
    shutil.copytree(phantom, data)
    other = tmp_path / "other"
    other.mkdir()
    shutil.move(data / "labels.csv", other / "labels.csv")
    yaml = (data / "dataset.yaml").read_text()
    (data / "dataset.yaml").write_text(yaml.replace("labels: labels.csv", "labels: ../other/labels.csv"))
    code, msg = _run(["anonymize", "kpixel", data, "--k", "2", "--out", tmp_path / "rel"])
    assert code != 0 and "outside the dataset folder" in msg and "allow-outside" in msg, msg
    before = (other / "labels.csv").read_bytes()
    code, msg = _run(["anonymize", "kpixel", data, "--allow-outside", "--k", "2", "--out", tmp_path / "rel",
                      "--mapping", other / "labels.csv", "--overwrite"])
    assert code != 0 and "never writes into" in msg, msg
    assert (other / "labels.csv").read_bytes() == before


def test_a_splits_file_is_never_replaced_by_another_kind(tmp_path, phantom):
    out = tmp_path / "rel"
    mapping = tmp_path / "map.json"
    assert _run(["anonymize", "kpixel", phantom, "--k", "2", "--out", out, "--mapping", mapping])[0] == 0
    before = mapping.read_bytes()
    code, msg = _run(["data", "split", phantom, "--out", mapping, "--overwrite"])
    assert code != 0 and "not a splits" in msg and mapping.read_bytes() == before
    code, msg = _run(["train", "identity", "--data", phantom, "--steps", "1", "--out", mapping])
    assert code != 0 and "not a checkpoint" in msg and mapping.read_bytes() == before


@pytest.mark.parametrize("command", ["ldp-image --epsilon 1 --clip-box calibrated --calibrate-on",
                                     "kpca --k 2 --basis-from"])
def test_a_second_dataset_being_read_is_an_input(tmp_path, phantom, command):
    other = tmp_path / "other"
    shutil.copytree(phantom, other)
    before = _tree_digest(other)
    method, *opts, flag = command.split()
    for out in (other, other / "rel", tmp_path / "rel"):
        mapping = other / "labels.csv" if out == tmp_path / "rel" else tmp_path / "map.json"
        code, msg = _run(["anonymize", method, phantom, *opts, flag, other, "--out", out, "--mapping", mapping,
                          "--overwrite"])
        assert code != 0 and "never writes into" in msg, (out, msg)
    assert _tree_digest(other) == before


def test_a_second_run_naming_the_same_mapping_is_refused_at_once(tmp_path, phantom):
    mapping = tmp_path / "private" / "m.json"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from medanon.locks import OutputLock; "
                               f"lock = OutputLock({str(mapping)!r}).acquire(); print('held', flush=True); "
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:                                                # another run is making a release with this mapping
        assert holder.stdout.readline().strip() == "held"
        code, msg = _run(["anonymize", "kpixel", phantom, "--k", "2", "--out", tmp_path / "other",
                          "--mapping", mapping])
    finally:
        holder.kill()
        holder.wait()
    assert code != 0 and "another medanon run is writing m.json" in msg, msg
    assert not (tmp_path / "other").exists() and not mapping.exists()


def test_a_full_disk_names_the_file_that_could_not_be_written(tmp_path, monkeypatch):
    """A failed write() or fsync() carries no file name: the error named the release's folder (another disk) when it
    was the private mapping that did not fit."""
    from medanon.fsutil import atomic_write_bytes
    from medanon.release.writer_safety import os_error

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as e:
        atomic_write_bytes(tmp_path / "private" / "m.json", b"{}")
    assert e.value.filename == str(tmp_path / "private" / "m.json") and e.value.errno == errno.ENOSPC
    assert not list((tmp_path / "private").iterdir())                       # no temporary file left
    said = os_error(e.value, tmp_path / "rel.partial")
    assert f"could not write {tmp_path / 'private' / 'm.json'}: No space left" in str(said)


def test_a_phantom_that_cannot_record_its_working_folder_leaves_none_behind(tmp_path, monkeypatch):
    """On a full disk the record of the temporary folder could not be written, and the empty folder stayed."""
    import medanon.fsutil as fsutil

    def full(out, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(out))

    monkeypatch.setattr(fsutil, "claim_working_path", full)
    with pytest.raises(OSError):
        generate(PhantomConfig(patients=2, per_patient=1, size=16, workers=1), tmp_path / "ph", progress=False)
    assert not list(tmp_path.iterdir())


def test_a_source_that_cannot_be_read_is_not_reported_as_a_failed_write(tmp_path):
    """An operating-system error on a file outside the release (a source read mid-run) reaches the caller as it was;
    one on the release's own files, or one naming no file, is the writer's 'could not write' error."""
    from medanon.release.writer import ReleaseWriter
    from medanon.release.writer_safety import OutputWriteError

    src = tmp_path / "sources" / "a.png"
    for name, err, expect in (("r1", OSError(errno.EACCES, "Permission denied", str(src)), PermissionError),
                              ("r2", OSError(errno.ENOSPC, "No space left on device"), OutputWriteError),
                              ("r3", OSError(errno.ENOSPC, "No space left", str(tmp_path / "r3.partial" / "x.png")),
                               OutputWriteError)):
        with pytest.raises(expect) as e, ReleaseWriter(tmp_path / name, method="snow", params={}, privacy={},
                                                     labels=[]):
            raise err
        assert (str(src) in str(e.value)) == (name == "r1"), str(e.value)


def test_a_splits_file_is_not_written_into_a_linked_image_folder(tmp_path, phantom):
    """``data split`` checked its --out against the dataset's files from a scan that never ran for a named layout (a
    default of its options made every scan fail, silently): with --allow-outside it wrote the splits file into the
    image folder the dataset links to."""
    ds, real = _linked(tmp_path, phantom)
    before = _tree_digest(real.parent)
    code, msg = _run(["data", "split", ds, "--allow-outside", "--stratify", "", "--out", real / "splits.csv"])
    assert code != 0 and "never writes into" in msg, msg
    assert _tree_digest(real.parent) == before


def test_a_release_being_written_is_not_read(tmp_path, phantom):
    """A release being replaced was read half old, half new (a Snow manifest with k-Same-Pixel's labels), and its
    new mapping was called another release's, with the advice to delete it. Readers refuse while its writer runs."""
    import medanon

    out = medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "rel", mapping=tmp_path / "rel.mapping.json",
                                                      progress=False)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from medanon.locks import OutputLock; "
                               f"lock = OutputLock({str(out)!r}).acquire(); print('held', flush=True); "
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:                                                # another process is replacing this release
        assert holder.stdout.readline().strip() == "held"
        code, msg = _run(["audit", out])
        assert code != 0 and f"release {out} is being written now by process {holder.pid}" in msg, msg
        code, msg = _run(["evaluate", "--real", phantom, "--release", out, "--out", tmp_path / "ev"])
        assert code != 0 and "is being written now" in msg and not (tmp_path / "ev").exists(), msg
    finally:
        holder.kill()
        holder.wait()
    assert _run(["audit", out])[0] == 0                 # its writer gone (killed), the release reads again


def test_nothing_is_written_inside_a_folder_another_run_is_writing(tmp_path, phantom):
    """While the demo ran, `anonymize ... --out DEMO/releases/kpixel-k2 --overwrite` replaced one of its releases
    with another method's. An output inside a folder whose writer holds its lock is refused, naming the holder."""
    busy = tmp_path / "demo-output"
    busy.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from medanon.locks import OutputLock; "
                               f"lock = OutputLock({str(busy)!r}).acquire(); print('held', flush=True); "
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, msg = _run(["anonymize", "ldp-image", phantom, "--epsilon", "1", "--out", busy / "releases" / "r"])
        assert code != 0 and f"which another medanon run is writing now (process {holder.pid}" in msg, msg
        assert not (busy / "releases").exists()
    finally:
        holder.kill()
        holder.wait()
    assert _run(["anonymize", "ldp-image", phantom, "--epsilon", "1", "--out", busy / "releases" / "r"])[0] == 0


def test_a_second_run_exporting_to_the_same_path_is_refused_before_training(tmp_path, phantom):
    """Two runs with one new --export: the second was refused only after its training, at the export."""
    export = tmp_path / "g.pt"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from medanon.locks import OutputLock; "
                               f"lock = OutputLock({str(export)!r}).acquire(); print('held', flush=True); "
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    config = Path(__file__).resolve().parents[1] / "configs" / "stylegan" / "tiny32.yaml"
    try:                                                # another run exports there (its training still going)
        assert holder.stdout.readline().strip() == "held"
        code, msg = _run(["train", "gan", phantom, "--config", config, "--set", "resolution=16", "--steps", "1",
                          "--checkpoint-every", "1", "--out", tmp_path / "run", "--export", export])
    finally:
        holder.kill()
        holder.wait()
    assert code != 0 and "another medanon run is writing" in msg and "g.pt" in msg, msg
    assert not (tmp_path / "run" / "checkpoint.pt").exists() and not export.exists()


def test_a_start_where_ctrl_c_is_ignored_keeps_it_ignored():
    """A job started with SIGINT ignored (nohup, a background job of a script) is not made killable by Ctrl-C while
    medanon loads."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    code = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); import medanon_launcher, sys; "
            "sys.argv = ['medanon', '--help']; import threading, os, time\n"
            "threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
            "medanon_launcher.main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120)
    assert p.returncode == 0 and b"Usage" in p.stdout, (p.returncode, p.stderr.decode()[-500:])
