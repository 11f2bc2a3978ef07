"""The report's utility section: per task, the k-SALSA Table 2 layout (each metric's seed mean with its paired
patient bootstrap interval, then the seeds' sd) and the headline metric against the same-N real classifier."""

from __future__ import annotations

from medanon.evaluate.report_format import _cell, _ci, _col, _columns, _e, _kind, _num, _plural, _pm, _table, _unit_mark
from medanon.evaluate.utility import HEADLINE, METRIC_NAMES

UTILITY_METRICS = {"grade": ["accuracy", "kappa", "binary_accuracy", "binary_auroc", "f1_3class"],
                   "binary": ["auroc", "ap", "binary_acc"], "multiclass": ["acc", "f1_macro"]}


def _learner_text(rep: dict) -> str:
    """One sentence: what was trained on each release (the learner), and how it differs from the papers'."""
    d = rep.get("networks", {}).get("utility_learner") or {}
    if d.get("learner") == "probe":
        p, net = d["probe"], d.get("feature_network", {})
        return (f"The learner is a <b>linear probe</b>: L2-regularised multinomial logistic regression (C = {p['C']}) "
                f"on standardised features of the frozen {_e(net.get('display_name', p['network']))} "
                f"(layers {_e(', '.join(p['layers']))}, average-pooled, {p['input_size']} px input). The network is "
                f"never trained and the fit is deterministic, so the spread over seeds is the "
                f"Original (real, same N) row's subsample only. The papers train a CNN on the release "
                f"(k-SALSA: ResNet-50); "
                f"<code>--preset full</code> does (learner cnn).")
    c = d.get("classifier") or rep.get("config", {}).get("utility", {}).get("classifier", {})
    return (f"The learner is a CNN ({_e(str(c.get('arch', '?')))}, {c.get('steps', '?')} steps at "
            f"{c.get('image_size', '?')} px) trained from scratch on each release, one per seed.")


def utility_section(rep: dict) -> str:
    rels = rep["releases"]
    out = ["<h2>Utility: train on the release, test on held-out real images</h2>",
           f"<p class=note>{_learner_text(rep)}</p>"]
    if not rep["tasks"]:
        return "".join(out[:1]) + ("<p class=note>No utility task: no release publishes a label column that the "
                                   "held-out real images have, so nothing can be trained on the release and "
                                   "tested on them.</p>")
    methods, settings = _columns(rels)
    for task in rep["tasks"]:
        kind = _kind(task)
        metrics = UTILITY_METRICS[kind]
        rows = []
        for m in methods:
            for i, met in enumerate(metrics):
                row = [_e(m) if i == 0 else "", METRIC_NAMES.get(met, met)]
                for s in settings:
                    c = _cell(rels, m, s)
                    u = c["utility"].get(task) if c else None
                    row.append(_seeds_and_ci(u, met, "release") if u and "release" in u else "–")
                rows.append(row)
        for i, met in enumerate(metrics):                     # the same-N real classifier under each setting
            row = ["<i>Original (real, same N)</i>" if i == 0 else "", METRIC_NAMES.get(met, met)]
            for s in settings:
                c = next((r for r in rels if _col(r) == s
                          and "real_same_n" in r["utility"].get(task, {})), None)
                row.append(_seeds_and_ci(c["utility"][task], met, "real_same_n") if c else "–")
            rows.append(row)
        first = next((r["utility"][task] for r in rels if "n_train" in r["utility"].get(task, {})), None)
        seeds = len(first["seeds"]) if first else 0
        ntest = rep["sample_sizes"]["utility_test"].get(task, 0)
        out.append(_table(["Method", "Metric", *map(_e, settings)], rows,
                          caption=f"Table 2 layout (k-SALSA), task <b>{_e(task)}</b>: the mean over "
                                  f"{_plural(seeds, 'seed')} with its 95 % paired bootstrap interval over "
                                  f"{_resampled(rels, task, ntest)}; the paper's "
                                  f"± sd over seeds follows (a deterministic learner's is 0 and says nothing of "
                                  f"the uncertainty). The Original rows "
                                  f"train on real source images subsampled to the release's size (per setting)."))
        rows = []
        for r in rels:
            u = r["utility"].get(task, {})
            if "skipped" in u:
                rows.append([_e(r["name"]), "–", "–", _e(u["skipped"])])
                continue
            trts = u.get("real_model_on_release")
            h = HEADLINE[kind]
            pb = (u.get("paired_bootstrap") or {}).get(h)
            nan = u["release"].get(h, {}).get("nan_seeds", 0)
            rows.append([_e(r["name"]), str(u.get("n_train", "–")),
                         _pm(u["release"].get(h)) + (f" <span class=ci>({nan} NaN seed(s) left out)</span>"
                                                     if nan else ""),
                         _ci(pb["release"]) if pb else "–", _ci(pb["real_same_n"]) if pb else "–",
                         _ci(pb["difference"]) if pb else "–", _on_release(u, h) if trts else "–"])
        full = rep["controls"].get("utility_full_real", {}).get(task)
        if full:
            fb = (full.get("bootstrap") or {}).get(HEADLINE[kind])
            rows.append(["<i>real, all source images (reference)</i>", str(full["n_train"]),
                         _num(full["scores"].get(HEADLINE[kind])), _ci(fb["release"]) if fb else "–", "–", "–", "–"])
        out.append(_table(["Release", "N train", f"{METRIC_NAMES[HEADLINE[kind]]} (train on release, ± sd over "
                           "seeds)", "seed mean [95% CI]", "Original, same N [95% CI]",
                           "release − Original [95% CI]",
                           f"{METRIC_NAMES[HEADLINE[kind]]} of the real model on the release"], rows,
                          caption=f"Intervals: paired percentile bootstrap over {_resampled(rels, task, ntest)} "
                                  f"(scipy.stats.bootstrap, paired=True), of the metric averaged over seeds; a "
                                  f"difference whose interval contains 0 is not a measured difference. Right column: "
                                  f"a classifier trained on all real source images, tested on the released images "
                                  f"with their released labels (DP-GLOW's direction)."))
    if rep["tasks"] and "grade" in rep["tasks"]:
        out.append("<p class=note>Binary (normal vs DR) and 3-class (healthy/NPDR/PDR) numbers are derived from the "
                   "5-class model by summing its probabilities; the papers trained separate models.</p>")
    return "\n".join(out)


def _seeds_and_ci(u: dict, metric: str, side: str) -> str:
    """A Table 2 cell: the seed mean with its paired bootstrap interval (``side``: the release's, or the same-N real
    classifiers' ``real_same_n``), then the seeds' sd; the sd alone where no interval was computed."""
    pb = ((u.get("paired_bootstrap") or {}).get(metric) or {}).get(side)
    seeds = u.get(side, {}).get(metric)
    if not pb:
        return _pm(seeds)
    return f"{_ci(pb, 3)} <span class=ci>± {_num(seeds['sd'], 3)} sd</span>" if seeds else _ci(pb, 3)


def _resampled(rels: list[dict], task: str, ntest: int) -> str:
    """What the utility intervals resampled: the held-out patients (every image of a drawn patient), or images."""
    pb = next((v for r in rels for v in ((r["utility"].get(task) or {}).get("paired_bootstrap") or {}).values()), {})
    if pb.get("resampled") == "patients":
        return (f"the {pb['n_patients']} held-out patients of the {ntest} test images (a drawn patient brings all "
                f"its images)")
    return f"the {ntest} held-out test images"


def _on_release(u: dict, metric: str) -> str:
    """The real model's score on the release, with its interval and N (the release's labelled records)."""
    ci = (u.get("real_model_on_release_ci") or {}).get(metric)
    n = u.get("real_model_on_release_n")
    value = _ci(ci) if ci else _num(u["real_model_on_release"].get(metric))
    unit = (f", {ci['n_patients']} patient clusters" if ci and ci.get("n_patients") else "")
    mark = _unit_mark((ci or {}).get("resampled"))           # records one by one where no patient ids reach it
    return value + (f" <span class=ci>n={n} records{unit}</span>" if n else "") + mark
