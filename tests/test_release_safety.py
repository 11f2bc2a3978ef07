"""The release writer's safety and the leaks the audit must catch (issues 13 and 14)."""

import csv
import json
import os
import stat
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.data.layouts import scan
from medanon.data.records import Record
from medanon.errors import ConfigError, DataError, OutputExistsError
from medanon.outputs import UnsafeOutputError
from medanon.phantoms.generate import generate
from medanon.release import ReleaseWriter, audit_release, read_release

SETTINGS = dict(method="toy", params={"p": 0.1}, privacy={}, labels=["grade"])


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, list[Record]]:
    root = generate(PhantomConfig(patients=12, per_patient=2, size=16, workers=1),
                    tmp_path_factory.mktemp("src") / "fundus", progress=False)
    return root, scan(root).records


def _release(out: Path, records, mapping=None, source_digest=None, **kw) -> Path:
    with ReleaseWriter(out, **SETTINGS, mapping=mapping, source=source_digest or {"sha256": "a"}, **kw) as rel:
        for i, r in enumerate(records):
            if not rel.done(r.record_id):
                rel.add(r.record_id, torch.full((3, 8, 8), -1 + 2 * i / len(records)), [r])
    return out


def _interrupted(out: Path, records, n: int, source_digest=None) -> None:
    with pytest.raises(KeyboardInterrupt):
        with ReleaseWriter(out, **SETTINGS, source=source_digest or {"sha256": "a"}) as rel:
            for i, r in enumerate(records):
                if i == n:
                    raise KeyboardInterrupt
                rel.add(r.record_id, torch.zeros(3, 8, 8), [r])


def test_release_into_or_over_its_input_is_refused(tmp_path, source):
    root, _ = source
    for out in (root, root / "release", root.parent):
        with pytest.raises(UnsafeOutputError, match="medanon never writes"):
            ReleaseWriter(out, **SETTINGS, inputs=[root], overwrite=True)
    with pytest.raises(UnsafeOutputError, match="mapping"):
        ReleaseWriter(tmp_path / "rel", **SETTINGS, inputs=[root], mapping=root / "labels.csv", overwrite=True)
    assert (root / "labels.csv").read_text().startswith("image,")          # untouched


def test_existing_mapping_needs_overwrite_and_must_be_medanons(tmp_path, source):
    _, records = source
    _release(tmp_path / "a", records[:4], mapping=tmp_path / "map.json")
    before = (tmp_path / "map.json").read_text()
    with pytest.raises(OutputExistsError, match="mapping"):
        ReleaseWriter(tmp_path / "b", **SETTINGS, mapping=tmp_path / "map.json")
    assert (tmp_path / "map.json").read_text() == before                    # the earlier release's mapping
    foreign = tmp_path / "notes.json"
    foreign.write_text('{"mine": 1}')
    with pytest.raises(UnsafeOutputError, match="not written by medanon"):
        ReleaseWriter(tmp_path / "c", **SETTINGS, mapping=foreign, overwrite=True)
    ReleaseWriter(tmp_path / "a", **SETTINGS, mapping=tmp_path / "map.json", overwrite=True)   # its own: fine


def test_overwrite_never_replaces_another_releases_mapping(tmp_path, source):
    # a mistyped mapping path with overwrite would cut release a's records off their sources for good
    _, records = source
    _release(tmp_path / "a", records[:4], mapping=tmp_path / "map.json")
    before = (tmp_path / "map.json").read_text()
    with pytest.raises(OutputExistsError, match=r"belongs to the release 'a', not to .*d:"):
        ReleaseWriter(tmp_path / "d", **SETTINGS, mapping=tmp_path / "map.json", overwrite=True)
    assert (tmp_path / "map.json").read_text() == before and not (tmp_path / "d").exists()
    # a release of the same folder name elsewhere (exp2/a beside exp1's a): the name matched, the records do not
    with pytest.raises(OutputExistsError, match="a release named 'a' whose records are not those of"):
        ReleaseWriter(tmp_path / "exp2" / "a", **SETTINGS, mapping=tmp_path / "map.json", overwrite=True)
    (tmp_path / "exp2").mkdir()
    _release(tmp_path / "exp2" / "a", records[:4])                                   # even once it exists
    with pytest.raises(OutputExistsError, match="whose records are not those of"):
        ReleaseWriter(tmp_path / "exp2" / "a", **SETTINGS, mapping=tmp_path / "map.json", overwrite=True)
    assert (tmp_path / "map.json").read_text() == before
    _release(tmp_path / "a", records[:6], mapping=tmp_path / "map.json", overwrite=True)      # a again: replaced
    assert len(json.loads((tmp_path / "map.json").read_text())["records"]) == 6


def test_file_at_out_and_foreign_folder_refused_before_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafeOutputError, match="not a folder"):
        ReleaseWriter(tmp_path / "file", **SETTINGS, overwrite=True)
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "holiday.jpg").write_text("x")
    with pytest.raises(UnsafeOutputError, match="not written by medanon"):
        ReleaseWriter(tmp_path / "photos", **SETTINGS, overwrite=True)
    assert (tmp_path / "photos" / "holiday.jpg").exists()


def test_unwritable_out_refused_up_front(tmp_path):
    if os.geteuid() == 0:
        (tmp_path / "a-file").write_text("x")           # root can write anywhere: use a parent that is a file
        with pytest.raises(UnsafeOutputError, match="is a file"):
            ReleaseWriter(tmp_path / "a-file" / "rel", **SETTINGS)
        return
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    with pytest.raises(UnsafeOutputError, match="no write permission"):
        ReleaseWriter(locked / "rel", **SETTINGS)


def test_overwrite_discards_a_stale_partial_with_other_settings(tmp_path, source):
    _, records = source
    out = tmp_path / "rel"
    _interrupted(out, records, 3)
    with pytest.raises(ConfigError, match="overwrite=True"):
        ReleaseWriter(out, **{**SETTINGS, "params": {"p": 0.2}})
    with pytest.warns(UserWarning, match="discarding"):
        w = ReleaseWriter(out, **{**SETTINGS, "params": {"p": 0.2}}, overwrite=True)
    assert len(w) == 0


def test_resume_notices_changed_source_content(tmp_path, source):
    _, records = source
    out = tmp_path / "rel"
    _interrupted(out, records, 3, source_digest={"sha256": "old"})
    with pytest.raises(ConfigError, match="other sources: the source images' content, or which of them are released"):
        ReleaseWriter(out, **SETTINGS, source={"sha256": "new"})
    assert len(ReleaseWriter(out, **SETTINGS, source={"sha256": "old"})) == 3       # same sources: resumes


@pytest.mark.parametrize("head", ["", '{"settings": {"method": "kp', "[]"])
def test_a_damaged_journal_is_named_as_such_not_as_other_settings(tmp_path, source, head):
    _, records = source
    out = tmp_path / "rel"
    _interrupted(out, records, 3)
    journal = tmp_path / "rel.partial" / ".journal.jsonl"
    rest = journal.read_text().splitlines()[1:]
    journal.write_text("\n".join([head, *rest]) + "\n")
    with pytest.raises(DataError, match="journal cannot be read") as e:
        ReleaseWriter(out, **SETTINGS, source={"sha256": "a"})
    assert "other settings" not in str(e.value) and "overwrite=True" in e.value.fix
    assert len(_release_replacing(out, records)) == len(records)      # overwrite: discarded, started over


def _release_replacing(out: Path, records) -> list[Path]:
    with ReleaseWriter(out, **SETTINGS, source={"sha256": "a"}, overwrite=True) as rel:
        for i, r in enumerate(records):
            rel.add(r.record_id, torch.full((3, 8, 8), -1 + 2 * i / len(records)), [r])
    return list((out / "images").iterdir())


def test_orphan_image_of_a_killed_run_is_removed_on_resume(tmp_path, source):
    _, records = source
    out = tmp_path / "rel"
    _interrupted(out, records, 3)
    (tmp_path / "rel.partial" / "images" / "0123456789abcdef.png").write_bytes(b"half")   # killed before journal
    rel = _release(out, records)
    assert len(list((rel / "images").iterdir())) == len(records)
    assert audit_release(rel).passed


def test_public_manifest_has_no_source_fingerprint_mapping_does(tmp_path, source):
    _, records = source
    out = _release(tmp_path / "rel", records, mapping=tmp_path / "map.json", source_digest={"sha256": "f" * 64})
    manifest, _ = read_release(out)
    assert "source" not in manifest and "f" * 64 not in (out / "manifest.json").read_text()
    mapping = json.loads((tmp_path / "map.json").read_text())
    assert mapping["source"]["sha256"] == "f" * 64 and mapping["format"] == "medanon-mapping"
    assert stat.S_IMODE((tmp_path / "map.json").stat().st_mode) == 0o600          # private
    for p in (out / "images").iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o644                            # shareable


def test_file_order_and_times_say_nothing(tmp_path, source):
    from scipy.stats import spearmanr

    _, records = source
    out = _release(tmp_path / "rel", records, mapping=tmp_path / "map.json")
    files = [p for p in (out / "images").iterdir()]
    assert len({int(p.stat().st_mtime) for p in [*files, out / "labels.csv", out / "manifest.json"]}) == 1
    recs = json.loads((tmp_path / "map.json").read_text())["records"]
    position = {r.record_id: i for i, r in enumerate(records)}
    inode = [(out / img).stat().st_ino for img in recs]
    order = [position[v["sources"][0]] for v in recs.values()]
    # one release of 24 records: a correlation this strong would happen by chance with p < 1e-3 only
    assert abs(spearmanr(inode, order).statistic) < 0.65
    rep = audit_release(out, mapping=tmp_path / "map.json", source_records=records)
    assert rep.passed, rep.format()
    assert any("file order" in c.name for c in rep.checks)


def test_audit_catches_ordered_files_and_timestamps(tmp_path, source):
    import shutil

    _, records = source
    out = _release(tmp_path / "rel", records, mapping=tmp_path / "map.json")
    recs = json.loads((tmp_path / "map.json").read_text())["records"]
    position = {r.record_id: i for i, r in enumerate(records)}
    ordered = sorted(recs, key=lambda img: position[recs[img]["sources"][0]])
    tmp = tmp_path / "copy"
    shutil.copytree(out / "images", tmp)
    shutil.rmtree(out / "images")
    (out / "images").mkdir()
    # the naive writer runs on one CPU: a file system may hand out inode numbers in per-CPU batches, so files made
    # in order from two CPUs (another test process beside this one) need not get increasing numbers
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cpus:
        os.sched_setaffinity(0, {min(cpus)})
    try:
        for i, img in enumerate(ordered):                 # what a naive writer does: source order, own times
            shutil.copyfile(tmp / Path(img).name, out / img)
            os.utime(out / img, (1e9 + i, 1e9 + i))
    finally:
        if cpus:
            os.sched_setaffinity(0, cpus)
    rep = audit_release(out, mapping=tmp_path / "map.json", source_records=records)
    failed = " ".join(c.name for c in rep.checks if not c.passed)
    assert "one timestamp" in failed
    assert "file order" in failed, rep.format()


def _rewrite_labels(out: Path, fn) -> None:
    rows = list(csv.DictReader((out / "labels.csv").open()))
    fn(rows)
    with (out / "labels.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("leak", ["non-ascii patient id", "mimic study folder", "undeclared column"])
def test_audit_catches_identifiers_it_used_to_miss(tmp_path, leak):
    root = tmp_path / "src"
    (root / "files" / "p10" / "p10000032" / "s50000320").mkdir(parents=True)
    img = root / "files" / "p10" / "p10000032" / "s50000320" / "view1.jpg"
    img.write_bytes(b"")
    recs = [Record(path=img, patient_id="José Silva", labels={"grade": 1.0}, record_id="r0123456789abcdef")]
    more = [Record(path=root / f"x{i}.png", patient_id=f"P{i:05d}", labels={"grade": 0.0}, record_id=f"q{i:015d}")
            for i in range(3)]
    out = _release(tmp_path / "rel", recs + more)
    if leak == "non-ascii patient id":
        m = json.loads((out / "manifest.json").read_text())
        m["params"]["comment"] = "from josé silva's visit"
        (out / "manifest.json").write_text(json.dumps(m))
        expected = "patient id"
    elif leak == "mimic study folder":
        _rewrite_labels(out, lambda rows: rows[0].update(grade="s50000320"))
        expected = "source folder name"
    else:
        _rewrite_labels(out, lambda rows: [r.update(patient_id="x") for r in rows])
        expected = "only the declared labels"
    rep = audit_release(out, source_records=recs + more)
    failed = " ".join(c.name for c in rep.checks if not c.passed)
    assert expected in failed, rep.format()


def test_audit_exit_codes(tmp_path, source):
    _, records = source
    out = _release(tmp_path / "rel", records[:6])
    r = CliRunner().invoke(cli, ["audit", str(out)])
    assert r.exit_code == 0, r.output
    (out / "images" / "0123456789abcdef.png").write_bytes(b"not a png")          # listed below, unreadable
    _rewrite_labels(out, lambda rows: rows.append({**rows[0], "image": "images/0123456789abcdef.png"}))
    r = CliRunner().invoke(cli, ["audit", str(out)])
    assert r.exit_code == 1 and "readable PNG" in r.output, r.output                # a failed check, no crash
    r = CliRunner().invoke(cli, ["audit", str(tmp_path)])
    assert r.exit_code == 3, r.output                                                # not a release: could not run


def test_writer_aggregates_labels_per_patient(tmp_path):
    """Two images of one patient must not outvote another patient (issue 14.8): counts are of patients."""
    recs = [Record(path=tmp_path / f"{i}.png", patient_id=p, labels={"grade": g}, record_id=f"r{i}")
            for i, (p, g) in enumerate([("A", 0.0), ("A", 0.0), ("B", 2.0)])]
    with ReleaseWriter(tmp_path / "rel", **SETTINGS) as rel:
        rel.add("one", torch.zeros(3, 8, 8), recs)
    _, rows = read_release(tmp_path / "rel")
    assert rows[0]["grade_counts"] == "0:1;2:1" and rows[0]["grade"] == "2"   # a tie of patients: the worse grade


def test_a_source_released_twice_is_refused(tmp_path, source):
    _, records = source
    with pytest.raises(DataError, match="more than 1 record"):
        with ReleaseWriter(tmp_path / "rel", **SETTINGS) as w:
            w.add("a", torch.zeros(3, 8, 8), [records[0]])
            w.add("b", torch.zeros(3, 8, 8), [records[0]])      # the same source with fresh noise
    assert not (tmp_path / "rel").exists()


def test_a_release_that_fails_before_its_first_record_leaves_nothing(tmp_path, source):
    """A first batch that diverged left OUT.partial holding a journal head only; the corrected command was then
    refused as an interrupted release with other settings. Once a record is written the partial folder stays."""
    _, records = source
    nan = torch.full((3, 8, 8), float("nan"))
    with pytest.raises(ConfigError, match="NaN or infinite"):
        with ReleaseWriter(tmp_path / "r", **SETTINGS, source={"sha256": "a"}) as rel:
            rel.add(records[0].record_id, nan, [records[0]])
    assert not (tmp_path / "r.partial").exists() and not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match="NaN or infinite"):
        with ReleaseWriter(tmp_path / "r", **SETTINGS, source={"sha256": "a"}) as rel:
            rel.add(records[0].record_id, torch.zeros(3, 8, 8), [records[0]])
            rel.add(records[1].record_id, nan, [records[1]])
    assert len(list((tmp_path / "r.partial" / "images").iterdir())) == 1           # kept for the resume
    _release(tmp_path / "r", records)
    assert len(list((tmp_path / "r" / "images").iterdir())) == len(records)


def test_replacing_a_release_warns_of_the_earlier_mapping_left_beside_it(tmp_path, source):
    """The mapping beside a release (``OUT.mapping.json``, where evaluation looks) is the user's file: replacing the
    release without writing a mapping there leaves it, describing records that are gone, and the writer says so."""
    _, records = source
    beside = tmp_path / "a.mapping.json"
    _release(tmp_path / "a", records[:4], mapping=beside)
    before = beside.read_text()
    with pytest.warns(UserWarning, match=r"a\.mapping\.json is the private mapping of an earlier release of .*a, "
                                         r"which this release replaced without writing a mapping"):
        _release(tmp_path / "a", records[:5], overwrite=True)
    assert beside.read_text() == before
    with pytest.warns(UserWarning, match="earlier release"):                          # another mapping path
        _release(tmp_path / "a", records[:5], mapping=tmp_path / "elsewhere.json", overwrite=True)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        beside.unlink()                                              # the user deletes it, as the warning says
        _release(tmp_path / "a", records[:5], mapping=beside, overwrite=True)         # written anew: nothing stale
