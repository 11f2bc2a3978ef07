"""The k-Same pipeline: cluster people, average each cluster with one method, release through the writer.

``release_ksame`` runs one method of the family on a dataset:

1. the clustering space: the codec's inverted latents ``E(x)`` flattened (the paper's choice; every
   method then averages the *same* clusters), or, without a codec, the PCA coefficients of the
   pixels;
2. people-level same-size clustering (:func:`medanon.anonymize.clustering.cluster_people`): one
   point per patient, at least k patients per cluster, every image of a patient in one cluster;
3. averaging, cluster batch by cluster batch (progress bar per batch; clusters already in the
   release are skipped, so an interrupted run resumes);
4. one record per cluster (``views`` records with the augmentation), written with random names,
   aggregated labels and the private mapping by :class:`medanon.release.ReleaseWriter`.

Fundus photographs go through all of it as right eyes, left eyes mirrored, and each record is shown as its
patients' majority side (:mod:`medanon.anonymize.eye_sides`, ``eye_sides=``).

``inverted`` (GAN-Inverted, ``G(E(x))`` per image) is the non-anonymous comparison of the paper:
one record per image, k = 1, and the manifest says so.

The settings are :class:`~medanon.anonymize.ksame_config.KSameConfig`; what a release states and
records is :mod:`medanon.anonymize.ksame_statement`. Their public names are importable from here too.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from medanon.anonymize.augment import latent_views, prior_w_std
from medanon.anonymize.averaging import (
    PCA,
    batches_within_memory,
    centroid_latents,
    member_weights,
    pad_clusters,
    pca_averages,
    pixel_averages,
    resolve_batch,
)
from medanon.anonymize.clustering import Clustering, cluster_people
from medanon.anonymize.eye_sides import LEFT, align
from medanon.anonymize.ksame_config import DEFAULT_VIEW_SIGMA, LATENT_METHODS, METHODS, KSameConfig
from medanon.anonymize.ksame_statement import (
    ksame_models_overlap,
    manifest_params,
    model_checksums,
    privacy_statement,
    seeds_used,
)
from medanon.anonymize.privacy import DataDependentRelease, NotAnonymised
from medanon.anonymize.salsa import KSalsa
from medanon.errors import ConfigError, DataError, user_stacklevel
from medanon.release.aggregate import aggregate_labels, warn_homogeneity

__all__ = [
    "DEFAULT_VIEW_SIGMA",
    "LATENT_METHODS",
    "METHODS",
    "ClusterAverager",
    "KSameConfig",
    "cluster_key",
    "encode_all",
    "fit_pca",
    "ksame_models_overlap",
    "load_images",
    "manifest_params",
    "model_checksums",
    "plan_clusters",
    "privacy_statement",
    "release_ksame",
    "secret_generator",
    "seeds_used",
]

log = logging.getLogger(__name__)


def cluster_key(record_ids: Sequence[str]) -> str:
    """Resume key of a cluster: a digest of its members (kept only in the private journal)."""
    return "c" + hashlib.sha256("\n".join(sorted(record_ids)).encode()).hexdigest()[:20]


def load_images(ds, idx: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """Images ``idx`` of dataset ``ds`` as (len(idx), C, H, W) on ``device``."""
    return torch.stack([ds.load(int(i))["image"] for i in idx]).to(device)


def encode_all(ds, codec, *, batch: int = 64, progress: bool = True) -> torch.Tensor:
    """``codec.encode`` of every image, streamed in batches: (N, num_ws, w_dim) on the codec's device."""
    out = []
    for start in tqdm(range(0, len(ds), batch), desc="inverting images", disable=not progress, unit="batch"):
        out.append(codec.encode(load_images(ds, range(start, min(start + batch, len(ds))))))
    return torch.cat(out)


def fit_pca(ds, cfg: KSameConfig, device) -> PCA:
    """PCA of the dataset's images on a seeded subsample of at most ``pca_fit_max`` images.

    For k-Same-PCA pass a *separate* dataset here (``release_ksame(..., pca_basis=...)``): a basis fitted on
    the released data makes every record depend on images outside its cluster."""
    n = len(ds)
    pick = range(n) if n <= cfg.pca_fit_max else np.sort(
        np.random.default_rng(cfg.seed).choice(n, cfg.pca_fit_max, replace=False))
    return PCA(cfg.pca_components, fit_max=cfg.pca_fit_max, seed=cfg.seed).fit(load_images(ds, pick, device))


def secret_generator() -> np.random.Generator:
    """A generator seeded with 128 secret bits from the operating system (``secrets``); the seed is not kept. numpy's
    PCG64 keeps all 128 (torch's CPU generator would keep 32 of any seed).

    The augmentation noise needs no reproducibility: every view is an independent draw, so a resumed run
    simply draws fresh noise for the views it still has to write, and nothing is stored anywhere."""
    return np.random.default_rng(secrets.randbits(128))


class ClusterAverager:
    """The images of a batch of clusters for one method (also used by the docs figure)."""

    def __init__(self, cfg: KSameConfig, ds, *, codec, features, latents, pca, device, map_prior=None):
        self.cfg, self.ds, self.codec, self.latents, self.pca, self.device = cfg, ds, codec, latents, pca, device
        if map_prior is not None and (cfg.method != "ksalsa" or cfg.salsa.map_init != "synthetic"):
            raise ValueError("a map prior is k-SALSA's start with map_init='synthetic'; this config does not use one")
        self.map_prior = map_prior
        self.salsa = KSalsa(codec.render, features, cfg.salsa, style_rows=codec.generator.num_ws) \
            if cfg.method == "ksalsa" else None
        self.w_std = prior_w_std(codec.generator, seed=cfg.seed) if cfg.views > 1 else None
        self.last: dict[str, float] = {}

    def __call__(self, clusters: list[np.ndarray], weights: list[np.ndarray], keys: list[str]) -> torch.Tensor:
        """(B, views, C, H, W) images of the clusters (``keys`` name them; the augmentation noise is secret)."""
        m = self.cfg.method
        if m == "kpixel":
            imgs = [pixel_averages(load_images(self.ds, c, self.device), [np.arange(len(c))], [w])
                    for c, w in zip(clusters, weights, strict=True)]
            return torch.cat(imgs)[:, None]
        if m == "kpca":
            imgs = [pca_averages(load_images(self.ds, c, self.device), [np.arange(len(c))], [w], self.pca)
                    for c, w in zip(clusters, weights, strict=True)]
            return torch.cat(imgs)[:, None]
        if m == "kcentroid":
            ws = centroid_latents(self.latents, clusters, weights)
        else:
            idx, w = pad_clusters(clusters, weights)
            images = load_images(self.ds, idx.reshape(-1), self.device).reshape(*idx.shape, -1, self.ds.size,
                                                                               self.ds.size)
            start, chosen = None, []
            if self.map_prior is not None:       # the centroid's styles with the nearest synthetic map
                map_idx, start = self.map_prior.start(centroid_latents(self.latents, clusters, weights))
                chosen = map_idx.tolist()
            res = self.salsa.average(images, self.latents[torch.from_numpy(idx).to(self.latents.device)],
                                     w.to(self.device), start=start)
            ws = res.ws
            # per cluster: the run's summary averages over clusters, not over batches of unequal size
            self.last = {"style_start": res.style_start.tolist(), "style_end": res.style_end.tolist(),
                         "maps": chosen}
        if self.cfg.views > 1:                   # secret noise, fresh per cluster (never derivable from the manifest)
            ws = torch.cat([latent_views(ws[j:j + 1], views=self.cfg.views, sigma=self.cfg.view_sigma,
                                         scale=self.w_std, generator=secret_generator(),
                                         style_rows=self.codec.generator.num_ws)
                            for j, _ in enumerate(keys)])
        else:
            ws = ws[:, None]
        return self.codec.decode(ws.flatten(0, 1)).reshape(*ws.shape[:2], self.ds.channels, self.ds.size,
                                                           self.ds.size)


def check_basis(ds, cfg: KSameConfig, pca_basis, *, content: bool = True) -> None:
    """The separate PCA basis fits the released data (size, channels, modality) and, with ``content``, shares no
    image with it (:func:`~medanon.data.overlap.images_in_common`: the same file contents, the same 8-bit pixels,
    or a resized or re-encoded copy)."""
    if cfg.method == "kpca" and cfg.pca_basis == "separate" and pca_basis is None:
        raise ConfigError("pca_basis='separate' needs the separate dataset to fit the basis on",
                          fix="give the separate dataset (pca_basis=dataset), or use the private basis")
    if pca_basis is not None and cfg.pca_basis != "separate":
        raise ConfigError("a separate PCA basis dataset was given but the config says pca_basis='private'",
                          fix="set pca_basis='separate'")
    if pca_basis is not None and (pca_basis.size, pca_basis.channels) != (ds.size, ds.channels):
        raise ConfigError(f"the basis dataset gives {pca_basis.channels}x{pca_basis.size}px images, the released "
                          f"one {ds.channels}x{ds.size}px", fix="open both datasets with the same size= and channels=")
    if pca_basis is not None and getattr(pca_basis, "modality", None) != getattr(ds, "modality", None):
        raise ConfigError(f"the basis dataset holds {pca_basis.modality} images, the released one {ds.modality}",
                          fix="fit the basis on images of the released modality")
    from medanon.data.overlap import images_in_common, same_people

    if pca_basis is None or not content:
        return
    shared = images_in_common(ds, pca_basis)
    people = 0 if shared else same_people(ds, pca_basis)
    if shared or people:
        what = (f"{shared} of the images being released (the same file contents, the same 8-bit pixels, or resized "
                "or re-encoded copies)" if shared else f"other images of {people} of the patients being released "
                                                       "(the same folder or phantom, the same patient ids)")
        raise ConfigError(f"the basis dataset holds {what}: a basis fitted on them is not separate, and the "
                          "statement would claim it is",
                          fix="fit the basis on other patients' images (public data), or use the private basis")


def plan_clusters(ds, cfg: KSameConfig, *, codec=None, device="cpu", progress: bool = True, pca_basis=None
                  ) -> tuple[Clustering, torch.Tensor | None, PCA | None]:
    """Everything before averaging: the latents (if any), the PCA (if needed) and the clusters.

    ``pca_basis``: a dataset *separate* from ``ds`` (e.g. public images) to fit the PCA on, with
    ``cfg.pca_basis = "separate"``; otherwise the PCA is fitted on ``ds`` itself (and the k-Same-PCA
    statement says that every record then depends on the whole dataset through the basis).
    """
    from medanon.data.splits import patient_strata

    check_basis(ds, cfg, pca_basis)
    ds = align(ds, cfg.eye_sides if cfg.method != "inverted" else "off")          # left eyes averaged mirrored
    pca_basis = align(pca_basis, cfg.eye_sides) if pca_basis is not None else None
    space = cfg.space if cfg.space != "auto" else ("latent" if codec is not None else "pca")
    if space == "latent" and codec is None:
        raise ConfigError("space='latent' needs codec: an inversion codec to cluster in its latent space")
    latents = encode_all(ds, codec, progress=progress) if codec is not None else None
    pca = fit_pca(pca_basis if pca_basis is not None else ds, cfg, device) \
        if (cfg.method == "kpca" or space == "pca") else None
    if space == "latent":
        points = latents.flatten(1)
    else:
        points = torch.cat([pca.transform(load_images(ds, range(i, min(i + 256, len(ds))), device))
                            for i in range(0, len(ds), 256)]).float()
    strata = None
    if cfg.stratify:
        if cfg.stratify not in ds.label_names:
            raise ConfigError(f"stratify={cfg.stratify!r} is not a label of the dataset",
                              fix=f"use one of {ds.label_names} or leave stratify out")
        strata = patient_strata(ds.records, cfg.stratify)
    pids = [r.patient_id for r in ds.records]
    if len(set(pids)) == len(pids):
        log.info("every image has its own patient id: clustering images (one per person)")
    clustering = cluster_people(points, pids, cfg.k if cfg.method != "inverted" else 1, strata=strata,
                                drop_remainder=cfg.drop_remainder, progress=progress)
    return clustering, latents, pca


def release_ksame(ds, writer, cfg: KSameConfig, *, codec=None, features=None, device="cpu",
                  progress: bool = True, plan: tuple | None = None, pca_basis=None, map_prior=None,
                  validated: bool = False) -> dict[str, Any]:
    """Run ``cfg.method`` on dataset ``ds`` into an open :class:`~medanon.release.ReleaseWriter`.

    Returns a summary (clusters, records written, records resumed, mean style losses for k-SALSA).
    ``pca_basis``: a separate dataset for the k-Same-PCA basis (see :func:`plan_clusters`); ``map_prior``: k-SALSA's
    :class:`~medanon.anonymize.map_prior.MapPrior` (a codec with a spatial map, ``map_init="synthetic"``). Warns
    :class:`~medanon.anonymize.privacy.DataDependentRelease` for k-Same-PCA on a private basis and
    :class:`~medanon.anonymize.privacy.LabelHomogeneity` when a released label is the same for every
    patient of a record; the writer's privacy statement records the counts. ``validated``: ``cfg`` was checked
    (and its weak settings warned about) when the release was planned.
    """
    if not validated:
        cfg.validate()
    if cfg.method in LATENT_METHODS and codec is None:
        raise ConfigError(f"{cfg.method} needs codec: an inversion codec (ReStyle encoder) or its checkpoint")
    if cfg.method == "ksalsa" and features is None:
        raise ConfigError("ksalsa needs features: a feature network (medanon.models.features.get_feature_network)")
    if cfg.method == "inverted":
        return _release_inverted(ds, writer, codec, progress=progress)
    check_basis(ds, cfg, pca_basis)
    ds = align(ds, cfg.eye_sides)                       # as plan_clusters saw it: left eyes averaged mirrored
    pca_basis = align(pca_basis, cfg.eye_sides) if pca_basis is not None else None
    if cfg.method == "kpca" and cfg.pca_basis == "private":
        warnings.warn("k-Same-PCA with the basis fitted on the released data: every record depends on images outside "
                      "its cluster through the basis (the statement says so); pass a separate basis dataset "
                      "(pca_basis=dataset) to keep each record a function of its cluster only",
                      DataDependentRelease, stacklevel=user_stacklevel())
    clustering, latents, pca = plan or plan_clusters(ds, cfg, codec=codec, device=device, progress=progress,
                                                     pca_basis=pca_basis)
    if not clustering.clusters:
        raise DataError("no cluster could be formed", fix="lower k= or add data")
    labels = list(writer.settings.get("labels", []))
    homogeneous = warn_homogeneity([[ds.records[i] for i in c] for c in clustering.clusters], labels)
    if labels and hasattr(writer, "privacy"):
        writer.privacy["homogeneous_records"] = {n: f"{c} of {len(clustering.clusters)}"
                                                 for n, c in homogeneous.items()}
    keys = [cluster_key([ds.records[i].record_id for i in c]) for c in clustering.clusters]
    record_keys = {f"{key}/{v}" for key in keys for v in range(cfg.views)}
    stale = [k for k in writer.entries if k not in record_keys]
    if stale:
        raise ConfigError(f"the interrupted release holds {len(stale)} record(s) of clusters this run does not form "
                          f"(the data or the clustering changed)",
                          fix="delete the .partial folder next to the release folder and start again")
    pids = [r.patient_id for r in ds.records]
    weights = [member_weights(c, pids) for c in clustering.clusters]
    sides = ds.eye_sides                                # each record shown as its patients' majority side
    shown_left = [sides.aligned and sides.record_side(c, pids) == LEFT for c in clustering.clusters]
    averager = ClusterAverager(cfg, ds, codec=codec, features=features, latents=latents, pca=pca, device=device,
                               map_prior=map_prior)
    todo = [i for i, key in enumerate(keys) if not all(writer.done(f"{key}/{v}") for v in range(cfg.views))]
    resumed = len(keys) - len(todo)
    style = []
    batch = resolve_batch(cfg.batch, device, ds.size)

    def average(chosen: list[int]) -> torch.Tensor:
        return averager([clustering.clusters[i] for i in chosen], [weights[i] for i in chosen],
                        [keys[i] for i in chosen])

    bar = tqdm(total=len(todo), desc=f"{cfg.method} (clusters of >= {cfg.k})", disable=not progress, unit="cluster")
    for chosen, images, in_force in batches_within_memory(todo, batch, average, what=cfg.method):
        batch = in_force                        # smaller after running out of memory
        for j, c in enumerate(chosen):
            sources = [ds.records[i] for i in clustering.clusters[c]]
            for v in range(cfg.views):
                key = f"{keys[c]}/{v}"
                if not writer.done(key):
                    writer.add(key, images[j, v].flip(-1) if shown_left[c] else images[j, v], sources)
        bar.update(len(chosen))
        if averager.last:
            style.append(averager.last)
            bar.set_postfix(style=f"{np.mean(averager.last['style_start']):.3f}->"
                                  f"{np.mean(averager.last['style_end']):.3f}")
    bar.close()
    _labels_per_patient(writer, [[ds.records[i] for i in c] for c in clustering.clusters], keys, cfg.views, labels)
    summary = {"clusters": len(keys), "resumed_clusters": resumed, "records": len(writer), "clusters_per_batch": batch,
               "dropped_images": len(clustering.dropped),
               "people_per_cluster": [int(min(len({pids[i] for i in c}) for c in clustering.clusters)),
                                      int(max(len({pids[i] for i in c}) for c in clustering.clusters))]}
    if style:
        summary["style_loss_start"] = float(np.mean([v for s in style for v in s["style_start"]]))  # over clusters
        summary["style_loss_end"] = float(np.mean([v for s in style for v in s["style_end"]]))
        if resumed:                             # a resumed run's losses are of the clusters it computed itself
            summary["style_loss_clusters"] = len(keys) - resumed
        maps = [m for s in style for m in s["maps"]]
        if maps:                                # how many distinct synthetic maps this run's clusters took
            summary["synthetic_maps"] = {"clusters": len(maps), "distinct": len(set(maps))}
    if sides.aligned:
        summary["eye_sides"] = sides.describe(records_left=sum(shown_left) * cfg.views)
    if pca is not None:
        summary["pca"] = pca.describe()
    return summary


def _labels_per_patient(writer, sources: list[list], keys: list[str], views: int, labels: list[str]) -> None:
    """Set every record's released labels to the per-patient aggregation of its sources.

    The writer aggregates the label dicts it is given, one per image; a patient with many images
    would then outweigh the others. Until the writer hands the source records to
    :func:`~medanon.release.aggregate.aggregate_labels` itself, the k-Same release replaces each
    entry's labels (written ones and resumed ones alike) before the writer closes and writes
    ``labels.csv`` from them.
    """
    entries = getattr(writer, "entries", None)
    if not labels or entries is None:
        return
    for key, members in zip(keys, sources, strict=True):
        agg = aggregate_labels(members, labels)
        for v in range(views):
            entry = entries.get(f"{key}/{v}")
            if entry is not None and "labels" in entry:
                entry["labels"] = agg


def _release_inverted(ds, writer, codec, *, progress: bool, batch: int = 64) -> dict[str, Any]:
    warnings.warn("GAN-Inverted releases one reconstruction per image: it is NOT anonymised (k = 1); it exists "
                  "only as the paper's comparison", NotAnonymised, stacklevel=user_stacklevel())
    todo = [i for i, r in enumerate(ds.records) if not writer.done(r.record_id)]
    for start in tqdm(range(0, len(todo), batch), desc="inverted", disable=not progress, unit="batch"):
        idx = todo[start:start + batch]
        images = codec.reconstruct(load_images(ds, idx, codec.device))
        for j, i in enumerate(idx):
            writer.add(ds.records[i].record_id, images[j], [ds.records[i]])
    return {"records": len(writer), "resumed": len(ds) - len(todo)}
