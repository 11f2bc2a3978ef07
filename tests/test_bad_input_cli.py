"""Bad input found by a command-line audit: each case was accepted (a wrong release, a wrong score) or ended in a
traceback; each is now one clear error naming the file or the setting."""

import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.data.layouts import scan
from medanon.errors import ConfigError, DataError
from medanon.phantoms.generate import generate
from medanon.segment.mask_files import MaskIndex, read_mask


@pytest.fixture(scope="module")
def phantom(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=6, per_patient=2, size=16, workers=1),
                    tmp_path_factory.mktemp("bad") / "fundus", progress=False)


def _run(*args) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["--device", "cpu", *map(str, args)])
    assert "Traceback" not in r.output, r.output
    return r.exit_code, " ".join(r.output.split())


def test_a_row_cut_short_is_refused_not_read_as_another_patient(tmp_path, phantom):
    """The last row cut inside its patient id ("P00012" -> "P0001") made a k = 2 record of one person."""
    data = tmp_path / "d"
    shutil.copytree(phantom, data)
    labels = data / "labels.csv"
    lines = labels.read_text().splitlines()
    lines[-1] = lines[-1][: lines[-1].index(",", lines[-1].index(",") + 1) + 3]     # image, mask, 2 id chars
    labels.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="do not have the header's") as e:
        scan(data)
    assert f"line(s) {len(lines)}" in str(e.value)
    code, out = _run("anonymize", "kpixel", data, "--k", "2", "--out", tmp_path / "r")
    assert code == 1 and "do not have the header's" in out and not (tmp_path / "r").exists()


def test_a_column_named_twice_is_refused(tmp_path, phantom):
    data = tmp_path / "d"
    shutil.copytree(phantom, data)
    labels = data / "labels.csv"
    rows = [line + ("," + line.split(",")[3] if i else ",grade") for i, line in
            enumerate(labels.read_text().splitlines())]
    labels.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"names column\(s\) \['grade'\] more than once"):
        scan(data)


def test_vessel_masks_of_zeros_and_ones_are_read_and_an_empty_one_is_refused(tmp_path):
    a = np.zeros((8, 8), np.uint8)
    a[2:4] = 1
    Image.fromarray(a).save(tmp_path / "m01.png")
    assert read_mask(tmp_path / "m01.png").sum() == 16                     # a 0/1 mask: its 1s are vessel
    Image.fromarray(a * 255).save(tmp_path / "m255.png")
    assert read_mask(tmp_path / "m255.png").sum() == 16
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "empty.png")
    with pytest.raises(DataError, match="has no vessel pixel"):
        read_mask(tmp_path / "empty.png")


def test_an_image_never_takes_the_mask_of_another_image_of_its_patient(tmp_path):
    masks = tmp_path / "masks"
    masks.mkdir()
    Image.fromarray(np.full((4, 4), 255, np.uint8)).save(masks / "P3_02.png")
    index = MaskIndex(masks)
    with pytest.raises(DataError, match="have no vessel mask") as e:
        index.pair([Path("/x/P3_01.png"), Path("/x/P3_02.png")])
    assert "P3_01.png" in str(e.value)
    Image.fromarray(np.full((4, 4), 255, np.uint8)).save(masks / "21_manual1.gif")
    assert MaskIndex(masks).pair([Path("/x/21_training.tif")]) == [masks / "21_manual1.gif"]   # DRIVE pairing


@pytest.mark.parametrize("args, said", [
    (["anonymize", "kcentroid", "DATA", "--k", "2", "--view-sigma", "nan"], "'nan' is not a finite number"),
    (["anonymize", "ksalsa", "DATA", "--k", "2", "--lr", "nan"], "'nan' is not a finite number"),
    (["anonymize", "gmia", "DATA", "--lambda-id", "inf"], "must be finite"),
    (["anonymize", "gmia", "DATA", "--lambda-id", "nan"], "--lambda-id nan is not a number"),
    (["train", "segmenter", "DATA", "--size", "16", "--lr", "inf"], "'inf' is not a finite number"),
    (["train", "identity", "DATA", "--size", "16", "--margin", "nan"], "'nan' is not a finite number"),
    (["train", "gan", "DATA", "--minutes", "inf"], "'inf' is not a finite number"),
])
def test_settings_that_are_not_numbers_are_refused(tmp_path, phantom, args, said):
    """NaN passed every range check (each comparison with it is false): GMIA released black images, k-Centroid
    half-black ones, with rc 0; an infinite learning rate trained a segmenter for an epoch and then failed."""
    code, out = _run(*[phantom if a == "DATA" else a for a in args], "--out", tmp_path / "r")
    assert code in (1, 2) and said in out, out
    assert not (tmp_path / "r").exists()


def test_a_config_file_must_be_text_and_name_each_key_once(tmp_path, phantom):
    (tmp_path / "dup.yaml").write_text("k: 3\nk: 4\n")
    code, out = _run("anonymize", "kpixel", phantom, "--config", tmp_path / "dup.yaml", "--out", tmp_path / "r")
    assert code == 1 and "key 'k' is given twice" in out
    code, out = _run("anonymize", "kpixel", phantom, "--k", "2", "--config", next((phantom / "images").iterdir()),
                     "--out", tmp_path / "r")
    assert code == 1 and "is not a readable text file" in out


def test_a_split_that_leaves_no_training_patient_is_refused(tmp_path, phantom):
    code, out = _run("data", "split", phantom, "--out", tmp_path / "s.csv", "--val", "0.99", "--test", "0")
    assert code == 1 and "leave no patient" in out and not (tmp_path / "s.csv").exists()
    code, out = _run("train", "flow", phantom, "--size", "16", "--steps", "1", "--out", tmp_path / "f", "--val", "0.9",
                     "--test", "0.9")
    assert code == 1 and "sum below 1" in out


def test_a_classifier_trained_on_the_test_split_claims_no_test_score(tmp_path, phantom):
    import json

    code, out = _run("train", "classifier", phantom, "--size", "16", "--label", "grade", "--steps", "1", "--split",
                     "test", "--out", tmp_path / "c.pt")
    assert code == 0, out
    assert "test" not in json.loads(out[out.index("{"):])
    code, out = _run("train", "classifier", phantom, "--size", "16", "--label", "age", "--steps", "1",
                     "--out", tmp_path / "a.pt")
    assert code != 0 and "continuous label" in out


@pytest.mark.parametrize("network", ["classifier", "identity"])
def test_a_training_split_option_that_would_change_nothing_or_is_unknown_is_refused(tmp_path, phantom, network):
    """--stratify nosuch trained on another split than every other command uses (exit 0); --stratify and
    --split-seed beside --splits were ignored."""
    import json

    label = ["--label", "grade"] if network == "classifier" else []
    base = ["train", network, phantom, "--size", "16", "--steps", "1", *label]
    code, out = _run(*base, "--stratify", "nosuch", "--out", tmp_path / "a.pt")
    assert code == 2 and "--stratify" in out and "'nosuch' is not a label of the data" in out, out
    assert not (tmp_path / "a.pt").exists()
    code, out = _run("data", "split", phantom, "--out", tmp_path / "s.csv")
    assert code == 0, out
    for extra in (["--stratify", "sex"], ["--split-seed", "3"]):
        code, out = _run(*base, "--splits", tmp_path / "s.csv", *extra, "--out", tmp_path / "b.pt")
        assert code == 2 and extra[0] in out and "the split comes from --splits" in out, out
    code, out = _run(*base, "--out", tmp_path / "c.pt")                 # the default split is data split's
    assert code == 0, out
    code, out2 = _run(*base, "--splits", tmp_path / "s.csv", "--out", tmp_path / "d.pt")
    assert code == 0 and json.loads(out[out.index("{"):])["trained_on"] == \
        json.loads(out2[out2.index("{"):])["trained_on"]


def test_the_audit_finds_a_source_image_copied_into_a_release(tmp_path, phantom):
    """A raw source PNG put over a released image (its time stamp matched) passed the audit."""
    import os

    import medanon

    out = medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "r", progress=False)
    assert medanon.audit(out, source=phantom).passed
    released = sorted((out / "images").iterdir())
    stamp = os.stat(released[1])
    shutil.copy(next((phantom / "images").iterdir()), released[0])
    os.utime(released[0], (stamp.st_atime, stamp.st_mtime))
    name = "no released image is a source file, byte for byte or pixel for pixel"
    report = medanon.audit(out, source=phantom)
    check = next(c for c in report.checks if c.name == name)
    assert not report.passed and not check.passed and released[0].name in check.detail

    # the same image re-encoded (other compression: other bytes, the same pixels) is a copy too
    from PIL import Image

    source = next((phantom / "images").iterdir())
    with Image.open(source) as im:
        im.save(released[0], optimize=True, compress_level=1)
    os.utime(released[0], (stamp.st_atime, stamp.st_mtime))
    assert released[0].read_bytes() != source.read_bytes()
    check = next(c for c in medanon.audit(out, source=phantom).checks if c.name == name)
    assert not check.passed and f"{released[0].name} = source {source.name}" in check.detail


def test_the_audit_finds_a_source_copied_through_the_preprocessing_with_the_mapping(tmp_path, phantom):
    """A released image that is its own source as medanon reads it (field of view cropped, resized: other pixels
    than the source file) passed the audit's byte and pixel comparison; with the mapping it is found. The release as
    made (averages of two people) passes."""
    import json
    import os

    import numpy as np
    from PIL import Image

    import medanon

    out = medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "r", mapping=tmp_path / "m.json", progress=False)
    name = ("no released image is a copy of one of its own sources as the methods preprocess them (within 3 8-bit "
            "grey levels, RMS: a copy with a little noise is a copy)")
    report = medanon.audit(out, source=phantom, mapping=tmp_path / "m.json")
    check = next(c for c in report.checks if c.name == name)
    assert check.passed and check.detail.startswith("12 released image / source pairs"), check.detail
    assert next(c for c in report.checks if c.name.startswith("no released image is a copy of a source its")).passed
    img, rec = sorted(json.loads((tmp_path / "m.json").read_text())["records"].items())[0]
    ds = medanon.open_dataset(phantom, size=16)
    row = next(i for i, r in enumerate(ds.records) if r.record_id == rec["sources"][0])
    pixels = np.rint((ds.load(row)["image"].numpy().transpose(1, 2, 0) + 1) * 127.5).astype(np.uint8)
    stamp = os.stat(out / img)
    # the source with +-2 levels of noise (1.4 levels RMS) passed the one-level comparison: it is a copy all the same
    noise = np.random.default_rng(0).integers(-2, 3, pixels.shape)
    Image.fromarray(np.clip(pixels.astype(int) + noise, 0, 255).astype(np.uint8)).save(out / img)
    os.utime(out / img, (stamp.st_atime, stamp.st_mtime))
    report = medanon.audit(out, source=phantom, mapping=tmp_path / "m.json")
    check = next(c for c in report.checks if c.name == name)
    assert not report.passed and not check.passed
    assert check.detail.startswith(f"1 are, e.g. {img} = source {Path(ds.records[row].path).name} (1.")
    Image.fromarray(pixels).save(out / img)
    os.utime(out / img, (stamp.st_atime, stamp.st_mtime))
    report = medanon.audit(out, source=phantom, mapping=tmp_path / "m.json")
    check = next(c for c in report.checks if c.name == name)
    assert not report.passed and not check.passed
    assert check.detail == f"1 are, e.g. {img} = source {Path(ds.records[row].path).name} (0.00 levels RMS)"
    files = next(c for c in report.checks if c.name == "no released image is a source file, byte for byte or "
                 "pixel for pixel")
    assert files.passed                                 # the source file itself is not what was released
    # another record's patient's image, as medanon reads it, in place of a k = 2 record: it was not found (the
    # record was compared with its own sources only) and the audit passed
    other = ("no released image is a copy of a source its record's mapping does not name")
    records = json.loads((tmp_path / "m.json").read_text())["records"]
    img2 = sorted(records)[1]
    stranger = next(i for i, r in enumerate(ds.records)
                    if r.record_id not in records[img2]["sources"] and r.record_id not in records[img]["sources"])
    at_side = medanon.open_dataset(phantom, size=Image.open(out / img2).size[0])     # as the release reads it
    pixels = np.rint((at_side.load(stranger)["image"].numpy().transpose(1, 2, 0) + 1) * 127.5).astype(np.uint8)
    Image.fromarray(pixels).save(out / img2)
    os.utime(out / img2, (stamp.st_atime, stamp.st_mtime))
    report = medanon.audit(out, source=phantom, mapping=tmp_path / "m.json")
    check = next(c for c in report.checks if c.name == other)
    assert not check.passed and check.detail.startswith(f"1 are, e.g. {img2} = source "
                                                        f"{Path(ds.records[stranger].path).name} (of another record)")


def test_an_attacker_of_the_wrong_kind_is_refused_before_the_report_folder_exists(tmp_path, phantom):
    import medanon

    rel = medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "r", mapping=tmp_path / "m.json", progress=False)
    code, out = _run("evaluate", "--real", phantom, "--release", rel, "--mapping", f"r={tmp_path / 'm.json'}",
                     "--preset", "tiny", "--no-inception", "--out", tmp_path / "ev", "--identity", "glow-xray64")
    assert code == 1 and "is a glow checkpoint, not the identity network" in out, out     # by name, as --model
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("args, state", [(["train", "flow", "DATA", "--steps", "1"], "checkpoint.pt"),
                                         (["train", "segmenter", "DATA", "--epochs", "1"], "last.pt")])
def test_a_resume_of_a_run_never_started_is_refused(tmp_path, phantom, args, state):
    code, out = _run(*[phantom if a == "DATA" else a for a in args], "--size", "16", "--out", tmp_path / "run",
                     "--resume")
    assert code == 1 and f"holds no training run to resume ({state} is missing)" in out, out
    assert not (tmp_path / "run").exists()


def test_a_setting_given_twice_is_refused_not_half_checked(tmp_path, phantom):
    """`--k 3 --set k=abc` ran with k = 3 and never looked at "abc"; `--set method=kpca` was ignored."""
    for extra in (["--set", "k=abc"], ["--set", "method=kpca"]):
        code, out = _run("anonymize", "kpixel", phantom, "--k", "3", *extra, "--out", tmp_path / "r")
        assert code == 1 and "set twice" in out, out


def test_a_utility_seed_named_twice_is_refused():
    from medanon.errors import ConfigError
    from medanon.evaluate.config import UtilityConfig

    with pytest.raises(ConfigError, match="names a seed more than once"):
        UtilityConfig(seeds=(0, 0)).validate()


def test_a_refused_release_leaves_no_folder_it_created(tmp_path, phantom):
    code, out = _run("anonymize", "kpixel", phantom, "--k", "100", "--out", tmp_path / "new" / "sub" / "rel")
    assert code == 1 and "lower --k" in out
    assert not (tmp_path / "new").exists()


def test_the_vessel_segmenter_is_not_trained_on_x_ray_masks(tmp_path):
    xray = generate(PhantomConfig(modality="xray", patients=2, per_patient=1, size=16, workers=1), tmp_path / "x",
                    progress=False)
    code, out = _run("train", "segmenter", xray, "--size", "16", "--epochs", "1", "--out", tmp_path / "run")
    assert code == 1 and "trained on colour fundus photographs" in out and not (tmp_path / "run").exists()


def test_held_out_data_of_the_encoder_is_neither_its_training_data_nor_another_modality(tmp_path, phantom):
    gan = Path(__file__).resolve().parents[1] / "checkpoints" / "stylegan2-fundus64.pt"
    xray = generate(PhantomConfig(modality="xray", patients=2, per_patient=1, size=16, workers=1), tmp_path / "x",
                    progress=False)
    for held, said in ((phantom, "is the training data"), (xray, "holds xray images")):
        r = CliRunner().invoke(cli, ["train", "encoder", str(phantom), "--generator", str(gan), "--out",
                                     str(tmp_path / "run"), "--eval-data", str(held), "--steps", "1"])
        assert r.exit_code == 2 and said in r.output, r.output


@pytest.mark.parametrize("method", ["snow", "ldp-image"])
def test_a_bad_image_is_found_before_the_release_writes_anything(tmp_path, phantom, method):
    """Snow and the LDP methods read images as they release them: a file truncated near the end was refused after
    the others were written, and the fix offered (--skip-bad) was then refused as 'other sources'. Every image the
    run will release is now decoded first: the refusal names the file with nothing written, and the fix works."""
    data = tmp_path / "data"
    shutil.copytree(phantom, data)
    last = sorted((data / "images").iterdir())[-1]
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    setting = ["--p", "0.3"] if method == "snow" else ["--epsilon", "1"]
    args = ["anonymize", method, data, *setting, "--size", "16", "--batch", "1", "--out", tmp_path / "r",
            "--mapping", tmp_path / "r.json"]
    code, out = _run(*args)
    assert code == 1 and "is truncated" in out and last.name in out and "--skip-bad" in out, out
    assert not any((tmp_path / name).exists() for name in ("r", "r.partial", "r.json"))     # nothing written
    code, out = _run(*args, "--skip-bad")
    assert code == 0, out


def test_copies_by_a_method_that_claims_nothing_for_images_are_a_note_not_a_failure(tmp_path, phantom):
    """A Snow record that is its source as the methods read it (Snow or VS-Snow at a small p can change too little
    to tell at a small size): the audit says so in a note, as the release's statement (a bound per pixel position,
    none for images) is not contradicted and the evaluation counts the copies, instead of failing as it does for a
    record that claims two people."""
    import json
    import os
    import warnings

    import numpy as np
    from PIL import Image

    import medanon

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = medanon.anonymize.snow(phantom, p=0.3).save(tmp_path / "s", mapping=tmp_path / "s.json",
                                                          progress=False)
    ds = medanon.open_dataset(phantom, size=16)
    rows = {r.record_id: i for i, r in enumerate(ds.records)}
    for img, rec in sorted(json.loads((tmp_path / "s.json").read_text())["records"].items())[:3]:
        x = ds.load(rows[rec["sources"][0]])["image"].numpy().transpose(1, 2, 0)
        stamp = os.stat(out / img)
        Image.fromarray(np.rint((x + 1) * 127.5).astype(np.uint8)).save(out / img)
        os.utime(out / img, (stamp.st_atime, stamp.st_mtime))
    report = medanon.audit(out, source=phantom, mapping=tmp_path / "s.json")
    assert report.passed, report.format()
    assert any(n.startswith("3 released images of one person each are copies of their source") for n in report.notes)


def test_a_large_release_is_compared_with_its_sources_on_a_stated_sample(tmp_path, phantom, monkeypatch):
    """Decoding every source of a 35,000-record release would cost the audit many minutes: above MAX_COMPARED
    records a fixed random sample is compared, and the check says how many and what that can miss."""
    import medanon
    from medanon.release import audit_source

    monkeypatch.setattr(audit_source, "MAX_COMPARED", 2)
    out = medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "r", mapping=tmp_path / "m.json", progress=False)
    check = next(c for c in medanon.audit(out, source=phantom, mapping=tmp_path / "m.json").checks
                 if c.name.startswith("no released image is a copy of one of its own sources"))
    assert check.passed and check.detail == ("8 released image / source pairs of the mapping compared at the released "
                                             "side (2 of 3 records, a fixed pseudo-random sample (seed 0): a "
                                             "release that copies its sources throughout is found, a single copy "
                                             "may not be)")


def test_the_audit_compares_with_the_crop_the_release_was_read_with(tmp_path):
    """A release read with crop='pad' (recorded in its manifest) is compared with its sources padded the same way:
    a record that is its source as read is found (the modality's default crop would never match it)."""
    import json
    import os

    import numpy as np
    from PIL import Image

    import medanon
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset

    ph = medanon.make_phantom(tmp_path / "x", modality="xray", patients=6, per_patient=2, size=16)
    for f in (ph / "images").iterdir():                # non-square sources: pad and centre crop differ
        Image.open(f).resize((16, 24)).save(f)
    ds = open_dataset(ph, DataConfig(size=16, crop="pad"))
    out = medanon.anonymize.kpixel(ds, k=2).save(tmp_path / "r", mapping=tmp_path / "m.json", progress=False)
    img, rec = sorted(json.loads((tmp_path / "m.json").read_text())["records"].items())[0]
    row = next(i for i, r in enumerate(ds.records) if r.record_id == rec["sources"][0])
    stamp = os.stat(out / img)
    pixels = np.rint((ds.load(row)["image"].numpy()[0] + 1) * 127.5).astype(np.uint8)
    Image.fromarray(pixels).save(out / img)
    os.utime(out / img, (stamp.st_atime, stamp.st_mtime))
    report = medanon.audit(out, source=ph, mapping=tmp_path / "m.json")
    check = next(c for c in report.checks if c.name.startswith("no released image is a copy of one of its own"))
    assert not check.passed and check.detail.startswith(f"1 are, e.g. {img} = source ")


def test_both_batch_names_with_different_values_are_refused_even_at_the_default(phantom):
    import medanon
    from medanon.errors import ConfigError

    with pytest.raises(ConfigError, match="batch=32 and batch_size=3 name one setting"):
        medanon.anonymize.snow(phantom, p=0.3, batch=32, batch_size=3)


def test_a_broken_transform_is_named_not_the_files_before_a_release(phantom, tmp_path):
    """The check that decodes every image before a release reads the files' pixels: a transform= that breaks its
    contract is reported as the transform's error, not as every file unreadable (whose fix says to delete them)."""
    import warnings

    import medanon
    from medanon.errors import DataError

    ds = medanon.open_dataset(phantom, size=16, transform=lambda x: x * 300)
    with warnings.catch_warnings(), pytest.raises(DataError) as e:
        warnings.simplefilter("ignore")
        medanon.anonymize.snow(ds, p=0.3).save(tmp_path / "r", progress=False)
    assert "transform= returned" in str(e.value) and "unreadable" not in str(e.value)
    assert not (tmp_path / "r").exists()


def _grey_copy(src: Path, dst: Path, *, only: int | None = None) -> Path:
    """A copy of the phantom (a colour fundus dataset) whose images are grey (``only``: that many of them)."""
    shutil.copytree(src, dst)
    for i, f in enumerate(sorted((dst / "images").glob("*.png"))):
        if only is None or i < only:
            Image.open(f).convert("L").save(f)
    return dst


def test_a_generator_is_not_trained_on_images_of_another_channel_count(tmp_path):
    """train gan opens the data with the config's channel count, which used to replicate grey X-rays into RGB (and
    mix grey and colour fundus images) without a word: a colour generator trained on grey images."""
    config = Path(__file__).resolve().parents[1] / "configs" / "stylegan" / "tiny32.yaml"
    xray = generate(PhantomConfig(modality="xray", patients=3, per_patient=2, size=32, workers=1), tmp_path / "xray",
                    progress=False)
    fundus = generate(PhantomConfig(patients=3, per_patient=2, size=32, workers=1), tmp_path / "fundus",
                      progress=False)
    mixed = _grey_copy(fundus, tmp_path / "mixed", only=2)
    for data, said in ((xray, "every image of the data is grey"),
                       (mixed, "mixed channel counts (2 with 1 channel, 4 with 3 channels)")):
        run = tmp_path / "runs" / data.name
        code, out = _run("train", "gan", data, "--config", config, "--steps", "1", "--out", run)
        assert code == 1 and said in out and "--set channels=1" in out, out
        assert not (run / "checkpoint.pt").exists()
    code, out = _run("train", "gan", xray, "--config", config, "--set", "channels=1", "--steps", "1",
                     "--checkpoint-every", "1", "--out", tmp_path / "ok")
    assert code == 0 and (tmp_path / "ok" / "checkpoint.pt").is_file(), out
    with pytest.warns(UserWarning, match=r"done 1 steps already, as many as asked for \(1\): nothing was trained"):
        code, out = _run("train", "gan", xray, "--resume", "--steps", "1", "--out", tmp_path / "ok")
    assert code == 0, out


def test_held_out_data_of_another_channel_count_is_refused_before_the_encoder_trains(tmp_path, phantom):
    """--eval-data was opened only after training, at the generator's channel count: grey images were replicated into
    RGB and reported as held-out quality, or a bad folder failed the run at its end."""
    gan = Path(__file__).resolve().parents[1] / "checkpoints" / "stylegan2-fundus64.pt"
    grey = _grey_copy(phantom, tmp_path / "grey")
    code, out = _run("train", "encoder", phantom, "--generator", gan, "--eval-data", grey, "--steps", "1",
                     "--out", tmp_path / "run")
    assert code == 1 and "every image of the data is grey" in out and "--channels 3" in out, out
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_fundus_dataset_of_grey_images_is_not_made_colour_silently(tmp_path, phantom):
    from medanon.config import DataConfig
    from medanon.data.channels import GreyFundus
    from medanon.data.dataset import open_dataset

    ds = _grey_copy(phantom, tmp_path / "fundus")
    assert "modality: fundus" in (ds / "dataset.yaml").read_text()
    with pytest.raises(GreyFundus, match="every image is grey") as e:
        open_dataset(ds, DataConfig(size=16))
    assert "channels=3" in e.value.fix
    assert open_dataset(ds, DataConfig(size=16, channels=3)).channels == 3         # asked for: converted
    code, out = _run("data", "summary", ds)                # the summary, with the refusal listed as a problem
    assert code == 1 and "every image is grey" in out and "--channels 3" in out and "images" in out, out


def test_under_torchrun_a_bad_image_in_another_process_share_stops_every_process(tmp_path, phantom):
    """Each torchrun process decodes only its share before releasing: a process whose share was good released its
    images while another's file was bad. The findings are gathered (all_gather through the ShardWriter), so every
    process refuses, naming the file, before any releases. A stand-in writer plays the other process."""
    from medanon.anonymize.per_image import decode_before_release
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset
    from medanon.data.records import Problem

    ds = open_dataset(phantom, DataConfig(size=16))
    theirs = Problem(str(tmp_path / "rank1" / "P9_01.png"), "unreadable", "image file is truncated")

    class OtherRankBad:                                   # this process's share is good; rank 1 found a bad file
        def gather(self, mine):
            return [mine, [theirs]]

    decode_before_release(ds, range(len(ds)))             # alone: nothing to say
    with pytest.raises(DataError, match="1 problem") as e:
        decode_before_release(ds, range(len(ds)), writer=OtherRankBad())
    assert "P9_01.png" in str(e.value)


def test_a_release_whose_numbers_are_not_numbers_is_named_by_file_and_field(tmp_path, phantom):
    """A hand-edited n_people or k gave "invalid literal for int() with base 10: 'abc'" and nothing else."""
    import json

    import medanon

    out = medanon.anonymize.kpixel(phantom, k=2).save(tmp_path / "r", progress=False)
    labels = (out / "labels.csv").read_text().splitlines()
    head = labels[0].split(",")
    row = labels[1].split(",")
    row[head.index("n_people")] = "abc"
    (out / "labels.csv").write_text("\n".join([labels[0], ",".join(row), *labels[2:]]) + "\n")
    code, said = _run("audit", out)
    assert code == 3 and f"{out / 'labels.csv'} row 2: n_people is 'abc', not a whole number" in said, said
    (out / "labels.csv").write_text("\n".join(labels) + "\n")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["params"]["k"] = "five"
    (out / "manifest.json").write_text(json.dumps(manifest))
    code, said = _run("audit", out)
    assert code == 3 and f"{out / 'manifest.json'}: params.k is 'five', not a whole number" in said, said


def test_options_that_would_change_nothing_are_refused_not_warned(tmp_path, phantom):
    """--calibrate-on with the public clip box was only warned about; --split-seed beside --splits and a flow's
    channels=... beside the data's channel count were ignored (exit 0)."""
    code, out = _run("anonymize", "ldp-image", phantom, "--size", "16", "--epsilon", "5", "--calibrate-on", phantom,
                     "--out", tmp_path / "l")
    assert code == 1 and "--calibrate-on is not used with --clip-box 'public'" in out, out
    code, out = _run("data", "split", phantom, "--out", tmp_path / "s.csv")
    assert code == 0, out
    for command in (["anonymize", "snow", phantom, "--size", "16", "--p", "0.1", "--split", "train"],
                    ["evaluate", "--real", phantom, "--release", phantom, "--preset", "tiny", "--no-inception"]):
        code, out = _run(*command, "--splits", tmp_path / "s.csv", "--split-seed", "5", "--out", tmp_path / "o")
        assert code == 2 and "--split-seed" in out and "the split comes from --splits" in out, out
    code, out = _run("train", "flow", phantom, "--size", "16", "--steps", "1", "--set", "channels=1", "--out",
                     tmp_path / "f")
    assert code == 1 and "the config's channels (1) differ from the 3 channel(s) the data are read with" in out, out
    flow = Path(__file__).resolve().parents[1] / "checkpoints" / "glow-fundus64.pt"
    code, out = _run("anonymize", "dpglow", phantom, "--flow", flow, "--epsilon", "5", "--center", "midrange",
                     "--out", tmp_path / "d")
    assert code == 1 and "--center 'midrange' changes nothing with --clip-box 'public'" in out, out
    assert not [p.name for p in tmp_path.iterdir() if p.name != "s.csv"]


def test_a_path_longer_than_the_file_system_takes_is_named_with_its_fix(tmp_path, phantom):
    """A 300-byte name was the operating system's error after the data were read, with the fix "free space or fix
    the permissions"."""
    long = tmp_path / ("a" * 300)
    code, out = _run("anonymize", "snow", phantom, "--size", "16", "--p", "0.3", "--out", long)
    assert code == 1 and "--out '" in out and "has a name of 300 bytes" in out and "choose a shorter path" in out, out
    code, out = _run("anonymize", "snow", long, "--size", "16", "--p", "0.3", "--out", tmp_path / "r")
    assert code in (1, 2) and "free space" not in out and "Traceback" not in out, out
    assert not list(tmp_path.iterdir())


def test_a_fid_sample_size_too_large_is_reported_as_given(tmp_path, phantom):
    """--fid-samples 5000 was reported as "fidelity.samples=50" (the preset's cap), a number the user never gave."""
    rel = tmp_path / "r"
    code, out = _run("anonymize", "snow", phantom, "--size", "16", "--p", "0.3", "--split", "train", "--out", rel)
    assert code == 0, out
    code, out = _run("evaluate", "--real", phantom, "--release", rel, "--preset", "tiny", "--no-inception",
                     "--fid-samples", "5000", "--out", tmp_path / "ev")
    assert code == 1 and "--fid-samples 5000 (capped at --set fidelity.max_samples=" in out, out
    assert "lower --fid-samples" in out and not (tmp_path / "ev").exists()      # refused before the folder is made


def test_snow_help_states_each_methods_range_of_p_and_one_p_may_be_set(tmp_path, phantom):
    """Snow's help said (0, 1] though p = 1 is refused, VS-Snow's said "pixels" for vessel pixels and named a snow
    folder; ``--set p=0.3`` failed with "expected a list … e.g. [0, 1]"."""
    _, snow = _run("anonymize", "snow", "--help")
    _, vs = _run("anonymize", "vs-snow", "--help")
    assert "pixel positions replaced, in (0, 1)" in snow and "rel/snow-p{p}" in snow
    assert "vessel pixels replaced" in vs and "in (0, 1]" in vs and "rel/vs-snow-p{p}" in vs
    _, size = _run("anonymize", "ksalsa", "--help")
    assert "[default: the side of the model the command reads" in size
    code, out = _run("anonymize", "snow", phantom, "--set", "p=0.3", "--out", tmp_path / "r")
    assert code == 0 and "p=0.3: wrote" in out, out


def test_cli_messages_name_flags_and_leave_nothing_behind(tmp_path, phantom):
    """Messages a command user saw named the library's parameters (val=, layout=, attacks.identity_checkpoint=);
    audit --modality overrode the layout's."""
    code, out = _run("data", "split", phantom, "--val", "0.6", "--test", "0.6", "--out", tmp_path / "s.csv")
    assert code == 1 and "--val 0.6, --test 0.6" in out and "val=" not in out, out
    (tmp_path / "empty").mkdir()
    code, out = _run("anonymize", "kpixel", phantom, "--k", "2", "--split", "train", "--mapping", tmp_path / "m.json",
                     "--out", tmp_path / "r")
    assert code == 0, out
    rel = tmp_path / "r"
    code, out = _run("audit", rel, "--source", tmp_path / "empty")
    assert code == 3 and "--layout generic --labels FILE.csv" in out and "labels_csv=" not in out, out
    code, out = _run("audit", rel, "--source", phantom, "--modality", "xray")
    assert code == 2 and "contradicts the source's layout, which holds fundus images" in out, out
    code, out = _run("evaluate", "--real", phantom, "--release", rel, "--mapping", f"r={tmp_path / 'm.json'}",
                     "--preset", "tiny", "--no-inception", "--out", tmp_path / "ev", "--identity",
                     Path(__file__).resolve().parents[1] / "checkpoints" / "classifier-grade-fundus64.pt")
    assert code == 1 and "leave --identity out" in out and "attacks.identity_checkpoint" not in out, out


def test_a_mapping_named_by_path_is_explained_and_debug_logs_are_medanons(tmp_path, phantom):
    import logging

    from medanon.runtime import setup_logging

    rel = tmp_path / "r"
    assert _run("anonymize", "snow", phantom, "--p", "0.3", "--split", "train", "--out", rel)[0] == 0
    (tmp_path / "m.json").write_text("{}")
    code, out = _run("evaluate", "--real", phantom, "--release", rel, "--mapping", f"{rel}={tmp_path / 'm.json'}",
                     "--out", tmp_path / "ev")
    assert code == 2 and "is a release folder's name, not its path (here: r)" in out, out
    logging.getLogger("PIL").setLevel(logging.DEBUG)
    setup_logging("debug")                 # PIL logged every chunk it read: 480 of 481 lines for 80 images
    try:
        assert logging.getLogger("PIL").level == logging.INFO
        assert logging.getLogger("medanon").getEffectiveLevel() == logging.DEBUG
    finally:
        setup_logging("info")


def test_a_split_seed_for_a_release_of_every_patient_is_refused(tmp_path, phantom):
    code, out = _run("anonymize", "kpixel", phantom, "--k", "2", "--split-seed", "3", "--out", tmp_path / "r")
    assert code == 2 and "--split all releases every patient" in out and not (tmp_path / "r").exists(), out


def test_the_encoders_held_out_images_are_inputs_wherever_they_lie(tmp_path, phantom):
    """--eval-data's folder was an input, but not the folder its images are in: reached through a link (with
    --allow-outside), the run folder was written among the held-out images."""
    import shutil

    gan = Path(__file__).resolve().parents[1] / "checkpoints" / "stylegan2-fundus64.pt"
    held = generate(PhantomConfig(patients=2, per_patient=1, size=16, seed=3, workers=1), tmp_path / "held",
                    progress=False)
    shutil.move(held / "images", tmp_path / "elsewhere")
    (held / "images").symlink_to(tmp_path / "elsewhere")
    before = sorted(p.name for p in (tmp_path / "elsewhere").iterdir())
    code, out = _run("train", "encoder", phantom, "--generator", gan, "--eval-data", held, "--allow-outside",
                     "--steps", "1", "--out", tmp_path / "elsewhere" / "run")
    assert code != 0 and "--out" in out and "elsewhere" in out, out
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == before


def test_a_weak_segmenter_is_named_in_the_commands_words(tmp_path):
    """The library's warning says epochs= and vessels='frangi'; the command says its flags."""
    data = generate(PhantomConfig(patients=16, per_patient=2, size=16, workers=1), tmp_path / "d", progress=False)
    with pytest.warns(UserWarning, match="weak"):
        code, out = _run("train", "segmenter", data, "--size", "16", "--epochs", "1", "--out", tmp_path / "run")
    assert code == 0 and "Train longer (--epochs)" in out and "`anonymize vs-snow --vessels frangi`" in out, out


@pytest.mark.parametrize("command", ["classifier", "identity"])
def test_a_network_another_run_finished_meanwhile_is_not_replaced(tmp_path, phantom, monkeypatch, command):
    """The --out check ran before this run held --out's lock; another run finished a network there in between.
    Without --overwrite this run refuses once it holds the lock, before training, and the network is kept."""
    import contextlib

    import medanon.cli.train_identity as cmd

    out = tmp_path / "net.pt"
    real_lock = cmd.main_rank_lock

    @contextlib.contextmanager
    def other_run_finished_first(path, dist, name="out"):
        out.write_bytes(b"the other run's network")
        with real_lock(path, dist, name=name):
            yield

    monkeypatch.setattr(cmd, "main_rank_lock", other_run_finished_first)
    args = ["--label", "grade"] if command == "classifier" else ["--fresh", "--embed-dim", "8"]
    code, msg = _run("train", command, phantom, "--size", "16", "--steps", "1", *args, "--out", out)
    assert code != 0 and ("already exists" in msg or "holds a finished identity network" in msg), msg
    assert out.read_bytes() == b"the other run's network"


@pytest.mark.parametrize("content", [b"record_id,patient_id,split\n\xe9,P1,train\n", b"\x80\x02PK\x03\x04binary"])
def test_a_splits_file_that_is_not_text_is_refused_naming_it(tmp_path, phantom, content):
    bad = tmp_path / "sp.csv"
    bad.write_bytes(content)
    code, msg = _run("anonymize", "kpixel", phantom, "--k", "2", "--split", "train", "--splits", bad,
                     "--out", tmp_path / "rel")
    assert code != 0 and "is not a splits CSV: it is not UTF-8 text" in msg and "medanon bug" not in msg, msg
    assert not (tmp_path / "rel").exists()


def test_the_audit_finds_a_copy_of_a_held_out_patients_image(tmp_path, phantom):
    """A release of the train split, one of its images replaced by a held-out (test split) image as medanon reads it:
    no record's mapping names that image, and the audit with --source compared released images only with the
    records' own sources, so it passed."""
    import json
    import os

    import numpy as np
    from PIL import Image

    import medanon

    ds = medanon.open_dataset(phantom, size=16)
    parts = medanon.split_dataset(ds)
    with pytest.warns(UserWarning):
        rel = medanon.anonymize.kpixel(parts["train"], k=2).save(tmp_path / "r", mapping=tmp_path / "m.json",
                                                                  progress=False)
    records = json.loads((tmp_path / "m.json").read_text())["records"]
    img = sorted(records)[0]
    held = next(i for i, r in enumerate(ds.records) if r.record_id == parts["test"].records[0].record_id)
    side = Image.open(rel / img).size[0]
    pixels = np.rint((medanon.open_dataset(phantom, size=side).load(held)["image"].numpy().transpose(1, 2, 0) + 1)
                     * 127.5).astype(np.uint8)
    stamp = os.stat(rel / img)
    Image.fromarray(pixels).save(rel / img)
    os.utime(rel / img, (stamp.st_atime, stamp.st_mtime))
    report = medanon.audit(rel, source=phantom, mapping=tmp_path / "m.json")
    check = next(c for c in report.checks if c.name == "no released image is a copy of a source its record's "
                                                       "mapping does not name")
    assert not report.passed and not check.passed, report.format()
    assert check.detail.startswith(f"1 are, e.g. {img} = source {Path(ds.records[held].path).name} (of no record: "), \
        check.detail


def test_a_data_folder_that_is_a_loop_of_links_is_named(tmp_path):
    """A dataset path through a loop of symbolic links ended in "an unexpected RuntimeError inside medanon"."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for args in (["data", "summary", tmp_path / "a"], ["anonymize", "snow", tmp_path / "a", "--p", "0.3", "--out",
                                                       tmp_path / "r"]):
        code, said = _run(*args)
        assert code == 1 and "leads through a loop of symbolic links" in said, said


def test_a_classifier_split_of_one_image_is_refused_before_reading(tmp_path):
    """`train classifier` on a split of one image ended in "an unexpected ValueError inside medanon"."""
    data = generate(PhantomConfig(patients=3, per_patient=1, size=16, workers=1), tmp_path / "p3", progress=False)
    code, said = _run("train", "classifier", "--data", data, "--label", "grade", "--steps", "1", "--out",
                      tmp_path / "c.pt")
    assert code == 2 and "has 1 image(s) with a grade label; a classifier needs at least two" in said, said
    assert not (tmp_path / "c.pt").exists()


def test_snow_refuses_an_existing_out_before_decoding_every_image(tmp_path, phantom, monkeypatch):
    """With --skip-bad every image is decoded when the data is opened: Snow did that before it looked at --out."""
    import medanon.data.dataset as dataset

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x").write_text("mine")

    def decoded(*a, **k):
        raise AssertionError("decoded before --out was checked")

    monkeypatch.setattr(dataset, "verify_decoding", decoded)
    code, said = _run("anonymize", "snow", phantom, "--p", "0.3", "--skip-bad", "--out", tmp_path / "r")
    assert code == 1 and "already exists" in said, said


def test_an_image_path_that_is_a_pipe_or_a_dangling_link_is_named_as_such(tmp_path, phantom):
    """A FIFO or a link that leads nowhere at an image's path was reported as "not on disk" (it is there)."""
    import os

    data = tmp_path / "d"
    shutil.copytree(phantom, data)
    images = sorted((data / "images").iterdir())
    images[0].unlink()
    os.mkfifo(images[0])
    images[1].unlink()
    images[1].symlink_to(tmp_path / "gone.png")
    code, said = _run("data", "summary", data)
    assert code == 1 and "is not a plain file (a pipe, a device or a socket)" in said, said
    assert "is a link that leads nowhere" in said, said


def test_a_bad_classifier_setting_names_itself_and_a_fix():
    """`--set utility.classifier.steps=-5` said "steps=-5 must be >= 1 and batch=16 >= 2", no fix."""
    from medanon.train.classifier import ClassifierTrainConfig

    for kw, words in ((dict(steps=-5), "steps=-5 must be at least 1"), (dict(batch=1), "batch=1 must be at least 2"),
                      (dict(lr=0.0), "lr=0.0 must be positive")):
        with pytest.raises(ConfigError, match=words) as e:
            ClassifierTrainConfig(**kw).validate()
        assert e.value.fix


def test_a_missing_mask_offers_emptying_its_cell_not_only_dropping_the_image(tmp_path, phantom):
    """A missing mask stopped kpixel (which reads no mask) and the fix offered only deleting the image's row or
    --skip-bad, which drops the image too; an empty mask cell is read as no mask."""
    import csv

    data = tmp_path / "d"
    shutil.copytree(phantom, data)
    rows = list(csv.DictReader((data / "labels.csv").open()))
    gone = rows[0]["mask"]
    (data / gone).unlink()
    code, said = _run("anonymize", "kpixel", data, "--k", "2", "--out", tmp_path / "r")
    assert code == 1 and "empty the image's mask cell in the CSV" in said, said
    rows[0]["mask"] = ""
    with (data / "labels.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    code, said = _run("anonymize", "kpixel", data, "--k", "2", "--out", tmp_path / "r")
    assert code == 0, said
