"""The dataset options on the command line: the same layout options for every command that reads a dataset,
clean messages for the reading half of issue 13 (outside paths, bombs, splits, --size, warnings)."""

import logging
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fixtures_layouts import make_mimic
from PIL import Image
from test_data_safety import png_claiming

from medanon.cli import cli
from medanon.cli.data import clean_warnings
from medanon.config import DataConfig
from medanon.data.dataset import open_dataset, reading
from medanon.data.layouts import GenericOptions, LayoutWarning, scan
from medanon.data.summary import format_summary, summarize


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


def generic_folder(root: Path, n: int = 4, *, extra: str = "") -> list[str]:
    (root / "pics").mkdir(parents=True)
    rows = ["file,subject,level"]
    for i in range(n):
        a = np.random.default_rng(i).integers(0, 256, (24, 24, 3), dtype=np.uint8)
        Image.fromarray(a).save(root / "pics" / f"s{i}.png")
        rows.append(f"pics/s{i}.png,subj{i},{i % 5}")
    if extra:
        rows.append(extra)
    (root / "meta.csv").write_text("\n".join(rows) + "\n")
    return ["--labels", str(root / "meta.csv"), "--image-col", "file", "--label-cols", "grade=level",
            "--patient-col", "subject"]


def test_summary_refuses_then_allows_an_outside_path(tmp_path: Path, runner):
    root = tmp_path / "ds"
    a = np.zeros((24, 24, 3), np.uint8)
    Image.fromarray(a).save(tmp_path / "x.png")
    opts = generic_folder(root, extra="../x.png,subjX,1")
    r = runner.invoke(cli, ["data", "summary", str(root), *opts, "--size", "16"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "1 outside" in r.output and "--allow-outside" in r.output and "unlabelled" not in r.output
    r = runner.invoke(cli, ["data", "summary", str(root), *opts, "--size", "16", "--allow-outside", "--json"])
    assert r.exit_code == 0, r.output
    assert '"images": 5' in r.stdout and '"skipped": []' in r.stdout


def test_summary_skips_a_bomb(tmp_path: Path, runner):
    root = tmp_path / "ds"
    opts = generic_folder(root, extra="pics/bomb.png,subjB,1")
    png_claiming(root / "pics" / "bomb.png", 60000, 60000)
    r = runner.invoke(cli, ["data", "summary", str(root), *opts, "--size", "16"])
    assert r.exit_code == 1 and "bomb.png" in r.output and "--max-pixels" in r.output
    r = runner.invoke(cli, ["data", "summary", str(root), *opts, "--size", "16", "--skip-bad", "--decode"])
    assert r.exit_code == 0 and "images    4" in r.output and "bomb.png: large" in r.output


def test_size_error_says_one_thing(runner, tmp_path: Path):
    r = runner.invoke(cli, ["data", "summary", str(tmp_path), "--size", "63"])
    assert r.exit_code == 2
    assert "63 is not a power of two from 16 to 1024" in r.output and "1024" in r.output


def test_split_warns_when_fractions_cannot_be_met(tmp_path: Path, runner):
    root = tmp_path / "ds"
    opts = generic_folder(root, n=4)
    r = runner.invoke(cli, ["data", "split", str(root), *opts, "--size", "16", "--out", str(tmp_path / "s.csv"),
                            "--val", "0.25", "--test", "0.25", "--stratify", "grade"])
    assert r.exit_code == 0, r.output
    assert "warning: the" in r.output and "can only be cut to whole patients" in r.output


@pytest.mark.parametrize("name", ["s.txt", "splits"])
def test_a_splits_file_under_any_name_is_replaced_with_overwrite(tmp_path: Path, runner, name):
    """--out accepts any name; a splits file not ending in .csv was taken for someone else's file and could never be
    replaced, --overwrite or not. A file that is not a splits file still is not replaced."""
    root = tmp_path / "ds"
    opts = [*generic_folder(root, n=4), "--size", "16", "--stratify", ""]
    out = tmp_path / name
    assert runner.invoke(cli, ["data", "split", str(root), *opts, "--out", str(out)]).exit_code == 0
    r = runner.invoke(cli, ["data", "split", str(root), *opts, "--out", str(out)])
    assert r.exit_code != 0 and "--overwrite" in r.output
    r = runner.invoke(cli, ["data", "split", str(root), *opts, "--out", str(out), "--overwrite", "--seed", "3"])
    assert r.exit_code == 0, r.output
    out.write_text("my notes\n")
    r = runner.invoke(cli, ["data", "split", str(root), *opts, "--out", str(out), "--overwrite"])
    assert r.exit_code != 0 and "never replaced" in r.output and out.read_text() == "my notes\n"


def test_audit_and_evaluate_take_the_layout_options(tmp_path: Path, runner):
    root = tmp_path / "ds"
    opts = generic_folder(root)
    release = tmp_path / "release"
    release.mkdir()
    bad = [o if o != "file" else "nope" for o in opts]
    r = runner.invoke(cli, ["audit", str(release), "--source", str(root), *bad])
    assert r.exit_code == 3 and "has no column 'nope'" in r.output
    r = runner.invoke(cli, ["audit", str(release), "--source", str(root), *opts])
    assert r.exit_code == 3 and "nope" not in r.output and "meta.csv" not in r.output     # the source was read
    r = runner.invoke(cli, ["evaluate", "--real", str(root), *bad, "--release", str(release),
                            "--out", str(tmp_path / "ev"), "--preset", "fast", "--size", "16"])
    assert r.exit_code == 1 and "has no column 'nope'" in r.output
    for cmd in (["audit"], ["evaluate"], ["data", "summary"], ["data", "split"], ["anonymize", "snow"]):
        text = runner.invoke(cli, [*cmd, "--help"]).output
        assert "--labels" in text and "--image-col" in text
        # the audit reads names, not pixels, and searches every file the labels name: no file options
        assert ("--allow-outside" in text and "--max-pixels" in text) == (cmd != ["audit"])


def test_reading_declares_options_for_code_that_opens_by_path(tmp_path: Path):
    root = tmp_path / "ds"
    generic_folder(root)
    generic = GenericOptions(labels_csv=root / "meta.csv", image_col="file", label_cols=("grade=level",),
                             patient_col="subject")
    with reading(root, generic=generic):
        ds = open_dataset(root, DataConfig(size=16))
    assert len(ds) == 4 and ds.layout == "generic"
    with pytest.raises(Exception, match="layout"):
        open_dataset(root, DataConfig(size=16))                # outside the block: nothing is declared


def test_layout_warning_is_one_clean_log_line(caplog):
    with warnings.catch_warnings(record=True) as escaped, caplog.at_level(logging.WARNING, logger="medanon"):
        warnings.simplefilter("always")
        with clean_warnings():
            warnings.warn("no patient column given", LayoutWarning, stacklevel=1)
    assert [r.getMessage() for r in caplog.records] == ["no patient column given"]
    assert not escaped


def test_mimic_summary_separates_long_label_names(tmp_path: Path):
    from medanon.data.dataset import ImageDataset

    sc = scan(make_mimic(tmp_path))
    ds = ImageDataset(sc.records, size=16, channels=1, crop="center", layout="mimic", root=sc.root)
    text = format_summary(summarize(ds))
    line = next(ln for ln in text.splitlines() if "enlarged_cardiomediastinum" in ln)
    assert line.split()[0] == "enlarged_cardiomediastinum"


def test_anonymize_skips_corrupt_pixels_with_skip_bad(tmp_path: Path, runner):
    ph = tmp_path / "ph"
    r = runner.invoke(cli, ["phantom", "--patients", "4", "--per-patient", "1", "--size", "16", "--out", str(ph),
                            "--workers", "1"])
    assert r.exit_code == 0, r.output
    victim = sorted((ph / "images").glob("*.png"))[1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])             # the header survives, the pixels do not
    args = ["anonymize", "snow", str(ph), "--p", "0.3", "--seed", "0", "--size", "16"]
    r = runner.invoke(cli, [*args, "--out", str(tmp_path / "rel")])
    assert r.exit_code == 1 and victim.name in r.output and "--skip-bad" in r.output
    r = runner.invoke(cli, [*args, "--out", str(tmp_path / "rel2"), "--skip-bad"])
    assert r.exit_code == 0, r.output
    assert "wrote 3 images" in r.output


def test_summary_reads_headers_only_unless_decode(tmp_path: Path, runner):
    root = tmp_path / "ds"
    opts = generic_folder(root, n=3)
    victim = root / "pics" / "s2.png"
    big = np.random.default_rng(9).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(big).save(victim)
    victim.write_bytes(victim.read_bytes()[:300])           # the header survives, the pixels do not
    r = runner.invoke(cli, ["data", "summary", str(root), *opts, "--size", "16", "--skip-bad"])
    assert r.exit_code == 0 and "images    3" in r.output                 # a header check: fast, finds nothing
    r = runner.invoke(cli, ["data", "summary", str(root), *opts, "--size", "16", "--skip-bad", "--decode"])
    assert r.exit_code == 0 and "images    2" in r.output and "s2.png: unreadable" in r.output
    r = runner.invoke(cli, ["data", "summary", str(root), *opts, "--size", "16", "--decode"])
    assert r.exit_code == 1 and "s2.png" in r.output and "--skip-bad" in r.output


def test_summary_lists_mixed_channel_counts_as_a_problem(tmp_path: Path, runner):
    """A grey image in a colour set: the summary is printed, with the problem, its files and the fix, and exits 1;
    with --channels there is no problem."""
    from medanon import make_phantom

    data = make_phantom(tmp_path / "ph", patients=3, per_patient=1, size=16)
    grey = sorted((data / "images").iterdir())[1]
    Image.open(grey).convert("L").save(grey)
    r = runner.invoke(cli, ["data", "summary", str(data)])
    assert r.exit_code == 1 and "patients 3" in r.output, r.output
    assert "PROBLEM   the images have mixed channel counts" in r.output and grey.name in r.output
    assert "--channels 3" in r.output and "channels=" not in r.output
    r = runner.invoke(cli, ["data", "summary", str(data), "--channels", "3"])
    assert r.exit_code == 0 and "PROBLEM" not in r.output, r.output


def test_transparent_images_are_named_once_and_summarised(tmp_path: Path, runner):
    """A fundus image saved with a transparent background: the summary counts images declaring transparency, the
    dataset warns once per folder when it decodes one (naming the file), and the pixels read are the stored colour."""
    from medanon import make_phantom
    from medanon.data.imageio import TransparencyIgnored

    data = make_phantom(tmp_path / "ph", patients=3, per_patient=1, size=16)
    files = sorted((data / "images").iterdir())
    for f in files[:2]:
        im = Image.open(f).convert("RGBA")
        a = np.asarray(im).copy()
        a[:4, :, 3] = 0                                            # a transparent band; colour kept
        Image.fromarray(a).save(f)
    r = runner.invoke(cli, ["data", "summary", str(data)])
    assert r.exit_code == 0 and "alpha     2 image(s) declare transparency" in r.output, r.output
    ds = open_dataset(data, DataConfig(size=16))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds.tensors(progress=False)
        ds.tensors(progress=False)
        open_dataset(data, DataConfig(size=16)).tensors(progress=False)
    said = [w for w in caught if issubclass(w.category, TransparencyIgnored)]
    assert len(said) == 1 and "has transparent pixels" in str(said[0].message), [str(w.message) for w in caught]
    assert any(f.name in str(said[0].message) for f in files[:2])
    plain = make_phantom(tmp_path / "plain", patients=3, per_patient=1, size=16)
    r = runner.invoke(cli, ["data", "summary", str(plain)])
    assert r.exit_code == 0 and "alpha" not in r.output


def test_the_summary_of_data_without_patient_ids_says_their_count_is_unknown(tmp_path):
    """APTOS has no patient ids: "patients 6" read as six people when each image merely counts as one."""
    from fixtures_layouts import make_aptos

    root = make_aptos(tmp_path)
    r = CliRunner().invoke(cli, ["data", "summary", str(root), "--size", "16"])
    assert r.exit_code == 0, r.output
    assert "patients unknown (no patient ids: each of the 6 images counted as its own)" in r.output
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LayoutWarning)
        assert summarize(open_dataset(root, DataConfig(size=16)))["patient_ids_known"] is False


def test_a_stratify_label_the_data_lacks_is_named_before_any_image_is_read(tmp_path: Path, runner):
    root = tmp_path / "ds"
    opts = generic_folder(root, n=4)
    (root / "pics" / "s0.png").write_bytes(b"not a png")           # reading the images would stop here first
    r = runner.invoke(cli, ["data", "split", str(root), *opts, "--stratify", "nope", "--out", str(tmp_path / "s.csv")])
    assert r.exit_code == 1 and "--stratify 'nope' is not a label of" in r.output and "'grade'" in r.output
    assert "s0.png" not in r.output and not (tmp_path / "s.csv").exists()
