"""Settings of the wrong type are refused at the call, not read as true or written into a manifest; identical
images are a dataset like any other."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
import torch

import medanon
from medanon.anonymize.gmia import GMIAConfig
from medanon.errors import ConfigError


@pytest.fixture(scope="module")
def xray(tmp_path_factory):
    return medanon.make_phantom(tmp_path_factory.mktemp("api") / "x", modality="xray", patients=3, per_patient=2,
                                size=16)


@pytest.mark.parametrize("call, said", [
    (lambda d: medanon.anonymize.ldp_image(d, epsilon=1, per_element="no"), "per_element='no' is a str"),
    (lambda d: medanon.anonymize.ldp_image(d, epsilon=1, clip="no"), "clip='no' is a str"),
    (lambda d: medanon.anonymize.kpixel(d, k=2, seed="x"), "seed='x' is a str; seed takes an integer"),
    (lambda d: medanon.anonymize.kpixel(d, k=2, seed=1.5), "seed=1.5 is a float"),
    (lambda d: medanon.anonymize.kpixel(d, k=2, drop_remainder="yes"), "drop_remainder='yes' is a str"),
    (lambda d: medanon.open_dataset(d, size=16, skip_bad="no"), "skip_bad='no' is a str"),
])
def test_a_setting_of_the_wrong_type_is_refused(xray, call, said):
    e = _refusal(call, xray, ConfigError)
    assert said in str(e) and "takes" in str(e) and e.fix


def _refusal(call, data, error):
    """The error ``call(data)`` raises (warnings silenced), which must be of type ``error``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error) as e:
            call(data)
    return e.value


def test_overwrite_no_does_not_replace_a_release(xray, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = medanon.anonymize.kpixel(xray, k=2).save(tmp_path / "r", progress=False)
        before = (out / "manifest.json").read_bytes()
        with pytest.raises(ConfigError, match="overwrite='no' is a str"):
            medanon.anonymize.kpixel(xray, k=3).save(out, overwrite="no", progress=False)
    assert (out / "manifest.json").read_bytes() == before


@pytest.mark.parametrize("method", ["kpixel", "kpca"])
def test_identical_images_form_clusters_like_any_others(tmp_path, method):
    """No direction varies among identical images: every PCA coefficient is 0 (it was 0/0, and the clustering
    failed deep inside with a numpy error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = getattr(medanon.anonymize, method)(torch.zeros(4, 1, 16, 16), k=2,
                                                 patient_ids=["a", "a", "b", "b"], value_range=(0, 1))
        out = rel.save(tmp_path / "r", progress=False)
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["records"] == 1 and counts["min_people_per_record"] == 2


@pytest.mark.parametrize("device, said", [("gpu9", "device='gpu9' is not understood"),
                                          (7, "device=7 is an int")])
def test_a_device_that_does_not_exist_is_a_config_error_before_any_model_loads(xray, device, said):
    for call in (lambda: medanon.anonymize.kpixel(xray, k=2, device=device),
                 lambda: medanon.anonymize.dpglow(xray, epsilon=1e4, device=device),
                 lambda: medanon.anonymize.snow(xray, p=0.1, device=device)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(ConfigError, match=said):
                call()


@pytest.mark.parametrize("call, error, said", [
    (lambda d: medanon.anonymize.kcentroid(d, k=2, codec=7), ConfigError, "codec=7 is an int; codec= takes"),
    (lambda d: medanon.anonymize.dpglow(d, epsilon=1.0, flow=3), ConfigError, "flow=3 is an int"),
    (lambda d: medanon.anonymize.kpixel(d, k=2, release_labels=5), ConfigError, "release_labels=5: it takes label"),
    (lambda d: medanon.anonymize.snow(d, p=0.3, batch="8"), ConfigError, "batch='8' is a str"),
    (lambda d: medanon.anonymize.snow(d, p=0.3, workers=0), ConfigError, "workers=0 must be at least 1"),
    (lambda d: medanon.split_dataset(d, stratify="nope"), ConfigError, "stratify='nope' is not a label"),
    (lambda d: medanon.split_dataset(d, val=0.6, test=0.5), ConfigError, "val=0.6, test=0.5"),
    (lambda d: medanon.audit(d.parent / "missing"), medanon.errors.DataError, "is not a folder"),
    (lambda d: medanon.evaluate(real=d, releases=[d.parent / "r"], size=0), ConfigError, "size=0: images are"),
    (lambda d: medanon.anonymize.gmia(d, config=GMIAConfig(steps=3), steps=50), ConfigError,
     "steps= given both as keyword and in config= (steps=3)"),
    (lambda d: medanon.anonymize.gmia(d, config="steps: 3"), ConfigError, "config= is a str; it takes a GMIAConfig"),
    (lambda d: medanon.anonymize.ksalsa(d, k=2, feature_size=3), ConfigError, "feature_size=3: the feature network"),
    (lambda d: medanon.anonymize.ksalsa(d, k=2, features=object()), ConfigError, "features= is an object, not a"),
])
def test_arguments_that_cannot_work_are_refused_by_name(xray, call, error, said):
    """Each of these raised an AttributeError or TypeError that named no argument, or was accepted: a stratify that
    is not a label split unstratified, size=0 evaluated at 64 px."""
    e = _refusal(call, xray, error)
    assert said in str(e) and e.fix


def test_audit_refuses_k_below_one(xray, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = medanon.anonymize.kpixel(xray, k=2).save(tmp_path / "r", progress=False)
    with pytest.raises(ConfigError, match="k=0"):
        medanon.audit(out, k=0)
    assert medanon.audit(out, k=2).passed


def test_split_dataset_takes_a_folder(xray):
    parts = medanon.split_dataset(xray)
    assert sum(len(p) for p in parts.values()) == 6
    assert not {r.patient_id for r in parts["train"].records} & {r.patient_id for r in parts["test"].records}


@pytest.mark.parametrize("images, kw, said", [
    (torch.rand(4, 1, 16, 16), {"modality": "fundus"}, "has 1 channel and modality='fundus'; fundus images have 3"),
    (torch.rand(4, 3, 16, 16), {"modality": "xray"}, "has 3 channels and modality='xray'; xray images have 1"),
])
def test_images_in_memory_must_have_their_modality_s_channels(images, kw, said):
    with pytest.raises(medanon.errors.DataError, match="") as e:
        medanon.anonymize.kpixel(images, k=2, patient_ids=["a", "a", "b", "b"], value_range=(0, 1), **kw)
    assert said in str(e.value)


def test_a_patient_id_is_one_person_whatever_its_number_type():
    """7 and 7.0 (a pandas id column with a gap is float) split one person into two, so a record of k images
    could show fewer than k people."""
    ds = medanon.data.as_dataset(torch.rand(5, 1, 16, 16), patient_ids=[7, 7.0, np.float32(8), np.int64(8), "x"],
                                 value_range=(0, 1))
    assert [r.patient_id for r in ds.records] == ["7", "7", "8", "8", "x"]


def test_an_empty_patient_id_is_refused():
    """An empty id would make every image without one a single patient."""
    with pytest.raises(ConfigError, match="empty id"):
        medanon.anonymize.kpixel(torch.rand(4, 1, 16, 16), k=2, patient_ids=["", "", "b", "b"],
                                 value_range=(0, 1))


@pytest.mark.parametrize("call, said", [
    (lambda d: medanon.split_dataset(d, seed=-1), "seed=-1 is negative; seeds are integers >= 0"),
    (lambda d: medanon.anonymize.kpixel(d, k=2, seed=-1), "seed=-1 is negative"),
    (lambda d: medanon.anonymize.snow(d, p=0.3, seed=-2), "seed=-2 is negative"),
    (lambda d: medanon.anonymize.ldp_image(d, epsilon=2.0, noise_seed=-1), "noise_seed=-1 is negative"),
    (lambda d: medanon.make_phantom(d.parent / "p2", patients=2, seed=-1), "seed=-1 is negative"),
    (lambda d: medanon.anonymize.kpca(d, k=2, pca_components="5"), "pca_components='5' is a str"),
    (lambda d: medanon.anonymize.ldp_image(d, epsilon=2.0, alpha="0.5"), "alpha='0.5' is a str"),
])
def test_seeds_and_numbers_are_checked_by_name(xray, call, said):
    """A negative seed reached numpy as 'expected non-negative integer' on some paths (a split, a phantom, k-Same
    beyond 2,000 images) and passed on others; a number given as a string failed with a comparison TypeError."""
    e = _refusal(call, xray, ConfigError)
    assert said in str(e) and e.fix


def test_numpy_scalars_are_numbers(xray):
    """epsilon= or alpha= as numpy scalars (e.g. from np.logspace) were refused as not positive numbers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = medanon.anonymize.ldp_image(xray, epsilon=np.float32(1e3), alpha=np.float64(0.5))
        assert rel.images(1).shape[0] == 1
    assert rel.privacy["epsilon_image"] == 1e3 and type(rel.params["epsilon"]) is float


def test_paths_and_counts_of_the_wrong_type_are_config_errors_naming_the_argument(xray, tmp_path):
    """pathlib's TypeError named no argument and was no MedanonError; these are both (ArgumentTypeError)."""
    from medanon.errors import ArgumentTypeError

    rel = medanon.anonymize.kpixel(xray, k=2)
    for call, said in ((lambda: rel.save(7), "path=7 is an int"),
                       (lambda: rel.save(tmp_path / "r", mapping=5), "mapping=5 is an int"),
                       (lambda: rel.images(-1), "limit=-1"),
                       (lambda: medanon.audit(tmp_path, mapping=["x"]), "mapping=['x'] is a list")):
        with pytest.raises(ArgumentTypeError, match=re.escape(said)) as e:
            call()
        assert isinstance(e.value, ConfigError) and isinstance(e.value, TypeError) and e.value.fix
    assert not (tmp_path / "r").exists()


def test_every_method_names_its_batch_batch_and_the_former_name_still_works(xray, tmp_path):
    """``batch=`` is the speed setting of every ``medanon.anonymize`` function; GMIA's and Snow's former
    ``batch_size=`` gives the same release with a FutureWarning, and both names with different values are refused."""
    import inspect

    for name in set(medanon.anonymize.__all__) - {"METHODS", "inverted"}:       # inverted has no speed setting
        params = inspect.signature(getattr(medanon.anonymize, name)).parameters
        assert "batch" in params, name
        assert "batch_size" not in params or params["batch_size"].default is None, name      # the former name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = medanon.anonymize.snow(xray, p=0.3, seed=1, batch_size=2).save(tmp_path / "old", progress=False)
    assert [str(w.message) for w in caught if w.category is FutureWarning] == [
        "snow: batch_size= is now batch=, as in every medanon.anonymize function; batch_size= will be removed"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new = medanon.anonymize.snow(xray, p=0.3, seed=1, batch=5).save(tmp_path / "new", progress=False)
    pixels = sorted(p.read_bytes() for p in old.rglob("*.png"))           # file names are drawn afresh each save
    assert len(pixels) == 6 and pixels == sorted(p.read_bytes() for p in new.rglob("*.png"))
    e = _refusal(lambda d: medanon.anonymize.vs_snow(d, p=0.3, batch=4, batch_size=8), xray, ConfigError)
    assert "batch=4 and batch_size=8 name one setting" in str(e) and e.fix == "pass batch= alone"
