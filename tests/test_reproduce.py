"""benchmarks/reproduce/ksalsa.py: its table assembly on a fixture report.json (the pipeline itself is the
script's own run, docs/reproduction.md). The paper's cells and ours (value, interval, N) must both appear, and
each claim's verdict must follow the intervals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    """A reproduction script as a module, loaded from its file under its own name: ``benchmarks/gmia.py`` (another
    test's ``gmia``) may already be in ``sys.modules``."""
    import importlib.util

    folder = ROOT / "benchmarks" / "reproduce"
    sys.path.insert(0, str(folder))                       # for the scripts' own ``import common``
    try:
        spec = importlib.util.spec_from_file_location(f"reproduce_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def ksalsa():
    return _script("ksalsa")


def _pb(value, half, base=0.8):
    return {"release": {"value": value, "ci": [value - half, value + half]},
            "real_same_n": {"value": base, "ci": [base - 0.05, base + 0.05]},
            "difference": {"value": value - base, "ci": [value - base - half, value - base + half]}}


def _release(name, fid, kappa, mia, records=20, valid=True):
    n_train = {"k2": 40, "k5": 16, "k1": 8}.get(name.split("-")[1][:2] if "-" in name else "", 120)
    return {"name": name,
            "fidelity": {"fid": {"value": fid, "ci": [fid - 5, fid + 5], "n": 30}},
            "utility": {"grade": {"n_train": n_train, "n_test": 60,
                                  "paired_bootstrap": {"kappa": _pb(kappa, 0.05), "accuracy": _pb(kappa / 2, 0.05)}}},
            "attacks": {"membership": {"top_k_accuracy": mia, "ci": [mia - 0.05, mia + 0.05], "chance": 0.1,
                                       "records_evaluated": records, "slots": records * 4}},
            "validity": {"membership": {"valid": valid, "reason": None if valid else "misses an exact copy"}}}


def _report():
    fids = {"kpixel": 150, "kpca": 160, "kcentroid": 140, "ksalsa": 120}
    kappas = {"kpixel": 0.1, "kpca": 0.2, "kcentroid": 0.5, "ksalsa": 0.52}
    mias = {"kpixel": 0.8, "kpca": 0.6, "kcentroid": 0.4, "ksalsa": 0.2}
    rels = [_release(f"{m}-k{k}", fids[m], kappas[m], mias[m], records=3 if k == 10 else 20)
            for m in fids for k in (2, 5, 10)]
    rels[-1]["fidelity"]["fid"] = {"value": 170, "ci": [165, 175], "n": 30}   # ksalsa-k10 above k-Centroid
    rels += [_release("inverted", 60, 0.7, 0.5), _release("kcentroid-k5-v5", 140, 0.6, 0.4),
             _release("ksalsa-k5-v5", 120, 0.7, 0.2)]
    kappa = {r["name"]: r["utility"]["grade"]["paired_bootstrap"]["kappa"]["release"]["value"] for r in rels}
    comps = [{"a": a, "b": b, "task": "grade", "n": 60, "n_patients": 15,
              "metrics": {"kappa": {"difference": {"value": kappa[a] - kappa[b],
                                                   "ci": [kappa[a] - kappa[b] - 0.03, kappa[a] - kappa[b] + 0.03]}}}}
             for a, b in (("ksalsa-k5", "kcentroid-k5"), ("ksalsa-k5-v5", "ksalsa-k5"), ("kpixel-k5", "ksalsa-k5"))]
    return {"releases": rels, "comparisons": comps, "controls": {
        "fidelity_by_n": {"30": {"fid": {"value": 50.0, "ci": [45.0, 55.0], "n": 30}}},
        "utility_full_real": {"grade": {"n_train": 120, "n_test": 60,
                                        "bootstrap": {"kappa": {"release": {"value": 0.9, "ci": [0.85, 0.95]}}}}}}}


def test_tables_hold_papers_cells_and_ours_with_n_and_interval(ksalsa):
    md, result = ksalsa.assemble(_report(), scale="fixture", note="a fixture", command="python x", timing={})
    t1 = result["tables"]["table1_fid"]
    assert "11.84" in t1 and "12.7" in t1 and "128.23" in t1                # paper, Table 1 APTOS
    assert "120.0 [115.0, 125.0] N 30" in t1                               # ours: value [interval] N
    assert "50.0 [45.0, 55.0] N 30" in t1                                  # the real-image control at that N
    t2 = result["tables"]["table2_utility"]
    assert "0.769" in t2 and "0.903" in t2
    assert "0.520 [0.470, 0.570] N 16/60" in t2                            # training records / test images
    t3 = result["tables"]["table3_membership"]
    assert "77.55" in t3 and "20.0 [15.0, 25.0] N 20 rec/80 slots" in t3
    paired = result["tables"]["utility_paired"]
    assert "0.829" in paired and "-0.280 [-0.330, -0.230]" in paired       # ksalsa-k5 − real, paired
    assert "scale `fixture`" in md and "## Claims" in md


def test_claims_follow_the_intervals(ksalsa):
    claims = {c.claim: c for c in ksalsa.claims(_report())}
    assert claims["T1 k=5: k-SALSA's FID is below k-Centroid's"].verdict == "holds"
    assert claims["T1 k=10: k-SALSA's FID is below k-Centroid's"].verdict == "does not hold"
    assert claims["T2 k=5: k-SALSA's κ is above k-Centroid's"].verdict == "cannot tell at this N"   # 0.02 ± 0.03
    assert "(paired) 0.020 [-0.010, 0.050] N 60 img/15 pat" in claims["T2 k=5: k-SALSA's κ is above k-Centroid's"].ours
    both = claims["T2 k=5: k-SALSA's κ is above k-Same-Pixel's and k-Same-PCA's"]     # the pair stored as Pixel − SALSA
    assert both.verdict == "cannot tell at this N" and "− Pixel 0.420 [0.390, 0.450]" in both.ours   # PCA not compared
    assert claims["T2 k=10: k-SALSA's κ is above k-Centroid's"].verdict == "cannot tell at this N"
    assert claims["T2 k=5: real images of the same N beat k-SALSA (κ)"].verdict == "holds"
    assert claims["T3 k=5: membership top-K falls Pixel > PCA > Centroid > SALSA (%)"].verdict == "holds"
    few = claims["T3 k=10: membership top-K falls Pixel > PCA > Centroid > SALSA (%)"]
    assert few.verdict == "cannot tell at this N" and "3 records" in few.reason
    assert claims["S6 k=5: 5 latent views per cluster raise k-SALSA's κ"].verdict == "holds"
    for c in claims.values():                                               # every claim carries the paper's number
        assert c.paper and c.ours and c.verdict in ("holds", "does not hold", "cannot tell at this N")


def test_invalid_attack_cannot_decide(ksalsa):
    rep = _report()
    for r in rep["releases"]:
        if r["name"] == "kpca-k5":
            r["validity"]["membership"] = {"valid": False, "reason": "misses an exact copy"}
    c = {c.claim: c for c in ksalsa.claims(rep)}["T3 k=5: membership top-K falls Pixel > PCA > Centroid > SALSA (%)"]
    assert c.verdict == "cannot tell at this N" and "k-Same-PCA" in c.reason


def test_dpglow_table_has_papers_cells_and_ours():
    dpglow = _script("dpglow")
    rows = [{"epsilon": e, "auroc_ldp_image": a, "auroc_ldp_image_ci95": [a - 0.05, a + 0.05],
             "auroc_dpglow": d, "auroc_dpglow_ci95": [d - 0.05, d + 0.05]}
            for e, a, d in (("inf (no clip)", 0.8, 0.8), ("1e3", 0.6, 0.75), ("1e2", 0.55, 0.7), ("1e1", 0.5, 0.55))]
    md, result = dpglow.assemble({"rows": rows, "images": 200}, command="python x", timing={})
    table = result["tables"]["table3_auroc"]
    assert "0.813" in table and "0.539" in table                            # the paper's Table 3
    assert "0.750 [0.700, 0.800] N 200" in table                           # ours
    verdicts = {c["claim"]: c["verdict"] for c in result["claims"]}
    assert verdicts["T3: DP-GLOW's AUROC falls from ∞ to 10¹·H·W"] == "holds"
    assert "scale `flows`" in md and "## Claims" in md
    md, _ = dpglow.assemble({"rows": rows, "images": 2000}, command="python x", timing={}, scale="paper")
    assert "scale `paper`" in md and "2,000 patients" in md and "over patients" in md


def test_a_k_that_was_not_run_has_no_claims_and_shows_as_not_run(ksalsa):
    rep = _report()
    rep["releases"] = [r for r in rep["releases"] if not r["name"].endswith("-k10")]
    claims = [c.claim for c in ksalsa.claims(rep)]
    assert claims and not any("k=10" in c for c in claims) and any("k=5" in c for c in claims)
    _, result = ksalsa.assemble(rep, scale="fixture", note="a fixture", command="python x", timing={})
    assert "not run" in result["tables"]["table1_fid"]


def test_gmia_orders_are_judged_on_paired_comparisons():
    gmia = _script("gmia")
    comps = [{"a": "gmia-id", "b": "gmia", "task": "pneumonia", "n": 300, "n_patients": 150,
              "metrics": {"auroc": {"difference": {"value": -0.12, "ci": [-0.2, -0.04]}}}}]
    rep = {"releases": [{"name": n} for n in ("gmia", "gmia-id", "gmia-ut", "recon")], "comparisons": comps}
    claims = {c["claim"]: c for c in gmia.assemble(rep, scale="fixture", note="x", command="python x",
                                                   timing={})[1]["claims"]}
    lut = claims["T2: adding L_ut to L_id raises AUROC"]                   # stored as gmia-id − gmia: sign flipped
    assert lut["verdict"] == "holds" and "gmia − gmia-id (paired) 0.120 [0.040, 0.200]" in lut["ours"]
    assert claims["T2: L_ut on the reconstruction raises AUROC"]["verdict"] == "cannot tell at this N"


class _Release:
    def __init__(self, calls):
        self.calls = calls

    def save(self, dest, *, mapping, progress):
        self.calls.append(dest.name)
        dest.mkdir()
        (dest / "manifest.json").write_text("{}")
        mapping.write_text("{}")


def test_a_release_folder_is_reused_only_for_the_command_that_made_it(tmp_path, ksalsa):
    """A re-run with other settings must not report the old release under the new ones."""
    from medanon.errors import DataError

    common = ksalsa.C
    calls, log = [], []
    dest = tmp_path / "ksalsa-k5"
    make = lambda: _Release(calls)                                          # noqa: E731
    common.make_release(dest, make, log, "anonymize ksalsa --k 5 --map-init centroid")
    assert calls == ["ksalsa-k5"]
    assert (tmp_path / "ksalsa-k5.command").read_text().strip() == "medanon anonymize ksalsa --k 5 --map-init centroid"
    common.make_release(dest, make, log, "anonymize ksalsa --k 5 --map-init centroid")      # resumed: not remade
    assert calls == ["ksalsa-k5"]
    with pytest.raises(DataError, match="was made by `medanon anonymize ksalsa --k 5 --map-init centroid`"):
        common.make_release(dest, make, log, "anonymize ksalsa --k 5 --map-init synthetic")
    (tmp_path / "ksalsa-k5.command").unlink()                                # a folder that records nothing
    with pytest.raises(DataError, match="does not record the command"):
        common.make_release(dest, make, log, "anonymize ksalsa --k 5 --map-init centroid")
    assert calls == ["ksalsa-k5"]
    partial = tmp_path / "ksalsa-k2.partial"                                 # an interrupted release resumes only
    partial.mkdir()                                                          # under the command that began it
    (tmp_path / "ksalsa-k2.command").write_text("medanon anonymize ksalsa --k 2 --map-init centroid\n")
    with pytest.raises(DataError, match="was made by"):
        common.make_release(tmp_path / "ksalsa-k2", make, log, "anonymize ksalsa --k 2 --map-init synthetic")


def test_every_release_call_fits_the_api_and_its_recorded_command(ksalsa):
    """Each release's keyword arguments bind to its library function, and its recorded command uses flags the
    command has (the script passed GAN-Inverted a seed it does not take, and stopped there)."""
    import inspect

    import medanon.anonymize as anonymize
    from medanon.cli import cli

    for literal in (True, False):
        for name in ksalsa.release_names(literal=literal, ks=ksalsa.KS):
            method, kw, cmd = ksalsa.release_call(name, train=Path("T"), codec=object(), codec_path=Path("c.pt"),
                                                  seed=0, device="cpu", ksalsa_steps=3, batch=8)
            inspect.signature(getattr(anonymize, method)).bind(None, **kw)
            command = cli.commands["anonymize"].commands[method]
            flags = {o for p in command.params for o in p.opts}
            assert {w for w in cmd.split() if w.startswith("--")} <= flags, (name, cmd)
