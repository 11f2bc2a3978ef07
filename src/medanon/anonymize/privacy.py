"""Warning classes for settings that weaken or void a release's privacy statement.

Library code raises them with :func:`warnings.warn`; the CLI prints them. Each class names one
reason, so a caller (or a test, or an ethics-board checklist) can filter or escalate precisely:

>>> import warnings
>>> # turn voided claims into errors:
>>> warnings.simplefilter("error", NoFormalGuarantee)       # doctest: +SKIP
"""

from __future__ import annotations


class PrivacyWarning(UserWarning):
    """Base class: a setting weakens what the release's privacy statement can claim."""


class NoFormalGuarantee(PrivacyWarning):
    """The release carries no formal guarantee under these settings (e.g. seeded DP noise, a data-derived
    Snow fill); its statement says so."""


class DataDependentRelease(PrivacyWarning):
    """Something every released record depends on was computed from the whole private dataset (a PCA basis, a
    clip box, a fill value): the statement names it and what it leaks is outside the guarantee."""


class CalibrationOverlap(PrivacyWarning):
    """Released images were among the images a model or clip box was fitted on."""


class WeakBudget(PrivacyWarning):
    """A differential-privacy budget so large that the bound protects nothing in practice."""


class NotAnonymised(PrivacyWarning):
    """The settings remove no identity: each released record is one person's image, reconstructed or processed
    (GAN-Inverted, k = 1; GMIA without optimisation steps or without its identity loss)."""


class WeakSetting(PrivacyWarning):
    """A setting under which the method is known to protect weakly: k = 2, several Snow releases of the same
    images, a GMIA margin that lets the identity network still link, a utility network trained on a sensitive
    attribute."""


class LabelDisclosure(PrivacyWarning):
    """A sensitive label (sex, age) released next to the images: no method protects a label it publishes."""


class LabelHomogeneity(PrivacyWarning):
    """A released record's sensitive label is the same for all its patients, so the label (and its counts)
    disclose every member's value (the homogeneity attack on k-anonymity)."""


# Every release's statement carries these keys, whatever its method; None means the statement makes no such
# guarantee (Snow's (0, delta) is per pixel position, so its per-image epsilon is None; k-Same has no epsilon).
STANDARD_FIELDS = ("guarantee", "unit", "k", "epsilon_image", "epsilon_patient", "delta")
GUARANTEE_FIELDS = ("k", "epsilon_image", "epsilon_patient", "delta")
NO_UNIT = "none: no formal guarantee, so no unit is protected"
COUNTS = ("the manifest's counts: records, source images and people in the release (and for DP the most images one "
          "patient has), exact, from the private data")


def no_guarantee(statement: dict) -> bool:
    """Whether ``statement`` guarantees nothing (its ``guarantee`` begins with "none", or is missing)."""
    return str(statement.get("guarantee") or "none").startswith("none")


def with_standard_fields(statement: dict) -> dict:
    """``statement`` with every key of :data:`STANDARD_FIELDS`, None where it makes no such guarantee, so that
    statements of different methods read alike. A statement of no guarantee protects no unit, and the numbers it
    records for reference (a seeded LDP release's epsilon, GAN-Inverted's k = 1) move to ``without_guarantee``.

    >>> with_standard_fields({"guarantee": "none: no formal guarantee"})["unit"]
    'none: no formal guarantee, so no unit is protected'
    >>> with_standard_fields({"guarantee": "epsilon-LDP", "epsilon_image": 2.0})["k"] is None
    True
    >>> s = with_standard_fields({"guarantee": "none: seeded noise", "epsilon_image": 2.0,
    ...                           "epsilon_patient": "none (with secret noise: n * epsilon_image)"})
    >>> s["epsilon_image"], s["epsilon_patient"], s["without_guarantee"]["epsilon_image"]
    (None, None, 2.0)
    """
    out = dict(statement)
    for key in STANDARD_FIELDS:
        out.setdefault(key, None)
    listed = out.get("not_protected") or []
    everything = any(str(item).startswith("everything") for item in listed)
    if COUNTS not in listed and not everything:      # a statement of no guarantee lists what it leaves too
        out["not_protected"] = [*listed, COUNTS]
    if no_guarantee(out):
        kept = {k: out[k] for k in GUARANTEE_FIELDS if out[k] is not None}   # numbers, and "none (...)" texts
        if kept:
            out["without_guarantee"] = {**(out.get("without_guarantee") or {}), **kept}
            out.update(dict.fromkeys(kept))
        if out["unit"] is None:
            out["unit"] = NO_UNIT
    return out
