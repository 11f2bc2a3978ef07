"""A release's privacy statement (the ``privacy`` field of its manifest) as text a reader can check.

Every method writes its own keys (k-anonymity: ``k``, ``unit``; ε-LDP: ``epsilon_image`` (the guarantee, per
image), ``epsilon_element`` (the same budget divided by D: not a per-pixel guarantee), ``D``, ``vacuous``,
``clip_box``; Snow: ``epsilon`` = 0 and ``delta`` with a grey or user-supplied fill and secret randomness;
GMIA, VS-Snow and anything seeded or data-filled: no guarantee, the reason in ``guarantee``).
:func:`headline` gives the one-line claim for a table cell; :func:`prose_html` gives the whole
statement as headed paragraphs and lists, every key kept (nothing in the manifest is dropped from
the page, unknown keys are listed under "Other recorded values").
"""

from __future__ import annotations

import html
import math
from typing import Any

# (key, heading) in reading order; values are strings or lists of strings
SECTIONS = (
    ("statement", "Statement"),
    ("guarantee", "What is guaranteed"),
    ("unit", "Protected unit"),
    ("mechanism", "Mechanism"),
    ("noise_scale", "Noise scale"),
    ("clip", "Clipping"),
    ("clip_box", "Clip box"),
    ("epsilon_patient", "Per patient"),
    ("labels", "Released labels"),
    ("homogeneous_records", "Records whose label discloses every member's value"),
    ("pca_basis", "PCA basis"),
    ("augmentation", "Augmented views"),
    ("randomness", "Randomness"),
    ("clip_center", "Clip-box centre"),
    ("fill", "Fill value"),
    ("margin_meaning", "What the margin means"),
    ("assumptions", "Assumptions"),
    ("why_no_guarantee", "Why there is no guarantee"),
    ("not_guaranteed", "What is not guaranteed"),
    ("not_protected", "What is not protected"),
    ("protection_measured_by", "How the protection is measured"),
    ("attack_measured", "How the protection is measured"),
)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def headline(priv: dict[str, Any]) -> str:
    """The claim in one line, e.g. ``k-anonymity: k = 5 patients per record``."""
    if not priv:
        return "no privacy statement in the manifest"
    guarantee = str(priv.get("guarantee") or "")         # a null guarantee is none, not the text "None"
    if guarantee.startswith("k-anonymity") and priv.get("k"):
        basis = str(priv.get("pca_basis", "")).startswith("fitted on the private")
        trained = (priv.get("models_trained_on_released") or {}).get("released_patients")
        return (f"k-anonymity: k = {priv['k']} patients per record"
                + ("; the PCA basis depends on every image" if basis else "")
                + (f"; its models were trained on {trained} of the released patients" if trained else ""))
    if guarantee == "epsilon-LDP" and _finite(priv.get("epsilon_image")):
        e = priv["epsilon_image"]
        tight = priv.get("epsilon_image_tight")
        tight_text = f" (tight {tight:.4g})" if _finite(tight) and tight < e * (1 - 1e-9) else ""
        vacuous = priv.get("vacuous", e > 10)
        delta = f" (δ = {priv['delta']:g})" if _finite(priv.get("delta")) else ""
        per_element = priv.get("epsilon_element", float("nan"))
        most, n = priv.get("epsilon_patient_max"), priv.get("max_images_per_patient")
        patient = (f"ε ≤ {most:.4g} per patient in this release ({n} images at most; n·ε for n images)"
                   if _finite(most) and isinstance(n, int) else "n·ε for a patient with n images")
        return (f"ε-local DP per image{delta}: ε = {e:.4g}{tight_text} (= {per_element:g} "
                f"per element × D = {priv.get('D')}; not a per-pixel guarantee); {patient}"
                + ("; vacuous at this ε" if vacuous else
                   "; vacuous for the patient with the most images" if priv.get("vacuous_patient") else ""))
    if priv.get("epsilon") == 0 and _finite(priv.get("delta")):
        return (f"none for images or patients; for one pixel position, the paper's (0, δ)-DP bound with "
                f"δ = {priv['delta']:.3g} (each pixel released unchanged with probability δ)")
    if guarantee.startswith("none") or guarantee == "":
        reason = guarantee.split(":", 1)[1].strip() if ":" in guarantee else ""
        if (priv.get("without_guarantee") or {}).get("epsilon_image", priv.get("epsilon_image")) == "inf":
            reason = "ε = ∞, no noise"
        if reason.startswith("no formal guarantee"):
            return reason
        return "no formal guarantee" + (f" ({reason})" if reason and "no formal" not in reason else "")
    return guarantee


def _paragraph(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "<ul>" + "".join(f"<li>{html.escape(str(v))}</li>" for v in value) + "</ul>"
    if isinstance(value, dict):
        return "<ul>" + "".join(f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>"
                                for k, v in value.items()) + "</ul>"
    return f"<p>{html.escape(str(value))}</p>"


def prose_html(priv: dict[str, Any]) -> str:
    """The whole statement as HTML: one headed block per known key, then every other recorded value."""
    if not priv:
        return "<p>The release's manifest holds no privacy statement.</p>"
    out, seen = [], set()
    for key, heading in SECTIONS:
        if key in priv and priv[key] not in (None, "", []):
            if heading in seen and out:                     # two keys share a heading: append under it
                out.append(_paragraph(priv[key]))
            else:
                out.append(f"<h4>{html.escape(heading)}</h4>{_paragraph(priv[key])}")
            seen.add(heading)
    known = {k for k, _ in SECTIONS}
    rest = {k: v for k, v in priv.items() if k not in known and v is not None}
    if rest:
        items = "".join(f"<li><code>{html.escape(str(k))}</code>: {html.escape(_value(v))}</li>"
                        for k, v in rest.items())
        out.append(f"<h4>Other recorded values</h4><ul>{items}</ul>")
    return "".join(out)


def _value(v: Any, *, nested: bool = False) -> str:
    """A recorded value in words: yes / no for flags (not Python's True), a nested record in parentheses.

    >>> _value({"seed": 1, "train_config": {"augment": True, "lr": 0.002}, "trained_crop": None})
    'seed = 1; train_config = (augment = yes; lr = 0.002); trained_crop = not recorded'
    """
    if v is None:
        return "not recorded"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict):
        text = "; ".join(f"{k} = {_value(x, nested=True)}" for k, x in v.items())
        return f"({text})" if nested else text
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x, nested=True) for x in v)
    return str(v)
