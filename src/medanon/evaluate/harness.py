"""One entry point, :func:`evaluate`: real data + release folders -> ``report.json`` and ``report.html``.

Order of work: load and split the real data; load every release (and its private mapping where the
custodian provides one); fix one FID sample size for all releases; then, per release, fidelity,
utility and the attacks; finally the report. Everything derived from the real data alone is built
once and cached (:class:`RealContext`, :mod:`medanon.evaluate.cache`); each release's results are
cached under its content digest, so an interrupted run resumes and adding a release to a report
costs only that release.

A release is written by :class:`medanon.release.ReleaseWriter` from the *source* split (``train``)
of the real data, with its private mapping at ``<release>.mapping.json`` (``mapping=`` argument of
the writer); the demo is a thin caller::

    from medanon.evaluate.config import EvalConfig
    from medanon.evaluate.harness import evaluate

    evaluate("demo-output/data/fundus", ["demo-output/releases/ksalsa-k5", ...], "demo-output/report-fundus",
             config=EvalConfig.fast(size=64), splits="demo-output/splits_fundus.csv", device=device,
             cache_dir="demo-output/eval-cache")
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from medanon.config import to_dict
from medanon.errors import ConfigError, DataError
from medanon.evaluate import fidelity as fid
from medanon.evaluate import utility as util
from medanon.evaluate.attacks.attribute import attribute_inference
from medanon.evaluate.attacks.linkability import linkability
from medanon.evaluate.attacks.membership import descriptors, top_k_membership
from medanon.evaluate.attacks.risk import inference_risk
from medanon.evaluate.attacks.singling_out import singling_out
from medanon.evaluate.cache import Cache, digest
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.inputs import RealData, ReleaseData, load_real, load_release
from medanon.fsutil import sha256_file
from medanon.models.classifier import load_classifier, predict_proba, save_classifier
from medanon.models.identity import IdentityNet, load_identity
from medanon.release.aggregate import aggregate_labels
from medanon.runtime import RunDir
from medanon.train.classifier import map_in_parallel, resize_to, train_classifier
from medanon.train.identity import train_identity

log = logging.getLogger(__name__)

RESULTS_VERSION = 1


@dataclass(frozen=True)
class ReleaseSpec:
    path: Path                                  # release folder
    mapping: Path | None = None                 # private mapping file (default: <release>.mapping.json if present)
    name: str | None = None                     # display name (default: the folder name)


def _spec(r: str | Path | ReleaseSpec) -> ReleaseSpec:
    return r if isinstance(r, ReleaseSpec) else ReleaseSpec(Path(r))


class RealContext:
    """Everything computed from the real data alone, built lazily and cached."""

    def __init__(self, real: RealData, cfg: EvalConfig, cache: Cache, device: torch.device, progress: bool):
        self.real, self.cfg, self.cache, self.device, self.progress = real, cfg, cache, device, progress
        self.src = real.rows(cfg.source_split)
        self.held = real.rows(cfg.heldout_split)
        if len(self.src) < 2 or len(self.held) < 2:
            raise DataError(f"the real dataset's {cfg.source_split!r} split has {len(self.src)} images and its "
                            f"{cfg.heldout_split!r} split {len(self.held)}: too few to evaluate",
                            fix="use a larger dataset or other split fractions")
        self.key = digest(real.digest, real.split.tolist(), cfg.size)
        self.notes: list[str] = []
        a = cfg.attacks
        self.identity_info: dict[str, Any] = (
            {"checkpoint": a.identity_checkpoint, "sha256": sha256_file(a.identity_checkpoint)}
            if a.identity_checkpoint else
            {"trained_on": f"real {cfg.source_split} split ({len(self.src)} images)", "config": to_dict(a.identity)})

    # -- identity network ------------------------------------------------------------------------------

    @cached_property
    def identity(self) -> IdentityNet:
        a = self.cfg.attacks
        if a.identity_checkpoint:
            net, _ = load_identity(a.identity_checkpoint, map_location=self.device)
            self.identity_info.update(trained_on=f"checkpoint {a.identity_checkpoint}")
            return net
        path = self.cache.path(f"identity-{digest(self.key, to_dict(a.identity))}", ".pt")
        return train_identity(self.real.images[self.src], list(self.real.patients[self.src]), cfg=a.identity,
                              out=path, device=self.device, progress=self.progress)

    def embed(self, images: torch.Tensor) -> np.ndarray:
        return self.identity.embed(images.to(self.device)).double().numpy()

    @cached_property
    def real_emb(self) -> np.ndarray:
        a = self.cfg.attacks
        name = f"real-identity-{digest(self.key, to_dict(a.identity), self.identity_info.get('sha256'))}"
        return self.cache.array(name, lambda: self.embed(self.real.images))

    @cached_property
    def real_desc(self) -> np.ndarray:
        return descriptors(self.real.images, self.real_emb)

    # -- fidelity reference ----------------------------------------------------------------------------

    @cached_property
    def ref_rows(self) -> np.ndarray:
        n = min(self.cfg.fidelity.reference_samples, len(self.src))
        rng = np.random.default_rng(np.random.SeedSequence([self.cfg.seed, 1]))
        return np.sort(rng.choice(self.src, n, replace=False))

    @cached_property
    def inception(self):
        """(extractor, provenance), or None when the Inception weights are not installed (said in the report)."""
        if not self.cfg.fidelity.inception:
            return None
        from medanon.models.features import FeatureNetworkUnavailable, WeightsChecksumError

        try:
            return fid.inception_extractor(device=self.device)
        except (FeatureNetworkUnavailable, WeightsChecksumError, ImportError) as e:  # report, do not crash
            self.notes.append(f"Inception FID network unavailable ({type(e).__name__}: {e}); FID and KID not computed")
            log.warning(self.notes[-1])
            return None

    def inception_features(self, images: torch.Tensor, desc: str) -> np.ndarray:
        ext, _ = self.inception
        return fid.extract_features(ext, images, batch=self.cfg.fidelity.batch, progress=self.progress, desc=desc)

    def real_inception(self, rows: np.ndarray, what: str) -> np.ndarray:
        return self.cache.array(f"inception-{what}-{digest(self.key, rows.tolist())}",
                                lambda: self.inception_features(self.real.images[rows], f"Inception ({what})"))

    # -- classifiers trained on real data --------------------------------------------------------------

    def _real_classifier(self, name: str, rows: np.ndarray, y: np.ndarray, num_classes: int, tcfg) -> Any:
        path = self.cache.path(f"{name}-{digest(self.key, rows.tolist(), to_dict(tcfg))}", ".pt")
        if path is not None and path.is_file():
            return load_classifier(path, map_location=self.device)[0]
        model = train_classifier(self.real.images[rows], y, num_classes=num_classes, cfg=tcfg, device=self.device,
                                 progress=self.progress, desc=name)
        if path is not None:
            save_classifier(path, model, extra={"rows": len(rows)})
        return model

    def attribute_attacker(self, label: str):
        tcfg = self.cfg.attacks.attribute_classifier
        v = self.real.label(label)[self.src]
        ok = ~np.isnan(v)
        if ok.sum() < 2 or len(np.unique(v[ok])) < 2:
            return None
        return self._real_classifier(f"attacker-{label}", self.src[ok], v[ok].astype(int), 2, tcfg)

    def test_set(self, task: util.Task) -> tuple[np.ndarray, np.ndarray]:
        ok, y = task.targets(self.real.label(task.label)[self.held])
        return self.held[ok], y

    def baseline_scores(self, task: util.Task, n: int, seed: int) -> dict[str, float]:
        """Train on ``n`` real source images (seeded subsample), test on the held-out set (cached)."""
        tcfg = self.cfg.utility.classifier
        name = f"baseline-{task.label}-{n}-{seed}-{digest(self.key, to_dict(tcfg))}"
        got = self.cache.load_json(name)
        if got is not None:
            return got
        ok, y = task.targets(self.real.label(task.label)[self.src])
        rows = self.src[ok]
        pick = util.subsample(len(rows), n, seed)
        test_rows, y_test = self.test_set(task)
        model = train_classifier(self.real.images[rows[pick]], y[pick], num_classes=task.num_classes,
                                 cfg=_with_seed(tcfg, seed), device=self.device, progress=self.progress,
                                 desc=f"real baseline {task.label} n={len(pick)} seed {seed}")
        s = util.score(task, y_test, predict_proba(model, resize_to(self.real.images[test_rows], tcfg.image_size)))
        self.cache.save_json(name, s)
        return s

    def full_real_model(self, task: util.Task):
        ok, y = task.targets(self.real.label(task.label)[self.src])
        tcfg = _with_seed(self.cfg.utility.classifier, self.cfg.utility.seeds[0])
        return self._real_classifier(f"real-{task.label}", self.src[ok], y, task.num_classes, tcfg)


def _with_seed(tcfg, seed: int):
    from dataclasses import replace

    return replace(tcfg, seed=int(seed))


# ------------------------------------------------------------------------------------------------ per release


def _fidelity_block(ctx: RealContext, n: int, inception, identity) -> dict:
    """FID + KID on Inception features and FD on identity embeddings of ``n`` images against the reference;
    ``inception`` / ``identity`` are callables giving the evaluated set's features."""
    f = ctx.cfg.fidelity
    out: dict[str, Any] = {"n": int(n), "n_reference": len(ctx.ref_rows)}
    boot = {"n_boot": f.bootstrap, "confidence": ctx.cfg.attacks.confidence, "seed": ctx.cfg.seed}
    if ctx.inception is not None:
        ref = ctx.real_inception(ctx.ref_rows, "reference")
        feats = inception()
        out["fid"] = fid.bootstrap_fd(ref, feats, **boot).to_dict()
        m, s = fid.kid_from_features(ref, feats, subsets=f.kid_subsets, subset_size=f.kid_subset_size,
                                     seed=ctx.cfg.seed)
        out["kid"] = {"mean": m, "sd": s, "subset_size": min(f.kid_subset_size, len(ref), n)}
    if f.in_domain:
        out["fd_identity"] = fid.bootstrap_fd(ctx.real_emb[ctx.ref_rows], identity(), **boot).to_dict()
    return out


def _fidelity(ctx: RealContext, rel: ReleaseData, n: int) -> dict:
    rng = np.random.default_rng(np.random.SeedSequence([ctx.cfg.seed, 2]))
    pick = np.sort(rng.choice(len(rel.images), n, replace=False))
    return _fidelity_block(ctx, n, lambda: ctx.inception_features(rel.images[pick], f"Inception ({rel.name})"),
                           lambda: ctx.embed(rel.images[pick]))


def _utility_seed(ctx: RealContext, task: util.Task, x: torch.Tensor, y: np.ndarray, test_rows: np.ndarray,
                  y_test: np.ndarray, seed: int) -> tuple[dict, dict]:
    """One seed of the utility protocol: the scores of a classifier trained on the release, and of the
    real baseline trained on as many real source images (cached)."""
    ucfg = ctx.cfg.utility
    model = train_classifier(x, y, num_classes=task.num_classes, cfg=_with_seed(ucfg.classifier, seed),
                             device=ctx.device, progress=False)
    probs = predict_proba(model, resize_to(ctx.real.images[test_rows], ucfg.classifier.image_size))
    return util.score(task, y_test, probs), ctx.baseline_scores(task, len(y), seed)


def _utility(ctx: RealContext, rel: ReleaseData, tasks: list[util.Task]) -> dict:
    out = {}
    ucfg = ctx.cfg.utility
    for task in tasks:
        ok, y = task.targets(rel.label(task.label))
        test_rows, y_test = ctx.test_set(task)
        if ok.sum() < 2 or len(np.unique(y)) < 2:
            out[task.label] = {"skipped": f"the release has {int(ok.sum())} record(s) labelled with "
                                          f"{len(np.unique(y))} class(es) of {task.label!r}: nothing to learn"}
            continue
        if len(test_rows) < 2:
            out[task.label] = {"skipped": f"the held-out split has no {task.label!r} labels to test on"}
            continue
        x = rel.images[torch.from_numpy(ok)]
        one_seed = partial(_utility_seed, ctx, task, x, y, test_rows, y_test)
        runs, base = (list(v) for v in zip(*map_in_parallel(one_seed, list(ucfg.seeds), device=ctx.device),
                                          strict=True))
        entry = {"n_train": int(ok.sum()), "n_test": len(test_rows), "seeds": list(ucfg.seeds),
                 "release": util.summarize(runs), "real_same_n": util.summarize(base)}
        if ucfg.full_real:
            model = ctx.full_real_model(task)
            probs = predict_proba(model, resize_to(x, ucfg.classifier.image_size))
            entry["real_model_on_release"] = util.score(task, y, probs)
        out[task.label] = entry
    return out


def _truth_from_sources(ctx: RealContext, rel: ReleaseData, label: str) -> np.ndarray:
    """Per record, the aggregated value of ``label`` over its sources (the release's label rule)."""
    vals = []
    for rows in rel.sources or []:
        agg = aggregate_labels([{label: float(ctx.real.records[i].labels.get(label, math.nan))} for i in rows],
                               [label])
        vals.append(float(agg[label]))
    return np.asarray(vals, np.float64)


def _attacks(ctx: RealContext, rel: ReleaseData) -> dict:
    a = ctx.cfg.attacks
    real, out = ctx.real, {}
    need_map = "needs the release's private mapping file (<release>.mapping.json next to the release, or --mapping)"
    rel_emb = ctx.embed(rel.images)
    held = ctx.held
    if rel.sources is not None:
        src_flat = np.asarray([i for rows in rel.sources for i in rows], np.int64)
        rec_flat = np.asarray([r for r, rows in enumerate(rel.sources) for _ in rows], np.int64)
        record_patients = [frozenset(real.patients[rows].tolist()) for rows in rel.sources]
    if a.membership:
        if rel.sources is None:
            out["membership"] = {"skipped": need_map}
        else:
            try:
                out["membership"] = top_k_membership(
                    release_desc=descriptors(rel.images, rel_emb), record_sources=rel.sources,
                    source_desc=ctx.real_desc, heldout_desc=ctx.real_desc[held], seed=ctx.cfg.seed,
                    confidence=a.confidence)
            except ValueError as e:
                out["membership"] = {"skipped": str(e)}
    if a.attribute:
        attacker = ctx.attribute_attacker(a.attribute)
        truth = _truth_from_sources(ctx, rel, a.attribute) if rel.sources is not None else (
            rel.label(a.attribute) if a.attribute in rel.label_names else None)
        if attacker is None:
            out["attribute"] = {"skipped": f"the real source split has no usable {a.attribute!r} labels"}
        elif truth is None or np.isnan(truth).all():
            out["attribute"] = {"skipped": f"no truth for {a.attribute!r}: {need_map}, or a released "
                                           f"{a.attribute!r} column"}
        else:
            out["attribute"] = attribute_inference(
                attacker=attacker, image_size=a.attribute_classifier.image_size, release_images=rel.images,
                release_truth=truth, heldout_images=real.images[held], heldout_truth=real.label(a.attribute)[held],
                attribute=a.attribute, confidence=a.confidence)
    if a.linkability:
        if rel.sources is None:
            out["linkability"] = {"skipped": need_map}
        else:
            try:
                out["linkability"] = linkability(
                    control_emb=ctx.real_emb[held], control_patients=list(real.patients[held]), release_emb=rel_emb,
                    record_patients=record_patients, source_emb=ctx.real_emb[src_flat],
                    source_patients=list(real.patients[src_flat]), source_record=rec_flat.tolist(),
                    target_far=a.target_far, seed=ctx.cfg.seed, max_pairs=a.max_pairs, confidence=a.confidence)
            except ValueError as e:
                out["linkability"] = {"skipped": str(e)}
    if a.singling_out:
        if rel.sources is None:
            out["singling_out"] = {"skipped": need_map}
        elif len(rel.images) < 2:
            out["singling_out"] = {"skipped": "a single released record cannot be singled out among others"}
        else:
            out["singling_out"] = singling_out(source_emb=ctx.real_emb[src_flat], source_record=rec_flat,
                                               release_emb=rel_emb, confidence=a.confidence, seed=ctx.cfg.seed)
    if a.inference and a.attribute:
        secret = real.label(a.attribute)
        if a.attribute not in rel.label_names or np.isnan(rel.label(a.attribute)).all():
            out["inference"] = {"skipped": f"the release publishes no {a.attribute!r} label to infer from"}
        else:
            members_pat = set(real.patients[src_flat].tolist()) if rel.sources is not None else \
                set(real.patients[ctx.src].tolist())
            m_rows = np.asarray([i for i in ctx.src if real.patients[i] in members_pat and not np.isnan(secret[i])])
            c_rows = np.asarray([i for i in held if not np.isnan(secret[i])])
            if len(m_rows) == 0 or len(c_rows) == 0:
                out["inference"] = {"skipped": f"no member or control targets with a known {a.attribute!r}"}
            else:
                out["inference"] = inference_risk(
                    member_emb=ctx.real_emb[m_rows], member_secret=secret[m_rows], control_emb=ctx.real_emb[c_rows],
                    control_secret=secret[c_rows], release_emb=rel_emb, release_secret=rel.label(a.attribute),
                    confidence=a.confidence, seed=ctx.cfg.seed)
                out["inference"]["members_are"] = (
                    "real images of the patients the mapping lists" if rel.sources is not None
                    else f"real images of the {ctx.cfg.source_split!r} split")
    return out


def _check_sources(ctx: RealContext, rel: ReleaseData) -> None:
    if rel.sources is None:
        return
    flat = np.asarray([i for rows in rel.sources for i in rows], np.int64)
    bad = flat[ctx.real.split[flat] != ctx.cfg.source_split]
    if len(bad):
        raise DataError(f"release {rel.path} stands for {len(bad)} image(s) outside the {ctx.cfg.source_split!r} split "
                        f"(e.g. patients {sorted(set(ctx.real.patients[bad].tolist()))[:5]}): its held-out patients "
                        f"would be tested against themselves", files=[str(rel.mapping_path)],
                        fix="evaluate with the split the release was made from (--splits CSV, or --split-seed)")


def evaluate_release(ctx: RealContext, rel: ReleaseData, *, n_fid: int, tasks: list[util.Task]) -> dict:
    """Fidelity, utility and attacks of one release (no caching here)."""
    _check_sources(ctx, rel)
    timing: dict[str, float] = {}
    res: dict[str, Any] = {
        "name": rel.name, "path": str(rel.path), "method": rel.method, "params": rel.params, "setting": rel.setting,
        "privacy": rel.manifest.get("privacy", {}), "phantom": bool(rel.manifest.get("phantom", False)),
        "records": len(rel.images), "counts": rel.manifest.get("counts", {}),
        "mapping": str(rel.mapping_path) if rel.mapping_path else None,
    }
    t = time.perf_counter()
    res["fidelity"] = _fidelity(ctx, rel, n_fid)
    timing["fidelity"], t = time.perf_counter() - t, time.perf_counter()
    res["utility"] = _utility(ctx, rel, tasks)
    timing["utility"], t = time.perf_counter() - t, time.perf_counter()
    res["attacks"] = _attacks(ctx, rel)
    timing["attacks"] = time.perf_counter() - t
    res["seconds"] = {k: round(v, 2) for k, v in timing.items()}
    return res


def _controls(ctx: RealContext, n_fid: int, tasks: list[util.Task]) -> dict:
    """Rows for the real data itself: held-out real images through the same metrics."""
    out: dict[str, Any] = {}
    n = min(n_fid, len(ctx.held))
    rng = np.random.default_rng(np.random.SeedSequence([ctx.cfg.seed, 3]))
    rows = np.sort(rng.choice(ctx.held, n, replace=False))
    out["fidelity"] = _fidelity_block(ctx, n, lambda: ctx.real_inception(rows, "heldout"),
                                      lambda: ctx.real_emb[rows])
    if ctx.cfg.utility.full_real:
        util_out = {}
        for task in tasks:
            test_rows, y_test = ctx.test_set(task)
            ok, _ = task.targets(ctx.real.label(task.label)[ctx.src])
            if len(test_rows) < 2 or ok.sum() < 2:
                continue
            probs = predict_proba(ctx.full_real_model(task),
                                  resize_to(ctx.real.images[test_rows], ctx.cfg.utility.classifier.image_size))
            util_out[task.label] = {"n_train": int(ok.sum()), "n_test": len(test_rows),
                                    "scores": util.score(task, y_test, probs)}
        out["utility_full_real"] = util_out
    return out


def _fid_samples(cfg: EvalConfig, releases: Sequence[ReleaseData]) -> int:
    smallest = min(len(r.images) for r in releases)
    n = cfg.fidelity.samples or smallest
    n = min(n, cfg.fidelity.max_samples)
    if n > smallest:
        raise ConfigError(f"fidelity.samples={n} is larger than the smallest release ({smallest} records)",
                          fix="lower fidelity.samples (every release is measured with the same number of images)")
    if n < 2:
        raise ConfigError("FID needs at least two images per release")
    return n


def _warnings(cfg: EvalConfig, rels: Sequence[ReleaseData], n_fid: int) -> list[str]:
    """Settings that weaken what the report can claim, said loudly (log and report)."""
    out = []
    if cfg.fidelity.inception and n_fid < 50:
        out.append(f"FID is computed on {n_fid} images per release: at this N its bias dominates; compare releases "
                   f"only with each other (same N) and read KID, which is unbiased")
    if len(cfg.utility.seeds) < 2:
        out.append("utility uses a single seed: the reported sd is 0 and says nothing about training variance")
    for r in rels:
        if r.sources is None:
            out.append(f"release {r.name}: no private mapping, so membership, linkability and singling-out are not "
                       f"measured (the attacks that need ground truth of who is in which record)")
    sha = sha256_file(cfg.attacks.identity_checkpoint) if cfg.attacks.identity_checkpoint else None
    ours = to_dict(cfg.attacks.identity)
    for r in rels:
        target = _identity_optimised_against(r)
        if target is None:
            continue
        if sha is not None and target.get("sha256") == sha:
            out.append(f"release {r.name} was optimised against the very identity network the attacks use "
                       f"({cfg.attacks.identity_checkpoint}): its linkability and singling-out numbers are "
                       f"optimistic; evaluate with an independently trained identity network")
        theirs = target.get("train_config") or {}
        if sha is None and theirs and all(theirs.get(k) == v for k, v in ours.items() if k in theirs):
            out.append(f"release {r.name} was optimised against an identity network trained with the same settings "
                       f"and seed as the attacks' own ({theirs}): on the same patients that is the same network, "
                       f"and its linkability and singling-out numbers are optimistic; change attacks.identity.seed")
    return out


def _identity_optimised_against(rel: ReleaseData) -> dict | None:
    """The identity network a release's images were optimised away from (GMIA with L_id and steps > 0), as its
    manifest records it; None for every other release."""
    ident = (rel.manifest.get("privacy") or {}).get("identity_network")
    if not ident:
        return None
    p = rel.params or {}
    if p.get("steps") == 0 or p.get("losses") == "ut":
        return None
    return ident


def evaluate(real_dir: str | Path, releases: Sequence[str | Path | ReleaseSpec], out: str | Path, *,
             config: EvalConfig | None = None, splits: str | Path | None = None,
             device: torch.device | str = "cpu", cache_dir: str | Path | None = None,
             progress: bool = True, studies: dict[str, dict] | None = None) -> dict:
    """Evaluate ``releases`` against the real dataset in ``real_dir``; write ``out``/report.json and report.html.

    ``splits`` is the CSV of the patient-level split the releases were made with (else the split is
    recomputed from ``config.split``). ``cache_dir`` (default ``out/cache``)
    holds what is reused across runs. ``studies`` are results computed outside the release loop that the
    report shows in their own sections (``dpglow_table3``: the dict of
    :func:`medanon.evaluate.flow_lr.evaluate_dpglow`). Returns the report as a dict.
    """
    from medanon.evaluate.report import build_grids, write_report

    cfg = config or EvalConfig()
    from medanon.config import validate

    validate(cfg)
    if not releases:
        raise ConfigError("no release to evaluate", fix="pass at least one --release DIR")
    dev = torch.device(device)
    out = Path(out)
    t0 = time.perf_counter()
    run = RunDir(out, config=cfg, command="evaluate", seeds={"evaluation": cfg.seed, "split": cfg.split.seed,
                                                            "utility": list(cfg.utility.seeds)})
    real = load_real(real_dir, size=cfg.size, splits_csv=splits, stratify=cfg.split.stratify, val=cfg.split.val,
                     test=cfg.split.test, seed=cfg.split.seed, progress=progress)
    run.record_input("real", real.root, files=[r.path for r in real.records])
    specs = [_spec(r) for r in releases]
    rels = [load_release(s.path, real, size=cfg.size, mapping=s.mapping, name=s.name) for s in specs]
    names = [r.name for r in rels]
    if len(set(names)) != len(names):
        raise ConfigError(f"two releases share a name: {names}", fix="give releases distinct folder names")
    cache = Cache(cache_dir if cache_dir is not None else out / "cache")
    ctx = RealContext(real, cfg, cache, dev, progress)
    n_fid = _fid_samples(cfg, rels)
    for note in _warnings(cfg, rels, n_fid):
        log.warning(note)
        ctx.notes.append(note)
    label_sets = [set(r.label_names) for r in rels]
    tasks = util.choose_tasks(cfg.utility.tasks, sorted(set.union(*label_sets)), real.label_names)
    results = []
    for rel in tqdm(rels, desc="releases", disable=not progress, unit="release"):
        key = digest(RESULTS_VERSION, rel.digest, ctx.key, to_dict(cfg), n_fid, [t.label for t in tasks],
                     str(rel.mapping_path and rel.mapping_path.stat().st_mtime_ns))
        got = cache.load_json(f"release-{key}")
        if got is None:
            got = evaluate_release(ctx, rel, n_fid=n_fid, tasks=tasks)
            cache.save_json(f"release-{key}", got)
        run.log_metrics(release=rel.name, seconds=got.get("seconds"))
        results.append(got)
    controls = _controls(ctx, n_fid, tasks)
    report = {
        "format": "medanon-evaluation", "version": RESULTS_VERSION,
        "phantom": real.phantom, "real": {"path": str(real.root), "images": len(real.records),
                                          "patients": len(set(real.patients.tolist())), "modality": real.modality,
                                          "split": real.split_source, "source_split": cfg.source_split,
                                          "heldout_split": cfg.heldout_split,
                                          "source_images": len(ctx.src), "heldout_images": len(ctx.held)},
        "sample_sizes": {"fid_per_release": n_fid, "fid_reference": len(ctx.ref_rows),
                         "utility_test": {t.label: len(ctx.test_set(t)[0]) for t in tasks}},
        "tasks": [t.label for t in tasks],
        "networks": {"inception": ctx.inception[1] if ctx.inception is not None else None,
                     "identity": ctx.identity_info},
        "config": to_dict(cfg), "device": str(dev), "controls": controls, "releases": results, "notes": ctx.notes,
        "studies": dict(studies or {}),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_report(out, report, build_grids(real, rels, n=cfg.grid, seed=cfg.seed))
    run.update(report=str(out / "report.html"), seconds=report["seconds"])
    run.finish()
    return report
