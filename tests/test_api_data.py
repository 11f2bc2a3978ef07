"""A dataset opened through the Python API keeps how it was read: ``medanon.evaluate(real=ds)`` reads a
generic-layout folder (which no detector recognises) with ``ds``'s own options."""

import csv
import logging
import shutil
import warnings

import pytest

import medanon
from medanon.data.dataset import ReadOptions, reading, subset
from medanon.errors import DataError

SIZE = 32


@pytest.fixture(scope="module")
def generic(tmp_path_factory):
    """A fundus phantom re-described as a bare CSV with its own column names (no dataset.yaml, no phantom.json)."""
    d = tmp_path_factory.mktemp("generic")
    phantom = medanon.make_phantom(d / "phantom", patients=12, per_patient=2, size=SIZE, seed=7)
    root = d / "hospital"
    shutil.copytree(phantom / "images", root / "scans")
    with open(phantom / "labels.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(root / "export.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "subject", "dr_level", "sex"])
        for r in rows:
            w.writerow([r["image"].replace("images/", "scans/"), r["patient_id"], r["grade"], r["sex"]])
    opts = dict(layout="generic", labels_csv=root / "export.csv", image_col="file", patient_col="subject",
                label_cols="grade=dr_level,sex", modality="fundus", size=SIZE)
    return root, opts


def test_an_opened_dataset_remembers_how_it_was_read(generic):
    root, opts = generic
    ds = medanon.open_dataset(root, **opts)
    assert ds.read_options == ReadOptions(layout="generic", generic=ds.read_options.generic, modality="fundus")
    assert ds.read_options.generic.patient_col == "subject"
    part = subset(ds, range(4))
    assert part.read_options == ds.read_options                  # a part of it is read the same way
    with pytest.raises(DataError):                                # nothing in the folder says how to read it
        medanon.open_dataset(root, size=16)
    with reading(root, **vars(ds.read_options)):                  # read again, at another size, the same way
        again = medanon.open_dataset(root, size=16)
    assert [r.record_id for r in again.records] == [r.record_id for r in ds.records]
    assert (again.modality, again.crop, again.channels, again.size) == ("fundus", "fov", 3, 16)
    assert again.label_array("grade").tolist() == ds.label_array("grade").tolist()


def test_evaluate_takes_a_generic_layout_dataset(tmp_path, generic):
    from test_eval_harness import SIZE as EVAL_SIZE
    from test_eval_harness import tiny_config

    from medanon.data.splits import split_patients, write_splits_csv

    assert EVAL_SIZE == SIZE
    root, opts = generic
    ds = medanon.open_dataset(root, **opts)
    split = split_patients(ds.records, val=0.25, test=0.25, stratify="", seed=0)
    write_splits_csv(tmp_path / "splits.csv", ds.records, split)
    train = subset(ds, [i for i, r in enumerate(ds.records) if split[r.patient_id] == "train"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                           # k = 2 is weak: the library says so
        rel = medanon.anonymize.kpixel(train, k=2)
        rel.save(tmp_path / "k2", mapping=tmp_path / "k2.mapping.json", progress=False)
    cfg = tiny_config(samples=2)                                  # test_eval_harness's small evaluation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = medanon.evaluate(real=ds, releases=[rel], config=cfg, splits=tmp_path / "splits.csv",
                               out=tmp_path / "report", progress=False)
    assert [r["name"] for r in res.releases] == ["k2"] and not res.phantom
    assert res.real["images"] == len(ds), res.real
    with pytest.raises(DataError):                                # a folder alone cannot be read
        medanon.evaluate(real=root, releases=[rel], config=cfg, out=tmp_path / "r2", progress=False)


def test_data_errors_name_parameters_in_the_library_and_flags_at_the_cli(generic, caplog):
    """The same mistakes through ``medanon.open_dataset`` and ``medanon data summary``: the library's message
    names its parameters (``max_pixels``, ``skip_bad=True``, ``image_col=``), the command's its flags."""
    from click.testing import CliRunner

    from medanon.cli import cli

    root, opts = generic
    with pytest.raises(DataError) as e:                           # every image "too large"
        medanon.open_dataset(root, **{**opts, "max_pixels": 100})
    lib = str(e.value)
    assert "over the limit of 100" in lib and "raise max_pixels" in lib and "skip_bad=True" in lib and "--" not in lib
    argv = ["data", "summary", str(root), "--layout", "generic", "--labels", str(opts["labels_csv"]),
            "--image-col", "file", "--patient-col", "subject", "--size", "16"]
    r = CliRunner().invoke(cli, [*argv, "--max-pixels", "100"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "over the limit of 100" in r.output and "pass a larger --max-pixels" in r.output and "--skip-bad" in r.output
    assert "max_pixels" not in r.output and "skip_bad" not in r.output

    with pytest.raises(DataError) as e:                           # a column the CSV does not have
        medanon.open_dataset(root, **{**opts, "image_col": "path"})
    assert "image_col=" in e.value.fix and "--image-col" not in str(e.value)
    r = CliRunner().invoke(cli, [*argv[:8], "path", *argv[9:]])
    assert r.exit_code == 1 and "--image-col" in r.output and "image_col" not in r.output

    with pytest.warns(UserWarning, match="patient_col="):         # no patient column: a warning, same words
        medanon.open_dataset(root, **{**opts, "patient_col": None})
    with caplog.at_level(logging.WARNING, logger="medanon"):   # the CLI logs layout warnings
        r = CliRunner().invoke(cli, [*argv[:9], *argv[11:]])
    assert r.exit_code == 0 and "--patient-col" in caplog.text and "patient_col" not in caplog.text
