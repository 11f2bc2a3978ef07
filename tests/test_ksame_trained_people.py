"""A k-Same release through a codec that records its training patients (``medanon train`` writes digests of them)
says so when they are released patients: the statement names the models and the count, or, for another part of the
same folder, turns its assumption into a stated unknown."""

import warnings

import pytest
import torch

import medanon
from medanon.anonymize.privacy import CalibrationOverlap
from medanon.codecs.stylegan import StyleGANCodec
from medanon.data.dataset import subset
from medanon.data.training_people import training_people
from medanon.models.encoder import Encoder
from medanon.models.stylegan import Generator


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = medanon.make_phantom(tmp_path_factory.mktemp("tp") / "ph", patients=8, size=16, seed=4)
    ds = medanon.open_dataset(root, size=16)
    patients = sorted({r.patient_id for r in ds.records})
    released = subset(ds, [i for i, r in enumerate(ds.records) if r.patient_id in patients[:4]])
    other = medanon.open_dataset(medanon.make_phantom(tmp_path_factory.mktemp("tp2") / "ph", patients=4, size=16,
                                                      seed=9), size=16)
    return ds, released, other


def _codec(people):
    torch.manual_seed(0)
    g = Generator(z_dim=16, w_dim=16, img_resolution=16, img_channels=3, channel_base=128, channel_max=16)
    e = Encoder(16, 3, g.num_ws, g.w_dim, iterative=False, channel_base=128, channel_max=16, head_dim=16)
    return StyleGANCodec(g, e, provenance={"trained_people": people})


def _statement(released, people):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rel = medanon.anonymize.kcentroid(released, k=2, codec=_codec(people))
    return rel.privacy, [w for w in caught if issubclass(w.category, CalibrationOverlap)]


def test_a_codec_trained_on_the_released_patients_is_stated(world):
    ds, released, _ = world
    record = training_people(ds, released.records, split="train", seed=0, model="mine.pt")
    privacy, warned = _statement(released, [record])
    assert privacy["models_trained_on_released"] == {"files": ["mine.pt"], "released_patients": 4}
    assert "trained on 4 of the released patients" in privacy["guarantee"] and warned
    assert any("mine.pt" in item for item in privacy["not_protected"])
    # the whole folder, released part included
    privacy, warned = _statement(released, [training_people(ds, ds.records, model="all.pt")])
    assert privacy["models_trained_on_released"]["released_patients"] == 4 and warned


def test_a_codec_trained_on_the_other_patients_or_other_data_changes_nothing(world):
    ds, released, other = world
    plain, _ = _statement(released, [])
    ids = {r.patient_id for r in released.records}
    rest = [r for r in ds.records if r.patient_id not in ids]
    for people in ([training_people(ds, rest, split="test", seed=0, model="heldout.pt")],
                   [training_people(other, other.records, model="elsewhere.pt")]):
        privacy, warned = _statement(released, people)
        said = privacy.pop("models_not_trained_on_released", None)
        assert privacy == plain and not warned
        assert said == (["heldout.pt: trained on this folder's patients that are not released"]
                        if "heldout.pt" in str(people) else None)


def test_a_codec_trained_on_another_split_is_recognised_as_not_the_released_patients(world):
    """The recommended workflow: the codec trained on the training split, the test split released. Its patients
    are recognised through the split the release was selected by (no false alarm); the statement says the assumption
    is known to hold for it."""
    from medanon.data.splits import select_split

    ds, _, _ = world
    train, test = select_split(ds, "train", seed=0), select_split(ds, "test", seed=0)
    privacy, warned = _statement(test, [training_people(ds, train.records, split="train", seed=0, model="enc.pt")])
    assert not warned and "models_trained_on_released" not in privacy
    assert privacy["models_not_trained_on_released"] == ["enc.pt: trained on this folder's train split"]
    privacy, warned = _statement(train, [training_people(ds, train.records, split="train", seed=0, model="enc.pt")])
    assert warned and privacy["models_trained_on_released"]["released_patients"] == len(train.patients)


def test_a_codec_trained_on_another_part_of_the_folder_is_an_unknown(world):
    ds, released, _ = world
    some = [r for r in ds.records if r.patient_id in {ds.records[0].patient_id, ds.records[-1].patient_id}]
    privacy, warned = _statement(released, [training_people(ds, some, split="val", seed=0, model="part.pt")])
    assert "models_trained_on_released" not in privacy and warned
    assert any("part.pt: trained on" in a and "not known here" in a for a in privacy["assumptions"])


def test_a_release_of_the_whole_folder_knows_its_codec_saw_released_patients(world):
    """Released: every patient of the folder (``--split all``). A codec trained on any part of it saw released
    patients only; its record counts them (older records do not: then the statement says the count is not
    recorded), where the statement said "not known"."""
    ds, _, _ = world
    part = [r for r in ds.records if r.patient_id in sorted({r.patient_id for r in ds.records})[:3]]
    record = training_people(ds, part, split="train", seed=0, model="enc.pt")
    privacy, warned = _statement(ds, [record])
    assert privacy["models_trained_on_released"] == {"files": ["enc.pt"], "released_patients": 3} and warned
    uncounted = {k: v for k, v in record.items() if k != "patients"}
    privacy, _ = _statement(ds, [uncounted])
    assert privacy["models_trained_on_released"] == {"files": ["enc.pt"], "released_patients": None}
    assert "released patients (how many is not recorded)" in privacy["guarantee"]


def test_models_stated_together_keep_every_file_and_every_unknown():
    """A shipped phantom-trained model and a recorded one, both on released patients: the machine-readable field
    names both; a model of unknown overlap beside one known to overlap keeps its own assumption."""
    from medanon.anonymize.ksame_config import KSameConfig
    from medanon.anonymize.ksame_statement import ksame_models_overlap, ksame_recorded_overlap, privacy_statement

    plain = privacy_statement(KSameConfig(method="kcentroid", k=5), None, uses_models=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationOverlap)
        both = ksame_recorded_overlap(ksame_models_overlap(plain, {"gen.pt": (7, {"seed": 0, "patients": 500})}),
                                      [("enc.pt", 20, "trained on exactly the released patients")])
        mixed = ksame_recorded_overlap(plain, [("gen.pt", 20, "trained on this folder's train split"),
                                               ("enc.pt", None, "trained on 12 images of this folder")])
    assert both["models_trained_on_released"] == {"files": ["enc.pt", "gen.pt"], "released_patients": 20}
    assert any("enc.pt" in a and "not known here" in a for a in mixed["assumptions"])
    assert mixed["models_trained_on_released"]["files"] == ["gen.pt"]
