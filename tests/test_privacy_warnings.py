"""Every setting that weakens or voids a privacy claim warns with a :class:`medanon.PrivacyWarning` subclass, so
``warnings.simplefilter("error", medanon.PrivacyWarning)`` stops it (docs/design.md, "Warnings")."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest
import torch

import medanon
from medanon.anonymize.gmia import GMIAConfig
from medanon.anonymize.privacy import LabelDisclosure, NotAnonymised, WeakSetting
from medanon.anonymize.snow_release import snow_sweep
from medanon.data.inputs import as_dataset

SRC = Path(medanon.__file__).parent


@pytest.fixture(scope="module")
def ds():
    g = torch.Generator().manual_seed(0)
    return as_dataset(torch.rand(8, 3, 16, 16, generator=g) * 2 - 1, patient_ids=[0, 0, 1, 1, 2, 2, 3, 3],
                      labels={"grade": [0, 1, 2, 0, 1, 2, 0, 1], "sex": [0, 0, 1, 1, 0, 0, 1, 1]}, modality="fundus",
                      value_range=(-1, 1))


def test_weak_settings_become_errors_under_the_documented_filter(ds, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", medanon.PrivacyWarning)
        with pytest.raises(WeakSetting, match="k = 2"):
            medanon.anonymize.kpixel(ds, k=2)
        with pytest.raises(LabelDisclosure, match="releasing sex"):
            medanon.anonymize.snow(ds, p=0.3, release_labels=["grade", "sex"])
        with pytest.raises(WeakSetting, match="publish at most one"):
            snow_sweep(ds, tmp_path / "snow-p{p}", ps=[0.1, 0.5], progress=False)
        medanon.anonymize.kpixel(ds, k=3)                   # the defaults warn with nothing of the kind


def test_every_warning_class_is_importable_flat_and_one_class_can_be_escalated_alone(ds):
    from medanon.anonymize import privacy

    classes = {n for n, c in vars(privacy).items() if isinstance(c, type) and issubclass(c, medanon.PrivacyWarning)}
    assert classes <= set(medanon.__all__) and all(getattr(medanon, n) is getattr(privacy, n) for n in classes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", medanon.WeakSetting)
        with pytest.raises(medanon.WeakSetting, match="k = 2"):
            medanon.anonymize.kpixel(ds, k=2)
        warnings.simplefilter("ignore", medanon.LabelDisclosure)
        medanon.anonymize.snow(ds, p=0.3, release_labels=["grade", "sex"])  # another class: not escalated


def test_gmia_settings_that_remove_no_identity_say_so_by_class():
    said = GMIAConfig(steps=0).warnings()
    assert [c for _, c in said] == [NotAnonymised] and "no identity is removed" in said[0][0]
    assert [c for _, c in GMIAConfig(losses="ut").warnings()] == [NotAnonymised]
    assert [c for _, c in GMIAConfig(margin=0.6).warnings()] == [WeakSetting]
    assert GMIAConfig().warnings() == []


def test_every_warning_of_the_release_code_names_its_class():
    """A bare ``warnings.warn(msg)`` is a UserWarning that the privacy filter lets through: in the modules that
    make and describe releases each warning must name its class, a PrivacyWarning subclass wherever a claim is
    weakened (the choice is reviewed where the class is named)."""
    bare = []
    for folder in ("anonymize", "api", "release"):
        for path in sorted((SRC / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn"
                        and getattr(node.func.value, "id", None) == "warnings" and len(node.args) < 2
                        and not any(k.arg == "category" for k in node.keywords)):
                    bare.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert bare == []


def test_a_label_that_is_the_patient_id_is_never_released():
    g = torch.Generator().manual_seed(1)
    ids = [100001, 100001, 100002, 100002, 100003, 100003]
    ds = as_dataset(torch.rand(6, 3, 16, 16, generator=g), patient_ids=[f"{i}" for i in ids],
                    labels={"grade": [0, 1, 2, 0, 1, 2], "mrn": ids, "site": [1, 1, 2, 2, 1, 1]}, modality="fundus",
                    value_range=(0, 1))
    with pytest.raises(medanon.errors.ConfigError, match="equals the patient id"):
        medanon.anonymize.snow(ds, p=0.3, release_labels=["grade", "mrn"])
    with pytest.raises(medanon.errors.ConfigError, match="equals the patient id"):
        medanon.anonymize.kpixel(ds, k=2, release_labels=["mrn"])
    medanon.anonymize.snow(ds, p=0.3, release_labels=["grade", "site"])     # other labels are released
