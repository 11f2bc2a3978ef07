"""One entry point, :func:`evaluate`: real data + release folders -> ``report.json`` and ``report.html``.

Order of work: load and split the real data; load every release (and its private mapping where the
custodian provides one); fix each release's FID sample size (its own records up to a cap, or one common N);
then, per release, fidelity, utility and the attacks; then the controls (held-out real images, at every FID
sample size in use); finally the report. Everything derived from the real data alone is built
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
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from medanon.config import to_dict
from medanon.data.inputs import patients_known
from medanon.errors import ConfigError, DataError
from medanon.evaluate import fidelity as fid
from medanon.evaluate import utility as util
from medanon.evaluate.attack_suite import run_attacks
from medanon.evaluate.attacks.bootstrap import record_clusters
from medanon.evaluate.cache import Cache, check_cache_apart, digest
from medanon.evaluate.calibration import calibrate_and_judge
from medanon.evaluate.cautions import differencing_results, few_test_patients, k_claim
from medanon.evaluate.config import EvalConfig, result_key
from medanon.evaluate.context import RealContext, checkpoint_trained_on, split_rows
from medanon.evaluate.inputs import ReleaseData, load_real, load_release
from medanon.evaluate.model_people import model_people_notes
from medanon.evaluate.nearcopy import screen
from medanon.evaluate.network_checks import network_checks
from medanon.evaluate.setting_notes import release_side, setting_notes, size_notes, views_notes
from medanon.evaluate.utility_run import comparisons, full_real_utility, release_utility
from medanon.fsutil import sha256_file
from medanon.models.identity import load_identity
from medanon.output_inventory import checkpoint_kind
from medanon.outputs import check_output, check_run_folder
from medanon.runtime import RunDir

log = logging.getLogger(__name__)

RESULTS_VERSION = 27    # 27: a patient-clustered AUC interval that reaches 0 or 1 is widened to the score interval
#                         with one unit per patient, and its p-value is at least an exact permutation test's smallest;
#                         26: inference's control reweighted to the members' mix of the secret; the screen reads
#                         the attacker's split (screening.other); validity rows list their reasons; attackers
#                         trained here learn a fundus patient's eyes where eyes repeat (identity_unit);
#                         top-K takes a patient's records as one unit and leaves their other images out of a pool;
#                         25: fundus differencing: both orientations, a both-eyes patient turned to one side;
#                         24: top-K records how many held-out patients its pools draw from;
#                         23: top-K's interval resamples the held-out patients of its pools too;
#                         22: the attribute truth per patient, ties left out; a NaN residual never takes the verdict;
#                         top-K ranks the views of one cluster once;
#                         21: a release's records in content order (not file order); MOVER intervals of Wilson rates;
#                         20: a residual risk of Wilson rates is of the observed rates; the utility bootstrap's
#                         same-N real entry is real_same_n (was baseline); the verdict's exposure names the images
#                         screened; real.patient_ids_known (attacks invalid without ids);
#                         19: a residual against a control without spread takes its interval, kappa of one
#                         true class undefined; 18: nearest-record rows say the members left out;
#                         17: KID's resamples drawn as every other patient bootstrap's;
#                         16: KID's patient bootstrap interval; 15: intervals of two-sided AUCs, F1, AUROCs, leak kept,
#                         unclipped residuals;
#                         14: utility shares counted from chance (AUROC 0.5); 13: pooled top-K accuracy


@dataclass(frozen=True)
class ReleaseSpec:
    path: Path                                  # release folder
    mapping: Path | None = None                 # private mapping file (default: <release>.mapping.json if present)
    name: str | None = None                     # display name (default: the folder name)


def _spec(r: str | Path | ReleaseSpec) -> ReleaseSpec:
    return r if isinstance(r, ReleaseSpec) else ReleaseSpec(Path(r))


# ------------------------------------------------------------------------------------------------ per release


def _fidelity_block(ctx: RealContext, n: int, inception, identity, groups=None) -> dict:
    """FID + KID on Inception features and FD on identity embeddings of ``n`` images against the reference;
    ``inception`` / ``identity`` are callables giving the evaluated set's features; ``groups`` the patient (or
    patient cluster) of each evaluated image, for intervals that resample patients (None: images)."""
    f = ctx.cfg.fidelity
    out: dict[str, Any] = {"n": int(n), "n_reference": len(ctx.ref_rows)}
    ref_groups = ctx.real.patients[ctx.ref_rows]       # real images: always by patient (the release: by its groups)
    boot = {"n_boot": f.bootstrap, "confidence": ctx.cfg.attacks.confidence, "seed": ctx.cfg.seed,
            "groups_ref": ref_groups, "groups_eval": groups}
    if ctx.inception is not None:
        ref = ctx.real_inception(ctx.ref_rows, "reference")
        feats = inception()
        out["fid"] = fid.bootstrap_fd(ref, feats, **boot).to_dict()
        out["kid"] = fid.kid_with_error(ref, feats, subsets=f.kid_subsets, subset_size=f.kid_subset_size,
                                        n_boot=max(f.bootstrap, 2), seed=ctx.cfg.seed, groups1=ref_groups,
                                        groups2=groups)
    if f.in_domain:
        out["fd_identity"] = fid.bootstrap_fd(ctx.real_emb[ctx.ref_rows], identity(), **boot).to_dict()
    return out


def _fidelity(ctx: RealContext, rel: ReleaseData, n: int, rel_emb: np.ndarray) -> dict:
    rng = np.random.default_rng(np.random.SeedSequence([ctx.cfg.seed, 2]))
    pick = np.sort(rng.choice(len(rel.images), n, replace=False))
    groups = record_clusters(rel.sources, ctx.real.patients)[pick] if rel.sources is not None else None
    return _fidelity_block(ctx, n, lambda: ctx.inception_features(rel.images[pick], f"Inception ({rel.name})"),
                           lambda: rel_emb[pick], groups)


def _check_sources(real, source_split: str, rel: ReleaseData) -> None:
    """A release whose mapping names images outside the source split is refused (before anything is written); without
    a mapping, one whose public counts exceed the split's people or images (it cannot have been made from the split
    alone); and one made from a split that differs from the evaluation's, by the settings its manifest records."""
    _check_split_made(real, source_split, rel)
    if rel.sources is None:
        _check_counts(real, source_split, rel)
        return
    flat = np.asarray([i for rows in rel.sources for i in rows], np.int64)
    bad = flat[real.split[flat] != source_split]
    if len(bad):
        raise DataError(f"release {rel.path} stands for {len(bad)} image(s) outside the {source_split!r} split "
                        f"(e.g. patients {sorted(set(real.patients[bad].tolist()))[:5]}): its held-out patients "
                        f"would be tested against themselves", files=[str(rel.mapping_path)],
                        fix="evaluate with the split the release was made from (splits= CSV, or the config's "
                            "split.seed); a release made from every patient cannot be evaluated: make it again "
                            f"from the {source_split!r} split only (anonymise medanon.split_dataset(...)"
                            f"[{source_split!r}])")


def mapping_key(mapping: Path | None) -> str:
    """A release's mapping in its cache key: its content (a copy restored with its old time, ``cp -p``, ``rsync -a``,
    reused the numbers of the mapping it replaced when its modification time was the key)."""
    return "none" if mapping is None else sha256_file(mapping)


def _check_split_made(real, source_split: str, rel: ReleaseData) -> None:
    """The release's ``params.split`` (how the one split it released was made) against the evaluation's split: another
    split name, a splits file where the evaluation recomputes the split, or a recomputed split of other settings means
    the evaluation's held-out patients may be in the release (without the mapping nothing else would tell)."""
    made = rel.params.get("split")
    if not isinstance(made, dict):
        return                                   # released whole, or made before releases recorded it
    why = None
    if made.get("split") != source_split:
        why = f"it is the {made.get('split')!r} split, and the evaluation takes releases of the {source_split!r} split"
    elif real.split_settings is not None and made.get("from") == "splits file":
        why = "it was made from a splits file, and the evaluation recomputes the split"
    elif real.split_settings is not None and "seed" in made:
        wrong = [f"{k} {made[k]!r} (the evaluation's: {real.split_settings[k]!r})" for k in real.split_settings
                 if k in made and made[k] != real.split_settings[k]]
        why = "its split was recomputed with " + ", ".join(wrong) if wrong else None
    if why is not None:
        raise DataError(f"release {rel.path} was made from another patient split than this evaluation's: {why} (its "
                        "manifest's params.split); the evaluation's held-out patients may be in it and would be "
                        "tested against themselves",
                        fix="evaluate with the split the release was made from (the same splits= CSV, or the "
                            f"config's split.seed, split fractions and strata: {made})")


def _check_counts(real, source_split: str, rel: ReleaseData) -> None:
    counts = rel.manifest.get("counts") or {}
    inside = real.split == source_split
    have = {"people": len(set(real.patients[inside].tolist())), "sources": int(inside.sum())}
    over = [f"{counts[k]} {what} where the split has {have[k]}"
            for k, what in (("people", "people"), ("sources", "source images"))
            if isinstance(counts.get(k), int) and counts[k] > have[k]]
    if over:
        raise DataError(f"release {rel.path} stands for more than the {source_split!r} split holds "
                        f"({'; '.join(over)}, by its public manifest): it was made from other images too, so its "
                        "held-out patients may be in it and would be tested against themselves",
                        fix="evaluate with the split the release was made from (splits= CSV, or split_seed=), and "
                            "give its mapping")


def evaluate_release(ctx: RealContext, rel: ReleaseData, *, n_fid: int, tasks: list[util.Task]) -> dict:
    """Fidelity, utility and attacks of one release (no caching here; :func:`evaluate` has checked its sources)."""
    timing: dict[str, float] = {}
    res: dict[str, Any] = {
        "name": rel.name, "path": str(rel.path), "method": rel.method, "params": rel.params, "setting": rel.setting,
        "privacy": rel.manifest.get("privacy", {}), "phantom": bool(rel.manifest.get("phantom", False)),
        "records": len(rel.images), "counts": rel.manifest.get("counts", {}),
        **({"quality": rel.manifest["quality"]} if rel.manifest.get("quality") else {}),   # DP-GLOW's fallback
        "mapping": str(rel.mapping_path) if rel.mapping_path else None,
        "k_claim": k_claim(rel, ctx.real.patients),
    }
    t = time.perf_counter()
    rel_emb = ctx.embed(rel.images)                             # once per release: fidelity, attacks, screening
    res["fidelity"] = _fidelity(ctx, rel, n_fid, rel_emb)
    timing["fidelity"], t = time.perf_counter() - t, time.perf_counter()
    res["utility"] = release_utility(ctx, rel, tasks)
    timing["utility"], t = time.perf_counter() - t, time.perf_counter()
    rel_emb_mirrored = ctx.embed(rel.images.flip(-1))          # the attacks' orientation step and the screen
    res["attacks"] = run_attacks(ctx, rel, rel_emb, rel_emb_mirrored)
    timing["attacks"], t = time.perf_counter() - t, time.perf_counter()
    if ctx.cfg.attacks.screening:
        res["screening"] = screen(release_images=rel.images, release_emb=rel_emb,
                                  real_images=ctx.real.images, real_emb=ctx.real_emb, source_rows=ctx.src,
                                  heldout_rows=ctx.held, heldout_patients=ctx.real.patients[ctx.held],
                                  real_patients=ctx.real.patients, record_sources=rel.sources,
                                  quantile=ctx.cfg.attacks.near_copy_quantile, confidence=ctx.cfg.attacks.confidence,
                                  release_emb_mirrored=rel_emb_mirrored,
                                  real_emb_mirrored=ctx.real_emb_mirrored,
                                  other_rows=np.setdiff1d(np.arange(len(ctx.real.images)), np.r_[ctx.src, ctx.held]))
        timing["screening"] = time.perf_counter() - t
    res["seconds"] = {k: round(v, 2) for k, v in timing.items()}
    return res


def _control_fidelity(ctx: RealContext, sizes: Sequence[int]) -> dict[str, dict]:
    """The control of every FID sample size in use: held-out real images (new patients) through the same metrics.

    FID is biased by N, so each release is compared with a control of its own N. The subsets are nested (the first
    N of one seeded order of the held-out images), so the held-out images go through Inception once."""
    order = np.random.default_rng(np.random.SeedSequence([ctx.cfg.seed, 3])).permutation(ctx.held)
    top = min(max(sizes), len(order))
    cache: dict[str, np.ndarray] = {}

    def inception(m: int) -> np.ndarray:
        if "feats" not in cache:
            cache["feats"] = ctx.real_inception(order[:top], "heldout")
        return cache["feats"][:m]

    out = {}
    for n in sorted(set(sizes)):
        m = min(n, len(order))
        if m != n:
            what = "FID and FD are" if ctx.cfg.fidelity.inception else "FD is"
            ctx.note(f"the fidelity control of N = {n} has {m} held-out images: {what} biased by N, so that control "
                     f"is not a like-for-like floor; use more held-out patients or fidelity.samples={m}")
        rows = order[:m]
        out[str(n)] = _fidelity_block(ctx, m, lambda m=m: inception(m), lambda rows=rows: ctx.real_emb[rows],
                                      ctx.real.patients[rows])
    return out


def _controls(ctx: RealContext, sizes: Sequence[int], tasks: list[util.Task]) -> dict:
    """Rows for the real data itself: held-out real images through the same metrics (fidelity at every release's
    N; ``fidelity`` is the one at the largest N)."""
    out: dict[str, Any] = {"fidelity_by_n": _control_fidelity(ctx, sizes)}
    out["fidelity"] = out["fidelity_by_n"][str(max(sizes))]
    if ctx.cfg.utility.full_real:
        out["utility_full_real"] = full_real_utility(ctx, tasks)
    return out


def _fid_samples(cfg: EvalConfig, releases: Sequence[ReleaseData]) -> dict[str, int]:
    """The FID / KID / FD sample size of each release (by name): ``fidelity.samples`` for every release when set
    (one common N), else all of each release's records up to ``fidelity.max_samples``. The controls are measured at
    each N in use, so a release is never compared with a floor of another N."""
    f = cfg.fidelity
    if f.samples:
        n = min(f.samples, f.max_samples)
        small = [r.name for r in releases if len(r.images) < n]
        if small:
            capped = f" (capped at fidelity.max_samples={f.max_samples})" if n < f.samples else ""
            raise ConfigError(f"fidelity.samples={f.samples}{capped} is larger than release(s) {small} "
                              f"({min(len(r.images) for r in releases)} records in the smallest)",
                              fix="lower fidelity.samples, or set it to 0 to measure each release on its own size")
        sizes = {r.name: n for r in releases}
    else:
        sizes = {r.name: min(len(r.images), f.max_samples) for r in releases}
    tiny = [name for name, n in sizes.items() if n < 2]
    if tiny:
        raise ConfigError(f"FID needs at least two images per release; {tiny} have fewer",
                          fix="evaluate releases of two or more records")
    return sizes


ATTACKER_CHECKPOINTS = ("identity_checkpoint", "independent_checkpoint", "siamese_checkpoint", "attribute_checkpoint")
ATTACKER_KINDS = {"identity_checkpoint": "identity", "independent_checkpoint": "identity",
                  "siamese_checkpoint": "siamese", "attribute_checkpoint": "classifier"}


def _check_attacker_channels(cfg: EvalConfig, channels: int, modality: str | None) -> None:
    """An attacker network given as a checkpoint reads images of the real data's channel count: one trained on the
    other modality (1-channel X-rays for colour fundus photographs, or the reverse) would run on converted images
    and measure nothing of these patients (refused before any network is trained)."""
    from medanon.checkpoint import load_checkpoint

    for k in ATTACKER_CHECKPOINTS:
        path = getattr(cfg.attacks, k)
        if not path:
            continue
        conf = load_checkpoint(path).get("config") or {}
        theirs = (conf.get("backbone") or {}).get("in_channels", conf.get("in_channels", conf.get("channels")))
        if theirs is not None and int(theirs) != channels:
            raise ConfigError(f"attacks.{k}={path!r} was trained on {theirs}-channel images; the real data "
                              f"({modality or 'these images'}) are read with {channels}: it would attack converted "
                              "images of another modality", fix=f"pass a network trained on {modality or 'this'} "
                                                                 f"data, or attacks.{k}='' to train one on the "
                                                                 "attacker split")


def _checkpoint_digests(cfg: EvalConfig) -> dict[str, str]:
    """SHA-256 of every attacker checkpoint the config names."""
    return {k: sha256_file(getattr(cfg.attacks, k)) for k in ATTACKER_CHECKPOINTS if getattr(cfg.attacks, k)}


def _independent_info(ctx: RealContext) -> dict | None:
    a = ctx.cfg.attacks
    if not a.independent_attacker:
        return None
    if a.independent_checkpoint:
        net = ctx.independent
        said = (load_identity(a.independent_checkpoint)[1].get("extra") or {}).get("train_config") or {}
        return {"checkpoint": a.independent_checkpoint, "sha256": sha256_file(a.independent_checkpoint),
                "trained_on": checkpoint_trained_on(a.independent_checkpoint, ctx),
                "config": {"arch": said.get("arch", "from the checkpoint"), "image_size": net.cfg.image_size,
                           "seed": said.get("seed"), "steps": said.get("steps"),
                           "backbone": net.cfg.backbone.to_dict()}, "identity_unit": ctx.unit_of("independent")}
    return {"trained_on": f"real {ctx.attacker_from} split ({ctx.split_name(ctx.attacker_rows)})",
            "config": to_dict(a.independent), "identity_unit": ctx.attacker_units[1]}


def _refuse_written(spec: ReleaseSpec) -> None:
    """Refuse a release, or its mapping, that another run is writing now."""
    from medanon.locks import refuse_while_written

    refuse_while_written(spec.path)
    refuse_while_written(spec.mapping or Path(f"{spec.path}.mapping.json"), what="mapping")


def evaluate(real_dir: str | Path, releases: Sequence[str | Path | ReleaseSpec], out: str | Path, *,
             config: EvalConfig | None = None, splits: str | Path | None = None,
             device: torch.device | str = "cpu", cache_dir: str | Path | None = None,
             progress: bool = True, studies: dict[str, dict] | None = None, overwrite: bool = False) -> dict:
    """Evaluate ``releases`` against the real dataset in ``real_dir``; write ``out``/report.json and report.html.

    ``splits`` is the CSV of the patient-level split the releases were made with (else the split is
    recomputed from ``config.split``). ``cache_dir`` (default ``out/cache``)
    holds what is reused across runs. ``studies`` are results computed outside the release loop that the
    report shows in their own sections (``dpglow_table3``: the dict of
    :func:`medanon.evaluate.flow_lr.evaluate_dpglow`). ``overwrite``: replace the report of another evaluation in
    ``out`` (one of the same real data and a subset of these releases is extended without it). Returns the report.
    """
    from medanon.evaluate import report as rep_io

    cfg = config or EvalConfig()
    from medanon.config import validate

    validate(cfg)
    for k in ATTACKER_CHECKPOINTS:                  # before any work: a missing file is a setting's error
        path = getattr(cfg.attacks, k)
        if path and not Path(path).is_file():
            raise ConfigError(f"attacks.{k}={path!r}: no such file", fix=f"pass an existing checkpoint, or "
                              f"attacks.{k}='' to train that attacker on the attacker split")
        held = checkpoint_kind(path) if path else None
        if path and held != ATTACKER_KINDS[k]:      # before the run folder exists: nothing is left behind
            want = ATTACKER_KINDS[k]
            raise ConfigError(f"attacks.{k}={path!r} is {'a ' + held if held else 'not a medanon'} checkpoint, not "
                              f"the {want} network it names", fix=f"pass a checkpoint of kind {want}, or "
                              f"attacks.{k}='' to train that attacker on the attacker split")
    if not releases:
        raise ConfigError("no release to evaluate", fix="pass at least one release folder in releases=")
    dev = torch.device(device)
    cfg = cfg.resolved(dev)                     # classifiers' precision "auto": what runs here, in the report
    out = Path(out)
    t0 = time.perf_counter()
    specs = [_spec(r) for r in releases]
    reads = [real_dir, splits, *(s.path for s in specs), *(s.mapping for s in specs),
             *(getattr(cfg.attacks, k) or None for k in ATTACKER_CHECKPOINTS)]
    check_output(out, inputs=reads, existing_ok=True, kind="dir")   # before reading anything; written only once
    if cache_dir is not None:                                       # all is read
        check_cache_apart(cache_dir, out)
    cache_at = Path(cache_dir) if cache_dir is not None else out / "cache"     # the default too: it may be a link
    check_output(cache_at, inputs=reads, existing_ok=True, kind="dir", name="cache",
                 what="evaluation-cache")                           # an evaluation's cache, never another output
    check_run_folder(out, "evaluate")
    from medanon.locks import release_state

    for s in specs:                         # a release being written or replaced now would be read half old, half new
        _refuse_written(s)
    rep_io.check_report_replaceable(out, real_dir, [s.path for s in specs], overwrite=overwrite)
    rep_io.check_unedited(out)

    def outputs_apart(ds) -> None:          # its images may lie outside real_dir (a labels CSV naming them)
        from medanon.outputs import dataset_inputs

        inputs = [*reads, *dataset_inputs(ds)]       # one walk of its records for both outputs
        check_output(out, inputs=inputs, existing_ok=True, kind="dir")
        check_output(cache_at, inputs=inputs, existing_ok=True, kind="dir", name="cache", what="evaluation-cache")

    real = load_real(real_dir, size=cfg.size, splits_csv=splits, stratify=cfg.split.stratify, val=cfg.split.val,
                     test=cfg.split.test, seed=cfg.split.seed, progress=progress, opened=outputs_apart)
    rep_io.check_report_replaceable(out, real_dir, [s.path for s in specs], overwrite=overwrite, real=real)
    _check_attacker_channels(cfg, int(real.images.shape[1]), real.modality)
    before = [release_state(s.path, s.mapping) for s in specs]
    rels = [load_release(s.path, real, size=cfg.size, mapping=s.mapping, name=s.name) for s in specs]
    for s, was in zip(specs, before, strict=True):   # a writer that started or replaced it while it was read
        _refuse_written(s)
        if release_state(s.path, s.mapping) != was:
            raise DataError(f"release {s.path} changed while it was read (replaced or rewritten by another run)",
                            files=[str(s.path)], fix="evaluate it again once nothing writes it")
    names = [r.name for r in rels]
    if len(set(names)) != len(names):
        raise ConfigError(f"two releases share a name: {names}", fix="give releases distinct folder names")
    unknown = sorted({n for pair in cfg.utility.compare for n in pair} - set(names))
    if unknown:
        raise ConfigError(f"utility.compare names release(s) {unknown} that are not evaluated (releases: {names})",
                          fix="name releases by their display names (folder names unless given)")
    split_rows(real, cfg)                               # every refusal before the report folder is made
    for r in rels:
        _check_sources(real, cfg.source_split, r)
    n_fid = _fid_samples(cfg, rels)
    def recheck() -> None:                  # under the lock: another evaluation may have written here since
        rep_io.check_report_replaceable(out, real_dir, [s.path for s in specs], overwrite=overwrite, real=real)
        rep_io.check_unedited(out)

    run = RunDir(out, config=cfg, command="evaluate", seeds={"evaluation": cfg.seed, "split": cfg.split.seed,
                                                            "utility": list(cfg.utility.seeds)}, recheck=recheck)
    run.record_input("real", real.root, files=[r.path for r in real.records])
    cache = Cache(cache_dir if cache_dir is not None else out / "cache")
    if cache.swept:
        log.info("removed %d temporary file(s) an interrupted evaluation left in the cache %s", cache.swept,
                 cache.root)
    # comparisons read what each release left in the cache: naming pairs must not invalidate any cached result
    keyed = replace(cfg, utility=replace(cfg.utility, compare=()))
    ctx = RealContext(real, keyed, cache, dev, progress)
    for note in (setting_notes(cfg, rels, n_fid) + views_notes(real.dataset.read_options.xray_views, rels)
                 + size_notes(cfg.size, rels)):
        log.warning(note)
        ctx.notes.append(note)
    label_sets = [set(r.label_names) for r in rels]
    tasks = util.choose_tasks(cfg.utility.tasks, sorted(set.union(*label_sets)), real.label_names)
    for note in few_test_patients(ctx, tasks) + model_people_notes(rels, ctx):
        log.warning(note)
        ctx.notes.append(note)
    ckpts = _checkpoint_digests(cfg)                # a checkpoint replaced at the same path invalidates the cache
    results = []
    for rel in tqdm(rels, desc="releases", disable=not progress, unit="release"):
        key = digest(RESULTS_VERSION, rel.digest, ctx.key, result_key(cfg), ckpts, n_fid[rel.name],
                     [t.label for t in tasks],
                     mapping_key(rel.mapping_path))
        got = cache.load_json(f"release-{key}")
        if got is None:
            got = cache.save_json(f"release-{key}", evaluate_release(ctx, rel, n_fid=n_fid[rel.name], tasks=tasks))
        else:                                       # keyed by content: a moved or renamed release is reported as
            got.update(name=rel.name, path=str(rel.path),   # it is named now, not as when it was first evaluated
                       mapping=str(rel.mapping_path) if rel.mapping_path else None)
        got["sizes"] = {"release": release_side(rel), "evaluated": cfg.size}   # not cached: how it was read now
        run.log_metrics(release=rel.name, seconds=got.get("seconds"))
        results.append(got)
    compared = comparisons(ctx, rels, tasks, cfg.utility.compare)   # after every release (evaluated or cached)
    differenced = differencing_results(ctx, rels) if cfg.attacks.differencing else []
    controls = _controls(ctx, list(n_fid.values()), tasks)
    checks = network_checks(ctx) if (cfg.attacks.linkability or cfg.attacks.singling_out or cfg.attacks.nearest) \
        else {}
    calibration = calibrate_and_judge(ctx, ckpts, results, checks)
    report = {
        "format": "medanon-evaluation", "version": RESULTS_VERSION,
        "phantom": real.phantom, "real": {"path": str(real.root), "digest": rep_io.real_data_digest(real),
                                          "images": len(real.records),
                                          "patients": len(set(real.patients.tolist())), "modality": real.modality,
                                          "patient_ids_known": patients_known(real.dataset),
                                          "split": real.split_source, "source_split": cfg.source_split,
                                          "heldout_split": cfg.heldout_split,
                                          "source_images": len(ctx.src), "heldout_images": len(ctx.held)},
        "sample_sizes": {"fid_per_release": n_fid, "fid_reference": len(ctx.ref_rows),
                         "utility_test": {t.label: len(ctx.test_set(t)[0]) for t in tasks}},
        "tasks": [t.label for t in tasks],
        "networks": {"inception": ctx.inception[1] if ctx.inception is not None else None,
                     "identity": ctx.identity_info,
                     "independent": _independent_info(ctx),
                     "attacker_split": {"split": ctx.attacker_from, "images": len(ctx.attacker_rows),
                                        "patients": len(set(real.patients[ctx.attacker_rows].tolist()))},
                     "checks": checks, "utility_learner": ctx.learner.describe() if tasks else None,
                     "siamese": {"trained_on": ctx.siamese_trained_on,
                                 "identity_unit": "patient" if cfg.attacks.siamese_checkpoint else
                                 ctx.attacker_units[1]} if cfg.attacks.siamese else None,
                     "checkpoints_sha256": ckpts},
        "config": to_dict(cfg), "device": str(dev), "controls": controls, "releases": results,
        "comparisons": compared, "differencing": differenced,
        "calibration": calibration, "notes": ctx.notes,
        "controls_balanced_on": {"setting": cfg.attacks.balance, "label": ctx.balance_label,
                                 "how": ("every control rate of a residual risk but inference's reweighted to the "
                                         "members' strata of this label" if ctx.balance_label else
                                         "no control rate reweighted but inference's")
                                 + "; inference's always to the members' strata of its secret (each risk's "
                                   "control.balanced: strata, shares, weights)"},
        "studies": dict(studies or {}),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    rep_io.write_report(out, report, {**rep_io.build_grids(real, rels, n=cfg.grid, seed=cfg.seed),
                                      **rep_io.build_closest(real, rels, results)})
    run.update(report=str(out / "report.html"), seconds=report["seconds"],
               written=rep_io.written_digests(out))       # a rerun replaces them only as they were written
    run.finish()
    cache.close()
    if cache.reused:                                   # an interrupted or repeated evaluation: say what was reused
        log.info("%d result(s) read from the cache %s instead of computed (same inputs and settings)", cache.reused,
                 cache.root)
    return report
