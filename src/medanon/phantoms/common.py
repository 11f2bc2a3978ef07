"""Types and small helpers shared by the fundus and chest X-ray phantom generators.

A phantom generator is two pure functions:

``sample_patient(rng, params) -> Patient``
    draws a persistent anatomy and attributes (sex, age, pathology, identifying markers);
``render(patient, rng, size) -> PhantomImage``
    draws one acquisition of that patient, with re-acquisition changes (pose, illumination,
    colour, blur, noise) taken from ``rng``.

Both are deterministic given their ``numpy.random.Generator``; the dataset writer gives every
patient and every acquisition its own generator derived from (seed, patient, acquisition), so the
output does not depend on the number of worker processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class PhantomImage:
    image: np.ndarray                            # uint8, (H, W, 3) for fundus, (H, W) for X-ray
    mask: np.ndarray | None                      # bool (H, W): vessels (fundus) or lungs (X-ray)
    labels: dict[str, float] = field(default_factory=dict)  # per-acquisition labels and ground truth


@dataclass(frozen=True)
class PhantomParams:
    """Population-level knobs of the phantom generators (not per patient)."""

    grade_weights: tuple[float, ...] = (0.49, 0.10, 0.27, 0.06, 0.08)  # DR grade 0..4 (APTOS-like)
    pneumonia_rate: float = 0.3                  # fraction of X-ray patients with pneumonia
    marker_rate: float = 0.05                    # fraction of patients with a burned-in block
    situs_inversus_rate: float = 0.03            # fraction of X-ray patients with mirrored anatomy
    age_range: tuple[float, float] = (25.0, 85.0)


def patient_rng(seed: int, patient_index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(patient_index), 0]))


def acquisition_rng(seed: int, patient_index: int, acquisition_index: int, eye: int = 0) -> np.random.Generator:
    """Acquisition ``acquisition_index`` of the patient's first eye (``eye=0``) or of their other eye (``eye=1``)."""
    entropy = [int(seed), int(patient_index), 1 + int(acquisition_index)] + ([1] if eye else [])
    return np.random.default_rng(np.random.SeedSequence(entropy))


def fellow_rng(seed: int, patient_index: int) -> np.random.Generator:
    """Whether a fundus patient has their other eye photographed, and that eye's anatomy (a stream of its own, so
    that the first eye and its acquisitions do not change)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(patient_index), 0, 1]))


def to_uint8(x: np.ndarray) -> np.ndarray:
    """Float image in [0, 1] -> uint8 with rounding and clipping."""
    return np.clip(np.rint(np.asarray(x, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)
