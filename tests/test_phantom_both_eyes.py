"""Fundus phantoms photographed in both eyes: the fellow eye shares the person, not the retina."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from medanon.config import PhantomConfig
from medanon.errors import ConfigError
from medanon.phantoms.common import PhantomParams, acquisition_rng, fellow_rng, patient_rng
from medanon.phantoms.fundus import render, sample_patient
from medanon.phantoms.fundus_fellow import sample_fellow_eye
from medanon.phantoms.generate import generate
from medanon.phantoms.provenance import people_of
from tests.test_phantom_generate import tree_digest


def _pair(i: int, seed: int = 3):
    first = sample_patient(patient_rng(seed, i), PhantomParams(marker_rate=0.3))
    return first, sample_fellow_eye(fellow_rng(seed, i), first)


def _rows(folder: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((folder / "labels.csv").open()))


def test_the_fellow_eye_keeps_the_person_and_turns_the_side():
    grades = []
    for i in range(40):
        first, other = _pair(i)
        assert (other.sex, other.age, other.marker) == (first.sex, first.age, first.marker)
        assert other.laterality == 1 - first.laterality
        assert np.sign(other.disc_center[0]) == (1 if other.laterality else -1)      # the disc on its own side
        assert abs(np.log(other.disc_radius / first.disc_radius)) < 0.15
        assert other.base_rgb != first.base_rgb and np.allclose(other.base_rgb, first.base_rgb, rtol=0.05)
        grades.append((first.grade, other.grade))
    diffs = np.array([abs(a - b) for a, b in grades])
    assert diffs.max() == 1 and 0.5 <= np.mean(diffs == 0) < 1          # mostly the same grade, never two apart


def test_the_fellow_eye_has_its_own_vessel_tree():
    """Vessel masks of two acquisitions of one eye overlap more than one eye's mask with the other eye's, mirrored
    (an attacker holding one eye does not get the other from the vessels), which is no closer than a stranger's."""
    def iou(u, v):
        return (u & v).sum() / max(1, (u | v).sum())

    same, fellow, stranger = [], [], []
    for i in range(10):
        first, other = _pair(i)
        m1, m2 = (render(first, acquisition_rng(3, i, a), 64).mask for a in (0, 1))
        mo = render(other, acquisition_rng(3, i, 0, eye=1), 64).mask
        js, jo = _pair(i + 1)
        ms = render(js if js.laterality == first.laterality else jo, acquisition_rng(3, i + 1, 0), 64).mask
        same.append(iou(m1, m2))
        fellow.append(iou(m1, mo[:, ::-1]))
        stranger.append(iou(m1, ms))
    assert np.median(same) > 1.4 * np.median(fellow)
    assert np.median(fellow) < 1.3 * np.median(stranger)


def test_first_eyes_are_the_one_eye_phantom_byte_for_byte(tmp_path: Path):
    kw = dict(patients=6, per_patient=2, size=32, seed=5, workers=1)
    one = tree_digest(generate(PhantomConfig(**kw), tmp_path / "one", progress=False))
    both_dir = generate(PhantomConfig(**kw, both_eyes=0.5), tmp_path / "both", progress=False)
    both = tree_digest(both_dir)
    rows = _rows(both_dir)
    by_patient: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_patient.setdefault(r["patient_id"], []).append(r)
    two = [p for p, rs in by_patient.items() if len(rs) == 4]
    assert 0 < len(two) < 6 and all(len(rs) in (2, 4) for rs in by_patient.values())
    for rs in by_patient.values():
        assert [int(r["acquisition"]) for r in rs] == list(range(1, len(rs) + 1))
        for r in rs[:2]:                                    # the first eye's acquisitions: the same files
            assert both[r["image"]] == one[r["image"]] and both[r["mask"]] == one[r["mask"]]
        if len(rs) == 4:                                    # the other eye: after them, the other side
            assert {rs[0]["laterality"], rs[2]["laterality"]} == {"L", "R"}
            assert rs[2]["laterality"] == rs[3]["laterality"] and rs[2]["sex"] == rs[0]["sex"]
    import json

    info = json.loads((both_dir / "phantom.json").read_text())
    assert info["images"] == len(rows) == 12 + 2 * len(two) and info["patients_both_eyes"] == len(two)
    assert "both_eyes" not in json.loads((tmp_path / "one" / "phantom.json").read_text())["settings"]
    assert people_of(info["settings"]) == people_of({"seed": 5})            # the same people, more photographs


def test_both_eyes_is_deterministic_whatever_the_workers(tmp_path: Path):
    kw = dict(patients=5, per_patient=1, size=32, seed=2, both_eyes=1.0)
    a = tree_digest(generate(PhantomConfig(**kw, workers=1), tmp_path / "a", progress=False))
    b = tree_digest(generate(PhantomConfig(**kw, workers=2), tmp_path / "b", progress=False))
    assert a == b and sum(k.startswith("images/") for k in a) == 10


@pytest.mark.parametrize("kw", [dict(modality="xray", both_eyes=0.5), dict(both_eyes=1.5), dict(both_eyes=-0.1)])
def test_bad_both_eyes_is_refused(kw):
    with pytest.raises(ConfigError, match="both_eyes"):
        PhantomConfig(**kw).validate()


def test_cli_writes_both_eyes_and_refuses_them_for_xray(tmp_path: Path):
    from click.testing import CliRunner

    from medanon.cli import cli

    r = CliRunner().invoke(cli, ["phantom", "--patients", "3", "--per-patient", "1", "--size", "32", "--both-eyes",
                                 "1", "--workers", "1", "--out", str(tmp_path / "f")])
    assert r.exit_code == 0, r.output
    assert "wrote 6 fundus phantom images of 3 patients (3 in both eyes)" in r.output
    r = CliRunner().invoke(cli, ["phantom", "--modality", "xray", "--both-eyes", "0.5", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "--both-eyes 0.5 is for fundus phantoms" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "x").exists()


@pytest.mark.parametrize(("per_patient", "unit"), [(2, "eye"), (1, "patient")])
def test_attackers_learn_eyes_where_eyes_are_photographed_repeatedly(tmp_path: Path, per_patient, unit):
    """A person's two retinas are two identities to an attacker network: on a both-eyes phantom with repeated
    photographs of each eye, `medanon train identity` and the evaluation's attackers learn eyes (and say so); with one
    photograph of each eye (EyePACS) only the patient's two eyes pair up, and the patient stays the identity."""
    import json as _json

    import torch
    from click.testing import CliRunner

    from medanon.checkpoint import load_checkpoint
    from medanon.cli import cli
    from medanon.evaluate.cache import Cache
    from medanon.evaluate.config import EvalConfig
    from medanon.evaluate.context import RealContext
    from medanon.evaluate.inputs import load_real

    data = generate(PhantomConfig(patients=12, per_patient=per_patient, size=32, seed=4, workers=1, both_eyes=1.0),
                    tmp_path / "both", progress=False)
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "identity", str(data), "--size", "32", "--split", "all",
                                 "--out", str(tmp_path / "id.pt"), "--steps", "2", "--embed-dim", "8"])
    assert r.exit_code == 0, r.output
    assert _json.loads(r.stdout[r.stdout.index("{"):])["identity_unit"] == unit
    assert load_checkpoint(tmp_path / "id.pt", kind="identity")["extra"]["identity_unit"] == unit
    real = load_real(data, size=32)
    ctx = RealContext(real, EvalConfig.tiny(size=32), Cache(None), torch.device("cpu"), False)
    units, got = ctx.attacker_units
    assert got == unit and ctx.identity_info["identity_unit"] == unit
    patients = real.patients[ctx.attacker_rows]
    assert len(set(units)) == len(set(patients)) * (2 if unit == "eye" else 1)
    assert ctx.unit_of("identity") == unit and len(set(ctx.siamese_ids)) == 12 * (2 if unit == "eye" else 1)
    assert list(ctx.identity_ids(np.arange(2), "patient")) == list(real.patients[:2])


def test_eye_identities_need_both_eyes_and_fall_back_where_no_eye_repeats():
    """Partly unlabelled one-eye data keeps the patient (an unlabelled image is not another eye); the Siamese
    reference and the network checks verify patients' pairs where no eye is photographed twice among the held-out
    images, instead of failing for want of genuine pairs."""
    from medanon.evaluate.attacks.siamese import SiameseConfig, siamese_attack, train_siamese
    from medanon.evaluate.attacks.siamese import embed as siamese_embed
    from medanon.train.identity import identity_units

    nan = float("nan")
    assert identity_units(["a"] * 3 + ["b"] * 3, [1, 1, nan, 0, 0, nan])[1] == "patient"
    import torch

    g = torch.Generator().manual_seed(0)
    images = torch.rand(40, 1, 16, 16, generator=g) * 2 - 1
    pats = np.repeat(np.arange(20), 2).astype(str)                   # one image of each eye
    eyes = np.asarray([f"{p}/{'LR'[i % 2]}" for i, p in enumerate(pats)])
    net = train_siamese(images[:20], pats[:20], cfg=SiameseConfig(width=4, steps=2, batch=8))
    feats = siamese_embed(net, images)
    out = siamese_attack(net, real_feats=feats, release_feats=feats[20:30], patients=pats,
                         source_rows=np.arange(20, 30), record_patients=[frozenset([p]) for p in pats[20:30]],
                         member_rows=np.arange(20, 30),
                         calib_rows=np.arange(30, 35), control_rows=np.arange(35, 40), max_pairs=50,
                         reference_ids=eyes)
    assert out["reference"]["genuine_pairs"] == 5                    # the 5 held-out patients' two eyes


def test_the_audit_recounts_a_dp_releases_images_per_patient(tmp_path: Path):
    """A patient photographed twice in each eye has four released images, so ε per patient is 4 × ε per image: the
    audit recounts it from the mapping and fails a statement that understates it (one edited to say 2)."""
    import json as _json
    import warnings

    from click.testing import CliRunner

    import medanon
    from medanon.cli import cli

    data = medanon.make_phantom(tmp_path / "ph", patients=6, per_patient=2, size=16, seed=4, both_eyes=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = medanon.anonymize.ldp_image(medanon.open_dataset(data, size=16), epsilon=100.0)
        rel.save(tmp_path / "rel", mapping=tmp_path / "map.json", progress=False)
    manifest = _json.loads((tmp_path / "rel" / "manifest.json").read_text())
    assert manifest["privacy"]["max_images_per_patient"] == 4 and manifest["privacy"]["epsilon_patient_max"] == 400
    args = ["audit", str(tmp_path / "rel"), "--source", str(data), "--mapping", str(tmp_path / "map.json")]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0 and "per-patient budget covers the most images one patient has" in r.output, r.output
    manifest["privacy"].update(max_images_per_patient=2, epsilon_patient_max=200.0)
    (tmp_path / "rel" / "manifest.json").write_text(_json.dumps(manifest))
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 1 and "a patient has 4 released images (the statement: 2)" in r.output, r.output
    # a statement that gives no count, where the source given has patient ids: the audit says what it counts
    manifest["privacy"].update(max_images_per_patient="unknown: the source has no patient ids",
                               epsilon_patient_max="unknown")
    (tmp_path / "rel" / "manifest.json").write_text(_json.dumps(manifest))
    r = CliRunner().invoke(cli, args)
    assert "one patient has up to 4 released images, so epsilon per patient is up to 400" in " ".join(r.output.split())


def test_the_data_summary_counts_patients_with_both_eyes(tmp_path: Path):
    """A data team sees how many patients have both eyes photographed (by the laterality label), which decides how a
    patient's images count (ε per patient, eye identities)."""
    import medanon
    from medanon.data.summary import format_summary, summarize

    data = generate(PhantomConfig(patients=8, per_patient=1, size=16, seed=1, workers=1, both_eyes=0.5),
                    tmp_path / "ph", progress=False)
    rows = _rows(data)
    pids = {r["patient_id"] for r in rows}
    both = sum(len({r["laterality"] for r in rows if r["patient_id"] == p}) == 2 for p in pids)
    s = summarize(medanon.open_dataset(data, size=16))
    assert (s["patients_both_eyes"], s["patients_one_eye"]) == (both, 8 - both) and 0 < both < 8
    assert f"eyes: {both} patient(s) with both, {8 - both} with one" in format_summary(s)


def test_the_report_says_the_attackers_learned_eyes():
    """The report page's protocol names the identity unit where the attackers learned eyes (and says nothing of it
    otherwise)."""
    from medanon.evaluate.report_attacks import _protocol

    real = {"source_split": "train", "source_images": 10, "heldout_split": "test", "heldout_images": 4}
    rep = {"real": real, "networks": {"attacker_split": {"split": "val", "images": 4, "patients": 2},
                                      "identity": {"trained_on": "real val split", "identity_unit": "eye"}}}
    assert "learned each eye of a patient as an identity" in _protocol(rep)
    rep["networks"]["identity"]["identity_unit"] = "patient"
    assert "learned each eye" not in _protocol(rep)
