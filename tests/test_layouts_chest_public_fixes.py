"""CheXpert / NIH readers: messages name the table a row is from, images no row names are found in new folders too,
one view rule for CheXpert, and the NIH table read when two are present is said."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import pytest

from medanon.data.labels import LABELS
from medanon.data.layouts import LayoutWarning, scan
from medanon.data.layouts.chest import view_code
from medanon.data.layouts.collect import Collector, Dirs
from medanon.data.layouts.patient_ids import check_patient_ids

sys.path.insert(0, str(Path(__file__).parent))
import fixtures_layouts as fx

VIEWS = LABELS["view"].classes


def quiet_scan(root, layout="auto"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LayoutWarning)
        return scan(root, layout)


def train_path(rel: str) -> str:
    return f"{fx.CHEXPERT_ROOT}/{rel}"


# ---------------------------------------------------------------------------------------------- D3: the table named


def test_an_unlabelled_chexpert_image_names_both_tables(tmp_path):
    root = fx.make_chexpert(tmp_path)
    fx.write_image(root / "train/patient00001/study1/view3_frontal.jpg", 7, gray=True)
    s = quiet_scan(root)
    assert [(p.kind, p.path) for p in s.problems] == [("unlabelled", "train/patient00001/study1/view3_frontal.jpg")]
    assert s.problems[0].detail == "no row of train.csv or valid.csv mentions this image"


def test_a_train_patient_with_both_sexes_is_said_to_be_of_train_csv(tmp_path):
    root = fx.make_chexpert(tmp_path)
    header, rows = fx.read_csv(root / "train.csv")
    sex = header.index("Sex")
    rows[0][sex], rows[1][sex] = "Female", "Male"                  # patient00001's two images
    fx.write_csv(root / "train.csv", header, rows)
    with pytest.warns(LayoutWarning, match="hold images of both sexes") as got:
        scan(root)
    said = [str(w.message) for w in got if "both sexes" in str(w.message)]
    assert said and "of train.csv hold" in said[0] and "valid.csv" not in said[0], said


def test_patient_id_problems_name_the_table_of_their_row(tmp_path):
    """Checks that run after every table was read used the last table's name for every row."""
    img = fx.write_image(tmp_path / "a" / "1.png", 1)
    others = [fx.write_image(tmp_path / "b" / f"{i}.png", i) for i in (2, 3)]
    col = Collector(tmp_path, "first.csv")
    col.start_table("first.csv")
    col.add(img, "NA", {}, 7)                                      # a placeholder id, row 7 of first.csv
    col.start_table("second.csv")
    col.add(others[0], "10", {}, 2)
    col.add(others[1], "010", {}, 3)
    check_patient_ids(col)
    details = {p.path: p.detail for p in col.problems}
    assert details["a/1.png"].startswith("first.csv row 7: the patient id 'NA'"), details
    assert details["b/2.png"].startswith("second.csv row 2:") and details["b/3.png"].startswith("second.csv row 3:")
    assert col.all_tables() == "first.csv or second.csv"


def test_rows_of_two_tables_that_disagree_name_each_table(tmp_path):
    img = fx.write_image(tmp_path / "x" / "1.png", 1)
    col = Collector(tmp_path, "train.csv")
    col.start_table("train.csv")
    col.add(img, "p1", {"sex": 0.0}, 4)
    col.start_table("valid.csv")
    col.add(img, "p1", {"sex": 1.0}, 9)
    assert [p.detail for p in col.problems] == [
        "train.csv row 4 and valid.csv row 9 describe the same image but disagree: sex F vs M"]


# ---------------------------------------------------------------------------------------------- D2: new folders


def test_chexpert_images_in_folders_with_no_listed_image_are_unlabelled(tmp_path):
    root = fx.make_chexpert(tmp_path)
    new = ["train/patient00002/study9/view1_frontal.jpg",           # a new study folder
           "train/patient00099/study1/view1_frontal.jpg",           # a whole patient no row names
           "valid/patient64599/study1/view1_frontal.jpg"]           # the same in valid/
    for i, rel in enumerate(new):
        fx.write_image(root / rel, 50 + i, gray=True)
    fx.write_image(root / "train/.cache/thumb.jpg", 60, gray=True)  # hidden folders are not the dataset's
    s = quiet_scan(root)
    assert sorted((p.kind, p.path) for p in s.problems) == [("unlabelled", rel) for rel in sorted(new)]
    assert all("train.csv or valid.csv" in p.detail for p in s.problems)
    assert len(s.records) == len(fx.CHEXPERT_ROWS)


def test_nih_images_folder_none_of_whose_pngs_is_listed_is_checked(tmp_path):
    root = fx.make_nih(tmp_path)
    fx.write_image(root / "images_003" / "images" / "00000099_000.png", 9, gray=True)
    fx.write_image(root / "images" / "00000098_000.png", 8, gray=True)
    s = quiet_scan(root)
    assert sorted((p.kind, p.path) for p in s.problems) == [("unlabelled", "images/00000098_000.png"),
                                                            ("unlabelled", "images_003/images/00000099_000.png")]
    assert "Data_Entry_2017_v2020.csv" in s.problems[0].detail
    assert len(s.records) == len(fx.NIH_ROWS)


def test_the_tree_walk_lists_each_folder_once(tmp_path, monkeypatch):
    for rel in ("t/p1/s1/a.jpg", "t/p1/s2/a.jpg", "t/p2/s1/a.jpg"):
        fx.write_image(tmp_path / rel, 1)
    (tmp_path / "t" / "link").symlink_to(tmp_path / "t" / "p1")    # a link to a folder is not walked twice
    calls = []
    real = Dirs._get

    def counting(self, d):
        if d not in self._cache:
            calls.append(d)
        return real(self, d)

    monkeypatch.setattr(Dirs, "_get", counting)
    dirs = Dirs()
    assert dirs.has(tmp_path / "t/p1/s1/a.jpg")
    found = dirs.tree(tmp_path / "t")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in found) == [
        "t", "t/p1", "t/p1/s1", "t/p1/s2", "t/p2", "t/p2/s1"]
    assert len(calls) == len(set(calls)) == 6


# ---------------------------------------------------------------------------------------------- D7: one view rule


def chexpert_with_view(tmp_path, frontal_lateral: str, ap_pa: str):
    root = fx.make_chexpert(tmp_path)
    header, rows = fx.read_csv(root / "train.csv")
    rows[1][header.index("Frontal/Lateral")], rows[1][header.index("AP/PA")] = frontal_lateral, ap_pa
    fx.write_csv(root / "train.csv", header, rows)
    s = quiet_scan(root)
    rel = rows[1][0].split("/", 1)[1]
    return s, rel


@pytest.mark.parametrize("frontal_lateral, ap_pa, view", [
    ("Lateral", "", "LATERAL"), ("Lateral", "LL", "LATERAL"), ("Lateral", "RL", "LATERAL"),
    ("lateral", " rl ", "LATERAL"), ("Frontal", "AP", "AP"), ("Frontal", "PA", "PA"), ("Frontal", "", None),
    ("Frontal", "LL", "OTHER"), ("Frontal", "RL", "OTHER"),           # a decubitus film is frontal, neither AP nor PA
])
def test_chexpert_frontal_lateral_decides_the_view(tmp_path, frontal_lateral, ap_pa, view):
    s, rel = chexpert_with_view(tmp_path, frontal_lateral, ap_pa)
    assert s.problems == []
    got = next(r.labels["view"] for r in s.records if r.path.relative_to(s.root).as_posix() == rel)
    assert math.isnan(got) if view is None else got == VIEWS.index(view)


@pytest.mark.parametrize("frontal_lateral, ap_pa, says", [
    ("Lateral", "AP", "column 'AP/PA': 'AP' is a frontal view, but column 'Frontal/Lateral' says 'Lateral'"),
    ("Lateral", "PA", "column 'AP/PA': 'PA' is a frontal view, but column 'Frontal/Lateral' says 'Lateral'"),
    ("Frontal", "Lateral", "column 'AP/PA': 'Lateral' is a lateral view, but column 'Frontal/Lateral' says 'Frontal'"),
    ("Oblique", "AP", "column 'Frontal/Lateral': 'Oblique' is neither 'Frontal' nor 'Lateral'"),
])
def test_chexpert_view_cells_that_disagree_are_a_problem_of_the_row(tmp_path, frontal_lateral, ap_pa, says):
    s, rel = chexpert_with_view(tmp_path, frontal_lateral, ap_pa)
    assert [(p.kind, p.path) for p in s.problems] == [("label", rel)]
    detail = s.problems[0].detail
    assert detail.startswith(f"train.csv row 3: {says}") and "or leave the image out)" in detail, detail
    assert rel not in {r.path.relative_to(s.root).as_posix() for r in s.records}


def test_other_layouts_keep_their_view_codes():
    raw = ("PA", "AP", "LATERAL", "LL", "RL", "LAT", "AP AXIAL")
    assert [view_code(v) for v in raw] == [VIEWS.index(v) for v in ("PA", "AP", "LATERAL", "LL", "OTHER", "LATERAL",
                                                                     "OTHER")]
    assert math.isnan(view_code(""))


# ---------------------------------------------------------------------------------------------- D9a: which NIH table


def test_nih_with_both_tables_says_which_it_read(tmp_path):
    root = fx.make_nih(tmp_path)
    header, rows = fx.read_csv(root / "Data_Entry_2017_v2020.csv")
    fx.write_csv(root / "Data_Entry_2017.csv", header, rows[:2])
    with pytest.warns(LayoutWarning, match=r"both Data_Entry_2017_v2020\.csv and Data_Entry_2017\.csv: medanon "
                                           r"reads Data_Entry_2017_v2020\.csv"):
        s = scan(root)
    assert s.files == [root / "Data_Entry_2017_v2020.csv"] and len(s.records) == len(fx.NIH_ROWS)


def test_nih_with_one_table_reads_it_quietly_and_says_so_in_the_scan(tmp_path):
    root = fx.make_nih(tmp_path)
    (root / "Data_Entry_2017_v2020.csv").rename(root / "Data_Entry_2017.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("error", LayoutWarning)
        s = scan(root)
    assert s.files == [root / "Data_Entry_2017.csv"] and s.problems == []


def test_chexpert_scan_lists_the_tables_it_read(tmp_path):
    root = fx.make_chexpert(tmp_path)
    assert quiet_scan(root).files == [root / "train.csv", root / "valid.csv"]


def test_a_chexpert_age_of_0_is_read_as_unknown_and_said(tmp_path):
    """CheXpert's patients are adults; its tables write Age 0 for an age not recorded. Read as age 0 it made
    infants of them (the attribute-inference attack and the released mean age used it): it is unknown, and said."""
    root = fx.make_chexpert(tmp_path)
    table = root / "train.csv"
    lines = table.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace(",Male,87,", ",Male,0,")                      # patient00002's row
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.warns(LayoutWarning, match=r"1 CheXpert row\(s\) give Age 0.*read as unknown"):
        s = scan(root, "chexpert")
    ages = {r.patient_id: r.labels.get("age") for r in s.records}
    assert math.isnan(ages["patient00002"]) and ages["patient00001"] == 68
