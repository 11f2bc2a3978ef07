"""Issue 14, "Show": README's "What each release guarantees" table is what the code's statements generate."""

from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]


def _module():
    return load_script("docs/guarantees_table.py")


def test_readme_table_is_the_generated_one():
    mod = _module()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert mod.readme_table(readme) == mod.table(), \
        "README.md's guarantees table is stale: run `python docs/guarantees_table.py --write`"


def test_table_rows_say_what_defaults_guarantee_and_what_voids_it():
    rows = {line.split(" | ")[0].lstrip("| "): line for line in _module().table().splitlines()[2:]}
    assert len(rows) == 15
    snow = next(v for k, v in rows.items() if k.startswith("Snow (`--p 0.3`"))
    assert "none for images or patients; for one pixel position, the paper's (0, δ)-DP bound" in snow
    assert "no formal guarantee (data-derived fill)" in rows["Snow with `--fill dataset` (the paper's fill)"]
    assert "no formal guarantee (reproducible noise, testing only)" in rows["DP-GLOW or image LDP with `--seed`"]
    dp = next(v for k, v in rows.items() if k.startswith("DP-GLOW (`--epsilon 1`"))
    assert "per image (δ = 0): ε = 1" in dp and "n·ε for a patient with n images" in dp and "vacuous" not in dp
    assert "vacuous" in next(v for k, v in rows.items() if "per-element" in k)
    assert "PCA basis depends on every image" in next(v for k, v in rows.items() if "basis fitted on the" in k)
    assert "no formal guarantee" in rows["GMIA"]


def test_a_row_is_what_a_default_release_states(tmp_path):
    """The table is built from statements, not releases: a default k-Same-Pixel release of a fundus phantom (grade
    released beside the images) must state exactly what its row says."""
    import warnings

    import medanon

    row = dict(_module().statements())["k-Same-Pixel (`--k 5`, fundus: grade released, the default)"]
    ds = medanon.open_dataset(medanon.make_phantom(tmp_path / "ph", patients=10, per_patient=2, size=16), size=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = medanon.anonymize.kpixel(ds, k=5)
    for key in ("guarantee", "unit", "k", "assumptions", "not_protected", "not_guaranteed"):
        assert rel.privacy[key] == row[key], key
