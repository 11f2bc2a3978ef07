"""A Siamese verification attacker (Packhäuser et al., "Deep learning-based patient re-identification is able to
exploit the biometric nature of medical chest X-ray data", Sci. Rep. 12, 14851, 2022).

Packhäuser et al. train a Siamese network on image *pairs* to decide "same patient?" and reach a verification
AUC of 0.994 on ChestX-ray14. This is the same kind of attacker, small and in plain torch: one convolutional
branch with shared weights embeds both images, and a head on the symmetric pair features ``|a - b|`` and
``a * b`` gives the logit of "same patient" (binary cross-entropy on balanced genuine / impostor pairs). It
is trained on the attacker split (patients neither released nor controls), independently of the identity
networks (another architecture, another loss, pairs instead of patient classes).

:func:`siamese_attack` runs it on a release, scored two-sided like the other attacks, each number with N:

- ``reference``: verification of real held-out pairs (genuine: two images of one patient, or of one eye where the
  network learned eyes), the attacker's
  strength on unprotected images (Packhäuser's number); its threshold at the target FAR on all impostor
  pairs is the one applied below;
- ``outer``: pairs (real source image, released record), genuine when the record stands for the image's
  patient (AUC with DeLong interval, two-sided AUC, TAR / FAR at the reference's threshold);
- ``membership``: the attacker holds a real image ``x`` of the target (members: the very source images of the
  release; controls: real images of held-out patients, on equal footing) and scores each released record ``r``
  by the verifier's logit **relative to a perfect match**, ``min(logit(x, r) - logit(x, x), 0)``: 0 when the
  verifier rates ``r`` at least as high as ``x`` itself (an exact copy of ``x`` gives 0: its features are
  ``x``'s), below 0 by how far it falls short. The target is claimed to be in the release when its
  best-scoring record passes a threshold set on half of the held-out patients; the **control** is the same
  attack on the other half (:func:`medanon.evaluate.attacks.nearest.membership_from_scores`), with the
  residual risk against it.

Why relative to ``x``'s own pair: the head sees ``a * b`` as well as ``|a - b|``, so the raw logit of a pair
carries a per-image offset (how "typical" the image looks to the head) as large as the gap between genuine and
impostor pairs. On a fundus phantom (80 patients x 3 images, 32 px, fast preset) an exact copy's own pair had a
logit between 3.4 and 6.8 (5-95 %), the best impostor record of a held-out image up to 5.0: the raw best logit
found the copy with a residual risk of 0.29 [0.14, 0.43] although every member's own copy was its top record.
Scored relative to the target's own pair, the copy is a perfect match and the residual risk is 1.0.
It still misses near-copies there (JPEG at quality 75, a one-pixel shift: residual 0.0-0.1): the verifier
was trained to call two images of one patient "same", never to tell an image from its patient's other images.

Every TAR, FAR, AUC and rate gets a patient cluster bootstrap interval (seeded by ``seed``), as in
:mod:`.linkability` and :mod:`.nearest`: reference pairs by held-out patient, outer pairs by clusters of records
and source patients, membership targets by patient.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from medanon.data.tensors import resize_to
from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES, patient_clusters
from medanon.evaluate.attacks.linkability import (
    _pairs,
    record_clusters,
    sources_in_records,
    threshold_at_far,
    verification_rates,
)
from medanon.evaluate.attacks.nearest import membership_from_scores
from medanon.evaluate.attacks.views import assumptions
from medanon.train.identity import verification_ids

ASSUMPTIONS = ("attacker holds a Siamese network trained on pairs of real images of other patients (genuine: "
               "the same patient, or the same eye of a fundus patient where eyes are photographed repeatedly) and "
               "the real images it wants to verify or find (for members, the very source images); membership "
               "scores a record relative to the target image's own pair (a perfect match); thresholds fixed on real "
               "held-out patients")


@dataclass
class SiameseConfig:
    image_size: int = 32                        # input side (images are area-resized to it)
    width: int = 16                             # channels of the first block (doubled per block, 4 blocks)
    steps: int = 300                            # optimiser steps
    batch: int = 64                             # pairs per step, half genuine, half impostor
    lr: float = 2e-3
    self_pairs: float = 0.25                    # share of genuine pairs that are one image twice, both views
                                                # jittered: a released near-copy of a source is "the same patient"
    seed: int = 0


class SiameseNet(nn.Module):
    """Shared convolutional branch and a pair head; ``forward(a, b)`` is the logit of "same patient"."""

    def __init__(self, channels: int, cfg: SiameseConfig):
        super().__init__()
        w = cfg.width
        layers: list[nn.Module] = []
        c_in = channels
        for c_out in (w, 2 * w, 4 * w, 4 * w):
            layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c_out),
                       nn.ReLU(inplace=True), nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
                       nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            c_in = c_out
        self.branch = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, 64))
        self.head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(inplace=True), nn.Linear(64, 1))
        self.cfg = cfg

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.branch(resize_to(x, self.cfg.image_size))

    def pair_logits(self, fa: torch.Tensor, fb: torch.Tensor) -> torch.Tensor:
        """Symmetric in (a, b): the head sees ``|a - b|`` and ``a * b``."""
        return self.head(torch.cat([(fa - fb).abs(), fa * fb], 1)).squeeze(1)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.pair_logits(self.features(a), self.features(b))


def _sample_pairs(groups: list[np.ndarray], owner: np.ndarray, n: int, rng: np.random.Generator,
                  self_pairs: float = 0.0):
    """``n // 2`` genuine pairs (two different images of one patient; a share ``self_pairs`` of them one image
    twice) and ``n - n // 2`` impostor pairs."""
    g = n // 2
    pick = rng.integers(len(groups), size=g)
    ga = np.empty(g, np.int64)
    gb = np.empty(g, np.int64)
    for k, p in enumerate(pick):
        ga[k], gb[k] = rng.choice(groups[p], 2, replace=False)
    selfp = rng.random(g) < self_pairs                  # the same image twice (each view jittered on its own)
    gb[selfp] = ga[selfp]
    ia = rng.integers(len(owner), size=n - g)
    ib = rng.integers(len(owner), size=n - g)
    clash = owner[ia] == owner[ib]
    while clash.any():
        ib[clash] = rng.integers(len(owner), size=int(clash.sum()))
        clash = owner[ia] == owner[ib]
    return np.r_[ga, ia], np.r_[gb, ib], np.r_[np.ones(g), np.zeros(n - g)].astype(np.float32)


def _jitter(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Per image: contrast x[0.9, 1.1], brightness ±0.05 and Gaussian noise (sd 0.03)."""
    n = len(x)
    c = 0.9 + 0.2 * torch.rand(n, 1, 1, 1, generator=gen, device=x.device)
    b = 0.1 * torch.rand(n, 1, 1, 1, generator=gen, device=x.device) - 0.05
    return x * c + b + 0.03 * torch.randn(x.shape, generator=gen, device=x.device)


def train_siamese(images: torch.Tensor, patients: Sequence[str], *, cfg: SiameseConfig | None = None,
                  device: torch.device | str = "cpu") -> SiameseNet:
    """Train on balanced pairs of ``images`` (``(N, C, H, W)`` in [-1, 1]) of patients with two or more images."""
    cfg = cfg or SiameseConfig()
    pats = np.asarray(patients)
    _, owner, counts = np.unique(pats, return_inverse=True, return_counts=True)
    groups = [np.flatnonzero(owner == p) for p in np.flatnonzero(counts >= 2)]
    if len(groups) < 2:
        raise ValueError(f"the Siamese attacker needs two or more patients with two or more images, got {len(groups)}")
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        # a network this small uses two cores poorly: one thread trains it in 14 CPU-s on the demo's attacker
        # split, two threads on a loaded 2-core machine took 230 s wall (spinning)
        torch.set_num_threads(1)
    try:
        return _train(images, owner, groups, cfg, device)
    finally:
        torch.set_num_threads(threads)


def _train(images: torch.Tensor, owner: np.ndarray, groups: list[np.ndarray], cfg: SiameseConfig,
           device: torch.device | str) -> SiameseNet:
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0x51A]))
    x = resize_to(images, cfg.image_size).to(device)
    gen = torch.Generator(device=x.device).manual_seed(cfg.seed)
    net = SiameseNet(images.shape[1], cfg).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps)
    net.train()
    for _ in range(cfg.steps):
        a, b, y = _sample_pairs(groups, owner, cfg.batch, rng, cfg.self_pairs)
        xa, xb = _jitter(x[a], gen), _jitter(x[b], gen)
        flip = torch.from_numpy(rng.random(len(a)) < 0.5).to(device)          # the order of a pair carries nothing
        xa, xb = torch.where(flip[:, None, None, None], xb, xa), torch.where(flip[:, None, None, None], xa, xb)
        loss = F.binary_cross_entropy_with_logits(net(xa, xb), torch.from_numpy(y).to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return net.eval()


SIAMESE_KIND = "siamese"


def save_siamese(path, net: SiameseNet, *, extra: dict | None = None):
    """Write a kind-``siamese`` checkpoint: the weights, the input channels and the :class:`SiameseConfig`."""
    from dataclasses import asdict

    from medanon.checkpoint import save_checkpoint

    channels = net.branch[0].in_channels
    return save_checkpoint(path, kind=SIAMESE_KIND, config={"channels": channels, **asdict(net.cfg)},
                           state={"net": net.state_dict()}, extra=extra)


def load_siamese(path, *, map_location: str | torch.device = "cpu") -> tuple[SiameseNet, dict]:
    """Rebuild a :class:`SiameseNet` from its checkpoint; returns ``(net in eval mode, checkpoint blob)``."""
    from medanon.checkpoint import load_checkpoint, load_weights, state_entry

    blob = load_checkpoint(path, kind=SIAMESE_KIND, map_location="cpu")   # copied into the net, then moved
    conf = dict(blob["config"])
    channels = int(conf.pop("channels"))
    net = SiameseNet(channels, SiameseConfig(**conf))
    load_weights(net, state_entry(blob, "net"), path)
    return net.to(map_location).eval(), blob


@torch.no_grad()
def embed(net: SiameseNet, images: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """The branch's features of every image (computed once per image; pairs are then scored by the head)."""
    dev = next(net.parameters()).device
    return torch.cat([net.features(images[i:i + batch].to(dev)) for i in range(0, len(images), batch)]).cpu()


@torch.no_grad()
def score_pairs(net: SiameseNet, fa: torch.Tensor, fb: torch.Tensor, i: np.ndarray, j: np.ndarray,
                batch: int = 65536) -> np.ndarray:
    """Logits of pairs ``(fa[i], fb[j])``. The features and indices go to the network's device once and the pairs
    are gathered there (on a GPU, one copy each way instead of two gathered copies per chunk of pairs)."""
    if not len(i):
        return np.zeros(0)
    dev = next(net.parameters()).device
    fa, fb = fa.to(dev), fb.to(dev)
    ti = torch.from_numpy(np.ascontiguousarray(i, np.int64)).to(dev)
    tj = torch.from_numpy(np.ascontiguousarray(j, np.int64)).to(dev)
    out = [net.pair_logits(fa.index_select(0, ti[s:s + batch]), fb.index_select(0, tj[s:s + batch]))
           for s in range(0, len(ti), batch)]
    return torch.cat(out).double().cpu().numpy()


def score_matrix(net: SiameseNet, fa: torch.Tensor, fb: torch.Tensor) -> np.ndarray:
    """``(len(fa), len(fb))`` logits of every pair."""
    i, j = np.meshgrid(np.arange(len(fa)), np.arange(len(fb)), indexing="ij")
    return score_pairs(net, fa, fb, i.ravel(), j.ravel()).reshape(len(fa), len(fb))


MATCH_SCORE = "Siamese logit relative to the target's own pair, min(logit(x, r) - logit(x, x), 0)"


def match_scores(net: SiameseNet, target_feats: torch.Tensor, release_feats: torch.Tensor) -> np.ndarray:
    """``(targets, records)``: ``min(logit(x, r) - logit(x, x), 0)``, the verifier's score of each record relative
    to a perfect match of the target image ``x`` (0: ``r`` rated at least as high as ``x`` itself, as an exact copy
    of ``x`` is)."""
    n = np.arange(len(target_feats))
    own = score_pairs(net, target_feats, target_feats, n, n)
    return np.minimum(score_matrix(net, target_feats, release_feats) - own[:, None], 0.0)


def match_extremes(net: SiameseNet, target_feats: torch.Tensor, release_feats: torch.Tensor, *,
                   rows: int = 256, release_feats_mirrored: torch.Tensor | None = None) -> np.ndarray:
    """``(targets, 2)``: each target's best and worst :func:`match_scores` over the records, computed ``rows``
    targets at a time: with the whole matrix of 11,354 targets × 11,354 records and its int64 pair indices, the VS-Snow
    paper-scale evaluation was killed at 24 GB. The membership attack reads only these extremes (``max``/``min``).
    ``release_feats_mirrored``: the records' features mirrored left-right; each pair then scores its record's better
    orientation (:mod:`.views`)."""
    out = np.zeros((len(target_feats), 2))
    for s in range(0, len(target_feats), rows):
        block = match_scores(net, target_feats[s:s + rows], release_feats)
        if release_feats_mirrored is not None:
            block = np.maximum(block, match_scores(net, target_feats[s:s + rows], release_feats_mirrored))
        out[s:s + rows] = np.c_[block.max(1), block.min(1)]
    return out


def siamese_attack(net: SiameseNet, *, real_feats: torch.Tensor, release_feats: torch.Tensor,
                   patients: np.ndarray, source_rows: np.ndarray,
                   record_patients: Sequence[frozenset], member_rows: np.ndarray, calib_rows: np.ndarray,
                   control_rows: np.ndarray, target_far: float = 0.01, fpr: float = 0.1, max_pairs: int = 5000,
                   seed: int = 0, confidence: float = 0.95, balance=None, tables: bool = True,
                   n_resamples: int = BOOT_RESAMPLES, release_feats_mirrored: torch.Tensor | None = None,
                   reference_ids: np.ndarray | None = None) -> dict:
    """Reference (real held-out pairs), outer verification and membership with its held-out control (reweighted
    to the members' strata where ``balance`` is given, :mod:`.balance`).

    Rows index ``real_feats`` / ``patients``; ``source_rows`` are the real images of the release's members;
    ``calib_rows`` and ``control_rows`` are the two halves of the held-out patients. ``tables=False``: no outer
    verification table (its pair bootstrap), as the known-answer calibration needs; the risk entries are the same.
    ``release_feats_mirrored``: the records' features mirrored left-right; every pair with a record then scores the
    record's better orientation (:mod:`.views`); the reference stays on real pairs as they are. ``reference_ids``:
    the identity of each row as the network learned it (a fundus patient's eye, :func:`medanon.train.identity.
    identity_units`), which makes the reference's genuine pairs; default the patient. Everything else is the patient's
    (a record stands for patients)."""

    rng = np.random.default_rng(seed)
    boot = {"seed": seed, "n_resamples": n_resamples}
    held = np.r_[calib_rows, control_rows]
    hp = patients[held]
    # genuine: one identity as learned; where no eye is photographed twice among them, the patient's pairs
    hu = hp if reference_ids is None else verification_ids(np.asarray(reference_ids)[held], hp)[0]
    ci, cj, cl, _ = _pairs(hu[:, None] == hu[None, :], True, rng, 1_000_000, max_pairs)
    if cl.sum() == 0 or (~cl).sum() == 0:
        raise ValueError("the Siamese attacker's reference needs held-out patients with two or more images")
    ref = score_pairs(net, real_feats[held], real_feats[held], ci, cj)
    imp = ref[~cl]
    thr, low = threshold_at_far(imp, target_far), -threshold_at_far(-imp, target_far)
    out: dict = {"target_far": target_far, "threshold": thr, "low_threshold": low,
                 "assumptions": assumptions(ASSUMPTIONS, release_feats_mirrored),
                 "reference": verification_rates(ref, cl, thr, confidence=confidence, low_threshold=low,
                                                 groups=np.unique(hp, return_inverse=True)[1][np.c_[ci, cj]], **boot)}
    rp = list(record_patients)
    sp = patients[source_rows]
    same = sources_in_records(rp, list(sp))                                        # (sources, records)
    oi, oj, ol, osub = _pairs(same, False, rng, 1_000_000, max_pairs)
    rc, sc = record_clusters(rp, list(sp))
    out["outer"] = None
    if tables and ol.sum() and (~ol).sum():
        outer = score_pairs(net, real_feats[source_rows], release_feats, oi, oj)
        if release_feats_mirrored is not None:                      # each record at its better orientation
            outer = np.maximum(outer, score_pairs(net, real_feats[source_rows], release_feats_mirrored, oi, oj))
        out["outer"] = verification_rates(outer, ol, thr, confidence=confidence, low_threshold=low,
                                          groups=np.stack([sc[oi], rc[oj]], 1), **boot) | {"subsampled": bool(osub)}
    scores = {k: match_extremes(net, real_feats[rows], release_feats,           # (targets, [best, worst])
                                release_feats_mirrored=release_feats_mirrored)
              for k, rows in (("members", member_rows), ("calib", calib_rows), ("controls", control_rows))}
    out["membership"] = membership_from_scores(scores["members"], scores["controls"], scores["calib"], fpr=fpr,
                                               confidence=confidence, calibrated_on="half of the held-out patients",
                                               score=MATCH_SCORE,
                                               assumptions=assumptions(ASSUMPTIONS, release_feats_mirrored),
                                               member_groups=patients[member_rows],
                                               member_clusters=patient_clusters(rp, patients[member_rows]),
                                               control_groups=patients[control_rows],
                                               calib_groups=patients[calib_rows], balance=balance, **boot)
    out["risk"], out["risk_reverse"] = out["membership"]["risk"], out["membership"]["risk_reverse"]
    out["n"] = (out["outer"] or {}).get("genuine_pairs", 0)
    return out
