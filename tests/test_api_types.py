"""Settings of the wrong type are refused at the call, not read as true or written into a manifest; identical
images are a dataset like any other."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import medanon
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConfigError, match="takes") as e:
            call(xray)
    assert said in str(e.value) and e.value.fix


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
        out = getattr(medanon.anonymize, method)(torch.zeros(4, 1, 16, 16), k=2,
                                                 patient_ids=["a", "a", "b", "b"]).save(tmp_path / "r", progress=False)
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["records"] == 1 and counts["min_people_per_record"] == 2


@pytest.mark.parametrize("device, said", [("gpu9", "device='gpu9' is not understood"),
                                          (7, "device=7 is a int")])
def test_a_device_that_does_not_exist_is_a_config_error_before_any_model_loads(xray, device, said):
    for call in (lambda: medanon.anonymize.kpixel(xray, k=2, device=device),
                 lambda: medanon.anonymize.dpglow(xray, epsilon=1e4, device=device),
                 lambda: medanon.anonymize.snow(xray, p=0.1, device=device)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(ConfigError, match=said):
                call()
