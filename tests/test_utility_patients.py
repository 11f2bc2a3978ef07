"""Utility intervals that respect patients: weighted row metrics (= the duplicated sample), the patient cluster
bootstrap, the same-N baseline of a release with views, and release-vs-release comparisons (in a tiny
evaluation, resumed from the cache)."""

import math
from dataclasses import replace

import numpy as np
import pytest
from fixtures_eval_releases import k_clusters, write_k_same_pixel
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

import medanon
from medanon.errors import ConfigError
from medanon.evaluate import metrics as M
from medanon.evaluate import utility as U


def _same(a, b):
    assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12), (a, b)


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::sklearn.exceptions.UndefinedMetricWarning")
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_weighted_row_metrics_equal_the_duplicated_sample(data):
    """Row b with integer weights w[b] is the 1-D function (and sklearn) on the sample with item i repeated w[b, i]
    times; tied scores (AUROC ties count one half, AP's distinct thresholds), zero weights, one shared score row."""
    b, n = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 20))
    draw = lambda values: np.array(data.draw(st.lists(values, min_size=b * n, max_size=b * n))).reshape(b, n)  # noqa: E731
    t, p, w = draw(st.integers(0, 4)), draw(st.integers(0, 5)), draw(st.integers(0, 3))
    s = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    tb = (t > 1).astype(int)
    rows = {"acc": M.accuracy_rows(t, p, weights=w),
            "kappa": M.quadratic_kappa_rows(t, p, labels=range(5), weights=w),
            "f1m": M.f1_rows(t, p, average="macro", labels=[0, 2, 4], weights=w),
            "f1b": M.f1_rows(tb, p, average="binary", weights=w),
            "auc": M.roc_auc_rows(tb, s, weights=w), "ap": M.average_precision_rows(tb, s, weights=w),
            "conf": M.confusion_rows(t, p, [4, 0, 2], weights=w)}
    for i in range(b):
        d = np.repeat(np.arange(n), w[i])                                 # the explicitly duplicated sample
        ti, pi, tbi, si = t[i][d], p[i][d], tb[i][d], s[i][d]
        _same(rows["acc"][i], M.accuracy(ti, pi))
        _same(rows["kappa"][i], M.quadratic_kappa(ti, pi, labels=range(5)))
        _same(rows["f1m"][i], M.f1(ti, pi, average="macro", labels=[0, 2, 4]))
        _same(rows["f1b"][i], M.f1(tbi, pi, average="binary"))
        _same(rows["auc"][i], M.roc_auc(tbi, si))
        _same(rows["ap"][i], M.average_precision(tbi, si))
        np.testing.assert_array_equal(rows["conf"][i], M.confusion(ti, pi, [4, 0, 2]))
        if len(d) and 0 < tbi.sum() < len(d):
            _same(rows["auc"][i], skm.roc_auc_score(tbi, si))
            _same(rows["ap"][i], skm.average_precision_score(tbi, si))
        if len(d) > 1 and len(set(ti)) > 1:    # one true class: sklearn's 0 for any prediction, undefined here
            _same(rows["kappa"][i], skm.cohen_kappa_score(ti, pi, weights="quadratic", labels=list(range(5))))
    # one score row shared by every weight row (how the bootstrap calls them) = that row repeated
    shared = M.roc_auc_rows(tb[:1], s[:1], weights=w), M.average_precision_rows(tb[:1], s[:1], weights=w)
    np.testing.assert_allclose(shared[0], M.roc_auc_rows(np.repeat(tb[:1], b, 0), np.repeat(s[:1], b, 0), weights=w),
                               atol=1e-12)
    np.testing.assert_allclose(shared[1], M.average_precision_rows(np.repeat(tb[:1], b, 0), np.repeat(s[:1], b, 0),
                                                                   weights=w), atol=1e-12)
    ones = np.ones((b, n), int)                                           # weights of one: the unweighted functions
    np.testing.assert_allclose(M.roc_auc_rows(tb, s, weights=ones), M.roc_auc_rows(tb, s), atol=1e-12)
    np.testing.assert_allclose(M.quadratic_kappa_rows(t, p, labels=range(5), weights=ones),
                               M.quadratic_kappa_rows(t, p, labels=range(5)), atol=1e-12)


def test_patient_bootstrap_is_scipys_bootstrap_of_patients_scored_on_the_duplicated_images():
    """The batched weights are scipy's percentile bootstrap of the patient indices, each resample scored on its
    images repeated as often as their patient was drawn, one resample at a time."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(0)
    task, n = U.KNOWN_TASKS["grade"], 36
    y = rng.integers(0, 5, n)
    groups = np.repeat([f"p{i}" for i in range(12)], 3)
    rel, base = ([rng.dirichlet(np.ones(5), n) for _ in range(2)] for _ in range(2))
    out = U.paired_intervals(task, y, rel, base, n_resamples=60, seed=3, groups=groups)
    codes = np.unique(groups, return_inverse=True)[1]

    def kappa_diff(pats):
        idx = np.concatenate([np.flatnonzero(codes == c) for c in pats])
        mean = lambda ps: np.nanmean([U.score(task, y[idx], p[idx])["kappa"] for p in ps])  # noqa: E731
        return mean(rel) - mean(base)

    ref = bootstrap((np.arange(12),), kappa_diff, vectorized=False, paired=True, n_resamples=60,
                    method="percentile", random_state=3).confidence_interval
    k = out["kappa"]
    assert k["difference"]["ci"] == pytest.approx([ref.low, ref.high], abs=1e-12)
    assert k["resampled"] == "patients" and k["n_patients"] == 12 and k["n"] == 36


def test_a_resample_of_one_true_grade_measures_no_kappa():
    """8 test patients, 5 of one grade: about 1 resample in 25 holds only that grade, where kappa is 0 for any
    prediction. Counted as 0 they pinned the real images' interval at 0.00; they are undefined and left out (and
    counted), as an AUROC of one class is."""
    task = U.KNOWN_TASKS["grade"]
    y = np.repeat([0, 0, 0, 0, 0, 2, 3, 4], 4)
    groups = np.repeat(np.arange(8), 4)
    good = [np.eye(5)[y] * 0.8 + 0.04 for _ in range(2)]              # confident and right
    out = U.paired_intervals(task, y, good, good, n_resamples=400, seed=0, groups=groups)["kappa"]
    assert out["undefined_resamples"] > 0 and out["release"]["ci"][0] > 0.5
    assert math.isnan(M.quadratic_kappa([1, 1, 1], [0, 1, 2])) and math.isnan(
        M.quadratic_kappa_rows([[1, 1, 1]], [[0, 1, 2]], labels=range(5))[0])


def test_patient_interval_is_wider_when_a_patients_images_agree():
    """Each patient's 4 images carry the same label and prediction: the data hold as much information as one image
    per patient, so resampling patients gives an interval about sqrt(4) = 2 times the images' (which treats the 4
    copies as independent evidence)."""
    rng = np.random.default_rng(1)
    task, g, per = U.KNOWN_TASKS["pneumonia"], 60, 4
    y_pat = rng.integers(0, 2, g)
    p_pat = np.clip(y_pat + rng.normal(0, 0.6, g), 0.01, 0.99)
    y, s = np.repeat(y_pat, per), np.repeat(p_pat, per)
    probs = [np.stack([1 - s, s], 1)]
    base = [np.full((len(y), 2), 0.5)]
    img = U.paired_intervals(task, y, probs, base, n_resamples=2000, seed=0)
    pat = U.paired_intervals(task, y, probs, base, n_resamples=2000, seed=0, groups=np.repeat(np.arange(g), per))
    assert img["auroc"]["resampled"] == "images" and "n_patients" not in img["auroc"]
    assert pat["auroc"]["resampled"] == "patients" and pat["auroc"]["n_patients"] == g
    for metric in ("auroc", "binary_acc"):
        w_img, w_pat = (np.diff(r[metric]["release"]["ci"])[0] for r in (img, pat))
        assert pat[metric]["release"]["value"] == img[metric]["release"]["value"]
        assert w_pat > w_img and 1.5 < w_pat / w_img < 2.6, (metric, w_img, w_pat)


def test_compare_releases_identical_and_perfect_vs_random():
    rng = np.random.default_rng(2)
    task = U.KNOWN_TASKS["pneumonia"]
    y = rng.integers(0, 2, 80)
    groups = np.repeat(np.arange(20), 4)
    perfect = [np.eye(2)[y] * 0.9 + 0.05]
    random = [rng.dirichlet(np.ones(2), 80) for _ in range(2)]             # two seeds
    same = U.compare_releases(task, y, random, random, groups=groups, n_resamples=200)
    for m in same.values():
        assert m["difference"]["value"] == 0.0 and m["difference"]["ci"] == [0.0, 0.0]
        assert m["resampled"] == "patients" and m["n_patients"] == 20 and m["n"] == 80
    diff = U.compare_releases(task, y, perfect, random, groups=groups, n_resamples=200)
    assert diff["auroc"]["a"]["value"] == 1.0 and diff["auroc"]["difference"]["ci"][0] > 0
    assert diff["auroc"]["a"]["ci"][0] <= 1.0 and diff["auroc"]["b"]["value"] < 0.8
    with pytest.raises(ConfigError, match="groups has shape"):
        U.compare_releases(task, y, perfect, random, groups=groups[:-1])
    with pytest.raises(ConfigError, match="probs_b"):
        U.compare_releases(task, y, perfect, [random[0][:-1]])


def test_comparison_rows_in_the_summary():
    from medanon.api.result import EvaluationResult

    c = {"a": "k2", "b": "k5", "task": "grade", "n": 40, "n_patients": 10,
         "metrics": {"kappa": {"a": {"value": 0.5, "ci": [0.3, 0.7]}, "b": {"value": 0.4, "ci": [0.2, 0.6]},
                               "difference": {"value": 0.1, "ci": [-0.05, 0.2]}}}}
    r = EvaluationResult(releases=[], controls={}, real={}, phantom=True, notes=[], seconds=0.0, report={}, html="",
                         comparisons=[c])
    (row,) = r.summary()
    assert (row["release"], row["attack"], row["metric"], row["value"], row["lo"], row["hi"], row["n"]) == \
        ("k2 - k5", "utility difference: grade", "kappa", 0.1, -0.05, 0.2, 40)


# ------------------------------------------------------------------------------------ a tiny evaluation

SIZE = 32


def _write_views(out, real, *, k: int, views: int):
    """A k-Same-Pixel release with ``views`` records per cluster (the average, and noisy copies of it), every view
    mapped to the cluster's sources: as k-SALSA's latent augmentation writes them."""
    import torch

    from medanon.evaluate.inputs import MAPPING_SUFFIX
    from medanon.release import ReleaseWriter

    rows = real.rows("train")
    g = torch.Generator().manual_seed(0)
    clusters = k_clusters(real.patients[rows], k)
    with ReleaseWriter(out, method="k-same-views", params={"k": k, "augmentation": {"views": views}},
                       privacy={"k": k, "statement": f"each record averages >= {k} people"},
                       labels=["grade", "sex"], seeds={"fixture": 0}, phantom=True,
                       mapping=out.with_name(out.name + MAPPING_SUFFIX)) as w:
        for n, c in enumerate(clusters):
            idx = rows[c]
            mean = real.images[idx].mean(0)
            for v in range(views):
                img = mean if v == 0 else (mean + 0.05 * torch.randn(mean.shape, generator=g)).clamp(-1, 1)
                w.add(f"c{n}/{v}", img, [real.records[i] for i in idx])
    return out, len(clusters)


def _config(compare=()):
    from medanon.evaluate.config import EvalConfig

    cfg = EvalConfig.tiny(size=SIZE)
    off = dict(membership=False, attribute="", linkability=False, singling_out=False, inference=False,
               nearest=False, independent_attacker=False, siamese=False, screening=False)
    return replace(cfg, fidelity=replace(cfg.fidelity, samples=8, in_domain=False),
                   utility=replace(cfg.utility, tasks=("grade",), seeds=(0, 1), full_real=False, compare=compare),
                   attacks=replace(cfg.attacks, **off))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from medanon.config import PhantomConfig
    from medanon.evaluate.harness import evaluate
    from medanon.evaluate.inputs import MAPPING_SUFFIX, load_real
    from medanon.phantoms.generate import generate

    root = tmp_path_factory.mktemp("utilpat")
    data = generate(PhantomConfig(patients=30, per_patient=4, size=SIZE, workers=1), root / "fundus", progress=False)
    real = load_real(data, size=SIZE)
    views, clusters = _write_views(root / "views", real, k=3, views=2)
    nomap, _ = _write_views(root / "views-nomap", real, k=3, views=2)
    (root / f"views-nomap{MAPPING_SUFFIX}").unlink()
    k2 = write_k_same_pixel(root / "k2", real, k=2)
    rels = [views, nomap, k2]
    rep = evaluate(data, rels, root / "report", config=_config(compare=(("k2", "views"),)),
                   cache_dir=root / "cache", progress=False)
    return {"root": root, "data": data, "real": real, "releases": rels, "clusters": clusters, "report": rep}


def test_views_release_is_compared_with_as_many_real_images_as_distinct_source_sets(world):
    by = {r["name"]: r for r in world["report"]["releases"]}
    u, nm = by["views"]["utility"]["grade"], by["views-nomap"]["utility"]["grade"]
    assert u["n_train"] == 2 * world["clusters"] == by["views"]["records"]
    assert u["n_same_n_real"] == world["clusters"] and "distinct source sets" in u["same_n_counts"]
    assert nm["n_same_n_real"] == nm["n_train"] == 2 * world["clusters"] and "no private mapping" in nm["same_n_counts"]
    k2 = by["k2"]["utility"]["grade"]
    assert k2["n_same_n_real"] == k2["n_train"] == by["k2"]["records"]    # one record per source set
    pb = u["paired_bootstrap"]["kappa"]
    test_patients = len(set(world["real"].patients[world["real"].rows("test")].tolist()))
    assert {"release", "real_same_n", "difference", "ratio"} <= set(pb) and "baseline" not in pb  # not chance
    assert pb["resampled"] == "patients" and pb["n_patients"] == test_patients == u["n_test_patients"]


def test_comparison_in_the_report_and_resumed_from_the_cache(world, monkeypatch):
    import json

    from medanon.evaluate import harness

    rep = world["report"]
    (c,) = rep["comparisons"]
    assert (c["a"], c["b"], c["task"], c["resampled"]) == ("k2", "views", "grade", "patients")
    by = {r["name"]: r for r in rep["releases"]}
    kappa = c["metrics"]["kappa"]
    assert kappa["a"]["value"] == pytest.approx(by["k2"]["utility"]["grade"]["release"]["kappa"]["mean"])
    assert kappa["b"]["value"] == pytest.approx(by["views"]["utility"]["grade"]["release"]["kappa"]["mean"])
    assert kappa["difference"]["value"] == pytest.approx(kappa["a"]["value"] - kappa["b"]["value"])
    lo, hi = kappa["difference"]["ci"]
    assert lo <= kappa["difference"]["value"] <= hi and c["n_patients"] == kappa["n_patients"]
    saved = json.loads((world["root"] / "report" / "report.json").read_text())
    assert saved["comparisons"][0]["metrics"]["kappa"]["difference"] == kappa["difference"]
    assert "utility-probs" not in json.dumps(saved) and len(json.dumps(saved["comparisons"])) < 20_000

    def no_work(*a, **k):                                                 # every release must come from the cache
        raise AssertionError("a release was evaluated again")

    monkeypatch.setattr(harness, "evaluate_release", no_work)
    again = harness.evaluate(world["data"], world["releases"], world["root"] / "again",
                             config=_config(compare=(("views", "k2"), ("views-nomap", "views"))),
                             cache_dir=world["root"] / "cache", progress=False)
    flip = {(x["a"], x["b"]): x["metrics"]["kappa"]["difference"] for x in again["comparisons"]}
    assert flip[("views", "k2")]["value"] == pytest.approx(-kappa["difference"]["value"])
    assert flip[("views", "k2")]["ci"] == pytest.approx([-hi, -lo])        # the same resamples, mirrored
    with pytest.raises(ConfigError, match="not evaluated"):
        harness.evaluate(world["data"], world["releases"][:1], world["root"] / "bad",
                         config=_config(compare=(("views", "nope"),)), cache_dir=world["root"] / "cache",
                         progress=False)
    res = medanon.evaluate(real=world["data"], releases=world["releases"], config=_config(), compare=[("k2", "views")],
                           out=world["root"] / "api", cache_dir=world["root"] / "cache", progress=False)
    assert res.comparisons[0]["metrics"]["kappa"]["difference"] == kappa["difference"]
    rows = [r for r in res.summary() if r["attack"] == "utility difference: grade" and r["metric"] == "kappa"]
    assert [(r["release"], r["value"], [r["lo"], r["hi"]]) for r in rows] == [("k2 - views", kappa["difference"][
        "value"], kappa["difference"]["ci"])]
    with pytest.raises(ConfigError, match="compare="):
        medanon.evaluate(real=world["data"], releases=world["releases"], config=_config(), compare=[("k2",)])


def test_the_full_real_reference_reports_its_own_interval_only(monkeypatch):
    """Paired with itself, the reference classifier's difference would be 0 and its ratio 1, which say nothing."""
    from types import SimpleNamespace

    import numpy as np

    from medanon.evaluate import utility_run

    full = {"kappa": {"release": {"value": 0.5, "ci": [0.4, 0.6]}, "real_same_n": {"value": 0.5, "ci": [0.4, 0.6]},
                      "difference": {"value": 0.0, "ci": [0.0, 0.0]}, "ratio": {"value": 1.0, "ci": [1.0, 1.0]}},
            "resamples": 20}
    task = SimpleNamespace(label="grade", targets=lambda y: (np.ones(len(y), bool), y))
    ctx = SimpleNamespace(test_set=lambda t: (np.arange(4), np.array([0, 1, 0, 1])), src=np.arange(4),
                          real=SimpleNamespace(label=lambda name: np.zeros(8)), real_inputs=np.zeros((8, 2)),
                          learner=SimpleNamespace(proba=lambda model, x: np.full((len(x), 2), 0.5)),
                          full_real_model=lambda t: None, cfg=SimpleNamespace(
                              utility=SimpleNamespace(bootstrap=20), attacks=SimpleNamespace(confidence=0.95), seed=0))
    monkeypatch.setattr(utility_run.util, "paired_intervals", lambda *a, **k: full)
    monkeypatch.setattr(utility_run.util, "score", lambda *a, **k: {"kappa": 0.5})
    monkeypatch.setattr(utility_run, "_test_patients", lambda ctx, rows: None)
    got = utility_run.full_real_utility(ctx, [task])["grade"]["bootstrap"]
    assert got == {"kappa": {"release": {"value": 0.5, "ci": [0.4, 0.6]}}, "resamples": 20}


def test_a_named_task_takes_its_labels_classes_and_a_label_without_classes_is_refused():
    """``utility.tasks=[sex]`` (or a CheXpert finding) made a task of 0 classes: no label was ever usable, and every
    release read "nothing to learn"."""
    from medanon.config import validate
    from medanon.evaluate.config import EvalConfig, UtilityConfig

    tasks = U.choose_tasks(("sex", "cardiomegaly", "view", "grade"), (), ())
    assert [(t.num_classes, t.kind) for t in tasks] == [(2, "binary"), (2, "binary"), (5, "multiclass"),
                                                        (5, "grade")]
    ok, y = tasks[1].targets(np.array([1.0, 0.0, -1.0, np.nan]))
    assert ok.tolist() == [True, True, False, False] and y.tolist() == [1, 0]
    assert U.kind_of("cardiomegaly") == "binary" and U.kind_of("pneumonia") == "binary"
    with pytest.raises(ConfigError, match=r"utility\.tasks names 'age', a continuous label"):
        validate(EvalConfig(utility=UtilityConfig(tasks=("age",))))
    with pytest.raises(ConfigError, match="not a label medanon reads"):
        U.choose_tasks(("diagnosis",), (), ())


def test_an_untestable_task_says_what_its_held_out_labels_are():
    """CheXpert's pneumonia is mostly uncertain (-1) or blank: the report said the held-out split had "no
    'pneumonia' labels" while a caution said it was tested on 1 image."""
    from types import SimpleNamespace

    from medanon.evaluate.utility_run import untestable

    labels = np.array([1.0, -1.0, -1.0, np.nan, np.nan, np.nan, 0.0, 1.0])
    ctx = SimpleNamespace(real=SimpleNamespace(label=lambda name: labels, dataset=SimpleNamespace(
        label_names=["pneumonia", "age", "edema", "sex"])), held=np.arange(1, 7))
    said = untestable(ctx, U.KNOWN_TASKS["pneumonia"])
    assert "1 of the held-out split's 6 images carry a usable 'pneumonia' label (3 blank, 2 uncertain (-1))" in said
    assert "utility.tasks" in said and said.endswith("the data hold edema, sex")
