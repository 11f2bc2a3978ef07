"""The utility part of an evaluation run (:mod:`medanon.evaluate.harness`): train on each release and on as many
real images, test both on the held-out images, and compare releases with one another.

- :func:`release_utility`: one release's entry per task (``report.json`` ``releases[i].utility``). Its intervals
  resample the held-out *patients* (:func:`medanon.evaluate.utility.paired_intervals` with ``groups``). The
  same-N real classifier is trained on as many real images as the release has *distinct source sets* (records that
  stand for the same source images, the views of one k-Same cluster, count once); without a mapping, on as many
  as it has records, and the entry says so. Each seed's test probabilities are kept in the evaluation's cache
  (:func:`probs_name`), never in the report, so a resumed evaluation can still compare the release.
- :func:`full_real_utility`: the learner trained on every real source image (``controls.utility_full_real``).
- :func:`comparisons`: ``utility.compare`` pairs of releases, each difference with a patient cluster bootstrap
  interval (``report.json`` ``comparisons``), after every release was evaluated or read from the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from medanon.evaluate import utility as util
from medanon.evaluate.cache import digest
from medanon.evaluate.context import RealContext
from medanon.evaluate.inputs import ReleaseData
from medanon.runtime import map_in_parallel


def probs_name(ctx: RealContext, rel_digest: str, task: util.Task) -> str:
    """Cache name of a release's per-seed test probabilities for ``task`` ((seeds, N, C) array)."""
    return f"utility-probs-{task.label}-{digest(rel_digest, ctx.learner_key, list(ctx.cfg.utility.seeds))}"


def distinct_sources(rel: ReleaseData, ok: np.ndarray) -> int | None:
    """How many distinct sets of source images the records ``ok`` stand for (None without a mapping)."""
    if rel.sources is None:
        return None
    return len({frozenset(rel.sources[i]) for i in np.flatnonzero(ok)})


def _seed(ctx: RealContext, task: util.Task, x, y: np.ndarray, test_rows: np.ndarray, n_real: int,
          seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One seed of the utility protocol: test-set probabilities of the learner trained on the release's encoded
    images ``x``, and of the real classifier trained on ``n_real`` real source images (cached)."""
    model = ctx.learner.fit(x, y, num_classes=task.num_classes, seed=seed)
    return ctx.learner.proba(model, ctx.real_inputs[test_rows]), ctx.real_same_n_probs(task, n_real, seed)


def _test_patients(ctx: RealContext, test_rows: np.ndarray) -> np.ndarray:
    return ctx.real.patients[test_rows]


def untestable(ctx: RealContext, task: util.Task) -> str:
    """Why ``task`` cannot be tested on the held-out split: how many of its images carry a usable label, and what
    the others carry (CheXpert's findings are often uncertain, −1, or blank), with the fix."""
    held = np.asarray(ctx.real.label(task.label)[ctx.held], np.float64)
    usable = int(task.targets(held)[0].sum())
    parts = [f"{int(np.isnan(held).sum())} blank", f"{int((held < 0).sum())} uncertain (-1)"]
    other = len(held) - usable - int(np.isnan(held).sum()) - int((held < 0).sum())
    parts += [f"{other} outside the task's classes"] if other else []
    others = [n for n in ctx.real.dataset.label_names if n != task.label and util.has_classes(n)][:6]
    return (f"{usable} of the held-out split's {len(held)} images carry a usable {task.label!r} label "
            f"({', '.join(parts)}), too few to test on: hold out more patients, or predict another label with "
            "the evaluation config's utility.tasks (on the command line --set 'utility.tasks=[LABEL]')"
            + (f"; the data hold {', '.join(others)}" if others else ""))


def release_utility(ctx: RealContext, rel: ReleaseData, tasks: list[util.Task]) -> dict:
    """Every task's utility entry of one release (see the module docstring)."""
    out = {}
    ucfg = ctx.cfg.utility
    encoded = None                                  # the release's images encoded for the learner, once
    for task in tasks:
        ok, y = task.targets(rel.label(task.label))
        test_rows, y_test = ctx.test_set(task)
        if ok.sum() < 2 or len(np.unique(y)) < 2:
            out[task.label] = {"skipped": f"the release has {int(ok.sum())} record(s) labelled with "
                                          f"{len(np.unique(y))} class(es) of {task.label!r}: nothing to learn"}
            continue
        if len(test_rows) < 2:
            out[task.label] = {"skipped": untestable(ctx, task)}
            continue
        if encoded is None:
            encoded = ctx.learner.encode(rel.images, f"{ctx.learner.name} inputs ({rel.name})")
        x = encoded[torch.from_numpy(ok)] if isinstance(encoded, torch.Tensor) else encoded[ok]
        distinct = distinct_sources(rel, ok)
        n_real = int(ok.sum()) if distinct is None else distinct
        pool = int(task.targets(ctx.real.label(task.label)[ctx.src])[0].sum())
        seeds = list(ucfg.seeds)
        if ctx.learner.deterministic:                   # one fit of the release serves every seed's real classifier
            p = ctx.learner.proba(ctx.learner.fit(x, y, num_classes=task.num_classes, seed=seeds[0]),
                                  ctx.real_inputs[test_rows])
            rel_p, base_p = [p] * len(seeds), [ctx.real_same_n_probs(task, n_real, s) for s in seeds]
        else:
            one_seed = partial(_seed, ctx, task, x, y, test_rows, n_real)
            rel_p, base_p = (list(v) for v in zip(*map_in_parallel(one_seed, seeds, device=ctx.device), strict=True))
        ctx.cache.save_array(probs_name(ctx, rel.digest, task), np.stack(rel_p))
        runs = [util.score(task, y_test, p) for p in rel_p]
        base = [util.score(task, y_test, p) for p in base_p]
        entry = {"n_train": int(ok.sum()), "n_same_n_real": min(n_real, pool),
                 "same_n_counts": "distinct source sets (private mapping): records standing for the same source "
                                  "images count once" if distinct is not None else
                                  "records (no private mapping: records standing for the same source images, such "
                                  "as augmented views of one cluster, cannot be told apart and each counts)",
                 "n_test": len(test_rows), "n_test_patients": len(set(_test_patients(ctx, test_rows).tolist())),
                 "seeds": seeds, "learner": ucfg.learner, "release": util.summarize(runs),
                 "real_same_n": util.summarize(base)}
        if n_real > pool:
            entry["same_n_capped"] = f"the source split has {pool} labelled images, fewer than {n_real}"
        if ucfg.bootstrap:
            entry["paired_bootstrap"] = util.paired_intervals(task, y_test, rel_p, base_p, n_resamples=ucfg.bootstrap,
                                                              confidence=ctx.cfg.attacks.confidence,
                                                              seed=ctx.cfg.seed,
                                                              groups=_test_patients(ctx, test_rows))
        if ucfg.full_real:
            entry.update(_real_model_on_release(ctx, rel, task, ok, x, y))
        out[task.label] = entry
    return out


def _real_model_on_release(ctx: RealContext, rel: ReleaseData, task: util.Task, ok: np.ndarray, x, y) -> dict:
    """The learner trained on every real source image, scored on the release's labelled records: its scores, N (the
    records) and a percentile bootstrap interval that resamples the records' patient clusters (records sharing a
    patient resample together; without the mapping, records one by one, as ``resampled`` says)."""
    from medanon.evaluate.attacks.bootstrap import record_clusters

    p = ctx.learner.proba(ctx.full_real_model(task), x)
    out: dict[str, Any] = {"real_model_on_release": util.score(task, y, p), "real_model_on_release_n": len(y)}
    if ctx.cfg.utility.bootstrap and len(y) >= 2:
        groups = (record_clusters([rel.sources[i] for i in np.flatnonzero(ok)], ctx.real.patients)
                  if rel.sources is not None else None)
        boot = util.paired_intervals(task, y, [p], [p], n_resamples=ctx.cfg.utility.bootstrap,
                                     confidence=ctx.cfg.attacks.confidence, seed=ctx.cfg.seed, groups=groups)
        out["real_model_on_release_ci"] = {k: {**v["release"], **{u: v[u] for u in ("resampled", "n_patients")
                                                                  if u in v}}
                                           for k, v in boot.items() if isinstance(v, dict) and "release" in v}
    return out


def full_real_utility(ctx: RealContext, tasks: list[util.Task]) -> dict:
    """The learner trained on every real source image with a label, tested on the held-out images (a reference row;
    its interval resamples the held-out patients)."""
    out = {}
    for task in tasks:
        test_rows, y_test = ctx.test_set(task)
        ok, _ = task.targets(ctx.real.label(task.label)[ctx.src])
        if len(test_rows) < 2 or ok.sum() < 2:
            continue
        p = ctx.learner.proba(ctx.full_real_model(task), ctx.real_inputs[test_rows])
        out[task.label] = {"n_train": int(ok.sum()), "n_test": len(test_rows), "scores": util.score(task, y_test, p)}
        if ctx.cfg.utility.bootstrap:               # its own interval only: paired with itself, a difference is 0
            boot = util.paired_intervals(
                task, y_test, [p], [p], n_resamples=ctx.cfg.utility.bootstrap, confidence=ctx.cfg.attacks.confidence,
                seed=ctx.cfg.seed, groups=_test_patients(ctx, test_rows))
            out[task.label]["bootstrap"] = {k: ({"release": v["release"]} if isinstance(v, dict) and "release" in v
                                                else v) for k, v in boot.items()}
    return out


def comparisons(ctx: RealContext, rels: Sequence[ReleaseData], tasks: list[util.Task],
                pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """One entry per pair of release names (``utility.compare``) and task: both releases' seed-averaged metrics on
    the same held-out images and their difference a - b, each with a paired patient cluster bootstrap interval
    (:func:`medanon.evaluate.utility.compare_releases`), read from the per-seed probabilities in the cache."""
    ucfg = ctx.cfg.utility
    by_name = {r.name: r for r in rels}
    out: list[dict[str, Any]] = []
    for a, b in pairs:
        for task in tasks:
            entry: dict[str, Any] = {"a": a, "b": b, "task": task.label}
            test_rows, y_test = ctx.test_set(task)
            got = {n: ctx.cache.load_array(probs_name(ctx, by_name[n].digest, task)) for n in (a, b)}
            missing = [n for n, p in got.items() if p is None]
            if missing:
                entry["skipped"] = (f"no {task.label!r} utility for {' and '.join(missing)} (its utility entry says "
                                    f"why)" if ctx.cache.root is not None else
                                    "the evaluation has no cache, where the per-seed probabilities are kept")
                out.append(entry)
                continue
            groups = _test_patients(ctx, test_rows)
            res = util.compare_releases(task, y_test, list(got[a]), list(got[b]), groups=groups,
                                        n_resamples=ucfg.bootstrap or 1000,
                                        confidence=ctx.cfg.attacks.confidence, seed=ctx.cfg.seed)
            entry.update({"n": len(y_test), "n_patients": len(set(groups.tolist())), "resampled": "patients",
                          "headline": util.HEADLINE.get(task.kind, ""), "metrics": res})
            out.append(entry)
    return out
