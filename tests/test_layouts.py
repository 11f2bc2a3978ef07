"""Layout readers: each real format on a tiny fixture, detection, problems, errors, determinism."""

from __future__ import annotations

import math
import shutil
import sys
import warnings
from pathlib import Path

import pytest

from medanon.data.labels import NIH_FINDINGS
from medanon.data.layouts import IMAGE_EXTENSIONS, LAYOUTS, GenericOptions, LayoutWarning, detect_layout, scan
from medanon.data.records import make_record_id
from medanon.errors import DataError

sys.path.insert(0, str(Path(__file__).parent))
import fixtures_layouts as fx


def quiet_scan(root, layout="auto", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LayoutWarning)
        return scan(root, layout, **kw)


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def rels(s) -> list[str]:
    return [r.path.relative_to(s.root).as_posix() for r in s.records]


def kinds(s) -> list[str]:
    return [p.kind for p in s.problems]


def generic_opts(root: Path, **kw) -> GenericOptions:
    base = {"labels_csv": root / "meta.csv", "image_col": "file", "label_cols": fx.GENERIC_LABEL_COLS,
            "patient_col": "subject"}
    base.update(kw)
    return GenericOptions(**base)


# ---------------------------------------------------------------------------------------------- readers


def test_api_names():
    assert set(LAYOUTS) == {"medanon", "aptos", "eyepacs", "brset", "rsna", "mimic", "chexpert", "nih", "generic"}
    assert IMAGE_EXTENSIONS == (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".dcm")


def test_aptos(tmp_path):
    root = fx.make_aptos(tmp_path, n=6)
    with pytest.warns(LayoutWarning, match="patient"):
        s = scan(root, "aptos")
    assert (s.layout, s.modality, s.problems) == ("aptos", "fundus", [])
    exp = fx.aptos_expected(6)
    assert len(s.records) == 6
    for r in s.records:
        code = r.path.stem
        assert r.path == root / "train_images" / f"{code}.png" and r.path.is_absolute()
        assert r.patient_id == code                     # APTOS: each image its own patient
        assert r.labels == {"grade": exp[code]}
        assert r.mask_path is None


def test_eyepacs(tmp_path):
    root = fx.make_eyepacs(tmp_path, n_patients=3)
    s = scan(root, "eyepacs")
    assert (s.layout, s.modality, s.problems) == ("eyepacs", "fundus", [])
    exp = fx.eyepacs_expected(3)
    assert sorted(r.path.stem for r in s.records) == sorted(exp)
    for r in s.records:
        pid, grade, lat = exp[r.path.stem]
        assert r.path.suffix == ".jpeg"
        assert (r.patient_id, r.labels["grade"], r.labels["laterality"]) == (pid, grade, lat)
    assert len({r.patient_id for r in s.records}) == 3


def test_eyepacs_images_at_root_with_other_extension(tmp_path):
    root = fx.make_eyepacs(tmp_path, n_patients=2, folder="", ext=".png")
    s = scan(root)
    assert s.layout == "eyepacs" and s.problems == []
    assert sorted(rels(s)) == sorted(f"{n}.png" for n in fx.eyepacs_expected(2))


def test_brset_codes(tmp_path):
    root = fx.make_brset(tmp_path, n_patients=3)
    s = scan(root, "brset")
    assert (s.layout, s.modality, s.problems) == ("brset", "fundus", [])
    exp = fx.brset_expected(3)
    assert len(s.records) == 6
    for r in s.records:
        e = exp[r.path.stem]
        assert r.path.parent.name == "fundus_photos"
        assert r.patient_id == e["patient_id"]
        for name in ("grade", "sex", "laterality", "age"):
            assert same(r.labels[name], e[name]), (r.path.stem, name)
    # sex code 1 is male (canonical 1), exam_eye 1 is the right eye (canonical 1)
    first = next(r for r in s.records if r.path.stem == "img00001")
    assert first.labels["sex"] == 1.0 and first.labels["laterality"] == 1.0
    assert math.isnan(next(r for r in s.records if r.path.stem == "img00005").labels["age"])


def test_brset_physionet_file_name(tmp_path):
    root = fx.make_brset(tmp_path, n_patients=1, csv_name="labels_brset.csv")
    assert detect_layout(root) == "brset"
    assert len(scan(root).records) == 2


def test_brset_bad_sex_code_is_a_label_problem(tmp_path):
    root = fx.make_brset(tmp_path, n_patients=2)
    header, rows = fx.read_csv(root / "labels.csv")
    rows[1][header.index("patient_sex")] = "3"
    fx.write_csv(root / "labels.csv", header, rows)
    s = scan(root)
    assert kinds(s) == ["label"]
    assert s.problems[0].path == "fundus_photos/img00002.jpg"
    assert "row 3" in s.problems[0].detail and "patient_sex" in s.problems[0].detail
    assert len(s.records) == 3 and "img00002" not in {r.path.stem for r in s.records}


def test_rsna(tmp_path):
    root = fx.make_rsna(tmp_path, n=4)
    with pytest.warns(LayoutWarning, match="one per image"):
        s = scan(root, "rsna")
    assert (s.layout, s.modality, s.problems) == ("rsna", "xray", [])
    assert not any(r.patient_known for r in s.records)    # patientId names an image, not a person
    exp = fx.rsna_expected(4)
    assert len(s.records) == 4                            # 6 CSV rows: positives have two boxes
    for r in s.records:
        e = exp[r.path.stem]
        assert r.path.suffix == ".dcm" and r.patient_id == r.path.stem
        assert r.labels == {k: e[k] for k in ("pneumonia", "sex", "age", "view")}


def test_rsna_unreadable_dicom(tmp_path):
    root = fx.make_rsna(tmp_path, n=2)
    bad = root / "stage_2_train_images" / f"{next(iter(fx.rsna_expected(2)))}.dcm"
    bad.write_bytes(b"not a dicom file at all")
    with pytest.warns(LayoutWarning, match="one per image"):
        s = scan(root)
    assert kinds(s) == ["unreadable"] and bad.name in s.problems[0].path
    assert len(s.records) == 1


@pytest.mark.parametrize("gz", [True, False])
def test_mimic(tmp_path, gz):
    root = fx.make_mimic(tmp_path, gz=gz)
    s = scan(root, "mimic")
    assert (s.layout, s.modality, s.problems) == ("mimic", "xray", [])
    exp = fx.mimic_expected()
    assert len(s.records) == len(exp) == 6
    for r in s.records:
        e = exp[r.path.stem]
        assert r.patient_id == e["subject"]
        subj = e["subject"]
        assert r.path.parent == root / "files" / f"p{subj[:2]}" / f"p{subj}" / f"s{e['study']}"
        for name, v in e.items():
            if name not in ("subject", "study"):
                assert same(r.labels[name], v), (r.path.stem, name)
    assert {-1.0, 0.0, 1.0} <= {v for r in s.records for v in r.labels.values() if not math.isnan(v)}


def test_mimic_without_patients_table(tmp_path):
    root = fx.make_mimic(tmp_path, patients=False)
    with pytest.warns(LayoutWarning, match="patients"):
        s = scan(root)
    assert s.problems == [] and all("sex" not in r.labels for r in s.records)


def test_chexpert_reads_both_tables_and_both_spellings_of_path(tmp_path):
    root = fx.make_chexpert(tmp_path)
    s = scan(root, "chexpert")
    assert (s.layout, s.modality, s.problems) == ("chexpert", "xray", [])
    exp = fx.chexpert_expected()
    assert rels(s) == sorted(exp)
    for r in s.records:
        e = exp[r.path.relative_to(root).as_posix()]
        assert r.patient_id == e["patient"] and r.patient_known
        for name, v in e.items():
            if name != "patient":
                assert same(r.labels[name], v), (r.path, name)
    assert {-1.0, 0.0, 1.0} <= {r.labels["cardiomegaly"] for r in s.records} | {r.labels["edema"] for r in s.records}


def test_chexpert_problems_name_row_and_file(tmp_path):
    root = fx.make_chexpert(tmp_path)
    header, rows = fx.read_csv(root / "train.csv")
    rows.append([f"{fx.CHEXPERT_ROOT}/train/someone/study1/view1_frontal.jpg", "Male", "50", "Frontal", "PA",
                 *[""] * 14])                                                        # no patientNNNNN folder
    rows.append([f"{fx.CHEXPERT_ROOT}/train/patient00009/study1/view1_frontal.jpg", "Male", "50", "Frontal", "PA",
                 *[""] * 14])                                                        # not on disk
    rows[0][2] = "212"                                                               # an impossible age
    fx.write_csv(root / "train.csv", header, rows)
    s = scan(root)
    assert sorted(kinds(s)) == ["label", "label", "missing"]
    text = " | ".join(f"{p.path}: {p.detail}" for p in s.problems)
    assert "train.csv row 6" in text and "patientNNNNN" in text
    assert "patient00009/study1/view1_frontal.jpg" in text
    assert "train/patient00001/study1/view1_frontal.jpg: train.csv row 2: column 'Age'" in text
    assert len(s.records) == len(fx.CHEXPERT_ROWS) - 1


def test_nih_reads_findings_ids_and_both_age_spellings(tmp_path):
    root = fx.make_nih(tmp_path)
    s = scan(root, "nih")
    assert (s.layout, s.modality, s.problems) == ("nih", "xray", [])
    exp = fx.nih_expected()
    assert sorted(r.path.name for r in s.records) == sorted(exp)
    for r in s.records:
        e = exp[r.path.name]
        assert r.patient_id == e["patient"] and r.patient_known
        assert (r.labels["sex"], r.labels["age"], r.labels["view"]) == (e["sex"], e["age"], e["view"])
        present = {k for k, v in r.labels.items() if k not in ("sex", "age", "view") and v == 1.0}
        assert present == e["findings"]
        assert set(r.labels) == {"sex", "age", "view", "no_finding", *NIH_FINDINGS}   # nothing it does not record
        assert all(r.labels[f] == 0.0 for f in NIH_FINDINGS if f not in e["findings"])


@pytest.mark.parametrize("column, value, says", [
    ("Patient Age", "412", "outside 0..130"),
    ("Finding Labels", "Covid", "not one of the 14"),
    ("Finding Labels", "No Finding|Mass", "together with a finding"),
    ("Finding Labels", "", "is empty"),
    ("Patient ID", "7", "is not the patient the image name"),
])
def test_nih_bad_cells_are_problems_of_their_image(tmp_path, column, value, says):
    root = fx.make_nih(tmp_path)
    header, rows = fx.read_csv(root / "Data_Entry_2017_v2020.csv")
    rows[2][header.index(column)] = value
    fx.write_csv(root / "Data_Entry_2017_v2020.csv", header, rows)
    s = scan(root)
    assert kinds(s) == ["label"] and says in s.problems[0].detail
    assert s.problems[0].path.endswith(rows[2][0]) and len(s.records) == len(fx.NIH_ROWS) - 1


def test_an_aptos_train_csv_is_not_taken_for_chexpert(tmp_path):
    root = fx.make_aptos(tmp_path, n=3)
    assert detect_layout(root) == "aptos"
    both = fx.make_chexpert(tmp_path)
    header, rows = fx.read_csv(both / "train.csv")
    fx.write_csv(both / "train.csv", [*header, "id_code", "diagnosis"], [[*r, "x", "0"] for r in rows])
    with pytest.raises(DataError, match="several layouts"):
        detect_layout(both)


def test_generic_renamed_label_columns(tmp_path):
    root = fx.make_generic(tmp_path)
    s = scan(root, "generic", generic=generic_opts(root))
    assert (s.layout, s.modality, s.problems) == ("generic", None, [])
    exp = fx.generic_expected()
    assert rels(s) == sorted(exp)                         # cells without extension resolve too
    for r in s.records:
        e = exp[r.path.relative_to(root).as_posix()]
        assert r.patient_id == e["patient"]
        assert r.labels == {"grade": e["grade"], "sex": e["sex"], "score": e["score"]}


def test_generic_without_patient_column_warns(tmp_path):
    root = fx.make_generic(tmp_path)
    with pytest.warns(LayoutWarning, match="own patient"):
        s = scan(root, generic=generic_opts(root, patient_col=None))
    assert s.layout == "generic"
    assert len({r.patient_id for r in s.records}) == len(s.records) == 5


def test_generic_images_dir(tmp_path):
    root = fx.make_generic(tmp_path)
    header, rows = fx.read_csv(root / "meta.csv")
    for row in rows:
        row[0] = row[0].removeprefix("pics/")
    fx.write_csv(tmp_path / "elsewhere" / "table.csv", header, rows)
    s = scan(root, generic=generic_opts(root, labels_csv=tmp_path / "elsewhere" / "table.csv",
                                        images_dir=root / "pics"))
    assert s.problems == [] and rels(s) == sorted(fx.generic_expected())


@pytest.mark.parametrize("modality", ["fundus", "xray"])
def test_medanon(tmp_path, modality):
    root = fx.make_medanon(tmp_path, modality)
    s = scan(root, "medanon")
    assert (s.layout, s.modality, s.problems) == ("medanon", modality, [])   # masks are not "unlabelled"
    exp = fx.medanon_expected(modality)
    assert rels(s) == sorted(exp)
    for r in s.records:
        e = exp[r.path.relative_to(root).as_posix()]
        assert r.patient_id == e["patient_id"]
        assert r.mask_path == root / e["mask"]
        assert list(r.labels) == fx.medanon_label_cols(modality)
    r0 = next(r for r in s.records if r.patient_id == "P0001")
    assert r0.labels["sex"] == 1.0 and r0.labels["marker_block"] == 1.0 and r0.labels["age"] == 40.0


def test_medanon_bad_version(tmp_path):
    root = fx.make_medanon(tmp_path, masks=False)
    text = (root / "dataset.yaml").read_text().replace("version: 1", "version: 7")
    (root / "dataset.yaml").write_text(text)
    with pytest.raises(DataError, match="version") as e:
        scan(root, "medanon")
    assert "dataset.yaml" in str(e.value) and e.value.fix


def test_medanon_column_errors_point_to_dataset_yaml(tmp_path):
    """A medanon folder's columns are named by its dataset.yaml: the fix says to correct it there, not to pass
    options that this layout does not take."""
    root = fx.make_medanon(tmp_path, masks=False)
    yaml_text = (root / "dataset.yaml").read_text()
    for key, line in (("label_cols", "label_cols: [grade, no_such_column]\n"), ("image_col", "image_col: nope\n")):
        (root / "dataset.yaml").write_text(yaml_text + line)
        with pytest.raises(DataError) as e:
            scan(root, "medanon")
        assert f"correct {key} in {root / 'dataset.yaml'}" in e.value.fix and "pass " not in e.value.fix, e.value.fix


# ---------------------------------------------------------------------------------------------- detection


@pytest.mark.parametrize("name", sorted(fx.BUILDERS))
def test_auto_detection(tmp_path, name):
    root = fx.BUILDERS[name](tmp_path)
    assert detect_layout(root) == name
    s = quiet_scan(root)
    assert s.layout == name and s.records and s.problems == []


def test_generic_options_imply_generic(tmp_path):
    root = fx.make_generic(tmp_path)
    assert scan(root, generic=generic_opts(root)).layout == "generic"


def test_undetectable_folder_names_folder_and_fix(tmp_path):
    root = fx.make_generic(tmp_path)          # a home-made CSV: not auto-detectable
    with pytest.raises(DataError) as e:
        detect_layout(root)
    msg = str(e.value)
    assert str(root) in msg and "trainLabels.csv" in msg and "stage_2_train_labels.csv" in msg
    assert "layout=" in e.value.fix and "labels_csv=" in e.value.fix
    with pytest.raises(DataError):
        scan(root)


def test_unknown_layout_name(tmp_path):
    root = fx.make_aptos(tmp_path, n=2)
    with pytest.raises(DataError, match="unknown layout") as e:
        scan(root, "kaggle")
    assert str(root) in str(e.value) and "aptos" in e.value.fix


def test_missing_folder(tmp_path):
    with pytest.raises(DataError, match="does not exist") as e:
        scan(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(e.value)


def test_generic_needs_options_and_named_layout_refuses_them(tmp_path):
    root = fx.make_generic(tmp_path)
    with pytest.raises(DataError) as e:
        scan(root, "generic")
    assert "image_col=" in e.value.fix
    aptos = fx.make_aptos(tmp_path, n=2)
    with pytest.raises(DataError):
        scan(aptos, "aptos", generic=generic_opts(root))


# ---------------------------------------------------------------------------------------------- problems


def test_missing_image(tmp_path):
    root = fx.make_aptos(tmp_path, n=4)
    gone = fx.aptos_id(2)
    (root / "train_images" / f"{gone}.png").unlink()
    s = quiet_scan(root)
    assert kinds(s) == ["missing"]
    assert s.problems[0].path == f"train_images/{gone}.png" and "train.csv row 4" in s.problems[0].detail
    assert len(s.records) == 3 and gone not in {r.patient_id for r in s.records}


def test_missing_image_generic_names_the_file(tmp_path):
    root = fx.make_generic(tmp_path)
    (root / "pics" / "scan_02.png").unlink()
    s = scan(root, generic=generic_opts(root))
    assert kinds(s) == ["missing"] and "scan_02" in s.problems[0].path
    assert "meta.csv row 4" in s.problems[0].detail


def test_extra_image_is_unlabelled(tmp_path):
    root = fx.make_eyepacs(tmp_path, n_patients=2)
    fx.write_image(root / "train" / "99_left.jpeg", 5)
    s = scan(root)
    assert kinds(s) == ["unlabelled"] and s.problems[0].path == "train/99_left.jpeg"
    assert len(s.records) == 4


def test_extra_image_in_medanon_images_folder(tmp_path):
    root = fx.make_medanon(tmp_path)
    fx.write_image(root / "images" / "stray.png", 5)
    (root / "notes.txt").write_text("not an image")
    s = scan(root)
    assert [(p.kind, p.path) for p in s.problems] == [("unlabelled", "images/stray.png")]


def test_missing_mask(tmp_path):
    root = fx.make_medanon(tmp_path)
    rel, e = next(iter(fx.medanon_expected().items()))
    (root / e["mask"]).unlink()
    s = scan(root)
    assert kinds(s) == ["missing"] and s.problems[0].path == e["mask"]
    assert rel not in rels(s) and len(s.records) == 5


@pytest.mark.parametrize("bad", ["7", "severe", "2.5"])
def test_bad_label_value(tmp_path, bad):
    root = fx.make_aptos(tmp_path, n=4)
    header, rows = fx.read_csv(root / "train.csv")
    rows[1][1] = bad
    fx.write_csv(root / "train.csv", header, rows)
    s = quiet_scan(root)
    assert kinds(s) == ["label"]
    p = s.problems[0]
    assert p.path == f"train_images/{rows[1][0]}.png"
    assert "row 3" in p.detail and "'diagnosis'" in p.detail and bad in p.detail
    assert len(s.records) == 3                          # the caller decides: raise, or skip it


def test_blank_label_is_nan_not_a_problem(tmp_path):
    root = fx.make_generic(tmp_path)
    header, rows = fx.read_csv(root / "meta.csv")
    rows[0][header.index("level")] = ""
    fx.write_csv(root / "meta.csv", header, rows)
    s = scan(root, generic=generic_opts(root))
    assert s.problems == [] and math.isnan(s.records[0].labels["grade"])


def test_duplicate_rows_merge_or_conflict(tmp_path):
    root = fx.make_generic(tmp_path)
    header, rows = fx.read_csv(root / "meta.csv")
    same_row = list(rows[1])
    partial = list(rows[3])
    partial[header.index("score")] = ""                 # consistent: blank fills from the other row
    fx.write_csv(root / "meta.csv", header, [*rows, same_row, partial])
    s = scan(root, generic=generic_opts(root))
    assert s.problems == [] and len(s.records) == 5

    conflicting = list(rows[2])
    conflicting[header.index("level")] = "4"
    fx.write_csv(root / "meta.csv", header, [*rows, conflicting])
    s = scan(root, generic=generic_opts(root))
    assert kinds(s) == ["label"] and s.problems[0].path == "pics/scan_02.png"
    assert "rows 4 and 7" in s.problems[0].detail and "grade" in s.problems[0].detail
    assert len(s.records) == 4


def test_empty_patient_id_is_a_problem(tmp_path):
    root = fx.make_generic(tmp_path)
    header, rows = fx.read_csv(root / "meta.csv")
    rows[0][header.index("subject")] = " "
    fx.write_csv(root / "meta.csv", header, rows)
    s = scan(root, generic=generic_opts(root))
    assert kinds(s) == ["label"] and "subject" in s.problems[0].detail and len(s.records) == 4


# ------------------------------------------------------------------------------------- structure errors


def test_missing_required_column(tmp_path):
    root = fx.make_aptos(tmp_path, n=2)
    _, rows = fx.read_csv(root / "train.csv")
    fx.write_csv(root / "train.csv", ["id_code", "grade"], rows)
    with pytest.raises(DataError) as e:
        quiet_scan(root, "aptos")
    assert "train.csv" in str(e.value) and "'diagnosis'" in str(e.value)
    assert e.value.files == [str(root / "train.csv")] and "id_code" in e.value.fix


def test_generic_wrong_image_column(tmp_path):
    root = fx.make_generic(tmp_path)
    with pytest.raises(DataError) as e:
        scan(root, generic=generic_opts(root, image_col="path"))
    assert "meta.csv" in str(e.value) and "'path'" in str(e.value)
    assert "image_col=" in e.value.fix and "file" in e.value.fix


def test_generic_unknown_label_column(tmp_path):
    root = fx.make_generic(tmp_path)
    with pytest.raises(DataError) as e:
        scan(root, generic=generic_opts(root, label_cols=("grade=dr_level",)))
    assert "dr_level" in str(e.value) and "meta.csv" in str(e.value) and "label_cols=" in e.value.fix


def test_missing_csv(tmp_path):
    root = fx.make_generic(tmp_path)
    with pytest.raises(DataError, match="not found") as e:
        scan(root, generic=generic_opts(root, labels_csv=root / "nope.csv"))
    assert "nope.csv" in str(e.value)
    rsna = fx.make_rsna(tmp_path, n=1)
    (rsna / "stage_2_train_labels.csv").unlink()
    with pytest.raises(DataError):
        scan(rsna, "rsna")


def test_headers_with_bom_and_spaces(tmp_path):
    root = fx.make_aptos(tmp_path, n=3)
    text = (root / "train.csv").read_text()
    body = text.split("\n", 1)[1]
    (root / "train.csv").write_bytes(("\ufeff id_code , Diagnosis \n" + body).encode("utf-8"))
    s = quiet_scan(root)
    assert s.layout == "aptos" and s.problems == [] and len(s.records) == 3


# ------------------------------------------------------------------------------------- determinism, ids


def test_order_and_ids_deterministic(tmp_path):
    root = fx.make_mimic(tmp_path)
    a, b = scan(root), scan(root)
    assert [(r.record_id, r.path) for r in a.records] == [(r.record_id, r.path) for r in b.records]
    assert rels(a) == sorted(rels(a))
    for r in a.records:
        assert r.record_id == make_record_id(r.path.relative_to(root).as_posix())
    # reversing the CSV rows changes nothing
    header, rows = fx.read_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz")
    fx.write_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz", header, rows[::-1], gz=True)
    c = scan(root)
    assert [r.record_id for r in c.records] == [r.record_id for r in a.records]
    assert [r.labels.keys() for r in c.records] == [r.labels.keys() for r in a.records]


def test_ids_do_not_depend_on_where_the_dataset_lives(tmp_path):
    root = fx.make_brset(tmp_path, n_patients=2)
    moved = shutil.copytree(root, tmp_path / "elsewhere" / "brset_copy")
    assert [r.record_id for r in scan(root).records] == [r.record_id for r in scan(moved).records]


@pytest.mark.parametrize("name", sorted(fx.BUILDERS))
def test_record_id_hides_file_name(tmp_path, name):
    s = quiet_scan(fx.BUILDERS[name](tmp_path))
    ids = [r.record_id for r in s.records]
    assert len(set(ids)) == len(ids)
    for r in s.records:
        assert r.record_id.startswith("r") and len(r.record_id) == 17
        for part in [r.path.name, r.path.stem, r.patient_id, *r.path.stem.split("-")]:
            if len(part) >= 6:
                assert part not in r.record_id


def test_a_utf16_labels_file_reads_like_utf8(tmp_path):
    """Excel's "Unicode text" export: UTF-16 with a byte-order mark, tab-separated."""
    import medanon

    root = medanon.make_phantom(tmp_path / "ph", patients=3, per_patient=1, size=16)
    text = (root / "labels.csv").read_text(encoding="utf-8")
    (root / "labels.csv").write_bytes(text.replace(",", "\t").encode("utf-16"))
    ds = medanon.open_dataset(root, size=16)
    assert len(ds) == 3 and "grade" in ds.label_names


@pytest.mark.parametrize(("text", "said"), [("format: [medanon-dataset\n  : : oops\n\t- x", "YAML syntax"),
                                            ("- a\n- b\n", "does not say 'format: medanon-dataset'"),
                                            ("", "does not say 'format: medanon-dataset'")])
def test_a_damaged_dataset_yaml_is_named_not_taken_for_no_layout(tmp_path, text, said):
    """Auto-detection gives a folder whose only layout file is a broken dataset.yaml to the medanon reader, which
    names the file and what is wrong, instead of 'none of the files that identify a layout are there'."""
    (tmp_path / "dataset.yaml").write_text(text)
    with pytest.raises(DataError, match=said) as e:
        scan(tmp_path)
    assert "dataset.yaml" in " ".join(map(str, e.value.files)) + str(e.value)


def test_a_labels_file_that_is_not_text_is_named_so(tmp_path):
    """A PNG or random bytes given as the labels CSV read as rows 'without the header's cells'."""
    from medanon.data.layouts.table import read_table

    (tmp_path / "labels.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (tmp_path / "noise.csv").write_bytes(bytes(range(256)) * 3)
    for name, kind in (("labels.png", "a PNG image"), ("noise.csv", "binary data")):
        with pytest.raises(DataError, match=f"is not a text CSV: it holds {kind}"):
            read_table(tmp_path / name)


# ------------------------------------------------------------------------------------------- patient ids
# Every k, per-patient epsilon and patient-level split counts people by these ids: one id per person, one person
# per id, or a problem that names the rows.


def test_an_eyepacs_name_without_a_side_is_a_problem_not_a_patient_of_its_own(tmp_path):
    """`10_L` and `10_R` (or `13-left`) became two patients each counted as known: a k = 2 record could be one
    person's two eyes."""
    root = fx.make_eyepacs(tmp_path)
    header, rows = fx.read_csv(root / "trainLabels.csv")
    for name in ("10_L", "10_R"):
        fx.write_image(root / "train" / f"{name}.jpeg")
        rows.append([name, "0"])
    fx.write_csv(root / "trainLabels.csv", header, rows)
    s = quiet_scan(root)
    bad = [p for p in s.problems if "is not '<patient id>_left'" in p.detail]
    assert sorted(p.path for p in bad) == ["train/10_L.jpeg", "train/10_R.jpeg"]
    assert not any(r.patient_id.startswith("10_") for r in s.records) and len(s.records) == 6


def test_one_file_under_two_names_is_one_image(tmp_path):
    """A link to an image, listed with another patient id, made one image two people."""
    root = fx.make_generic(tmp_path)
    header, rows = fx.read_csv(root / "meta.csv")
    target = next(p for p in (root / "pics").iterdir() if p.stem == Path(rows[0][0]).stem)
    (root / "pics" / "link.png").symlink_to(target.name)
    linked = list(rows[0])
    linked[0], linked[header.index("subject")] = "pics/link.png", "someone-else"
    fx.write_csv(root / "meta.csv", header, [*rows, linked])
    s = scan(root, generic=generic_opts(root))
    assert len(s.records) == 4 and "different patient ids" in " ".join(p.detail for p in s.problems)
    assert "unlabelled" not in kinds(s)                  # the link is listed, not an image without a row
    same_patient = list(rows[0])
    same_patient[0] = "pics/link.png"
    fx.write_csv(root / "meta.csv", header, [*rows, same_patient])
    s = scan(root, generic=generic_opts(root))
    assert s.problems == [] and len(s.records) == 5     # one image, however many names


@pytest.mark.parametrize("ids, said", [(["NA", "NA"], "missing-value placeholder"),
                                       (["10", "010"], "also spelled '10'"),
                                       (["P1", "p1"], "also spelled 'P1'")])
def test_placeholder_and_respelled_patient_ids_are_problems(tmp_path, ids, said):
    root = fx.make_generic(tmp_path)
    header, rows = fx.read_csv(root / "meta.csv")
    for row, pid in zip(rows, ids, strict=False):
        row[header.index("subject")] = pid
    fx.write_csv(root / "meta.csv", header, rows)
    s = scan(root, generic=generic_opts(root))
    assert len(s.records) == 3 and all(p.kind == "label" for p in s.problems)
    assert any(said in p.detail for p in s.problems), [p.detail for p in s.problems]


def test_an_id_holding_both_sexes_warns_of_a_collision(tmp_path):
    root = fx.make_generic(tmp_path)
    header, rows = fx.read_csv(root / "meta.csv")
    rows[1][header.index("subject")] = rows[0][header.index("subject")]
    rows[0][header.index("gender")], rows[1][header.index("gender")] = "male", "female"
    fx.write_csv(root / "meta.csv", header, rows)
    with pytest.warns(LayoutWarning, match="hold images of both sexes"):
        scan(root, generic=generic_opts(root))


def test_two_layouts_in_one_folder_are_refused_not_guessed(tmp_path):
    root = fx.make_eyepacs(tmp_path)
    fx.write_csv(root / "train.csv", ["id_code", "diagnosis"], [["abc", 0]])       # APTOS's table too
    with pytest.raises(DataError, match=r"several layouts \(eyepacs, aptos\)"):
        detect_layout(root)


def test_ages_out_of_range_are_problems_in_every_reader(tmp_path):
    root = fx.make_brset(tmp_path)
    header, rows = fx.read_csv(root / "labels.csv")
    rows[0][header.index("patient_age")] = "200"
    fx.write_csv(root / "labels.csv", header, rows)
    s = quiet_scan(root)
    assert any("'age': 200 is outside 0..130" in p.detail for p in s.problems)
    rsna = fx.make_rsna(tmp_path, n=2)
    dicom = sorted((rsna / "stage_2_train_images").iterdir())[0]
    fx.write_dicom(dicom, patient_id=dicom.stem, age="148")
    s = quiet_scan(rsna)
    assert any("PatientAge" in p.detail and "148 is outside" in p.detail for p in s.problems)


def test_an_id_in_two_split_folders_warns_that_parts_may_number_patients_anew(tmp_path):
    """RFMiD numbers its patients anew in Training/ and Validation/: a combined CSV made two people one."""
    root = tmp_path / "rfmid"
    for part in ("Training", "Validation"):
        fx.write_image(root / part / "1.png")
    fx.write_csv(root / "meta.csv", ["file", "subject"], [["Training/1.png", "1"], ["Validation/1.png", "1"]])
    with pytest.warns(LayoutWarning, match="several split folders"):
        scan(root, generic=GenericOptions(labels_csv=root / "meta.csv", image_col="file", patient_col="subject"))


def test_a_header_ending_in_a_delimiter_reads_like_one_without(tmp_path):
    """Excel often writes "id_code,diagnosis," over rows without the trailing comma: every row read as cut short."""
    root = fx.make_aptos(tmp_path, n=3)
    text = (root / "train.csv").read_text()
    head, body = text.split("\n", 1)
    (root / "train.csv").write_text(head + ",\n" + body)
    s = quiet_scan(root)
    assert s.layout == "aptos" and s.problems == [] and len(s.records) == 3
    (root / "train.csv").write_text(head + ",\n" + body.replace("\n", ",extra\n", 1))   # a value past the header
    with pytest.raises(DataError, match="do not have the header's 2 cells"):
        quiet_scan(root)


def test_a_csv_cell_finds_its_file_spelled_alike_on_disk(tmp_path):
    """Messidor-2 and EyePACS copies list IM002385.jpg where the disk has IM002385.JPG; a CSV written on Windows
    names Zoë composed where a Mac wrote it decomposed. One file spelled alike is the file; two are not guessed."""
    import unicodedata

    from PIL import Image

    root = tmp_path / "d"
    root.mkdir()
    nfd = unicodedata.normalize("NFD", "Zoë_1.png")
    for name in ("IM1.JPG", nfd, "two.JPG", "two.Jpg"):
        Image.new("RGB", (16, 16), (90, 20, 10)).save(root / name, format="PNG" if name.endswith("png") else "JPEG")
    nfc = unicodedata.normalize("NFC", "Zoë_1.png")
    (root / "meta.csv").write_text(f"file,subject\nIM1.jpg,p1\n{nfc},p2\ntwo.jpg,p3\n", encoding="utf-8")
    s = quiet_scan(root, "generic", generic=GenericOptions(labels_csv=root / "meta.csv", image_col="file",
                                                           patient_col="subject"))
    assert sorted(rels(s)) == sorted(["IM1.JPG", nfd]), rels(s)
    assert sorted(kinds(s)) == ["missing", "unlabelled", "unlabelled"], s.problems    # two.jpg: not guessed


def test_an_excel_sep_line_names_the_delimiter(tmp_path):
    """Excel's CSV export may begin with "sep=;": the delimiter of the rest, not a header; a layout is detected
    past it and problems keep their file line numbers."""
    root = fx.make_eyepacs(tmp_path, n_patients=2)
    csv_path = root / "trainLabels.csv"
    lines = csv_path.read_text().splitlines()
    csv_path.write_text("sep=;\n" + "\n".join(line.replace(",", ";") for line in lines) + "\n")
    s = scan(root)
    assert (s.layout, s.problems) == ("eyepacs", []) and len(s.records) == len(lines) - 1
    from medanon.data.layouts.table import read_table

    assert read_table(csv_path).rows[0][0] == 3                  # the file's line 3: the first row of values


def test_excel_sep_lines_name_tabs_and_survive_a_byte_order_mark():
    from medanon.data.layouts.table import _excel_sep

    assert [_excel_sep(x) for x in ("sep=\t\r\n", "\ufeffsep=;\n", '"sep=,"', "file,grade", "sep=;;")] == \
        ["\t", ";", ",", None, None]
