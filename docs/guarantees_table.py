"""The README's "What each release guarantees" table, generated from the privacy statements the code writes.

    python docs/guarantees_table.py            # print the table (Markdown)
    python docs/guarantees_table.py --write    # replace the table in README.md between its markers

Every cell comes from the statement a method writes into a release manifest (``privacy``): the
guarantee is :func:`medanon.evaluate.privacy_text.headline` of it, the unit its ``unit``, the
assumptions and what is not protected its lists. ``tests/test_privacy_readme.py`` fails when the
README's table differs from what this prints, so the README cannot drift from the code.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

START, END = "<!-- guarantees-table:start -->", "<!-- guarantees-table:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"
D_XRAY64 = 64 * 64                              # a 64 px chest X-ray: D = C*H*W = 4096


def statements() -> list[tuple[str, dict[str, Any]]]:
    """(method and settings, the privacy statement the code writes for them)."""
    from medanon.anonymize.dpglow import SPACE as GLOW_SPACE
    from medanon.anonymize.gmia import GMIAConfig
    from medanon.anonymize.gmia_release import gmia_privacy
    from medanon.anonymize.ksame import KSameConfig, privacy_statement
    from medanon.anonymize.ldp import ClipCalibration, LaplaceMechanism, seeded_privacy
    from medanon.anonymize.ldp_image import SPACE as PIXEL_SPACE
    from medanon.anonymize.snow import snow_privacy, vs_snow_privacy

    def ldp(space: str, epsilon: float, per_element: bool = False, flow: str | None = None) -> dict[str, Any]:
        cal = ClipCalibration.public_box("glow-eps" if flow else "pixel", D_XRAY64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mech = LaplaceMechanism(cal, epsilon=epsilon, per_element=per_element, center="zero" if flow
                                    else "midrange")
        return mech.privacy(space_description=space, flow=flow)

    from medanon.anonymize.privacy import with_standard_fields

    glow = "GLOW, checkpoint sha256 ..."
    GRADE, FUNDUS = ("grade",), "fundus"
    return [(name, with_standard_fields(priv)) for name, priv in [
        # fundus, as released by default: the utility label (grade) beside each record; the latent methods through
        # a trained codec
        ("k-SALSA, k-Centroid (`--k 5`, fundus: the default codec, with a spatial map; grade released; the defaults)",
         privacy_statement(KSameConfig(method="ksalsa", k=5), None, labels=GRADE, uses_models=True, mean_map=True,
                           modality=FUNDUS)),
        ("k-Same-Pixel (`--k 5`, fundus: grade released, the default)",
         privacy_statement(KSameConfig(method="kpixel", k=5), None, labels=GRADE, modality=FUNDUS)),
        ("k-Same-PCA (`--k 5`, basis fitted on the released data: the default)",
         privacy_statement(KSameConfig(method="kpca", k=5), None, labels=GRADE, modality=FUNDUS)),
        ("k-Same-PCA (`--k 5 --basis-from DIR`)",
         privacy_statement(KSameConfig(method="kpca", k=5, pca_basis="separate"), None, labels=GRADE, modality=FUNDUS)),
        ("k-Same family with `--stratify grade --drop-remainder`",
         privacy_statement(KSameConfig(method="kcentroid", k=5, stratify="grade", drop_remainder=True), None,
                           labels=GRADE, uses_models=True, mean_map=True,
                           modality=FUNDUS)),
        ("GAN-Inverted", privacy_statement(KSameConfig(method="inverted", k=1), None)),
        ("DP-GLOW (`--epsilon 1`, 64 px X-ray, public clip box, secret noise: the defaults)",
         ldp(GLOW_SPACE, 1.0, flow=glow)),
        ("DP-GLOW (`--epsilon 100 --per-element`, the paper's 10²·H·W)", ldp(GLOW_SPACE, 100.0, True, flow=glow)),
        ("Image-domain LDP (`--epsilon 1`, 64 px X-ray)", ldp(PIXEL_SPACE, 1.0)),
        ("DP-GLOW or image LDP with `--seed`", seeded_privacy(ldp(PIXEL_SPACE, 1.0))),
        ("Snow (`--p 0.3`, 64 px, grey fill, no seed: the defaults)", snow_privacy(0.3, 64, 64)),
        ("Snow with `--fill dataset` (the paper's fill)", snow_privacy(0.3, 64, 64, fill="dataset")),
        ("Snow or VS-Snow with `--seed`", snow_privacy(0.3, 64, 64, seeded=True)),
        ("VS-Snow (`--p 0.3`)", vs_snow_privacy(0.3, {"method": "unet"})),
        ("GMIA", gmia_privacy(GMIAConfig(), {})),
    ]]


def _cell(value: Any) -> str:
    if value in (None, "", []):
        return "–"
    items = value if isinstance(value, (list, tuple)) else [value]
    return "<br>".join(str(v).replace("|", "\\|").replace("\n", " ") for v in items)


def table() -> str:
    from medanon.evaluate.privacy_text import headline

    rows = ["| method (settings) | unit protected | guarantee | assumptions | not protected |",
            "|---|---|---|---|---|"]
    for name, priv in statements():
        not_protected = (priv.get("not_protected") or []) + ([priv["not_guaranteed"]] if priv.get("not_guaranteed")
                                                             else [])
        if not not_protected and priv.get("why_no_guarantee"):
            not_protected = priv["why_no_guarantee"]
        unit = priv.get("unit") or ("none" if str(priv.get("guarantee", "")).startswith("none") else "–")
        rows.append(f"| {name} | {_cell(unit)} | {_cell(headline(priv))} | {_cell(priv.get('assumptions'))} | "
                    f"{_cell(not_protected)} |")
    return "\n".join(rows) + "\n"


def readme_table(text: str) -> str:
    """The table between the markers of a README text."""
    if START not in text or END not in text:
        raise ValueError(f"README.md has no {START} ... {END} block")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the table in README.md")
    args = ap.parse_args()
    t = table()
    if args.write:
        text = README.read_text(encoding="utf-8")
        readme_table(text)                      # both markers present
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1]
        README.write_text(f"{head}{START}\n{t}{END}{tail}", encoding="utf-8")
    else:
        print(t, end="")


if __name__ == "__main__":
    main()
