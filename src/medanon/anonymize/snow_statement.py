"""What a Snow or VS-Snow release states: the fill value it uses and its exact privacy statement.

:func:`snow_privacy` and :func:`vs_snow_privacy` write the statement into every release manifest
(the mechanisms: :mod:`medanon.anonymize.snow`; the reasoning: docs/snow.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from medanon.anonymize.snow_mechanism import count_for
from medanon.errors import ConfigError

FILLS = ("grey", "value", "dataset")          # default first: the data-independent mid-grey


STRUCTURE = ("structure survives: anatomy and anything spatially smooth (a fundus photograph's vessels, optic disc and "
             "lesions; a chest X-ray's ribs, heart outline, devices and burned-in markers)")
MEASURED = ("not when the release is made: `medanon evaluate` measures the attacks (the paper's is a sex attacker's "
            "accuracy) and the utility of the data's task (the paper's is a DR classifier's F1 on fundus photographs; "
            "for chest X-rays, pneumonia) on this release (docs/snow.md)")


def parse_fill(fill: str | Sequence[float], channels: int) -> tuple[str, torch.Tensor | None]:
    """``grey`` | ``value:R,G,B`` (0–255; one value for grey images) | ``dataset`` | a sequence of C values
    in [-1, 1] -> (kind, fill value (C,) float64 in [-1, 1], or None for ``dataset``: computed later)."""
    if not isinstance(fill, str):
        try:
            vals = torch.as_tensor(list(fill), dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise ConfigError(f"fill={fill!r} is not grey, value:R,G,B, dataset or a sequence of C numbers in [-1, 1]",
                              fix="e.g. fill='grey' (default, data-independent) or fill=[0.0, 0.0, 0.0]") from None
        kind = "value"
    elif fill == "grey":
        return "grey", torch.zeros(channels, dtype=torch.float64)
    elif fill == "dataset":
        return "dataset", None
    elif fill.startswith("value:"):
        try:
            vals = torch.tensor([float(v) for v in fill[6:].split(",")], dtype=torch.float64) / 127.5 - 1
        except ValueError:
            raise ConfigError(f"fill={fill!r}: the values must be numbers",
                              fix="e.g. fill='value:128,64,32' (0-255, one per channel)") from None
        kind = "value"
    else:
        raise ConfigError(f"fill={fill!r} is not grey, value:R,G,B or dataset",
                          fix="grey (default, data-independent), value:R,G,B (a mean from public data, 0-255) "
                              "or dataset (the paper's; no formal guarantee)")
    if vals.numel() == 1 and channels > 1:
        vals = vals.expand(channels).clone()
    if vals.numel() != channels:
        raise ConfigError(f"fill={fill!r} gives {vals.numel()} value(s): the images have {channels} channel(s)",
                          fix="one value per channel (or one for all), e.g. fill='value:128,64,32'")
    if not bool(((vals >= -1) & (vals <= 1)).all()):
        raise ConfigError(f"fill={fill!r}: a value is outside 0-255 (value:R,G,B) or [-1, 1] (numbers)",
                          fix="one value per channel in 0-255, e.g. fill='value:128,64,32'")
    return kind, vals


FILL_TEXT = {
    "grey": "mid-grey (0 in [-1, 1]; 127.5 of 255), independent of the data",
    "value": "a constant supplied by the user (assumed not computed from the private images, e.g. the mean of a "
             "public dataset)",
    "dataset": "per-channel mean over all pixels of all images of the released dataset (data-derived)",
}
SEEDED = "no formal guarantee (reproducible randomness, testing only)"


def snow_privacy(p: float, h: int, w: int, *, fill: str = "grey", seeded: bool = False) -> dict[str, Any]:
    """The exact privacy statement of a Snow release (written into its manifest).

    ``fill``: ``grey`` | ``value`` | ``dataset``; ``seeded``: the hidden sets come from a seed the user chose
    (reproducible). Either ``dataset`` or ``seeded`` voids the formal guarantee, and the statement says so.
    """
    k = count_for(p, h * w)
    q = k / (h * w)
    delta = 1 - q
    if fill not in FILLS:
        raise ConfigError(f"fill {fill!r} is not one of {FILLS}")
    void = []
    if fill == "dataset":
        void.append("the fill value is the mean of the very images being released: replacing one source image "
                    "changes the fill of every other released image, so two neighbouring datasets give disjoint "
                    "output supports (delta = 1 for every pixel)")
    if seeded:
        void.append("the hidden sets come from a seed chosen by the user; whoever knows or guesses it (and the "
                    "order of the source images) knows which pixels are released unchanged, so the selection is "
                    "not random to an attacker")
    if void:
        reason = "; ".join([r for r, on in (("data-derived fill", fill == "dataset"),
                                            ("reproducible randomness, testing only", seeded)) if on])
        return {
            "mechanism": (f"Snow (John et al., ETRA 2020) as in VS-Snow Eq. 1: per image exactly k = round(p*H*W) "
                          f"= {k} of the {h * w} pixel positions are set in every channel to the fill value"),
            "fill": FILL_TEXT[fill],
            "guarantee": f"none: no formal guarantee ({reason})",
            "epsilon": None, "delta": None, "unit": None,
            "why_no_guarantee": [*void, "the (0, delta) per-pixel argument of VS-Snow §1.1 needs a "
                                 "fill that depends on no private data and a selection that is secret and random"],
            "not_protected": [
                "images and patients: each released image stands for exactly one source image and resembles it",
                STRUCTURE + " can be read from or interpolated between the unchanged pixels",
                "labels released with the images are released as they are",
            ],
            "attack_measured": MEASURED,
        }
    return {
        "mechanism": (f"Snow (John et al., ETRA 2020), the selection of VS-Snow Eq. 1 "
                      f"(whose fill is the dataset mean; this one's is below): per image exactly k = round(p*H*W) "
                      f"= {k} of the {h * w} pixel positions, drawn pseudo-uniformly (see assumptions), are set "
                      f"in every channel to the fill value"),
        "fill": FILL_TEXT[fill],
        "guarantee": (f"no image or patient is protected. The paper's bound (VS-Snow §1.1) covers ONE PIXEL POSITION "
                      f"of one image only: (0, delta)-differential privacy with delta = 1 - k/(H*W) = {delta:.4f}; for "
                      f"two images that differ only at one pixel position, Pr[Snow(x) in S] <= Pr[Snow(x') in S] + "
                      f"delta for every set S of outputs, because that position is released as the fill value, "
                      f"whatever its input, with probability k/(H*W), and unchanged with probability delta"),
        "epsilon": 0.0, "delta": round(delta, 6),
        "unit": ("one pixel position (all channels) of one image as read, i.e. after cropping and resizing, which are "
                 "functions of the source file: one pixel of the source file can change several pixels as read, and "
                 "under the field-of-view crop (the fundus default, placed by the image's own bright pixels) every "
                 "one"),
        "assumptions": [
            "the hidden sets are drawn from a secret seed (operating-system randomness), recorded nowhere; each "
            "image's set is a permutation drawn by numpy's PCG64 generator, seeded from that seed and the image's "
            "index: pseudo-random, not cryptographic, so the probability k/(H*W) that a position is hidden, and "
            "delta, hold up to that generator's bias",
            "the fill value depends on no private image" + (" (the user vouches for the supplied constant)"
                                                            if fill == "value" else ""),
        ],
        "not_protected": [
            "images and patients: any two different images differ in many pixels; for a whole image the same "
            "argument gives delta = 1, i.e. no guarantee at all",
            f"delta = {delta:.2f} is not small: each pixel is released exactly as it was with probability "
            f"{delta:.2f}; by the usual standard (delta much smaller than 1 / number of records) this is no "
            "differential privacy",
            STRUCTURE + " can be read from or interpolated between the unchanged pixels (a median filter undoes "
            "much of it); each released image stands for exactly one source image and resembles it",
            *([] if fill == "grey" else [
                "the fill value is released (manifest and pixels): whatever it reveals about the data it was "
                "computed from is not covered"]),
            "repeated releases: with one seed the hidden sets are nested across p (several p reveal what the "
            "smallest reveals); with different seeds the union of unchanged pixels reveals more than either",
            "labels released with the images are released as they are",
        ],
        "attack_measured": MEASURED,
    }


def vs_snow_privacy(p: float, vessels: dict[str, Any], *, seeded: bool = False) -> dict[str, Any]:
    """The exact privacy statement of a VS-Snow release: no formal guarantee is claimed."""
    return {
        "mechanism": ("VS-Snow (VS-Snow Eq. 2): per image exactly round(p*|V|) of the vessel pixels V, uniformly "
                      "at random, take in every channel the mean of their vessel 8-neighbours in the input image "
                      "(all in-image 8-neighbours when none is a vessel pixel); nothing else changes"),
        "vessel_masks": vessels,
        "guarantee": "none: no formal differential-privacy guarantee is claimed",
        "randomness": ("a seed chosen by the user (recorded in the manifest; reproducible, testing only)" if seeded
                       else "a secret seed from the operating system, recorded nowhere"),
        "epsilon": None, "delta": None, "unit": None,
        "why_no_guarantee": [
            "pixels outside the vessel mask are released unchanged (for them delta = 1)",
            f"a vessel pixel is released unchanged with probability about {1 - p:.2f}, and when replaced its value "
            "still enters the released means of up to 8 neighbouring vessel pixels: nothing bounds what one "
            "pixel changes",
            "the vessel mask is computed from the image itself (or supplied with it), so which pixels are eligible "
            "depends on the private data",
        ],
        "not_protected": [
            "the vessel tree's course and calibre (a replaced pixel takes a mean along the vessel), the optic disc, "
            "fovea, lesions and pigmentation: identity-bearing structure survives; each released image stands for "
            "exactly one source image and resembles it",
            "repeated releases: with one seed the replaced sets are nested across p; with different seeds the union "
            "of unchanged vessel pixels reveals more than either",
            "with a chosen seed (testing only), the seed and the private order of the source images regenerate every "
            "replaced set",
            "labels released with the images are released as they are",
        ],
        "attack_measured": MEASURED,
    }
