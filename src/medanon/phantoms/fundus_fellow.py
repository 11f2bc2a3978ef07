"""The other eye of a fundus phantom patient, for datasets photographed in both eyes (EyePACS, most screening).

A person's two eyes share what belongs to the person and differ in what belongs to the eye. The fellow eye
keeps the patient's sex, age, pigmentation (fundus colour, lens, texture strength), optic-disc colour and
identifying marker; its disc size and cup ratio are close to the first eye's (they are strongly correlated between
fellow eyes); its diabetic-retinopathy grade is the same in 70 % of patients and one grade apart otherwise (DR is
mostly symmetric). Its vessel tree, disc and fovea position, choroidal texture and lesions are drawn anew: a
retina's vessel pattern is not a mirror copy of the other eye's, so an identity attacker holding one eye of a
person does not recognise the other from the vessels alone.

:func:`sample_fellow_eye` draws from its own generator, so a dataset with fellow eyes keeps every first eye
byte-identical to the same phantom without them.

>>> import numpy as np
>>> from medanon.phantoms.fundus import sample_patient
>>> first = sample_patient(np.random.default_rng(0))
>>> other = sample_fellow_eye(np.random.default_rng(1), first)
>>> (other.sex, other.age, other.laterality) == (first.sex, first.age, 1 - first.laterality)
True
"""

from __future__ import annotations

import math

import numpy as np

from medanon.phantoms.fundus import FundusPatient, _disc_and_macula, _lesions, _pigmentation, _vessel_tree, assemble

__all__ = ["SAME_GRADE", "sample_fellow_eye"]

SAME_GRADE = 0.7                # share of patients whose two eyes have the same DR grade


def sample_fellow_eye(rng: np.random.Generator, patient: FundusPatient) -> FundusPatient:
    """The other eye of ``patient`` (opposite laterality), drawn from ``rng`` in a fixed order (grade, disc and
    macula, pigmentation, vessel tree, lesions)."""
    grade = patient.grade
    if rng.random() >= SAME_GRADE:
        step = 1 if grade == 0 else -1 if grade == 4 else int(rng.choice((-1, 1)))
        grade += step
    a = (patient.age - 55.0) / 30.0
    eye = _disc_and_macula(rng, patient.sex, a)
    eye["disc_r"] = patient.disc_radius * math.exp(0.03 * rng.standard_normal())
    eye["cup_ratio"] = float(np.clip(patient.cup_ratio + 0.03 * rng.standard_normal(), 0.12, 0.7))
    eye["disc_rgb"], eye["cup_rgb"] = patient.disc_rgb, patient.cup_rgb
    _, _, tex, _ = _pigmentation(rng, patient.sex, patient.age, a)
    base = np.asarray(patient.base_rgb) * np.exp(0.01 * rng.standard_normal(3))
    pigmentation = (base, np.asarray(patient.lens_rgb), tex, patient.texture_amp)
    vessels, tree = _vessel_tree(rng, patient.sex, a, grade, eye["fovea"], eye["disc"], eye["disc_r"])
    lesions = _lesions(rng, grade, eye["fovea"], eye["disc"], eye["disc_r"], vessels, tree)
    return assemble(patient.sex, patient.age, 1 - patient.laterality, grade, eye, pigmentation, vessels, lesions,
                    patient.marker)
