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

``inverted`` (GAN-Inverted, ``G(E(x))`` per image) is the non-anonymous comparison of the paper:
one record per image, k = 1, and the manifest says so.
"""

from __future__ import annotations

import hashlib
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from medanon.anonymize.augment import latent_views, prior_w_std
from medanon.anonymize.averaging import (
    PCA,
    centroid_latents,
    check_k,
    cluster_batches,
    member_weights,
    pad_clusters,
    pca_averages,
    pixel_averages,
)
from medanon.anonymize.clustering import Clustering, cluster_people
from medanon.anonymize.salsa import KSalsa, SalsaConfig
from medanon.errors import ConfigError, DataError

log = logging.getLogger(__name__)

METHODS = ("ksalsa", "kcentroid", "kpixel", "kpca", "inverted")
LATENT_METHODS = ("ksalsa", "kcentroid", "inverted")


@dataclass
class KSameConfig:
    method: str = "ksalsa"                      # ksalsa | kcentroid | kpixel | kpca | inverted
    k: int = 5                                  # people per record, at least
    stratify: str = ""                          # cluster within strata of this label (patient's worst value)
    drop_remainder: bool = False                # leave out the N mod k leftovers (and strata smaller than k)
    space: str = "auto"                         # clustering space: auto | latent | pca (auto: latent with a codec)
    batch: int = 8                              # clusters averaged together
    pca_components: float = 0.9                 # k-Same-PCA (and the pca space): count or variance fraction
    pca_fit_max: int = 2000                     # images the PCA is fitted on (seeded subsample beyond)
    views: int = 1                              # images per cluster (supplement E augmentation; 1 = off)
    view_sigma: float = 0.25                    # augmentation noise, relative to the prior's W std
    seed: int = 0                               # PCA subsample and augmentation noise
    salsa: SalsaConfig = field(default_factory=SalsaConfig)

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"method {self.method!r} is not one of {', '.join(METHODS)}")
        if self.space not in ("auto", "latent", "pca"):
            raise ConfigError(f"clustering space {self.space!r} must be auto, latent or pca")
        if self.batch < 1:
            raise ConfigError(f"batch={self.batch} must be at least 1")
        if self.views < 1:
            raise ConfigError(f"views={self.views} must be at least 1")
        if self.views > 1 and self.method not in ("ksalsa", "kcentroid"):
            raise ConfigError(f"--views {self.views}: the augmentation applies to latent averages (ksalsa, kcentroid)")
        if self.method != "inverted":
            check_k(self.k)
        self.salsa.validate()


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
    """PCA of the dataset's images on a seeded subsample of at most ``pca_fit_max`` images."""
    n = len(ds)
    pick = range(n) if n <= cfg.pca_fit_max else np.sort(
        np.random.default_rng(cfg.seed).choice(n, cfg.pca_fit_max, replace=False))
    return PCA(cfg.pca_components, fit_max=cfg.pca_fit_max, seed=cfg.seed).fit(load_images(ds, pick, device))


def privacy_statement(cfg: KSameConfig, clustering: Clustering | None) -> dict[str, Any]:
    if cfg.method == "inverted":
        return {"guarantee": "none: GAN-Inverted releases G(E(x)) for every image, one record per person's image; "
                             "it is the paper's non-anonymous comparison, not a de-identification",
                "k": 1}
    return {
        "guarantee": f"k-anonymity of records: every released image is computed only from the images of one "
                     f"cluster, and every cluster holds all images of at least k={cfg.k} distinct patients; each "
                     f"patient is in exactly one cluster"
                     + (f"; each cluster gives {cfg.views} images (augmented views of one average)"
                        if cfg.views > 1 else ""),
        "k": cfg.k, "unit": "patient (as identified by the source's patient ids)",
        "assumptions": ["the source's patient ids are correct: one id per person, one person per id",
                        "the models (generator, encoder, feature network) are not released; if they were trained "
                        "on the private images, what they memorised is outside this guarantee"],
        "not_guaranteed": "k-anonymity does not bound what can be inferred about a cluster member from the average "
                          "(it is not differential privacy); measure it with the membership-inference attack of "
                          "`medanon evaluate` (top-K accuracy, k-SALSA §4.5)",
        "clusters": len(clustering.clusters) if clustering else None,
        "dropped_images": len(clustering.dropped) if clustering else 0,
    }


def _generator(seed: int, key: str) -> torch.Generator:
    digest = hashlib.sha256(f"medanon-ksame-views:{seed}:{key}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


class ClusterAverager:
    """The images of a batch of clusters for one method (also used by the docs figure)."""

    def __init__(self, cfg: KSameConfig, ds, *, codec, features, latents, pca, device):
        self.cfg, self.ds, self.codec, self.latents, self.pca, self.device = cfg, ds, codec, latents, pca, device
        self.salsa = KSalsa(codec.render, features, cfg.salsa) if cfg.method == "ksalsa" else None
        self.w_std = prior_w_std(codec.generator, seed=cfg.seed) if cfg.views > 1 else None
        self.last: dict[str, float] = {}

    def __call__(self, clusters: list[np.ndarray], weights: list[np.ndarray], keys: list[str]) -> torch.Tensor:
        """(B, views, C, H, W) images of the clusters (``keys`` seed each cluster's augmentation noise)."""
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
            res = self.salsa.average(images, self.latents[torch.from_numpy(idx).to(self.latents.device)],
                                     w.to(self.device))
            ws = res.ws
            # per cluster: the run's summary averages over clusters, not over batches of unequal size
            self.last = {"style_start": res.style_start.tolist(), "style_end": res.style_end.tolist()}
        if self.cfg.views > 1:                   # noise per cluster from (seed, key): the same after a resume
            ws = torch.cat([latent_views(ws[j:j + 1], views=self.cfg.views, sigma=self.cfg.view_sigma,
                                         scale=self.w_std, generator=_generator(self.cfg.seed, key))
                            for j, key in enumerate(keys)])
        else:
            ws = ws[:, None]
        return self.codec.decode(ws.flatten(0, 1)).reshape(*ws.shape[:2], self.ds.channels, self.ds.size,
                                                           self.ds.size)


def plan_clusters(ds, cfg: KSameConfig, *, codec=None, device="cpu", progress: bool = True
                  ) -> tuple[Clustering, torch.Tensor | None, PCA | None]:
    """Everything before averaging: the latents (if any), the PCA (if needed) and the clusters."""
    from medanon.data.splits import patient_strata

    space = cfg.space if cfg.space != "auto" else ("latent" if codec is not None else "pca")
    if space == "latent" and codec is None:
        raise ConfigError("clustering in the latent space needs --model (an inversion codec)")
    latents = encode_all(ds, codec, progress=progress) if codec is not None else None
    pca = fit_pca(ds, cfg, device) if (cfg.method == "kpca" or space == "pca") else None
    if space == "latent":
        points = latents.flatten(1)
    else:
        points = torch.cat([pca.transform(load_images(ds, range(i, min(i + 256, len(ds))), device))
                            for i in range(0, len(ds), 256)]).float()
    strata = None
    if cfg.stratify:
        if cfg.stratify not in ds.label_names:
            raise ConfigError(f"--stratify {cfg.stratify!r} is not a label of the dataset",
                              fix=f"use one of {ds.label_names} or leave --stratify out")
        strata = patient_strata(ds.records, cfg.stratify)
    pids = [r.patient_id for r in ds.records]
    if len(set(pids)) == len(pids):
        log.info("every image has its own patient id: clustering images (one per person)")
    clustering = cluster_people(points, pids, cfg.k if cfg.method != "inverted" else 1, strata=strata,
                                drop_remainder=cfg.drop_remainder, progress=progress)
    return clustering, latents, pca


def release_ksame(ds, writer, cfg: KSameConfig, *, codec=None, features=None, device="cpu",
                  progress: bool = True, plan: tuple | None = None) -> dict[str, Any]:
    """Run ``cfg.method`` on dataset ``ds`` into an open :class:`~medanon.release.ReleaseWriter`.

    Returns a summary (clusters, records written, records resumed, mean style losses for k-SALSA).
    """
    cfg.validate()
    if cfg.method in LATENT_METHODS and codec is None:
        raise ConfigError(f"{cfg.method} needs --model: an inversion codec checkpoint (ReStyle encoder)")
    if cfg.method == "ksalsa" and features is None:
        raise ConfigError("ksalsa needs a feature network (--features)")
    if cfg.method == "inverted":
        return _release_inverted(ds, writer, codec, progress=progress)
    clustering, latents, pca = plan or plan_clusters(ds, cfg, codec=codec, device=device, progress=progress)
    if not clustering.clusters:
        raise DataError("no cluster could be formed", fix="lower --k or add data")
    keys = [cluster_key([ds.records[i].record_id for i in c]) for c in clustering.clusters]
    record_keys = {f"{key}/{v}" for key in keys for v in range(cfg.views)}
    stale = [k for k in writer.entries if k not in record_keys]
    if stale:
        raise ConfigError(f"the interrupted release holds {len(stale)} record(s) of clusters this run does not form "
                          f"(the data or the clustering changed)",
                          fix="delete the .partial folder next to --out and start again")
    pids = [r.patient_id for r in ds.records]
    weights = [member_weights(c, pids) for c in clustering.clusters]
    averager = ClusterAverager(cfg, ds, codec=codec, features=features, latents=latents, pca=pca, device=device)
    todo = [i for i, key in enumerate(keys) if not all(writer.done(f"{key}/{v}") for v in range(cfg.views))]
    resumed = len(keys) - len(todo)
    style = []
    bar = tqdm(cluster_batches(len(todo), cfg.batch), desc=f"{cfg.method} (clusters of >= {cfg.k})",
               disable=not progress, unit="batch")
    for rng in bar:
        chosen = [todo[i] for i in rng]
        images = averager([clustering.clusters[i] for i in chosen], [weights[i] for i in chosen],
                          [keys[i] for i in chosen])
        for j, c in enumerate(chosen):
            sources = [ds.records[i] for i in clustering.clusters[c]]
            for v in range(cfg.views):
                key = f"{keys[c]}/{v}"
                if not writer.done(key):
                    writer.add(key, images[j, v], sources)
        if averager.last:
            style.append(averager.last)
            bar.set_postfix(style=f"{np.mean(averager.last['style_start']):.3f}->"
                                  f"{np.mean(averager.last['style_end']):.3f}")
    summary = {"clusters": len(keys), "resumed_clusters": resumed, "records": len(writer),
               "dropped_images": len(clustering.dropped),
               "people_per_cluster": [int(min(len({pids[i] for i in c}) for c in clustering.clusters)),
                                      int(max(len({pids[i] for i in c}) for c in clustering.clusters))]}
    if style:
        summary["style_loss_start"] = float(np.mean([v for s in style for v in s["style_start"]]))  # over clusters
        summary["style_loss_end"] = float(np.mean([v for s in style for v in s["style_end"]]))
    if pca is not None:
        summary["pca"] = pca.describe()
    return summary


def _release_inverted(ds, writer, codec, *, progress: bool, batch: int = 64) -> dict[str, Any]:
    warnings.warn("GAN-Inverted releases one reconstruction per image: it is NOT anonymised (k = 1); it exists "
                  "only as the paper's comparison", stacklevel=3)
    todo = [i for i, r in enumerate(ds.records) if not writer.done(r.record_id)]
    for start in tqdm(range(0, len(todo), batch), desc="inverted", disable=not progress, unit="batch"):
        idx = todo[start:start + batch]
        images = codec.reconstruct(load_images(ds, idx, codec.device))
        for j, i in enumerate(idx):
            writer.add(ds.records[i].record_id, images[j], [ds.records[i]])
    return {"records": len(writer), "resumed": len(ds) - len(todo)}


def manifest_params(cfg: KSameConfig, *, codec=None, features=None) -> dict[str, Any]:
    """The method parameters the release manifest records (also the resume check: they must not change)."""
    p: dict[str, Any] = {"k": cfg.k if cfg.method != "inverted" else 1, "clustering": {
        "algorithm": "greedy same-size (k-SALSA §3.4), people-level, leftovers join nearest clusters"
                     if not cfg.drop_remainder else "greedy same-size (k-SALSA §3.4), people-level, leftovers dropped",
        "space": cfg.space if cfg.space != "auto" else ("latent" if codec is not None else "pca"),
        "stratify": cfg.stratify or None, "deterministic": True},
        "weights": "each patient 1/P in its cluster, shared among the patient's images"}
    if cfg.method == "inverted":
        p.pop("clustering")
        p.pop("weights")
    if cfg.method == "kpca" or p.get("clustering", {}).get("space") == "pca":
        p["pca"] = {"components": cfg.pca_components, "fit_max": cfg.pca_fit_max}
    if cfg.method == "ksalsa":
        p["salsa"] = cfg.salsa.describe()
        if features is not None and hasattr(features, "describe"):
            d = features.describe()
            p["salsa"]["feature_network"] = {"name": d.get("display_name", d.get("name")),
                                             "input_size": d.get("input_size")}
    if cfg.views > 1:
        p["augmentation"] = {"views": cfg.views, "sigma": cfg.view_sigma,
                             "noise": "w + sigma * std_prior(w) * N(0, I), one shift per view shared by all ws"}
    if codec is not None:
        p["codec"] = {k: v for k, v in codec.describe().items() if k in ("name", "iterations", "num_ws", "w_dim",
                                                                         "resolution", "noise_mode")}
    return p


def seeds_used(cfg: KSameConfig, *, codec=None) -> dict[str, int]:
    """The seeds a run depends on (clustering, inversion and k-SALSA are deterministic and need none)."""
    space = cfg.space if cfg.space != "auto" else ("latent" if codec is not None else "pca")
    seeds = {}
    if cfg.method == "kpca" or (space == "pca" and cfg.method != "inverted"):
        seeds["pca_subsample"] = cfg.seed
    if cfg.views > 1:
        seeds["augmentation"] = cfg.seed
    return seeds


def model_checksums(codec=None, features=None) -> dict[str, str]:
    out = {}
    if codec is not None:
        d = codec.describe()
        sha = (d.get("checkpoint") or {}).get("sha256")
        if sha:
            out[f"codec:{d.get('name')}"] = sha
        gen = d.get("generator_checkpoint")
        if isinstance(gen, dict) and gen.get("sha256"):
            out["generator"] = gen["sha256"]
    if features is not None and hasattr(features, "describe"):
        d = features.describe()
        if d.get("weights_sha256"):
            out[f"features:{d.get('name')}"] = d["weights_sha256"]
    return out
