"""The linear k-Same averages (k-Same-Pixel, k-Same-PCA, k-Centroid) and the cluster bookkeeping they share.

Every average is a *weighted* mean over a cluster's images: each patient of the cluster counts the
same (1/P), shared equally among that patient's images (:func:`member_weights`), so a patient with
many acquisitions does not dominate a record that stands for P people.

- k-Same-Pixel: the weighted mean image.
- k-Same-PCA (Newton et al.'s k-Same-Eigen): project the images on the top principal components of
  the dataset, average the coefficients, reconstruct. Projection is linear, so this equals the
  pixel average projected on the principal subspace: it keeps the cluster's shared low-frequency
  structure and drops everything outside the subspace.
- k-Centroid: the weighted mean latent (Eq. 4), rendered by the generator; k-SALSA starts there.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import torch

from medanon.anonymize.privacy import WeakSetting
from medanon.errors import ConfigError, user_stacklevel

T, R = TypeVar("T"), TypeVar("R")


class FewerComponents(UserWarning):
    """The PCA basis supports fewer components than ``pca_components`` asked for: its image count or rank bounds
    them."""


def member_weights(members: np.ndarray, patient_ids: Sequence[str]) -> np.ndarray:
    """Weights of a cluster's rows summing to 1: each patient 1/P, split equally among their rows."""
    pats = [str(patient_ids[i]) for i in members]
    counts = {p: pats.count(p) for p in set(pats)}
    return np.array([1.0 / (len(counts) * counts[p]) for p in pats])


def weighted_means(values: torch.Tensor, clusters: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> torch.Tensor:
    """Weighted mean of ``values`` (N, ...) over each cluster: (len(clusters), ...)."""
    out = []
    for members, w in zip(clusters, weights, strict=True):
        idx = torch.as_tensor(members, device=values.device)
        wt = torch.as_tensor(w, dtype=values.dtype, device=values.device)
        out.append(torch.tensordot(wt / wt.sum(), values[idx], dims=1))
    return torch.stack(out)


def pixel_averages(images: torch.Tensor, clusters: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> torch.Tensor:
    """k-Same-Pixel: the weighted mean image of each cluster, (m, C, H, W)."""
    return weighted_means(images, clusters, weights)


def centroid_latents(latents: torch.Tensor, clusters: Sequence[np.ndarray], weights: Sequence[np.ndarray]
                     ) -> torch.Tensor:
    """k-Centroid / the k-SALSA start w0 (Eq. 4): the weighted mean latent of each cluster."""
    return weighted_means(latents, clusters, weights)


def check_components(n_components: float) -> None:
    """A PCA's components: an integer count >= 1, or a variance fraction in (0, 1)."""
    if not (0 < n_components < 1 or (float(n_components).is_integer() and n_components >= 1)):
        raise ConfigError(f"pca_components={n_components} must be a count >= 1 or a variance fraction in (0, 1)",
                          fix="e.g. pca_components=0.9 or pca_components=50")


class PCA:
    """Principal components of flattened images, fitted on a seeded subsample, in float64.

    ``n_components``: an integer count, or a fraction in (0, 1) of the variance to keep. The fit uses
    the n×n Gram matrix of the centred subsample (n = at most ``fit_max`` images), so memory is
    n×D floats for D pixels, whatever D is.
    """

    def __init__(self,
        n_components: int | float = 0.9,       # count, or fraction of variance to keep
        *,
        fit_max: int = 2000,                    # images used for the fit (a seeded random subsample beyond)
        seed: int = 0,                          # seed of the subsample
    ):
        check_components(n_components)
        self.n_components = n_components
        self.fit_max = fit_max
        self.seed = seed

    def fit(self, images: torch.Tensor) -> PCA:
        x = images.reshape(len(images), -1)
        if len(x) > self.fit_max:
            pick = np.sort(np.random.default_rng(self.seed).choice(len(x), self.fit_max, replace=False))
            x = x[torch.from_numpy(pick).to(x.device)]
        x = x.double()
        self.mean_ = x.mean(0)
        xc = x - self.mean_
        evals, evecs = torch.linalg.eigh(xc @ xc.T)                  # Gram: (n, n)
        evals, evecs = evals.flip(0).clamp_min(0), evecs.flip(1)
        total = evals.sum()
        ratio = evals / total if total > 0 else torch.zeros_like(evals)
        keep = evals > evals[0] * 1e-10 if total > 0 else torch.zeros_like(evals, dtype=torch.bool)
        rank = int(keep.sum())
        if self.n_components < 1:
            # sklearn's rule: the fewest components whose variance exceeds the fraction (right side on a tie)
            q = int(torch.searchsorted(ratio.cumsum(0), torch.tensor(self.n_components, dtype=ratio.dtype,
                                                                       device=ratio.device), right=True)) + 1
        else:
            q = int(self.n_components)
        q = max(1, min(q, rank, len(x) - 1 if len(x) > 1 else 1))
        if self.n_components >= 1 and q < int(self.n_components):
            warnings.warn(f"pca_components={int(self.n_components)}: a basis of {len(x)} image(s) (rank {rank}) has "
                          f"only {q} principal component(s); {q} are used (the release records the count used)",
                          FewerComponents, stacklevel=user_stacklevel())
        if rank == 0:                       # identical images: no direction varies, every coefficient is 0
            self.components_ = torch.zeros(q, xc.shape[1], dtype=xc.dtype, device=xc.device)
        else:
            self.components_ = (evecs[:, :q].T @ xc) / evals[:q].sqrt()[:, None]   # (q, D), orthonormal rows
        self.explained_variance_ratio_ = ratio[:q]
        self.n_components_ = q
        self.n_fit_ = len(x)
        return self

    def transform(self, images: torch.Tensor) -> torch.Tensor:
        x = images.reshape(len(images), -1).double()
        return (x - self.mean_) @ self.components_.T

    def inverse_transform(self, coeffs: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return (coeffs @ self.components_ + self.mean_).reshape(len(coeffs), *shape)

    def describe(self) -> dict[str, object]:
        return {"components": self.n_components_, "asked": self.n_components, "fit_images": self.n_fit_,
                "fit_seed": self.seed, "explained_variance": round(float(self.explained_variance_ratio_.sum()), 4)}


def pca_averages(images: torch.Tensor, clusters: Sequence[np.ndarray], weights: Sequence[np.ndarray],
                 pca: PCA) -> torch.Tensor:
    """k-Same-PCA: weighted mean of PCA coefficients per cluster, reconstructed (m, C, H, W)."""
    coeffs = pca.transform(images)
    avg = weighted_means(coeffs, clusters, weights)
    return pca.inverse_transform(avg, images.shape[1:]).to(images.dtype).clamp(-1, 1)


def pad_clusters(clusters: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> tuple[np.ndarray, torch.Tensor]:
    """Rectangular form of a batch of clusters: member indices (B, S) padded with the cluster's first
    member, and weights (B, S) with 0 on padding (so padded slots contribute nothing)."""
    s = max(len(c) for c in clusters)
    idx = np.stack([np.concatenate([c, np.full(s - len(c), c[0])]) for c in clusters]).astype(np.int64)
    w = torch.tensor(np.stack([np.concatenate([wi, np.zeros(s - len(wi))]) for wi in weights]))
    return idx, w


CPU_CLUSTER_BATCH = 32          # clusters averaged together by default on the CPU at 64 px (a quarter as many per
# doubling of the side, so that memory stays about the same): with the demo's codec, k-SALSA averaged 1.24, 1.43 and
# 0.97 times as many clusters a second as with 8 at k = 2, 5, 10 (`python benchmarks/cluster_batch.py`, docs/ksalsa.md).
CPU_BATCH_SIZE = 64             # the image side that CPU_CLUSTER_BATCH is for
# ... and on a GPU, where launches bound small batches: k-SALSA at 256 px, bf16, k = 5 took 0.161 s a cluster with 64
# per batch on an H200, 0.176 with 32 and 0.182 with 128 on an H100 (docs/gpu.md). Halved on running out of memory.
GPU_CLUSTER_BATCH = 64


def resolve_batch(batch: int, device: torch.device | str, size: int = CPU_BATCH_SIZE) -> int:
    """Clusters per batch: ``batch``, or for 0 (the default) :data:`GPU_CLUSTER_BATCH` on a GPU and on the CPU
    :data:`CPU_CLUSTER_BATCH` at 64 px, scaled by ``(64 / size)²`` for images of side ``size`` (memory and work per
    cluster grow with the pixels), at least 1. Batching changes the speed, and an optimised average only by float
    rounding (batched convolutions round with the batch's size; docs/distributed.md).

    >>> resolve_batch(0, "cpu", 64), resolve_batch(0, "cpu", 128), resolve_batch(0, "cpu", 512), resolve_batch(5, "cpu")
    (32, 8, 1, 5)
    """
    if batch:
        return int(batch)
    if torch.device(device).type != "cpu":
        return GPU_CLUSTER_BATCH
    return max(1, int(CPU_CLUSTER_BATCH * (CPU_BATCH_SIZE / size) ** 2))


def batches_within_memory(items: Sequence[T], batch: int, run: Callable[[list[T]], R], *,
                          what: str) -> Iterator[tuple[list[T], R, int]]:
    """``run`` on consecutive batches of at most ``batch`` items, yielding each batch with its result and the batch
    size in force. The items are shared evenly between the fewest batches of at most ``batch`` (70 items at 32 a
    batch: 24, 24, 22, not 32, 32, 6), so that no short last batch runs at a small batch's speed. A batch that runs out
    of device memory (``torch.OutOfMemoryError``) is tried again with half as many items, down to one, and a warning
    names the new size; the batches after it keep that size."""
    if items and batch > 0:
        batch = math.ceil(len(items) / math.ceil(len(items) / batch))
    pos = 0
    while pos < len(items):
        chunk = list(items[pos:pos + batch])
        out_of_memory = False
        try:
            out = run(chunk)
        except torch.OutOfMemoryError:
            if len(chunk) == 1:
                raise
            out_of_memory = True                 # freed below, once the exception no longer holds its tensors
        if out_of_memory:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            batch = len(chunk) // 2
            warnings.warn(f"{what}: out of device memory with {len(chunk)} per batch; continuing with {batch}",
                          RuntimeWarning, stacklevel=user_stacklevel())
            continue
        yield chunk, out, batch
        pos += len(chunk)


def check_k(k: int, method: str = "") -> None:
    """k below 2 gives no anonymity at all: refuse; warn that k = 2 is weak (the paper's Table 3, and for k-SALSA
    the reproduction on phantoms, docs/reproduction.md)."""
    if k < 2:
        raise ConfigError(f"k={k}: a record of fewer than 2 people is not anonymised",
                          fix="use k = 5 or more (the paper evaluates 2, 5 and 10)")
    if k == 2:
        extra = ("; on phantoms at the paper's scale k-SALSA at k = 2 leaked more than k-Centroid (membership top-K "
                 "44.5 % against 33.4 %, 320 records each)" if method == "ksalsa" else "")
        warnings.warn("k = 2: no method gave strong protection against membership inference at k = 2 in the "
                      f"k-SALSA paper (Table 3){extra}; prefer k >= 5", WeakSetting, stacklevel=user_stacklevel())
