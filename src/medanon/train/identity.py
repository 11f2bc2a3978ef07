"""Training the identity network (ArcFace on patient ids) on real patients' repeated acquisitions.

Only patients with at least two acquisitions teach the network anything about re-acquisition
changes, so patients with one image are left out (and counted in the checkpoint). Batches are
sampled uniformly over images; augmentation mimics re-acquisition (translation, brightness,
contrast). The run checkpoints every ``checkpoint_every`` steps (network, ArcFace head, optimiser,
generator state) and resumes from the checkpoint at ``out`` when asked.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from medanon.checkpoint import load_checkpoint, state_entry
from medanon.data.tensors import resize_to
from medanon.data.training_people import patients_digest
from medanon.errors import ConfigError, DataError
from medanon.fsutil import sha256_bytes
from medanon.models.classifier import PRESETS, ResNetConfig
from medanon.models.identity import KIND, ArcFaceHead, IdentityConfig, IdentityNet, save_identity
from medanon.train.classifier import jitter
from medanon.train.distributed import Dist, local_shards, shard_rows, split_batch

log = logging.getLogger(__name__)


@dataclass
class IdentityTrainConfig:
    arch: str = "small"                         # backbone: small | resnet10 | resnet18
    embed_dim: int = 128                        # embedding size
    image_size: int = 64                        # images are area-resized to this side
    steps: int = 1500                           # optimiser steps
    batch: int = 64                             # images per step
    lr: float = 2e-3                            # AdamW peak learning rate (cosine decay)
    weight_decay: float = 5e-4                  # AdamW weight decay
    margin: float = 0.3                         # ArcFace additive angular margin (radians)
    scale: float = 16.0                         # ArcFace logit scale
    augment: bool = True                        # re-acquisition-like augmentation
    seed: int = 0                               # weights, batches, augmentation
    checkpoint_every: int = 250                 # steps between resumable checkpoints (0 = only at the end)

    def validate(self) -> None:
        if self.arch not in PRESETS:
            raise ConfigError(f"identity arch={self.arch!r} is unknown", fix=f"use one of {sorted(PRESETS)}")
        if self.steps < 1 or self.batch < 2 or self.embed_dim < 2 or self.image_size < 8:
            raise ConfigError("identity steps, batch (>= 2), embed_dim (>= 2) and image_size (>= 8) are too small")
        if not 0 <= self.margin < math.pi / 2 or self.scale <= 0:
            raise ConfigError(f"identity margin={self.margin} must be in [0, pi/2) and scale={self.scale} positive")

    def to_dict(self) -> dict:
        return asdict(self)


class _NetAndHead(torch.nn.Module):
    """Embedding network and ArcFace head as one module (one DDP wrapper for both)."""

    def __init__(self, net: IdentityNet, head: ArcFaceHead):
        super().__init__()
        self.net, self.head = net, head

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.head(self.net(x), y)


def _net_config(cfg: IdentityTrainConfig, channels: int) -> IdentityConfig:
    return IdentityConfig(backbone=ResNetConfig.preset(cfg.arch, in_channels=channels, num_classes=0),
                          embed_dim=cfg.embed_dim, image_size=cfg.image_size)


def _refuse_held(held: Path, final: Path | None, changed: list[str], how: str = "") -> None:
    kept = " (a finished network there is replaced only when the new one is)" if held == final else ""
    raise ConfigError(f"{held} holds an identity network trained with other {' and '.join(changed)}"
                      + (f" ({how})" if how else ""),
                      fix=f"choose another out file, or resume=False to train anew{kept}")


def _settings_changed(blob: dict, cfg: IdentityTrainConfig, channels: int) -> str:
    """Which settings differ from the checkpoint's, in words (``steps 300 -> 400``)."""
    from medanon.config import differences

    return "; ".join(d for d in (differences(blob["extra"].get("train_config") or {}, cfg.to_dict()),
                                 differences(blob["config"] or {}, _net_config(cfg, channels).to_dict(), "network."))
                     if d)


def _held(final: Path | None, resume: bool) -> Path | None:
    """The checkpoint a run of ``final`` resumes: its ``.partial`` (unfinished), else the finished network."""
    if final is None or not resume:
        return None
    return next((p for p in (final.with_name(final.name + ".partial"), final) if p.is_file()), None)


def _check_partial(final: Path) -> None:
    """``OUT.partial``, where an unfinished run keeps its state (and which a finished run removes), may be only such a
    state: a file of the user's by that name is never written over nor removed, even for a fresh run."""
    from medanon.outputs import check_output

    check_output(final.with_name(final.name + ".partial"), kind="file", existing_ok=True, name="out",
                 what="checkpoint:identity", can_overwrite=False)


def _same_settings(blob: dict, cfg: IdentityTrainConfig, channels: int) -> bool:
    return blob["extra"].get("train_config") == cfg.to_dict() and blob["config"] == _net_config(cfg, channels).to_dict()


def check_resumable(out: str | Path, cfg: IdentityTrainConfig, channels: int, *, resume: bool = True) -> None:
    """The settings part of :func:`train_identity`'s resume check, before any image is read: a network at ``out``
    (or its ``.partial``) trained with other settings is refused without decoding the dataset (minutes on a large
    one). The patients and images are compared when training starts."""
    _check_partial(Path(out))
    held = _held(Path(out), resume)
    if held is not None:
        blob = load_checkpoint(held, kind=KIND)
        if not _same_settings(blob, cfg, channels):
            _refuse_held(held, Path(out), ["settings"], _settings_changed(blob, cfg, channels))


def eye_ids(patient_ids: Sequence[str], sides: Sequence[float]) -> list[str]:
    """Each image's eye: its patient and side (``p1/L``, ``p1/R``). An image of unknown side (NaN) is of the patient's
    one known side where they have one, of their own unit ``p1/?`` where they have both, and the patient where they
    have none.

    >>> eye_ids(["a", "a", "b", "b", "b", "c"], [1.0, float("nan"), 0.0, 1.0, float("nan"), float("nan")])
    ['a/R', 'a/R', 'b/L', 'b/R', 'b/?', 'c']
    """
    if len(sides) != len(patient_ids):
        raise ValueError(f"{len(sides)} sides for {len(patient_ids)} patient ids")
    ids = [str(p) for p in patient_ids]
    side = [None if s != s else ("R" if float(s) >= 0.5 else "L") for s in sides]
    known: dict[str, set[str]] = {}
    for p, s in zip(ids, side, strict=True):
        if s is not None:
            known.setdefault(p, set()).add(s)

    def unit(p: str, s: str | None) -> str:
        if s is not None:
            return f"{p}/{s}"
        have = known.get(p, set())
        return p if not have else f"{p}/{next(iter(have))}" if len(have) == 1 else f"{p}/?"

    return [unit(p, s) for p, s in zip(ids, side, strict=True)]


def identity_units(patient_ids: Sequence[str], sides: Sequence[float] | None = None) -> tuple[list[str], str]:
    """The identities an attacker network learns, and their name: ``"eye"`` (:func:`eye_ids`) where ``sides`` (the
    ``laterality`` label: 0 left, 1 right, NaN unknown) shows some patient photographed in both eyes and eyes are
    photographed repeatedly, else ``"patient"``. A person's two retinas are different vessel patterns, so a network
    taught to give both one identity learns neither well; but where each eye has one image (EyePACS), eyes teach
    nothing about re-acquisition and the patient's two eyes are the only pairs. Eyes are chosen when the images of
    eyes photographed twice or more are at least half the images of patients photographed twice or more. The attacks
    still link a record to the patient (any of their images). Data of one eye per patient keeps the patient.

    >>> identity_units(["p1", "p1", "p1", "p1", "p2"], [0.0, 0.0, 1.0, 1.0, float("nan")])
    (['p1/L', 'p1/L', 'p1/R', 'p1/R', 'p2'], 'eye')
    >>> identity_units(["p1", "p1", "p2", "p2"], [0.0, 1.0, 0.0, 1.0])      # one image of each eye: the patient
    (['p1', 'p1', 'p2', 'p2'], 'patient')
    >>> identity_units(["a", "a", "b", "b"], [1.0, float("nan"), 0.0, 0.0])  # one eye each: the patient
    (['a', 'a', 'b', 'b'], 'patient')
    """
    ids = [str(p) for p in patient_ids]
    if sides is None:
        return ids, "patient"
    eyes = eye_ids(ids, sides)
    sided = {(p, float(s) >= 0.5) for p, s in zip(ids, sides, strict=True) if s == s}
    both = {p for p, right in sided if right and (p, False) in sided}

    def repeated(units: list[str]) -> tuple[int, int]:
        """Images of units photographed twice or more, and how many such units."""
        many = [n for n in Counter(units).values() if n >= 2]
        return sum(many), len(many)

    (eye_images, eye_units), (patient_images, _) = repeated(eyes), repeated(ids)
    if both and eye_units >= 2 and 2 * eye_images >= patient_images:
        return eyes, "eye"
    return ids, "patient"


def verification_ids(ids: Sequence[str], patient_ids: Sequence[str]) -> tuple[np.ndarray, bool]:
    """The identities a network's verification pairs are made of: ``ids`` (as it learned them, e.g. eyes) where some
    identity has two or more images, else the patients (whose pairs are then a patient's two eyes); and whether it
    fell back to the patients.

    >>> verification_ids(["a/L", "a/R"], ["a", "a"])
    (array(['a', 'a'], dtype='<U1'), True)
    """
    ids = np.asarray(ids)
    if len(np.unique(ids)) < len(ids):
        return ids, False
    return np.asarray(patient_ids), True


def train_identity(images: torch.Tensor, patient_ids: Sequence[str], *, cfg: IdentityTrainConfig | None = None,
                   out: str | Path | None = None, resume: bool = True, device: torch.device | str | None = None,
                   progress: bool = False, dist: Dist | None = None, accumulation: int = 1,
                   extra: dict[str, Any] | None = None) -> IdentityNet:
    """Train an :class:`IdentityNet` on ``images`` (N, C, H, W) of the patients ``patient_ids`` (N,).

    With ``out`` the network is checkpointed there (kind ``identity``) and, with ``resume``, a
    checkpoint left by an interrupted run with the same config and data is continued. ``extra``: more to record in
    the checkpoint (the command records the phantom and its patients it was trained on, where the data is one).

    Data-parallel (``dist``, every rank calls this) and gradient accumulation as in
    :func:`medanon.train.classifier.train_classifier`: the batch and its augmentation are drawn as in
    one process and split into ``world_size * accumulation`` shards, DDP sums the gradients of the
    network and the ArcFace head, batch normalisation sees a shard (SyncBatchNorm across GPUs on
    CUDA); rank 0 writes the checkpoint, which holds only global state and resumes with any number of ranks.
    """
    cfg = cfg or IdentityTrainConfig()
    cfg.validate()
    if images.ndim != 4 or len(images) != len(patient_ids):
        raise ValueError(f"images {tuple(images.shape)} and patient_ids ({len(patient_ids)}) do not match")
    counts = Counter(map(str, patient_ids))
    keep = [i for i, p in enumerate(map(str, patient_ids)) if counts[p] >= 2]
    ids = sorted({str(patient_ids[i]) for i in keep})
    if len(ids) < 2:
        raise DataError("the identity network needs at least two patients with two or more acquisitions each",
                        fix="train on a dataset with repeated acquisitions per patient (phantoms: per_patient=2+)")
    dropped = len(counts) - len(ids)
    if dropped:
        log.info("identity training: %d patient(s) with a single image left out", dropped)
    label_of = {p: i for i, p in enumerate(ids)}
    y_all = torch.tensor([label_of[str(patient_ids[i])] for i in keep])
    dev = torch.device(device) if device is not None else images.device
    if dist is not None:
        dev = dist.device
    dist = dist or Dist(device=dev)
    shards = dist.world_size * accumulation
    x_all = resize_to(images[keep].float(), cfg.image_size)
    net_cfg = _net_config(cfg, images.shape[1])
    digest = patients_digest(ids)
    assignment = sha256_bytes("\n".join(str(patient_ids[i]) for i in keep).encode())[:16]   # whose image is which
    meta = {"train_config": cfg.to_dict(), "patients": len(ids), "images": len(keep), "patients_digest": digest,
            "images_digest": sha256_bytes(x_all.detach().cpu().contiguous().numpy().tobytes())[:16],
            "assignment_digest": assignment,
            "single_image_patients_left_out": dropped, **(extra or {})}
    # until the last step the state goes to OUT.partial: OUT itself only ever holds a finished network
    final = Path(out) if out is not None else None
    partial = final.with_name(final.name + ".partial") if final is not None else None
    if final is not None:
        _check_partial(final)

    torch.manual_seed(int(cfg.seed))
    net = IdentityNet(net_cfg).to(dev)
    head = ArcFaceHead(cfg.embed_dim, len(ids), s=cfg.scale, m=cfg.margin).to(dev)
    params = list(net.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps)
                                                                               / cfg.steps)))
    gen = torch.Generator().manual_seed(int(cfg.seed))
    start = 0
    held = _held(final, resume)
    if held is not None:
        blob = load_checkpoint(held, kind=KIND)         # on the CPU, where the generator's state must be
        changed = [what for what, ok in (
            ("settings", _same_settings(blob, cfg, images.shape[1])),
            ("patients", blob["extra"].get("patients_digest") == digest
             and blob["extra"].get("assignment_digest", assignment) == assignment),   # (checkpoints before it: none)
            ("images", blob["extra"].get("images_digest", meta["images_digest"]) == meta["images_digest"]))
            if not ok]
        if changed:
            how = [_settings_changed(blob, cfg, images.shape[1])] if "settings" in changed else []
            if "patients" in changed or "images" in changed:
                was = (blob["extra"].get("images", "?"), blob["extra"].get("patients", "?"))
                now = (meta["images"], meta["patients"])
                if was != now:
                    how.append(f"trained on {was[0]} images of {was[1]} patients, these are {now[0]} images of "
                               f"{now[1]} patients")
                else:                                            # the counts agree: the content differs
                    other = " and ".join(w for w in ("patients", "images") if w in changed)
                    how.append(f"as many images ({now[0]}) and patients ({now[1]}), but other {other}")
            _refuse_held(held, final, changed, "; ".join(h for h in how if h))
        net.load_state_dict(state_entry(blob, "net"))
        if blob["step"] >= cfg.steps:
            log.info("identity network in %s is complete (%d steps)", out, blob["step"])
            return net.eval()
        head.load_state_dict(state_entry(blob, "head"))
        opt.load_state_dict(state_entry(blob, "opt"))
        sched.load_state_dict(state_entry(blob, "sched"))
        gen.set_state(state_entry(blob, "gen"))
        start = int(blob["step"])
        log.info("resuming identity training from step %d", start)

    both: torch.nn.Module = _NetAndHead(net, head)
    if dist.enabled:
        if dev.type == "cuda":
            net = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net)
            both = _NetAndHead(net, head)
        both = torch.nn.parallel.DistributedDataParallel(both, device_ids=[dev.index] if dev.type == "cuda" else None)

    def save(step: int) -> None:
        if final is not None and dist.is_main:
            done = step >= cfg.steps
            save_identity(final if done else partial, net, step=step, extra=meta,
                          state={"head": head.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                                 "gen": gen.get_state()})
            if done and partial.exists():
                partial.unlink()

    net.train()
    head.train()
    bs = min(cfg.batch, len(y_all))
    if shards > 1:
        split_batch(bs, dist.world_size, accumulation, what="identity batch")
    mine = list(local_shards(dist, accumulation))
    bar = tqdm(range(start, cfg.steps), desc="identity network", disable=not (progress and dist.is_main), unit="step")
    for step in bar:
        idx = torch.randint(0, len(y_all), (bs,), generator=gen)
        xb = x_all[idx]
        if cfg.augment:
            xb = jitter(xb, gen)
        if shards > 1:                          # this rank's shards; the mean over the whole batch
            xb, yb = xb.to(dev), y_all[idx].to(dev)
            opt.zero_grad(set_to_none=True)
            total = torch.zeros((), device=dev)
            for i, s in enumerate(mine):
                xs, ys = shard_rows(xb, s, shards), shard_rows(yb, s, shards)
                with nullcontext() if not dist.enabled or i == len(mine) - 1 else both.no_sync():
                    part = F.cross_entropy(both(xs, ys), ys, reduction="sum")
                    (part * dist.world_size / bs).backward()            # DDP averages over ranks
                total += part.detach()
            loss = dist.all_reduce_sum(total) / bs
        else:
            loss = F.cross_entropy(head(net(xb.to(dev)), y_all[idx].to(dev)), y_all[idx].to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            save(step + 1)
    save(cfg.steps)
    return net.eval()
