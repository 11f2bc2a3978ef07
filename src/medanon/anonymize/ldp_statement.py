"""What an ε-LDP release states: the claim in words, the distinguishing bound, the seeded exception.

:meth:`medanon.anonymize.ldp.LaplaceMechanism.privacy` writes the manifest's privacy field with
:func:`statement`; :func:`seeded_privacy` withdraws the guarantee of a release whose noise came from
a seed (testing only).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from medanon.anonymize.ldp import LaplaceMechanism

WEAK_EPSILON = 10.0                             # above this image budget the guarantee is vacuous (warned)
EXACT_CLAUSE = ("The noise is exact: each clipped element is snapped to a grid of 4096 steps across its box and "
                "discrete Laplace noise is drawn with integer arithmetic from operating-system random bits (Canonne, "
                "Kamath & Steinke 2020), so no floating-point sampling is involved and the bound holds for this "
                "implementation, given uniformly random bits from the operating system.")
FLOAT_CLAUSE = ("The bound is proven for exact real-valued Laplace noise; the noise is sampled in 64-bit floating "
                "point (difference of two exponentials of 53-bit uniforms), whose outputs lie on a finite grid with "
                "tails cut at about 37 noise scales, and this sampler is not hardened against Mironov's (2012) "
                "least-significant-bit attack. Where an element's clip width exceeds those 37 noise scales (epsilon "
                "per element above about 37 over min(alpha, 1)), some outputs of one input are impossible for "
                "another, and the implementation is epsilon-DP for no finite epsilon; elsewhere the pure epsilon "
                "claim holds only up to that floating-point gap.")
SEEDED = "no formal guarantee (reproducible noise, testing only)"


def distinguishing_bound(epsilon: float) -> float:
    """The most an ε-LDP output lets anyone tell which of two given inputs it came from (equal priors):
    success probability e^ε / (1 + e^ε)."""
    return 1.0 / (1.0 + math.exp(-epsilon)) if epsilon < 700 else 1.0


def statement(mech: LaplaceMechanism, *, space_description: str, flow: str | None = None) -> str:
    """The privacy claim in words, with this mechanism's numbers."""
    if not math.isfinite(mech.epsilon_image):
        return (f"No differential privacy: epsilon = inf, no noise is added to the {space_description}"
                f"{' (clipped only)' if mech.clip else ''}. Released images are reconstructions of the inputs.")
    e = mech.epsilon_image
    cal = mech.calibration
    fixed = ("the public clip box" if cal.public else "the calibration statistics (recorded by checksum)") \
        + (" and the flow's weights" if flow else "")
    per_element = ("per latent element" if flow else "per pixel value")
    parts = [
        f"Each released image is the output of a Laplace mechanism M that is epsilon-locally differentially private "
        f"with epsilon = {e:.6g} PER IMAGE (D = {mech.dims} elements; written per element it is "
        f"{mech.epsilon_element:.6g} {per_element} x D, which is a way to state the image budget, not a guarantee "
        f"for single pixels{': one pixel can move every latent element' if flow else ''}"
        + (f"; the mechanism also satisfies the tighter epsilon = {mech.epsilon_image_tight:.6g}"
           if mech.epsilon_image_tight < e * (1 - 1e-9) else "")
        + f") with respect to the "
        f"{space_description}: for ANY two inputs and any set S of outputs, P[M(v) in S] <= exp(epsilon) "
        "P[M(v') in S].",
        f"A patient with n released images is protected at n * epsilon = n * {e:.6g} (budgets add up).",
        "It holds for every input, not only training-like ones: each element is first clipped to "
        f"[c_k - w_k/2, c_k + w_k/2] with w_k = alpha * Delta_k (alpha = {mech.alpha:g}; Delta_k "
        + ("the width of the public range, computed from no image; " if cal.public else
           "from the calibration set's per-element min and max; ")
        + ("c_k the range's midpoint" if mech.center == "midrange" else "c_k = 0")
        + "), so two clipped inputs differ in element k by at most w_k, and the noise scale is "
        "max(Delta_k, w_k) * D / epsilon.",
    ]
    if flow:
        parts.append(f"The image-to-latent map of the flow ({flow}) is a fixed deterministic function, so the same "
                     "bound holds between any two input images.")
    parts.append("The second clip, " + ("the inverse flow, " if flow else "")
                 + "clamping to [-1, 1] and 8-bit rounding are post-processing and keep the guarantee.")
    if cal.public and not flow:                 # a public box computed from no image: nothing else to leak
        parts.append(f"The bound is conditional on a fixed mechanism: {fixed} is a public constant, computed from no "
                     "image. It does NOT cover labels released with the images.")
    else:
        parts.append(f"The bound is conditional on a fixed mechanism: {fixed} are treated as public constants. It "
                     "does NOT cover what " + ("the flow's weights reveal" if cal.public else "they reveal")
                     + " about the images they were computed from (if released images were among them, that leakage "
                     "is outside this bound), nor labels released with the images.")
    p = distinguishing_bound(e)
    if e > WEAK_EPSILON:
        parts.append(f"At this budget the bound is VACUOUS: it lets an observer tell which of two given images an "
                     f"output came from with probability up to e^eps / (1 + e^eps) = {p:.6f} (likelihood ratio "
                     f"exp({e:.6g})); no meaningful formal protection for a whole image; any obfuscation seen is "
                     "empirical.")
    else:
        parts.append(f"An observer tells which of two given images an output came from with probability at most "
                     f"e^eps / (1 + e^eps) = {p:.4f}.")
    parts.append(EXACT_CLAUSE if mech.sampler == "exact" else FLOAT_CLAUSE)
    return " ".join(parts)


REFERENCE_ONLY = ("epsilon_element", "epsilon_image_tight", "distinguishing_bound", "vacuous")


def withdrawn_privacy(privacy: dict[str, Any], *, reason: str, why: str, noise_note: str | None = None,
                      without: str = "without this flaw") -> dict[str, Any]:
    """The statement of an ε-LDP release whose guarantee does not hold: ``reason`` (short, after "none: ") and
    ``why`` (what breaks the bound) are stated; the ε numbers are kept for reference (what the mechanism would
    give ``without`` the flaw). ``noise_note`` replaces the noise description (a seeded release's noise)."""
    patient_max = privacy.get("epsilon_patient_max")
    reference = {"epsilon_patient_max": (f"none ({without} it would be {patient_max:g})"
                                         if isinstance(patient_max, (int, float)) else patient_max)}
    statement = str(privacy.get("statement", ""))
    if noise_note is not None:                   # the exact-noise sentence describes a path this release did not take
        statement = statement.replace(EXACT_CLAUSE, "").replace(FLOAT_CLAUSE, "").rstrip()
    # numbers that read as a bound of this release (the tight epsilon, the distinguishing probability) are kept with
    # the other reference numbers, under without_guarantee
    kept = {k: privacy[k] for k in REFERENCE_ONLY if k in privacy}
    privacy = {**{k: v for k, v in privacy.items() if k not in kept},
               "without_guarantee": {**(privacy.get("without_guarantee") or {}), **kept}}
    return {**privacy, **({} if patient_max is None else reference), "guarantee": f"none: {reason}",
            "delta": None,
            "unit": f"none: {reason} ({without}: one image; a patient with n released images, n * epsilon)",
            "epsilon_patient": f"none ({without} it would be n * epsilon_image for a patient with n images)",
            "not_protected": [f"everything: {why}", *[n for n in privacy.get("not_protected", [])
                                                       if not n.startswith("a patient's other released images")]],
            **({"noise_source": noise_note, "sampler": "float"} if noise_note is not None else {}),
            "why_no_guarantee": [why, *privacy.get("why_no_guarantee", [])],
            "statement": f"NO FORMAL GUARANTEE ({reason}): {why}. The epsilon and the bound below are what the "
                         f"mechanism would give {without}; neither holds for this release. " + statement}


def seeded_privacy(privacy: dict[str, Any]) -> dict[str, Any]:
    """The statement of an ε-LDP release whose noise came from a seed: the ε numbers are kept for reference
    (what the mechanism would give with secret noise), the guarantee is withdrawn. Seeded noise is drawn by the
    floating-point sampler (Mersenne Twister), whatever sampler secret noise would use."""
    secret = ("secret", "os.urandom", "recorded nowhere", "no seed exists")
    out = withdrawn_privacy(
        {**privacy, "assumptions": [a for a in privacy.get("assumptions", []) if not any(w in a for w in secret)]},
        reason=SEEDED, why="the noise is a deterministic function of the seed and the record; whoever knows or "
                           "guesses the seed regenerates it and subtracts it, recovering the clipped input",
        noise_note="seeded per-record torch generators (Mersenne Twister, 64-bit floating-point Laplace) from a "
                   "seed the user chose (not recorded in the release; whoever knows it regenerates the noise): "
                   "TESTING ONLY", without="with secret noise")
    out["assumptions"] = ["none for privacy: the noise is reproducible from the seed, so it is not secret",
                          *out["assumptions"]]
    return out
