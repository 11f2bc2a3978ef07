"""Eye sides in the k-Same averages: left eyes averaged mirrored, each record shown as its patients' majority side."""

import csv
import json
import warnings

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import medanon
from medanon.anonymize.eye_sides import LEFT, RIGHT, UNKNOWN, align, disc_side, find_sides
from medanon.anonymize.ksame_config import KSameConfig
from medanon.cli import cli
from medanon.errors import ConfigError


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    """24 fundus patients at 32 px, one image each: left and right eyes, a laterality label each."""
    return medanon.make_phantom(tmp_path_factory.mktemp("eyes") / "ph", patients=24, size=32, seed=5)


def _right_eye(phantom) -> torch.Tensor:
    ds = medanon.open_dataset(phantom, size=32)
    i = next(i for i, r in enumerate(ds.records) if r.labels["laterality"] == 1)
    return ds.load(i)["image"]


def _near(eye: torch.Tensor) -> torch.Tensor:
    """Another photograph of the same eye: two 8-bit grey levels brighter (a copy would be refused as one)."""
    return (eye + 2 / 127.5).clamp(-1, 1)


def _release(images, sides, *, mode="auto", method="kpixel", pids=None):
    labels = {"laterality": [float(s) if s != UNKNOWN else float("nan") for s in sides], "grade": [0.0] * len(sides)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = getattr(medanon.anonymize, method)(images, k=len(sides), patient_ids=pids or [f"p{i}" for i in
                                                                                         range(len(sides))],
                                                 labels=labels, modality="fundus", eye_sides=mode,
                                                 value_range=(-1, 1))
        return rel, rel.images(progress=False)


def test_the_disc_finder_reads_the_phantoms_sides(phantom):
    """The brightest blob of the field of view is the optic disc: the side it gives agrees with the phantom's
    laterality label for nearly every image (a known answer), and a mirrored image gets the other side."""
    ds = medanon.open_dataset(phantom, size=32)
    images, fov = ds.tensors(progress=False)
    truth = ds.label_array("laterality").astype(int)
    found = disc_side(images, fov)
    assert (found == truth).mean() >= 0.9, (found, truth)
    assert set(np.unique(truth)) == {0, 1}
    mirrored = disc_side(images.flip(-1), fov.flip(-1))
    known = (found != UNKNOWN) & (mirrored != UNKNOWN)
    assert known.sum() >= 20 and (mirrored[known] == 1 - found[known]).all()
    centred = -torch.ones(1, 3, 32, 32)
    centred[..., 14:18, 14:18] = 1.0                 # a disc-centred photograph: no side to read
    assert disc_side(centred).tolist() == [UNKNOWN]


def test_a_mixed_cluster_averages_one_eye_not_two(phantom):
    """Known answer: a right eye, another photograph of it labelled right and its mirror image labelled left. Aligned,
    the three are one right eye and their average is that eye (shown right, the majority); unaligned (``off``, the
    paper's) it is a two-disc blend. Two left and one right: the same eye shown mirrored."""
    eye = _right_eye(phantom)
    images = torch.stack([eye, _near(eye), eye.flip(-1)])
    expected = torch.stack([eye, _near(eye), eye]).mean(0)
    _, out = _release(images, [RIGHT, RIGHT, LEFT])
    assert (out[0] - expected).abs().max() <= 1 / 127.5 + 1e-6            # 8-bit rounding only
    _, off = _release(images, [RIGHT, RIGHT, LEFT], mode="off")
    assert (off[0] - expected).abs().max() > 0.2                         # a third of a disc on the wrong side
    _, left = _release(torch.stack([eye.flip(-1), _near(eye).flip(-1), eye]), [LEFT, LEFT, RIGHT])
    assert (left[0] - expected.flip(-1)).abs().max() <= 1 / 127.5 + 1e-6


def test_auto_finds_unlabelled_sides_and_labels_mode_leaves_them(phantom, tmp_path):
    """Without a laterality label ``auto`` mirrors the image whose disc is on the left; ``labels`` keeps it as it is
    (and the statement's counts say which)."""
    eye = _right_eye(phantom)
    images = torch.stack([eye, _near(eye), eye.flip(-1)])
    expected = torch.stack([eye, _near(eye), eye]).mean(0)
    rel, out = _release(images, [RIGHT, RIGHT, UNKNOWN])
    assert (out[0] - expected).abs().max() <= 1 / 127.5 + 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel.save(tmp_path / "auto")
    applied = rel.privacy["eye_sides_applied"]
    assert applied == {"mode": "auto", "images": 3, "from_labels": 2, "estimated": 1, "unknown": 0, "mirrored": 1,
                       "records_shown_left": 0}
    rel, out = _release(images, [RIGHT, RIGHT, UNKNOWN], mode="labels")
    assert (out[0] - expected).abs().max() > 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel.save(tmp_path / "labels")
    assert rel.privacy["eye_sides_applied"]["unknown"] == 1 and rel.privacy["eye_sides_applied"]["mirrored"] == 0


def test_the_aligned_view_mirrors_the_left_eyes_only(phantom):
    """What every k-Same method reads (clustering, encoding, averaging): left eyes mirrored, image and field of view;
    right eyes as they are; the same records; a view is not aligned twice."""
    ds = medanon.open_dataset(phantom, size=32)
    view = align(ds, "auto")
    left = [i for i, r in enumerate(ds.records) if r.labels["laterality"] == 0]
    assert view.eye_sides.from_labels == len(ds) and sorted(view.mirrored) == left
    i = left[0]
    for key in ("image", "fov"):
        assert torch.equal(view.load(i)[key], ds.load(i)[key].flip(-1))
    right = next(j for j in range(len(ds)) if j not in left)
    assert torch.equal(view.load(right)["image"], ds.load(right)["image"])
    assert view.records is ds.records and align(view, "auto") is view
    with pytest.raises(ValueError, match="already a view aligned with eye_sides='auto', not 'off'"):
        align(view, "off")                          # a manifest would misstate the mode


def test_statement_params_and_xray():
    """The manifest records the mode (fundus, averaging methods), the statement says what was mirrored and what a
    record's orientation discloses; chest X-rays and GAN-Inverted are never mirrored; a bad mode is refused."""
    from medanon.anonymize.ksame_statement import manifest_params, privacy_statement

    cfg = KSameConfig(method="kpixel", k=5)
    st = privacy_statement(cfg, None, modality="fundus")
    assert "mirrored" in st["eye_sides"] and "optic disc" in st["eye_sides"]
    assert any("orientation" in item for item in st["not_protected"])
    assert manifest_params(cfg, modality="fundus")["eye_sides"] == "auto"
    assert set(manifest_params(cfg, modality="fundus")["disc_finder"]) == {"blur", "midline"}
    assert "disc_finder" not in manifest_params(KSameConfig(method="kpixel", k=5, eye_sides="labels"),
                                                modality="fundus")
    # off is recorded as before eye sides existed (an interrupted run of then resumes under off)
    assert "eye_sides" not in manifest_params(KSameConfig(method="kpixel", k=5, eye_sides="off"), modality="fundus")
    assert "can be wrong" in st["eye_sides"] and "unknown keep their orientation" in st["eye_sides"]
    for other in (privacy_statement(cfg, None, modality="xray"),
                  privacy_statement(KSameConfig(method="kpixel", k=5, eye_sides="off"), None, modality="fundus")):
        assert "eye_sides" not in other and not any("orientation" in item for item in other["not_protected"])
    assert "eye_sides" not in manifest_params(cfg, modality="xray")
    assert "optic disc" not in privacy_statement(KSameConfig(method="kpixel", k=5, eye_sides="labels"), None,
                                                 modality="fundus")["eye_sides"]
    with pytest.raises(ConfigError, match="eye_sides='left'"):
        KSameConfig(method="kpixel", k=5, eye_sides="left").validate()
    unquoted = KSameConfig(method="kpixel", k=5, eye_sides=False)          # YAML's reading of `off`
    unquoted.validate()
    assert unquoted.eye_sides == "off"
    xray = medanon.open_dataset(medanon.make_phantom(modality="xray", patients=3), size=16)
    assert find_sides(xray, "auto").mode == "off" and not len(align(xray, "auto").mirrored)


def test_the_cli_release_is_aligned_and_its_audit_recomputes_it(phantom, tmp_path):
    """``medanon anonymize kpixel`` aligns by default; the audit recomputes every record with the sides the method
    used (labels, and the disc where a label is missing) and fails a record averaged the other way."""
    runner = CliRunner()
    out, mapping = tmp_path / "rel", tmp_path / "map.json"
    res = runner.invoke(cli, ["anonymize", "kpixel", "--data", str(phantom), "--k", "3", "--size", "32",
                              "--release-labels", "laterality", "--out", str(out), "--mapping", str(mapping)])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["params"]["eye_sides"] == "auto"
    assert manifest["privacy"]["eye_sides_applied"]["mirrored"] > 0
    rows = list(csv.DictReader((out / "labels.csv").open()))
    assert any(";" in r["laterality_counts"] for r in rows)        # mixed-side records exist: alignment matters
    res = runner.invoke(cli, ["audit", str(out), "--source", str(phantom), "--mapping", str(mapping)])
    assert res.exit_code == 0 and "recomputed" in res.output, res.output
    # the same records averaged without alignment are not what the manifest says was made
    manifest["params"]["eye_sides"] = "off"
    (out / "manifest.json").write_text(json.dumps(manifest))
    res = runner.invoke(cli, ["audit", str(out), "--source", str(phantom), "--mapping", str(mapping)])
    assert res.exit_code != 0 and "patient-weighted average" in res.output, res.output
    res = runner.invoke(cli, ["anonymize", "kpixel", "--data", str(phantom), "--k", "3", "--size", "32",
                              "--eye-sides", "sideways", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--eye-sides" in res.output and "Traceback" not in res.output
    # `--set eye_sides=off` (YAML reads off as false) is the flag's off
    res = runner.invoke(cli, ["anonymize", "kpixel", "--data", str(phantom), "--k", "3", "--size", "32",
                              "--set", "eye_sides=off", "--out", str(tmp_path / "set-off")])
    assert res.exit_code == 0, res.output
    assert "eye_sides" not in json.loads((tmp_path / "set-off" / "manifest.json").read_text())["params"]


def test_a_run_interrupted_before_eye_sides_is_told_how_to_resume(phantom, tmp_path, interrupted_after):
    """A kpixel run interrupted before eye sides were recorded (its journal's params have none) is refused with the
    way to resume it as it was made, ``--eye-sides off``, which then resumes it."""
    runner = CliRunner()
    out = tmp_path / "rel"
    args = ["anonymize", "kpixel", "--data", str(phantom), "--k", "3", "--size", "32", "--out", str(out)]
    with interrupted_after(2):
        res = runner.invoke(cli, [*args, "--eye-sides", "off"])
    assert res.exit_code != 0 and (tmp_path / "rel.partial").is_dir()
    res = runner.invoke(cli, args)                                    # the default, auto: other settings
    assert res.exit_code != 0 and "resume it with --eye-sides off (as it was made)" in res.output, res.output
    res = runner.invoke(cli, [*args, "--eye-sides", "off"])
    assert res.exit_code == 0 and "resuming: " in res.output, res.output


def _ghost(images: torch.Tensor) -> float:
    """Mean brightness (above the field of view's) at the mirror position of each image's brightest blob, as a share
    of the blob's: a second, mirrored disc raises it."""
    from scipy.ndimage import gaussian_filter

    out = []
    for img in images:
        g = img.mean(0).numpy()
        f = g > -0.92
        b = gaussian_filter(np.where(f, g - g[f].mean(), 0.0), 2.0)
        y, x = np.unravel_index(np.argmax(np.where(f, b, -np.inf)), b.shape)
        out.append(b[y, b.shape[1] - 1 - x] / b[y, x])
    return float(np.mean(out))


def test_a_both_eyes_release_averages_right_eyes_and_counts_both_sides(tmp_path):
    """Photographed in both eyes (as EyePACS), every k-Same group holds both sides of each patient: the release averages
    them as right eyes (one disc where ``off`` blends two), counts each patient for both sides in
    ``laterality_counts`` (and warns that this says each member has both eyes photographed), and passes its audit's
    recomputation."""
    phantom = medanon.make_phantom(tmp_path / "both", patients=6, size=32, seed=5, both_eyes=1.0)
    runner = CliRunner()
    out, mapping = tmp_path / "rel", tmp_path / "map.json"
    res = runner.invoke(cli, ["anonymize", "kpixel", "--data", str(phantom), "--k", "3", "--size", "32",
                              "--release-labels", "laterality", "--out", str(out), "--mapping", str(mapping)])
    assert res.exit_code == 0, res.output
    assert "homogeneous released labels: laterality in 2 of 2 records" in res.output
    rows = list(csv.DictReader((out / "labels.csv").open()))
    assert [(r["laterality"], r["laterality_counts"]) for r in rows] == [("1", "0:3;1:3")] * 2   # a tie: right
    applied = json.loads((out / "manifest.json").read_text())["privacy"]["eye_sides_applied"]
    assert applied["mirrored"] == 6 and applied["records_shown_left"] == 0
    res = runner.invoke(cli, ["audit", str(out), "--source", str(phantom), "--mapping", str(mapping)])
    assert res.exit_code == 0 and "recomputed" in res.output, res.output
    from PIL import Image

    records = torch.stack([torch.from_numpy(np.asarray(Image.open(out / r["image"]), np.float32)).permute(2, 0, 1)
                           / 127.5 - 1 for r in rows])
    assert (disc_side(records) == RIGHT).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = medanon.anonymize.kpixel(medanon.open_dataset(phantom, size=32), k=3, eye_sides="off")
        blended = torch.stack([r.image for r in off])
    sources, _ = medanon.open_dataset(phantom, size=32).tensors(progress=False)
    assert _ghost(records) < _ghost(sources) + 0.15 < _ghost(blended)
