from collections import Counter
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from medanon.data.records import Record
from medanon.data.splits import split_patients, split_records, write_splits_csv


def make_records(n_patients: int, per_patient: int, seed: int = 0) -> list[Record]:
    rng = np.random.default_rng(seed)
    recs = []
    for p in range(n_patients):
        grade = float(rng.choice(5, p=[0.5, 0.1, 0.25, 0.07, 0.08]))
        for a in range(per_patient):
            # acquisitions of one patient may carry different grades (e.g. two eyes)
            g = grade if a == 0 else float(max(0, grade - rng.integers(0, 2)))
            recs.append(Record(Path(f"/x/P{p}_{a}.png"), f"P{p}", {"grade": g}, f"r{p}_{a}"))
    return recs


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 80), per=st.integers(1, 4), seed=st.integers(0, 10**6),
       val=st.floats(0, 0.4), test=st.floats(0, 0.4))
def test_no_patient_crosses_splits(n, per, seed, val, test):
    recs = make_records(n, per, seed)
    parts = split_records(recs, val=val, test=test, stratify="grade", seed=seed)
    owners = {}
    for name, rs in parts.items():
        for r in rs:
            assert owners.setdefault(r.patient_id, name) == name
    assert sum(len(v) for v in parts.values()) == len(recs)


def test_fractions_and_stratification():
    recs = make_records(1000, 2)
    a = split_patients(recs, val=0.15, test=0.15, stratify="grade", seed=1)
    sizes = Counter(a.values())
    assert abs(sizes["test"] - 150) <= 5 and abs(sizes["val"] - 150) <= 5
    # each stratum (the patient's worst grade) is split in the same proportions, up to one patient
    worst = {}
    for r in recs:
        worst[r.patient_id] = max(worst.get(r.patient_id, 0), r.labels["grade"])
    for g in set(worst.values()):
        members = [p for p in worst if worst[p] == g]
        n_test = sum(a[p] == "test" for p in members)
        assert abs(n_test - 0.15 * len(members)) <= 1


def test_deterministic_and_seed_dependent():
    recs = make_records(100, 2)
    assert split_patients(recs, stratify="grade", seed=3) == split_patients(recs, stratify="grade", seed=3)
    assert split_patients(recs, stratify="grade", seed=3) != split_patients(recs, stratify="grade", seed=4)


def test_missing_labels_form_their_own_stratum():
    recs = [Record(Path(f"/x/{i}.png"), f"P{i}", {"grade": float("nan")}, f"r{i}") for i in range(40)]
    a = split_patients(recs, val=0.25, test=0.25, stratify="grade", seed=0)
    assert Counter(a.values()) == {"train": 20, "val": 10, "test": 10}


def test_splits_csv(tmp_path: Path):
    recs = make_records(10, 2)
    a = split_patients(recs, stratify="", seed=0)
    write_splits_csv(tmp_path / "s.csv", recs, a)
    lines = (tmp_path / "s.csv").read_text().splitlines()
    assert lines[0] == "record_id,patient_id,split,bytes" and len(lines) == 21


def test_a_splits_csv_that_splits_a_patient_or_names_another_part_is_refused(tmp_path: Path):
    import csv
    import re

    import pytest

    from medanon.errors import DataError
    from medanon.evaluate.inputs import _read_splits_csv

    recs = [Record(path=tmp_path / f"{p}_{i}.png", patient_id=p, record_id=f"{p}-{i}")
            for p in ("a", "b", "c") for i in range(2)]
    good = tmp_path / "good.csv"
    write_splits_csv(good, recs, {"a": "train", "b": "test", "c": "val"})
    assert list(_read_splits_csv(good, recs)) == ["train", "train", "test", "test", "val", "val"]
    rows = list(csv.reader(open(good)))

    def variant(name: str, change) -> Path:
        out = [list(r) for r in rows]
        change(out)
        path = tmp_path / name
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(out)
        return path

    cases = {"patient(s) in more than one split (e.g. a in test and train)": lambda o: o[2].__setitem__(2, "test"),
             "names split(s) ['trian']": lambda o: o[1].__setitem__(2, "trian"),
             "gives 1 image(s) another patient": lambda o: o[3].__setitem__(1, "z")}
    for i, (message, change) in enumerate(cases.items()):
        with pytest.raises(DataError, match=re.escape(message)):
            _read_splits_csv(variant(f"bad{i}.csv", change), recs)


def test_a_splits_csv_with_rows_the_dataset_lacks_is_read_with_a_warning(tmp_path: Path):
    import pytest

    from medanon.data.layouts.common import LayoutWarning
    from medanon.evaluate.inputs import _read_splits_csv

    recs = [Record(path=tmp_path / f"{p}_{i}.png", patient_id=p, record_id=f"{p}-{i}")
            for p in ("a", "b", "c") for i in range(2)]
    path = tmp_path / "splits.csv"
    write_splits_csv(path, recs, {"a": "train", "b": "test", "c": "val"})
    with pytest.warns(LayoutWarning, match="lists 2 record"):           # e.g. a splits file of a larger version
        assert list(_read_splits_csv(path, recs[:4])) == ["train", "train", "test", "test"]


def test_the_splits_csv_of_another_dataset_with_the_same_file_names_is_refused(tmp_path: Path):
    """Two phantoms (or two versions of a dataset) have the same file names, patients and record ids: the CSV of one
    was taken for the other's. It records each file's size; an older CSV without sizes is still read."""
    import csv

    import pytest

    from medanon.config import DataConfig, PhantomConfig
    from medanon.data.dataset import open_dataset
    from medanon.errors import DataError
    from medanon.evaluate.inputs import _read_splits_csv
    from medanon.phantoms.generate import generate

    a, b = (open_dataset(generate(PhantomConfig(patients=4, per_patient=2, size=16, workers=1, seed=seed),
                                  tmp_path / f"p{seed}", progress=False), DataConfig(size=16)) for seed in (0, 1))
    assert [r.record_id for r in a.records] == [r.record_id for r in b.records]
    assert [r.patient_id for r in a.records] == [r.patient_id for r in b.records]
    assignment = split_patients(a.records, val=0.25, test=0.25, seed=0)
    write_splits_csv(tmp_path / "a.csv", a.records, assignment)
    assert len(_read_splits_csv(tmp_path / "a.csv", a.records)) == len(a.records)
    with pytest.raises(DataError, match="was written for other files") as e:
        _read_splits_csv(tmp_path / "a.csv", b.records)
    assert e.value.files and e.value.fix
    rows = list(csv.reader(open(tmp_path / "a.csv")))
    with open(tmp_path / "old.csv", "w", newline="") as f:                      # written before sizes were kept
        csv.writer(f).writerows(r[:3] for r in rows)
    assert len(_read_splits_csv(tmp_path / "old.csv", b.records)) == len(b.records)


def test_a_continuous_label_is_refused_as_strata_before_any_data_is_read(tmp_path):
    """Every age would be a stratum of its own, each cut to whole patients, and the totals would miss the asked
    fractions by up to a patient per age. ``data split --stratify age`` now says so before reading an image."""
    import pytest
    from click.testing import CliRunner

    from medanon.cli import cli
    from medanon.errors import ConfigError

    recs = [Record(Path(f"/x/{i}.png"), f"P{i}", {"age": float(20 + i)}, f"r{i}") for i in range(10)]
    with pytest.raises(ConfigError, match="'age' is a continuous label"):
        split_patients(recs, stratify="age")
    r = CliRunner().invoke(cli, ["data", "split", str(tmp_path / "nothing-here"), "--stratify", "age",
                                 "--out", str(tmp_path / "s.csv")])
    assert r.exit_code != 0 and "--stratify 'age' is a continuous label" in r.output
    assert "does not exist" not in r.output and not (tmp_path / "s.csv").exists()
    assert split_patients([Record(Path("/x/a.png"), "P0", {"site": 1.0})], stratify="site") == {"P0": "train"}
