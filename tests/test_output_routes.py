"""Outputs reached by other routes: the folder a release is written in until it is finished, a second output of
the same run, the evaluation's cache, a network being retrained, an edit that keeps a file's size, what a killed
run left beside an output, and an output named only by its place."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from test_release_safety import SETTINGS, _release

import medanon
from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.data.layouts import scan
from medanon.errors import ConfigError, OutputExistsError
from medanon.outputs import UnsafeOutputError
from medanon.phantoms.generate import generate
from medanon.release import ReleaseWriter

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def phantom(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=6, per_patient=2, size=16, workers=1),
                    tmp_path_factory.mktemp("routes") / "fundus", progress=False)


def test_a_mapping_in_the_folder_that_becomes_the_release_is_refused(tmp_path, phantom):
    """OUT.partial is renamed to OUT: a mapping written there was published with the release."""
    records = scan(phantom).records
    for mapping in (tmp_path / "r.partial" / "m.json", tmp_path / ".r.old-1" / "m.json", tmp_path / "r" / "m.json"):
        with pytest.raises(ConfigError, match="would be inside the release"):
            _release(tmp_path / "r", records, mapping=mapping)
    assert not (tmp_path / "r").exists() and not (tmp_path / "r.partial").exists()


def test_a_snow_sweep_does_not_put_one_mapping_into_another_release(tmp_path, phantom):
    r = CliRunner().invoke(cli, ["anonymize", "snow", str(phantom), "--size", "16", "--p", "0.1,0.12", "--out",
                                 str(tmp_path / "r{p}"), "--mapping", str(tmp_path / "r{p}2" / "m.json")])
    assert r.exit_code == 1 and "would be inside the release" in r.output, r.output
    assert not list(tmp_path.iterdir())


def test_an_interrupted_close_resumes_with_its_own_mapping(tmp_path, phantom, monkeypatch):
    """The mapping waits beside its path until the release is in place: a run stopped before leaves no mapping (and
    no pending one), and resumes."""
    import medanon.release.writer as writer

    records = scan(phantom).records
    real_shuffle = writer._shuffle

    def stop(folder):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_shuffle", stop)
    with pytest.raises(KeyboardInterrupt):
        _release(tmp_path / "r", records, mapping=tmp_path / "m.json")
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "r").exists()
    assert not (tmp_path / ".m.json.pending").exists()
    monkeypatch.setattr(writer, "_shuffle", real_shuffle)
    _release(tmp_path / "r", records, mapping=tmp_path / "m.json")
    assert len(json.loads((tmp_path / "m.json").read_text())["records"]) == len(records)
    other = tmp_path / "other.json"                   # another release's mapping is still never replaced
    shutil.copy(tmp_path / "m.json", other)
    with pytest.raises(OutputExistsError, match="belongs to the release 'r', not to"):
        _release(tmp_path / "r2", records, mapping=other)


def test_the_evaluation_cache_is_never_another_output(tmp_path, phantom):
    rel = medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "rel", mapping=tmp_path / "m.json", progress=False)
    other = medanon.anonymize.kpixel(phantom, k=3).save(tmp_path / "other", progress=False)
    second = generate(PhantomConfig(patients=2, per_patient=1, size=16, workers=1), tmp_path / "ph2",
                      progress=False)                                  # a dataset this evaluation does not read
    before = {c: sorted(p.name for p in c.rglob("*")) for c in (other, second)}
    for cache in (other, second):
        with pytest.raises(UnsafeOutputError,
                           match=r"is a medanon (release|phantom) folder, not an evaluation-cache folder"):
            medanon.evaluate(real=phantom, releases=[rel], mappings={"rel": tmp_path / "m.json"}, cache_dir=cache,
                             preset="tiny", size=16)
    assert {c: sorted(p.name for p in c.rglob("*")) for c in (other, second)} == before
    # the report folder as its own cache (or under it): it ran once, then was a cache that the same command refused
    for cache, out in ((tmp_path / "ev", tmp_path / "ev"), (tmp_path, tmp_path / "ev")):
        with pytest.raises(medanon.errors.ConfigError, match=r"is the report folder .* or holds it"):
            medanon.evaluate(real=phantom, releases=[rel], mappings={"rel": tmp_path / "m.json"}, cache_dir=cache,
                             out=out, preset="tiny", size=16)
    assert not (tmp_path / "ev").exists()


def test_an_evaluation_refuses_its_folders_before_it_makes_a_release(tmp_path, phantom, monkeypatch):
    from medanon.release.release import Release

    made = []
    monkeypatch.setattr(Release, "save", lambda self, *a, **k: made.append(a))
    rel = medanon.anonymize.kpixel(phantom, k=2)
    with pytest.raises(UnsafeOutputError):
        medanon.evaluate(real=phantom, releases=[rel], out=phantom / "report", preset="tiny", size=16)
    assert made == []


def test_fresh_identity_training_keeps_the_old_network_until_the_new_one_exists(tmp_path, phantom):
    old = tmp_path / "id.pt"
    shutil.copy(ROOT / "checkpoints" / "identity-attacker-independent-fundus24.pt", old)
    before = old.read_bytes()
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "identity", str(phantom), "--size", "16", "--out",
                                 str(old), "--fresh", "--overwrite", "--split", "test", "--steps", "2"])
    assert r.exit_code != 0 and "finished identity network" not in r.output      # it failed while training
    assert old.read_bytes() == before


def test_identity_training_refuses_a_network_of_other_settings_before_decoding_the_images(tmp_path, phantom,
                                                                                            monkeypatch):
    """The refusal came after every image was decoded (minutes on a large dataset); the settings need none."""
    from medanon.data.dataset import ImageDataset

    out = tmp_path / "id.pt"
    base = ["--device", "cpu", "train", "identity", str(phantom), "--size", "16", "--out", str(out), "--steps", "1"]
    assert CliRunner().invoke(cli, base).exit_code == 0
    decoded = []
    real = ImageDataset.tensors
    monkeypatch.setattr(ImageDataset, "tensors", lambda self, *a, **k: decoded.append(1) or real(self, *a, **k))
    r = CliRunner().invoke(cli, [*base, "--seed", "1"])
    assert r.exit_code == 1 and "trained with other settings" in r.output and decoded == [], r.output
    before = out.read_bytes()
    r = CliRunner().invoke(cli, [*base, "--seed", "1", "--fresh"])          # a finished network: --overwrite too
    assert r.exit_code == 1 and "holds a finished identity network" in r.output and "--overwrite" in r.output
    assert decoded == [] and out.read_bytes() == before
    assert CliRunner().invoke(cli, [*base, "--seed", "1", "--fresh", "--overwrite"]).exit_code == 0 and decoded == [1]
    assert out.read_bytes() != before


def test_overwrite_spares_an_edit_that_keeps_the_size(tmp_path, phantom):
    out = medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "r", progress=False)
    labels = out / "labels.csv"
    text = labels.read_text()
    head, first, *rest = text.split("\n")
    cells = first.split(",")
    cells[3] = "1" if cells[3] != "1" else "2"                             # one record's grade, same length
    edited = "\n".join([head, ",".join(cells), *rest])
    assert edited != text and len(edited) == len(text)
    labels.write_text(edited)
    with pytest.raises(UnsafeOutputError, match=r"labels\.csv"):
        medanon.anonymize.kpixel(phantom, k=3).save(out, overwrite=True, progress=False)
    assert labels.read_text() == edited


def test_masks_read_from_a_folder_are_an_input(tmp_path, phantom):
    masks = tmp_path / "masks"
    shutil.copytree(phantom / "masks", masks)
    rel = medanon.anonymize.vs_snow(phantom, p=0.3, vessels="files", masks_dir=masks)
    with pytest.raises(UnsafeOutputError, match="never writes into"):
        rel.save(masks / "rel", progress=False)


def test_what_a_killed_run_left_beside_an_output_is_removed(tmp_path):
    from medanon.fsutil import claim_working_path

    out = tmp_path / "ph"
    (tmp_path / ".ph.x1y2z3w4.partial").mkdir()                               # a killed phantom run's folder
    (tmp_path / ".ph.x1y2z3w4.partial" / "a.png").write_bytes(b"x")
    (tmp_path / ".ph.old-123").mkdir()                                        # a killed replacement's old output
    for left in (".ph.x1y2z3w4.partial", ".ph.old-123"):                      # as the killed runs recorded them
        claim_working_path(out, tmp_path / left)
    (tmp_path / "keep.partial").mkdir()                                       # not medanon's pattern: kept
    (tmp_path / ".ph.x.abcdefgh.partial").mkdir()                             # output "ph.x" being written: kept
    generate(PhantomConfig(patients=2, per_patient=1, size=16, workers=1), out, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".ph.lock") == [".ph.x.abcdefgh.partial",
                                                                                  "keep.partial", "ph"]


def test_a_folder_named_like_a_leftover_is_not_removed_unless_a_run_recorded_it(tmp_path):
    """Any sibling named .OUT.old-N or .OUT.xxxxxxxx.partial was removed as a killed run's leftover: the run's own
    input dataset so named was deleted (and the run then failed on its missing images), a user's notes too. Only
    what a run recorded making is removed now."""
    data = generate(PhantomConfig(patients=4, per_patient=1, size=16, workers=1), tmp_path / ".rel.old-42",
                    progress=False)
    (tmp_path / ".rel.abcd1234.partial").mkdir()
    (tmp_path / ".rel.abcd1234.partial" / "NOTES.txt").write_text("mine")
    before = sorted(p.name for p in data.rglob("*"))
    out = medanon.anonymize.kpixel(medanon.open_dataset(data, size=16), k=2).save(tmp_path / "rel", progress=False)
    assert medanon.audit(out).passed and sorted(p.name for p in data.rglob("*")) == before
    assert (tmp_path / ".rel.abcd1234.partial" / "NOTES.txt").read_text() == "mine"
    assert not (tmp_path / ".rel.working.json").exists()                      # nothing left to remove


def test_overwrite_of_a_link_replaces_the_link_and_keeps_what_it_pointed_at(tmp_path):
    target = generate(PhantomConfig(patients=2, per_patient=1, size=16, workers=1), tmp_path / "ph",
                      progress=False)
    (tmp_path / "link").symlink_to(target)
    generate(PhantomConfig(patients=3, per_patient=1, size=16, workers=1), tmp_path / "link", progress=False,
             overwrite=True)
    assert not (tmp_path / "link").is_symlink() and len(scan(tmp_path / "link").records) == 3
    assert len(scan(target).records) == 2
    assert not [p for p in tmp_path.iterdir() if ".old-" in p.name]


def test_a_link_to_an_empty_folder_is_no_new_output(tmp_path, phantom):
    """A release, phantom or report named by a link to an empty folder was published by renaming over the link: the
    link became a folder on this disk and the place it led to stayed empty. It is refused, naming where it leads."""
    (tmp_path / "big").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "big")
    for args in (["phantom", "--patients", "2", "--out", str(tmp_path / "out")],
                 ["anonymize", "kpixel", str(phantom), "--k", "2", "--out", str(tmp_path / "out")]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 1 and "is a link to" in r.output and str(tmp_path / "big") in r.output, r.output
        assert (tmp_path / "out").is_symlink() and not any((tmp_path / "big").iterdir())


@pytest.mark.parametrize("args", [["phantom", "--patients", "2", "--out", "."],
                                  ["anonymize", "kpixel", "DATA", "--k", "2", "--out", "./"]])
def test_an_output_named_only_by_its_place_is_refused(tmp_path, phantom, args, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, [str(phantom) if a == "DATA" else a for a in args])
    assert r.exit_code == 1 and "names a folder by its place" in r.output and "Traceback" not in r.output


def test_a_release_writer_refuses_dot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsafeOutputError, match="by its place"):
        ReleaseWriter(Path("."), **SETTINGS)



def test_an_evaluation_does_not_replace_the_report_of_another(tmp_path, phantom):
    """A report of release A was replaced by one of release B in the same --out, without --overwrite."""
    real = generate(PhantomConfig(patients=20, per_patient=2, size=32, workers=1), tmp_path / "real", progress=False)
    train = medanon.split_dataset(real)["train"]                 # the split evaluate recomputes by default
    for name, k in (("a", 2), ("b", 3)):
        medanon.anonymize.kpixel(train, k=k).save(tmp_path / name, mapping=tmp_path / f"{name}.json", progress=False)
    args = ["evaluate", "--real", str(real), "--preset", "tiny", "--no-inception", "--size", "32", "--out",
            str(tmp_path / "ev")]
    r = CliRunner().invoke(cli, [*args, "--release", str(tmp_path / "a"), "--mapping", f"a={tmp_path / 'a.json'}"])
    assert r.exit_code == 0, r.output
    before = (tmp_path / "ev" / "report.json").read_bytes()
    r = CliRunner().invoke(cli, [*args, "--release", str(tmp_path / "b"), "--mapping", f"b={tmp_path / 'b.json'}"])
    assert r.exit_code == 1 and "holds the report of another evaluation" in r.output and "--overwrite" in r.output
    assert (tmp_path / "ev" / "report.json").read_bytes() == before
    # the same folder with an edited held-out label is other data: its report is not replaced silently
    sources = {rec.patient_id for rec in train.records}
    table = real / "labels.csv"
    head, *rows = table.read_text().splitlines()
    at, pid = head.split(",").index("grade"), head.split(",").index("patient_id")
    i = next(i for i, row in enumerate(rows) if row.split(",")[pid] not in sources)
    cells = rows[i].split(",")
    cells[at] = str((int(float(cells[at])) + 1) % 5)
    rows[i] = ",".join(cells)
    table.write_text("\n".join([head, *rows]) + "\n")
    r = CliRunner().invoke(cli, [*args, "--release", str(tmp_path / "a"), "--mapping", f"a={tmp_path / 'a.json'}"])
    assert r.exit_code == 1 and "holds the report of an evaluation of other data" in r.output, r.output
    assert "--overwrite" in r.output and (tmp_path / "ev" / "report.json").read_bytes() == before


@pytest.mark.parametrize("stop_at", ["write_marker", "_stamp", "remove_replaced"])
def test_a_release_killed_while_moving_into_place_resumes(tmp_path, phantom, monkeypatch, stop_at):
    """The journals leave OUT.partial before it is published; a run killed after that finishes on the next run."""
    import medanon.fsutil as fsutil
    import medanon.release.writer as writer

    records = scan(phantom).records
    real_write = writer.write_record
    if stop_at == "remove_replaced":                  # replacing an older release: killed after the swap
        _release(tmp_path / "r", records[:4])
    module = fsutil if stop_at == "remove_replaced" else writer
    real = getattr(module, stop_at)

    def stop(*args, **kwargs):
        real(*args, **kwargs) if stop_at == "remove_replaced" else None
        raise KeyboardInterrupt

    monkeypatch.setattr(module, stop_at, stop)
    with pytest.raises(KeyboardInterrupt):
        _release(tmp_path / "r", records, mapping=tmp_path / "m.json", overwrite=True)
    assert (tmp_path / ".r.closing").is_dir()
    monkeypatch.setattr(module, stop_at, real)
    written = []
    monkeypatch.setattr(writer, "write_record", lambda *a, **k: written.append(1) or real_write(*a, **k))
    _release(tmp_path / "r", records, mapping=tmp_path / "m.json", overwrite=True)
    # killed before the rename, every record is reused; after it (the release in place), the run makes it anew
    assert len(written) == (len(records) if stop_at == "remove_replaced" else 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "r"]
    assert len(list((tmp_path / "r" / "images").iterdir())) == len(records)
    assert not [p for p in (tmp_path / "r").rglob(".journal*")]
    assert len(json.loads((tmp_path / "m.json").read_text())["records"]) == len(records)


@pytest.mark.parametrize("stop_at", ["_shuffle", "replace_output", "killed", "killed-other-mapping",
                                     "killed-no-mapping"])
def test_an_overwrite_stopped_while_closing_keeps_each_release_with_its_own_mapping(tmp_path, phantom, monkeypatch,
                                                                                      stop_at):
    """Replacing a release and its mapping: stopped before the swap, the old release keeps its old mapping (it was
    written over first, so the published release lost its only link to its sources); stopped after it, the new
    release has its new mapping; killed in between the two renames, the next run puts the pending mapping in place."""
    import medanon.release.writer as writer

    records = scan(phantom).records
    mapping = tmp_path / "m.json"
    _release(tmp_path / "r", records[:4], mapping=mapping)
    old = mapping.read_text()
    real = {"_shuffle": writer._shuffle, "replace_output": writer.replace_output}

    def stop(*args, **kwargs):
        if stop_at == "replace_output":
            real[stop_at](*args, **kwargs)               # the new release is in place, its mapping not yet
        raise KeyboardInterrupt

    if stop_at.startswith("killed"):                   # SIGKILL between the swap and the mapping's rename
        monkeypatch.setattr(writer.os, "replace", _replace_killing_at(mapping, writer.os.replace))
        with pytest.raises(SystemExit):
            _release(tmp_path / "r", records, mapping=mapping, overwrite=True)
        monkeypatch.undo()
        assert (tmp_path / ".m.json.pending").is_file() and mapping.read_text() == old
        # the next run opens the release (and its checks do not take the old mapping for another release's), with
        # the same mapping path, another, or none: the pending mapping goes where its run was asked to put it
        then = {"killed": mapping, "killed-other-mapping": tmp_path / "m2.json", "killed-no-mapping": None}[stop_at]
        ReleaseWriter(tmp_path / "r", **SETTINGS, mapping=then, source={"sha256": "a"}, resume=False,
                      overwrite=True).release_locks()
    else:
        monkeypatch.setattr(writer, stop_at, stop)
        with pytest.raises(KeyboardInterrupt):
            _release(tmp_path / "r", records, mapping=mapping, overwrite=True)
    held = set(json.loads(mapping.read_text())["records"])
    published = {f"images/{p.name}" for p in (tmp_path / "r" / "images").iterdir()}
    assert held == published and not (tmp_path / ".m.json.pending").exists()
    assert len(published) == (4 if stop_at == "_shuffle" else len(records))
    assert (mapping.read_text() == old) == (stop_at == "_shuffle")


def test_a_mapping_pending_when_a_run_was_killed_before_its_release_went_in_goes(tmp_path, phantom, monkeypatch):
    """Killed (no clean-up) after its mapping was pending and before the release was swapped in; the next run names
    another mapping path: the pending file, which maps records never published, is removed and said, and the old
    release keeps its mapping."""
    import medanon.release.writer as writer

    records = scan(phantom).records
    mapping = tmp_path / "m.json"
    _release(tmp_path / "r", records[:4], mapping=mapping)
    old = mapping.read_text()

    def killed(*a, **k):
        raise SystemExit("killed")

    monkeypatch.setattr(writer, "_shuffle", killed)
    monkeypatch.setattr(writer, "settle_pending_mapping", lambda *a, **k: None)     # SIGKILL: nothing runs after
    with pytest.raises(SystemExit):
        _release(tmp_path / "r", records, mapping=mapping, overwrite=True)
    monkeypatch.undo()
    assert (tmp_path / ".m.json.pending").is_file()
    with pytest.warns(UserWarning, match=r"removed .*\.m\.json\.pending, the private mapping a stopped run"):
        _release(tmp_path / "r2", records, mapping=tmp_path / "m2.json")     # another release: not this one
        _release(tmp_path / "r", records, mapping=tmp_path / "other.json", overwrite=True)
    assert not (tmp_path / ".m.json.pending").exists() and mapping.read_text() == old


def test_another_release_never_takes_a_mapping_pending_for_a_killed_one(tmp_path, phantom, monkeypatch):
    """Release A (its first) killed between its swap and its mapping's rename; release B then names the same mapping
    path: B is refused (before, B's opening removed A's pending mapping and A was left with none), and A's own rerun
    puts A's mapping in place."""
    import medanon.release.writer as writer

    records = scan(phantom).records
    mapping = tmp_path / "m.json"
    monkeypatch.setattr(writer.os, "replace", _replace_killing_at(mapping, writer.os.replace))
    with pytest.raises(SystemExit):
        _release(tmp_path / "a", records, mapping=mapping)
    monkeypatch.undo()
    pending = tmp_path / ".m.json.pending"
    assert pending.is_file() and not mapping.exists() and (tmp_path / "a").is_dir()
    with pytest.raises(OutputExistsError, match="is pending for the release 'a'"):
        _release(tmp_path / "b", records[:4], mapping=mapping)
    assert pending.is_file() and not (tmp_path / "b").exists()
    ReleaseWriter(tmp_path / "a", **SETTINGS, mapping=mapping, source={"sha256": "a"}, resume=False,
                  overwrite=True).release_locks()
    held = set(json.loads(mapping.read_text())["records"])
    assert held == {f"images/{p.name}" for p in (tmp_path / "a" / "images").iterdir()} and not pending.exists()


def test_a_release_killed_inside_its_shuffle_resumes_with_its_pending_mapping(tmp_path, phantom, monkeypatch):
    """Killed while the shuffle had moved the images to ``.images.shuffled`` and deleted ``images``: the release's own
    pending mapping is still recognised as its own (its journal names its records), so the same command resumes."""
    import shutil

    import medanon.release.writer as writer

    records = scan(phantom).records
    mapping = tmp_path / "m.json"

    def killed(folder):
        images, shuffled = folder / "images", folder / ".images.shuffled"
        shuffled.mkdir()
        for p in images.iterdir():
            shutil.copyfile(p, shuffled / p.name)
        shutil.rmtree(images)
        raise SystemExit("killed")                       # before the rename back

    monkeypatch.setattr(writer, "_shuffle", killed)
    monkeypatch.setattr(writer, "settle_pending_mapping", lambda *a, **k: None)     # SIGKILL: nothing runs after
    with pytest.raises(SystemExit):
        _release(tmp_path / "r", records, mapping=mapping)
    monkeypatch.undo()
    assert (tmp_path / ".m.json.pending").is_file()
    _release(tmp_path / "r", records, mapping=mapping)
    held = set(json.loads(mapping.read_text())["records"])
    assert held == {f"images/{p.name}" for p in (tmp_path / "r" / "images").iterdir()}
    assert not (tmp_path / ".m.json.pending").exists()


def test_a_noted_pending_mapping_of_another_release_of_the_same_name_is_left_alone(tmp_path, phantom, monkeypatch):
    """s1/release stopped while shuffling (its note stays), then s2/release (same folder name, same mapping path)
    killed between its swap and its mapping's rename; s1/release resumed with another mapping path must not remove
    s2's pending mapping (its only one) nor say it did."""
    import warnings

    import medanon.release.writer as writer

    records = scan(phantom).records
    (tmp_path / "s1").mkdir()
    (tmp_path / "s2").mkdir()
    mapping = tmp_path / "m.json"

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_shuffle", stop)
    with pytest.raises(KeyboardInterrupt):
        _release(tmp_path / "s1" / "release", records, mapping=mapping)
    monkeypatch.undo()
    monkeypatch.setattr(writer.os, "replace", _replace_killing_at(mapping, writer.os.replace))
    with pytest.raises(SystemExit):
        _release(tmp_path / "s2" / "release", records[:4], mapping=mapping)
    monkeypatch.undo()
    pending = tmp_path / ".m.json.pending"
    assert pending.is_file()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _release(tmp_path / "s1" / "release", records, mapping=tmp_path / "m1.json")
    assert pending.is_file() and not [w for w in said if "m.json.pending" in str(w.message)]


def test_a_refused_rerun_still_puts_a_killed_runs_pending_mapping_in_place(tmp_path, phantom, monkeypatch):
    """Killed between the swap and the mapping's rename, then run again *without* --overwrite: the rerun is refused
    (the release exists), but the published release gets its mapping (before, it stayed pending until a run with
    --overwrite, and the release had no mapping at its path)."""
    import medanon.release.writer as writer

    records = scan(phantom).records
    mapping = tmp_path / "m.json"
    _release(tmp_path / "r", records[:4], mapping=mapping)
    monkeypatch.setattr(writer.os, "replace", _replace_killing_at(mapping, writer.os.replace))
    with pytest.raises(SystemExit):
        _release(tmp_path / "r", records, mapping=mapping, overwrite=True)
    monkeypatch.undo()
    assert (tmp_path / ".m.json.pending").is_file()
    with pytest.raises(OutputExistsError):
        _release(tmp_path / "r", records, mapping=mapping)
    held = set(json.loads(mapping.read_text())["records"])
    assert held == {f"images/{p.name}" for p in (tmp_path / "r" / "images").iterdir()} and len(held) == len(records)
    assert not (tmp_path / ".m.json.pending").exists() and not (tmp_path / ".r.closing").exists()


def _replace_killing_at(mapping: Path, real):
    """``os.replace`` that dies (as SIGKILL would, no clean-up) when asked to move ``mapping``'s pending file."""
    def replace(src, dst, *a, **k):
        if Path(dst) == mapping:
            raise SystemExit("killed")
        return real(src, dst, *a, **k)
    return replace


def test_foreign_files_in_the_closing_folder_are_refused(tmp_path, phantom):
    (tmp_path / ".r.closing").mkdir()
    (tmp_path / ".r.closing" / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="did not write there"):
        _release(tmp_path / "r", scan(phantom).records)
    assert (tmp_path / ".r.closing" / "notes.txt").read_text() == "mine"


def test_a_release_killed_while_closing_resumes_with_its_mapping_without_overwrite(tmp_path, phantom, monkeypatch):
    import medanon.release.writer as writer

    records = scan(phantom).records
    real = writer._stamp

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_stamp", stop)
    with pytest.raises(KeyboardInterrupt):
        _release(tmp_path / "r", records, mapping=tmp_path / "m.json")
    monkeypatch.setattr(writer, "_stamp", real)
    _release(tmp_path / "r", records, mapping=tmp_path / "m.json")      # the same command, no overwrite
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "r"]


@pytest.mark.parametrize("replacing", [False, True])
def test_a_mapping_written_by_a_killed_close_goes_when_the_resume_writes_it_elsewhere(tmp_path, phantom, monkeypatch,
                                                                                         replacing):
    """Stopped between writing the mapping and publishing the release, then resumed with another mapping path: the
    first path never holds the mapping of records never published (it waited beside it, and went); a published
    release's mapping is kept."""
    import medanon.release.writer as writer

    records = scan(phantom).records
    if replacing:                                   # an older release of the same folder, with its own mapping
        _release(tmp_path / "r", records[:4], mapping=tmp_path / "old.json")
    real = writer._stamp

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_stamp", stop)
    with pytest.raises(KeyboardInterrupt):
        _release(tmp_path / "r", records, mapping=tmp_path / "first.json", overwrite=replacing)
    monkeypatch.setattr(writer, "_stamp", real)
    assert not (tmp_path / "first.json").exists() and not (tmp_path / ".first.json.pending").exists()
    _release(tmp_path / "r", records, mapping=tmp_path / "second.json", overwrite=replacing)
    assert not (tmp_path / "first.json").exists()
    assert len(json.loads((tmp_path / "second.json").read_text())["records"]) == len(records)
    assert (tmp_path / "old.json").is_file() == replacing          # another release's mapping: never touched


def test_a_mapping_that_appears_while_a_release_is_made_is_not_replaced(tmp_path, phantom):
    """Another run naming the same mapping finished first: this one must not replace its private mapping."""
    records = scan(phantom).records
    mapping = tmp_path / "m.json"
    with pytest.raises(Exception, match="appeared while this release was being made"):
        with ReleaseWriter(tmp_path / "r", **SETTINGS, mapping=mapping, source={"sha256": "a"}) as rel:
            for r in records:
                rel.add(r.record_id, torch.zeros(3, 8, 8), [r])
            mapping.write_text('{"format": "medanon-mapping", "release": "other"}')
    assert json.loads(mapping.read_text())["release"] == "other"
    assert (tmp_path / "r.partial").is_dir() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("where", ["out", "mapping", "data"])
def test_a_loop_of_symbolic_links_is_named_not_a_traceback(tmp_path, phantom, where):
    (tmp_path / "loopA").symlink_to(tmp_path / "loopB")
    (tmp_path / "loopB").symlink_to(tmp_path / "loopA")
    loop = str(tmp_path / "loopA")
    args = {"out": [str(phantom), "--out", loop], "mapping": [str(phantom), "--out", str(tmp_path / "r"),
                                                             "--mapping", loop + "/m.json"],
            "data": [loop, "--out", str(tmp_path / "r")]}[where]
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", *args, "--k", "2"])
    assert r.exit_code == 1 and "Traceback" not in r.output and "loop of symbolic links" in r.output, r.output
    with pytest.raises(medanon.errors.ConfigError, match="loop of symbolic links"):
        medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "r", mapping=tmp_path / "loopA" / "m.json")


def test_a_link_then_dotdot_is_followed_as_the_system_follows_it(tmp_path, phantom):
    """``deep/../s.csv`` with ``deep -> DATASET/images`` is DATASET/s.csv to the operating system; the check dropped
    the ``..`` before following the link, judged ``./s.csv`` and wrote into the dataset."""
    data = tmp_path / "data"
    shutil.copytree(phantom, data)
    (tmp_path / "deep").symlink_to(data / "images")
    for args in (["data", "split", str(data), "--out", str(tmp_path / "deep" / ".." / "s.csv")],
                 ["phantom", "--patients", "2", "--size", "16", "--out", str(tmp_path / "deep" / ".." / "ph")]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code != 0 and "dataset folder" in r.output, r.output
    assert sorted(p.name for p in data.iterdir()) == sorted(p.name for p in phantom.iterdir())


def test_a_snow_sweep_never_gives_two_p_values_one_release(tmp_path, phantom):
    """p values that print alike (0.3, 0.3000001), or folders a link makes one, published one release holding both
    p's images (listed and unlisted), its manifest naming one p."""
    r = CliRunner().invoke(cli, ["anonymize", "snow", str(phantom), "--size", "16", "--p", "0.3,0.3000001", "--out",
                                 str(tmp_path / "dup-p{p}")])
    assert r.exit_code != 0 and "0.3 and --p 0.3 one and the same path" in r.output, r.output
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "a0.1").mkdir()
    (tmp_path / "sw" / "a0.5").symlink_to(tmp_path / "sw" / "a0.1")
    r = CliRunner().invoke(cli, ["anonymize", "snow", str(phantom), "--size", "16", "--p", "0.1,0.5", "--out",
                                 str(tmp_path / "sw" / "a{p}" / "rel")])
    assert r.exit_code != 0 and "one and the same file" in r.output, r.output
    assert not list((tmp_path / "sw" / "a0.1").iterdir()) and not (tmp_path / "dup-p0.3").exists()
    r = CliRunner().invoke(cli, ["anonymize", "snow", str(phantom), "--size", "16", "--p", "0.1,0.5", "--out",
                                 str(tmp_path / "ok{p}"), "--mapping", str(tmp_path / "sw" / "a{p}" / "m.json")])
    assert r.exit_code != 0 and "--mapping" in r.output and "one and the same file" in r.output, r.output


@pytest.mark.parametrize("method", ["dpglow", "ldp-image"])
def test_the_dp_commands_refuse_their_outputs_before_a_flow_is_loaded_or_an_image_read(tmp_path, phantom, method,
                                                                                      monkeypatch):
    """dpglow and ldp-image checked --out and --mapping only when the release was saved: after the flow was loaded,
    the images read and the clip box calibrated."""
    import medanon.api.dp
    import medanon.cli.anonymize_dp

    def work(*a, **k):
        raise AssertionError("work began before the outputs were checked")

    monkeypatch.setattr(medanon.api.dp, "load_flow_for", work)
    monkeypatch.setattr(medanon.cli.anonymize_dp, "open_split", work)
    for out, mapping in ((phantom / "rel", tmp_path / "m.json"), (tmp_path / "rel", phantom / "m.json")):
        r = CliRunner().invoke(cli, ["anonymize", method, str(phantom), "--epsilon", "10", "--out", str(out),
                                     "--mapping", str(mapping)])
        assert r.exit_code != 0 and "dataset" in r.output and "work began" not in str(r.exception), r.output


def test_the_default_cache_is_checked_too(tmp_path, phantom):
    """OUT/cache, where the cache goes by default, linked to another release: refused only late, with a lock file
    left inside that release (whose audit then failed)."""
    train = medanon.split_dataset(medanon.open_dataset(phantom, size=16))["train"]
    rel = medanon.anonymize.kpixel(train, k=2).save(tmp_path / "rel", mapping=tmp_path / "m.json", progress=False)
    other = medanon.anonymize.kpixel(phantom, k=3).save(tmp_path / "other", progress=False)
    before = sorted(p.name for p in other.rglob("*")) + sorted(p.name for p in other.iterdir())
    medanon.evaluate(real=phantom, releases=[rel], mappings={"rel": tmp_path / "m.json"}, out=tmp_path / "ev",
                     preset="tiny", size=16)                           # a report folder of medanon's, rerun below
    shutil.rmtree(tmp_path / "ev" / "cache")
    (tmp_path / "ev" / "cache").symlink_to(other)
    with pytest.raises(UnsafeOutputError, match="is a medanon release folder, not an evaluation-cache folder"):
        medanon.evaluate(real=phantom, releases=[rel], mappings={"rel": tmp_path / "m.json"}, out=tmp_path / "ev",
                         preset="tiny", size=16)
    assert sorted(p.name for p in other.rglob("*")) + sorted(p.name for p in other.iterdir()) == before


def test_a_report_written_meanwhile_by_another_evaluation_is_not_replaced(tmp_path, monkeypatch):
    """An evaluation checks its --out, loads the data for seconds, then takes the folder's lock: another evaluation
    that wrote its report there meanwhile lost it, without --overwrite. The check runs again under the lock."""
    import medanon.evaluate.harness as harness

    real = generate(PhantomConfig(patients=20, per_patient=2, size=32, workers=1), tmp_path / "real", progress=False)
    train = medanon.split_dataset(real)["train"]
    medanon.anonymize.kpixel(train, k=2).save(tmp_path / "a", mapping=tmp_path / "a.json", progress=False)
    out = tmp_path / "ev"
    fid_samples = harness._fid_samples

    def meanwhile(*a, **k):                     # after every check, before the lock: another evaluation's report
        from medanon.runtime import RunDir

        RunDir(out, config={}, command="evaluate").finish()
        (out / "report.json").write_text(json.dumps({"real": {"path": str(tmp_path / "other")}, "releases": []}))
        return fid_samples(*a, **k)

    monkeypatch.setattr(harness, "_fid_samples", meanwhile)
    r = CliRunner().invoke(cli, ["evaluate", "--real", str(real), "--preset", "tiny", "--no-inception", "--size", "32",
                                 "--out", str(out), "--release", str(tmp_path / "a"), "--mapping",
                                 f"a={tmp_path / 'a.json'}"])
    assert r.exit_code == 1 and "holds the report of another evaluation" in r.output, r.output
    assert json.loads((out / "report.json").read_text())["real"]["path"] == str(tmp_path / "other")


def test_a_release_written_meanwhile_by_another_run_is_not_replaced(tmp_path, monkeypatch, phantom):
    """The writer checked --out, then took its lock: a release another run finished in between was replaced."""
    import medanon.release.writer as writer

    records = scan(phantom).records[:2]

    out = tmp_path / "rel"
    take, done = writer.OutputLock.acquire, []

    def meanwhile(self):                        # the other run finishes just before this one locks
        if self.out == out and not done:
            done.append(1)
            _release(out, records)
        return take(self)

    monkeypatch.setattr(writer.OutputLock, "acquire", meanwhile)
    with pytest.raises(OutputExistsError):
        ReleaseWriter(out, **SETTINGS, source={"sha256": "a"})
    assert not (tmp_path / ".rel.lock").exists() and len((out / "labels.csv").read_text().splitlines()) == 3


def test_an_export_another_run_wrote_meanwhile_is_not_replaced(tmp_path):
    """Two training runs started with one --export: the check at the start passed for both, and the second to finish
    replaced the first's export (a fundus GAN replaced by an X-ray one, both 'exported'). The export is checked
    again under its own lock when it is written; a run replaces its own export only."""
    from medanon.outputs import UnsafeOutputError, writing_export

    run, export = tmp_path / "run", tmp_path / "g.pt"
    run.mkdir()
    export.write_bytes(b"the other run's export")             # written while this run trained
    with pytest.raises(UnsafeOutputError, match="is not an export of the run") as e, \
            writing_export(run, export, name="--export"):
        export.write_bytes(b"mine")
    assert export.read_bytes() == b"the other run's export" and str(run) in e.value.fix
    export.unlink()
    with writing_export(run, export, name="--export"):
        export.write_bytes(b"mine")
    with writing_export(run, export, name="--export"):     # its own export: a resumed run may replace it
        export.write_bytes(b"mine, later")
    assert export.read_bytes() == b"mine, later" and not (tmp_path / ".g.pt.lock").exists()
