"""The audit's check that a release's privacy statement says what its settings give: the statement's ``k`` is the
method's, ε per image is the ε it was asked for (times D where it was asked per element), the noise is at least the
scale that ε needs, and the per-patient budget is the images of one patient times ε. These are the manifest's own
numbers, compared with each other: an edited statement, or one a fault wrote apart from the settings it states,
fails here without the source or the mapping. (The images' noise is measured against the stated ε by
:mod:`.audit_noise`, with the source and the mapping.)

>>> from types import SimpleNamespace
>>> rep = SimpleNamespace(checks=[], add=lambda name, ok, detail="": rep.checks.append((name, ok, detail)))
>>> check_statement_numbers(rep, {"params": {"k": 3}, "privacy": {"k": 10}})
>>> rep.checks[-1][1], rep.checks[-1][2]
(False, "the statement's k is 10, the method's (params.k) 3")
"""

from __future__ import annotations

import math
from typing import Any

CHECK = "the statement's numbers are those of the method's settings (manifest)"


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def stated_k(manifest: dict, k_set: int | None) -> int | None:
    """The larger of the method's k (``k_set``: ``params.k``, read) and the statement's ``privacy.k`` where that is a
    whole number: the claim each record's people are counted against (they differ only in a release whose statement
    was changed)."""
    said = (manifest.get("privacy") or {}).get("k")
    if isinstance(said, int) and not isinstance(said, bool) and (k_set is None or said > k_set):
        return said
    return k_set


def check_statement_numbers(rep, manifest: dict) -> None:
    """Add :data:`CHECK` to ``rep`` (an :class:`.audit.AuditReport`) where the manifest states a k or an ε."""
    params, privacy = manifest.get("params") or {}, manifest.get("privacy") or {}
    wrong: list[str] = []
    compared = 0
    k_set, k_said = params.get("k"), privacy.get("k")
    if _num(k_set) and _num(k_said):
        compared += 1
        if k_set != k_said:
            wrong.append(f"the statement's k is {k_said:g}, the method's (params.k) {k_set:g}")
    eps, asked, d = privacy.get("epsilon_image"), params.get("epsilon"), privacy.get("D")
    size, channels = params.get("size"), params.get("channels")
    if _num(d) and _num(size) and _num(channels):
        compared += 1
        if d != channels * size * size:
            wrong.append(f"D is {d:g}, the released images have {channels * size * size} elements "
                         f"({channels} x {size} x {size})")
    if _num(eps) and _num(asked):
        compared += 1
        want = asked * d if params.get("per_element") and _num(d) else asked
        if not _close(eps, want):
            wrong.append(f"epsilon per image is {eps:g}, the method was asked for {want:g} (params.epsilon "
                         f"{asked:g}{' per element x D' if params.get('per_element') else ''})")
    if _num(eps) and _num(d) and _num(privacy.get("epsilon_element")):
        compared += 1
        if not _close(privacy["epsilon_element"] * d, eps):
            wrong.append(f"epsilon per element x D is {privacy['epsilon_element'] * d:g}, not epsilon per image "
                         f"({eps:g})")
    sens = (privacy.get("calibration") or {}).get("sensitivity_mean")
    if _num(eps) and eps > 0 and _num(d) and _num(sens) and _num(privacy.get("noise_scale_mean")):
        compared += 1
        need = sens * d / eps                   # b_k = max(Delta_k, w_k) * D / epsilon >= Delta_k * D / epsilon
        if privacy["noise_scale_mean"] < need * (1 - 1e-9):
            wrong.append(f"the mean noise scale is {privacy['noise_scale_mean']:g}, below the {need:g} that epsilon "
                         f"= {eps:g} per image needs (mean sensitivity {sens:g} x D / epsilon)")
    most, budget = privacy.get("max_images_per_patient"), privacy.get("epsilon_patient_max")
    if _num(eps) and _num(most) and _num(budget):
        compared += 1
        if budget < most * eps * (1 - 1e-9):
            wrong.append(f"epsilon per patient is stated as {budget:g}, but {most:g} images of one patient at "
                         f"{eps:g} each add up to {most * eps:g}")
    if compared:
        rep.add(CHECK, not wrong,
                "; ".join(wrong) if wrong else f"{compared} number{'s' if compared > 1 else ''} compared")
