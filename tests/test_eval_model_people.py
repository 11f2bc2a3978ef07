"""The report says when the models a release was made with were trained on the evaluation's controls."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import medanon
from medanon.anonymize.privacy import WeakSetting
from medanon.evaluate.model_people import model_people_notes
from medanon.models_shipped import SHIPPED
from medanon.train.identity import patients_digest


def _ctx(root, patients, held, files_sha256="data-digest"):
    patients = np.asarray(patients)
    held = np.asarray(held)
    src = np.setdiff1d(np.arange(len(patients)), held)
    return SimpleNamespace(real=SimpleNamespace(root=root, patients=patients, files_sha256=files_sha256),
                           src=src, held=held, cfg=SimpleNamespace(source_split="train", heldout_split="test"))


def _release(models=None, params=None):
    return SimpleNamespace(name="rel", manifest={"models": models or {}}, params=params or {})


def test_a_shipped_codec_trained_on_the_phantoms_people_is_named_with_the_controls_it_saw(tmp_path):
    same = medanon.make_phantom(tmp_path / "seed0", modality="fundus", patients=4, per_patient=1, size=16)
    other = medanon.make_phantom(tmp_path / "seed5", modality="fundus", patients=4, per_patient=1, size=16, seed=5)
    ids = ["P00001", "P00002", "P00003", "P00004"]
    rel = _release({"codec": SHIPPED["cotrained-map-fundus64.pt"]})
    notes = model_people_notes([rel], _ctx(same, ids, [2, 3]))
    assert len(notes) == 1 and "cotrained-map-fundus64.pt saw 2 of the 2 controls" in notes[0], notes
    assert "seed 0, 500 patients" in notes[0]
    assert model_people_notes([rel], _ctx(other, ids, [2, 3])) == []           # other people
    assert model_people_notes([_release({"codec": "0" * 64})], _ctx(same, ids, [2, 3])) == []   # not shipped
    xray = _release({"flow": SHIPPED["glow-xray64.pt"]})                        # an X-ray phantom's people
    assert model_people_notes([xray], _ctx(same, ids, [2, 3])) == []


def test_recorded_training_patients_are_compared_with_the_controls():
    ids = ["a", "a", "b", "c", "d", "d"]
    ctx = _ctx(None, ids, [3, 4, 5])                    # controls c, d; members a, b

    def rec(people, source="data-digest"):
        return {"model": "my-codec.pt", "source": {"sha256": source}, "split": "all", "images": 6,
                "patients_digest": patients_digest(people)}

    nested = {"codec": {"trained_people": [rec(["a", "b", "c", "d"])]}}
    notes = model_people_notes([_release(params=nested)], ctx)
    assert len(notes) == 1 and "my-codec.pt saw 2 of the 2 controls" in notes[0], notes
    assert model_people_notes([_release(params={"trained_people": [rec(["a", "b"])]})], ctx) == []   # the members
    assert model_people_notes([_release(params={"trained_people": [rec(["a", "b", "c", "d"], "other")]})],
                              ctx) == []                                         # another dataset
    unknown = model_people_notes([_release(params={"trained_people": [rec(["a", "c"])]})], ctx)
    assert len(unknown) == 1 and "is not known" in unknown[0] and "my-codec.pt" in unknown[0], unknown
    # as a public manifest carries them: keyed by the dataset's content digest, recognised the same way
    from medanon.data.training_people import public_people

    keyed = {"codec": {"trained_people": public_people([rec(["a", "b", "c", "d"])])}}
    assert "saw 2 of the 2 controls" in model_people_notes([_release(params=keyed)], ctx)[0]
    other = {"trained_people": public_people([rec(["a", "b", "c", "d"], "other")])}
    assert model_people_notes([_release(params=other)], ctx) == []
    assert model_people_notes([_release(params={"trained_people": public_people([rec(["a", "b"])])})], ctx) == []


def test_a_codec_trained_by_medanon_carries_its_people_into_the_release_and_the_evaluation(tmp_path):
    """`train gan` on every patient, `train encoder` on the train split: the exported codec names both runs'
    people (digests only), a release made with it carries them, and the evaluation of that folder says the GAN saw
    its controls (the encoder, trained on the members, did not)."""
    import json

    from click.testing import CliRunner

    from medanon.cli import cli
    from medanon.codecs.stylegan import load_codec
    from medanon.evaluate.inputs import load_real

    root = Path(__file__).resolve().parents[1] / "configs"
    data = medanon.make_phantom(tmp_path / "data", modality="fundus", patients=8, per_patient=2, size=32, seed=3)
    run = CliRunner()
    r = run.invoke(cli, ["--device", "cpu", "train", "gan", str(data), "--config", str(root / "stylegan/tiny32.yaml"),
                         "--steps", "1", "--checkpoint-every", "1", "--out", str(tmp_path / "gan")])
    assert r.exit_code == 0, r.output
    r = run.invoke(cli, ["--device", "cpu", "train", "encoder", "--data", str(data), "--split", "train",
                         "--generator", str(tmp_path / "gan" / "checkpoint.pt"), "--config",
                         str(root / "encoder/tiny32.yaml"), "--set", "iterations=1", "--steps", "1",
                         "--out", str(tmp_path / "re"), "--export", str(tmp_path / "codec.pt")])
    assert r.exit_code == 0, r.output
    people = load_codec(tmp_path / "codec.pt").provenance["trained_people"]
    assert [(p["model"], p["split"], p["images"]) for p in people] == [("codec.pt", "train", len(
        medanon.split_dataset(medanon.open_dataset(data, size=32))["train"])), ("checkpoint.pt", "all", 16)], people
    assert "P0000" not in json.dumps(people)                     # digests, never ids

    train = medanon.split_dataset(medanon.open_dataset(data, size=32))["train"]
    with pytest.warns(WeakSetting, match="k = 2"):
        rel = medanon.anonymize.kcentroid(train, k=2, codec=tmp_path / "codec.pt")
    params = json.loads(json.dumps(rel.params))                 # as the manifest holds them
    from medanon.data.training_people import public_people

    assert params["codec"]["trained_people"] == public_people(people)
    public = json.dumps(params)                                  # the manifest is public: keyed digests only
    assert all(p["patients_digest"] not in public and p["records_digest"] not in public
               and p["source"]["sha256"] not in public for p in people), params["codec"]

    real = load_real(data, size=32)
    held, src = np.flatnonzero(real.split == "test"), np.flatnonzero(real.split == "train")
    ctx = SimpleNamespace(real=real, src=src, held=held, cfg=SimpleNamespace(source_split="train",
                                                                             heldout_split="test"))
    notes = model_people_notes([SimpleNamespace(name="kc", manifest={"models": {}}, params=params)], ctx)
    n = len(set(real.patients[held]))
    assert len(notes) == 1 and f"checkpoint.pt saw {n} of the {n} controls" in notes[0], notes
    assert "codec.pt" not in notes[0]


def test_a_dpglow_release_carries_the_people_its_flow_was_trained_on(tmp_path):
    import json
    import warnings

    from click.testing import CliRunner

    from medanon.cli import cli

    root = Path(__file__).resolve().parents[1] / "configs"
    data = medanon.make_phantom(tmp_path / "data", modality="xray", patients=6, per_patient=1, size=32, seed=13)
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "flow", str(data), "--config",
                                 str(root / "glow/tiny32.yaml"), "--steps", "1", "--batch", "2",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    other = medanon.make_phantom(tmp_path / "other", modality="xray", patients=4, per_patient=1, size=32, seed=14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # the statement's warnings are tested elsewhere
        rel = medanon.anonymize.dpglow(medanon.open_dataset(other, size=32), epsilon=1e4,
                                       flow=tmp_path / "run" / "flow.pt")
    (rec,) = json.loads(json.dumps(rel.params))["flow_trained_people"]["trained_people"]
    assert sorted(rec) == ["dataset_key", "images", "model", "people_key", "split"], rec
    assert rec["model"] == "flow.pt" and rec["images"] >= 1 and "P0000" not in json.dumps(rec)


def test_a_release_evaluated_at_another_size_has_no_trusted_attack_row():
    """An exact copy in a 64 px release, evaluated at 32 px, sits about 4 grey levels from the real image decoded at
    32 px from its file: the copy screens that invalidate a wrong mapping or held-out copies cannot fire (a copy
    release with a shuffled mapping got a trusted risk of 0.06), so no row is trusted, and the report says why. The
    side comes from the image files, else the manifest."""
    from medanon.evaluate.calibration import validity
    from medanon.evaluate.setting_notes import size_notes

    rels = [SimpleNamespace(name="big", manifest={"params": {"size": 64}}),
            SimpleNamespace(name="files", side=64, manifest={"params": {}}),      # a release written by hand
            SimpleNamespace(name="same", manifest={"params": {"size": 32}}),
            SimpleNamespace(name="unknown", manifest={"params": {}})]
    notes = size_notes(32, rels)
    assert [n.split(":")[0] for n in notes] == ["release big", "release files"], notes
    assert notes[0].startswith("release big: its images are 64 px and were evaluated at 32 px")
    assert "size=64" in notes[0]
    risk = {"residual_risk": {"risk": 0.06, "ci": [0.0, 0.2]}, "attack": {"patients": 28}}
    rel = {"name": "shuffled", "attacks": {"membership": risk}, "screening": {}}
    table = {"membership": {"passes": True, "copy_check": True}}
    ok = validity({**rel, "sizes": {"release": 32, "evaluated": 32}}, table, {}, {})
    bad = validity({**rel, "sizes": {"release": 64, "evaluated": 32}}, table, {}, {})
    assert ok["membership"]["valid"] and not bad["membership"]["valid"], (ok, bad)
    assert "64 px and were evaluated at 32 px" in bad["membership"]["reason"]


def test_the_note_on_releases_of_the_same_people_names_what_their_methods_give_up():
    from medanon.evaluate.setting_notes import _together

    assert _together({"dpglow", "gmia"}) == ("ε budgets add up (basic composition) and each is another view of the "
                                             "same people, and an attacker may combine them")
    said = _together({"kpixel", "snow"})
    assert "differenced" in said and "Snow's unchanged pixels" in said and "ε" not in said
    assert _together({"ldp-image"}) == "ε budgets add up (basic composition)"


def test_top_k_membership_over_few_held_out_patients_is_not_trusted():
    from medanon.evaluate.calibration import validity

    def row(pool_patients):
        risk = {"residual_risk": {"risk": 0.9, "ci": [0.5, 1.0]}, "attack": {"patients": 28},
                "pool_patients": pool_patients}
        rel = {"name": "r", "attacks": {"membership": {"risk": risk}}, "screening": {}}
        return validity(rel, {"membership": {"passes": True, "copy_check": True}}, {}, {})["membership"]

    assert row(30)["valid"] and row(None)["valid"]
    few = row(5)
    assert not few["valid"] and "images of 5 held-out patients (fewer than 10" in few["reason"]


def test_the_new_invalidity_reasons_stay_whole_in_the_verdicts_list():
    """A reason keeps its fix in the same sentence, without "; " (the verdict lists every reason whole)."""
    from medanon.evaluate.calibration import _few_pool_patients
    from medanon.evaluate.setting_notes import other_size

    for reason in (other_size(64, 32), other_size((48, 64), 64), _few_pool_patients({"pool_patients": 5})):
        assert reason and "; " not in reason, reason
    assert "48 x 64 px" in other_size((48, 64), 64)
