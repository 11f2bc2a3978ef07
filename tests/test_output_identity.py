"""Outputs and inputs compared as files (device and inode), not as path strings: a hard link, or a folder reached
by another path (a bind mount, simulated here by giving one path another's identity), is the input; and an
``overwrite`` re-checks the old output just before replacing it, so what a user put there meanwhile survives."""

import os
from pathlib import Path

import pytest

from medanon import outputs
from medanon.errors import OutputExistsError
from medanon.fsutil import atomic_dir
from medanon.outputs import UnsafeOutputError, check_output


def _generic(root: Path) -> Path:
    """A folder of the user's (not a medanon dataset: only the file rule can refuse a write into it)."""
    root.mkdir(parents=True)
    (root / "a.png").write_bytes(b"\x89PNG not really")
    (root / "labels.csv").write_text("image,grade\na.png,1\n")
    return root


def _alias(monkeypatch, alias: Path, real: Path) -> None:
    """Make ``alias`` (and what is below it) report the identities of ``real`` (and what is below it), as a bind
    mount of ``real`` at ``alias`` would."""
    identity = outputs._identity

    def fake(p: Path):
        p = Path(p)
        if p == alias or alias in p.parents:
            return identity(real / p.relative_to(alias))
        return identity(p)

    monkeypatch.setattr(outputs, "_identity", fake)


def test_a_hard_link_to_an_input_file_is_that_file(tmp_path):
    data = _generic(tmp_path / "data")
    link = tmp_path / "out.csv"
    os.link(data / "labels.csv", link)
    with pytest.raises(UnsafeOutputError, match="is the input"):
        check_output(link, inputs=[data / "labels.csv"], kind="file", overwrite=True)
    assert (data / "labels.csv").read_text() == "image,grade\na.png,1\n"


def test_a_folder_reached_by_another_path_is_the_input_it_leads_to(tmp_path, monkeypatch):
    data = _generic(tmp_path / "data")
    view = tmp_path / "view"
    view.mkdir()
    _alias(monkeypatch, view, data)
    with pytest.raises(UnsafeOutputError, match="is the input"):
        check_output(view, inputs=[data], overwrite=True)
    with pytest.raises(UnsafeOutputError, match="is inside the input"):
        check_output(view / "rel", inputs=[data])
    (data / "sub").mkdir()
    with pytest.raises(UnsafeOutputError, match="contains the input"):
        check_output(data, inputs=[view / "sub"], overwrite=True)
    with pytest.raises(UnsafeOutputError, match="contains the input"):       # rule 1 alone, without the walk
        outputs.check_not_an_input(data, inputs=[view / "sub"])


def test_an_existing_out_holding_an_input_under_another_path_is_refused(tmp_path, monkeypatch):
    """An existing output folder with the input mounted somewhere below it: only walking it finds the input."""
    data = _generic(tmp_path / "data")
    out = tmp_path / "rel"
    with atomic_dir(out, marker="phantom") as tmp:
        (tmp / "x.txt").write_text("made")
    (out / "mnt").mkdir()
    _alias(monkeypatch, out / "mnt", data)
    with pytest.raises(UnsafeOutputError, match="contains the input"):
        check_output(out, inputs=[data], overwrite=True, what="phantom")


def test_overwrite_keeps_the_old_output_when_a_file_was_added_to_it_during_the_run(tmp_path):
    out = tmp_path / "ph"
    with atomic_dir(out, marker="phantom") as tmp:
        (tmp / "x.txt").write_text("first")
    with pytest.raises(UnsafeOutputError), atomic_dir(out, overwrite=True, marker="phantom") as tmp:
        (tmp / "x.txt").write_text("second")
        (out / "NOTES.txt").write_text("mine")             # the user's, put there while the run ran
    assert (out / "NOTES.txt").read_text() == "mine" and (out / "x.txt").read_text() == "first"
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


def test_an_output_finished_by_another_run_meanwhile_is_not_replaced_without_overwrite(tmp_path):
    """A run that checked OUT before another run made it (the other held the lock and finished first) must not
    replace that run's finished output at its end: without overwrite, OUT existing is refused then too."""
    from medanon.outputs import write_marker

    out = tmp_path / "ph"
    with pytest.raises(OutputExistsError, match="already exists"), atomic_dir(out, marker="phantom") as tmp:
        (tmp / "x.txt").write_text("second")
        out.mkdir()                                         # what the other run left: a finished phantom folder
        (out / "x.txt").write_text("first")
        write_marker(out, "phantom")
    assert (out / "x.txt").read_text() == "first"
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


def test_a_release_overwrite_keeps_the_old_release_when_a_file_was_added_to_it(tmp_path):
    import medanon
    from medanon.release import ReleaseWriter

    ds = medanon.open_dataset(medanon.make_phantom(tmp_path / "d", patients=2, size=16), size=16)
    out = tmp_path / "rel"

    def write(overwrite: bool, meanwhile=None) -> None:
        with ReleaseWriter(out, method="snow", params={}, privacy={"statement": "test"}, labels=[],
                           overwrite=overwrite) as w:
            for i, r in enumerate(ds.records):
                w.add(f"r{i}", ds.load(i)["image"], [r])
            if meanwhile is not None:
                meanwhile()

    write(False)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(UnsafeOutputError):
        write(True, meanwhile=lambda: (out / "NOTES.txt").write_text("mine"))
    assert (out / "NOTES.txt").read_text() == "mine" and (out / "manifest.json").read_bytes() == before
