"""Training the vessel segmenter (:class:`~medanon.models.unet.FullResUNet`), with resume and evaluation.

Data: a dataset whose layout provides vessel masks (the fundus phantoms; a generic CSV with a mask
column), or a DRIVE-style pair of folders (images + one manual vessel mask per image, paired by
:mod:`medanon.segment.mask_files`). Patients are split train / val / test (patient level, seeded);
images of a folder pair count as one patient each.

Loop: AdamW with a cosine learning rate, loss = binary cross-entropy + soft Dice, random flips and,
with ``patch > 0``, random square crops (the VS-Snow paper's "random sliding window sampler",
needed at 512 px on a CPU). After every epoch the validation Dice (threshold 0.5) and AUROC go to
``metrics.jsonl`` and ``last.pt`` (model, optimizer, RNG states, best weights) is written, so
``resume=True`` continues an interrupted run exactly. At the end, the best epoch's weights get the
probability threshold that maximises validation Dice, and the test split is scored for the U-Net
and, on the same images, for the Frangi and Sato baselines (``test_metrics.json``). The result is
``vessel-segmenter.pt`` (kind ``vessel-segmenter``, read by :mod:`medanon.segment.learned`).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
import warnings
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from medanon.checkpoint import load_checkpoint, save_checkpoint, state_entry
from medanon.config import differences
from medanon.data.dataset import ImageDataset
from medanon.data.records import Record, make_record_id
from medanon.data.splits import split_patients
from medanon.errors import ConfigError, DataError
from medanon.fsutil import atomic_write_text, sha256_bytes
from medanon.models.unet import FullResUNet
from medanon.runtime import RunDir, files_digest
from medanon.segment.learned import KIND
from medanon.segment.mask_files import load_aligned_mask, pair_folder
from medanon.segment.metrics import auroc, best_threshold, dice
from medanon.segment.vesselness import Vesselness
from medanon.train.distributed import Dist, local_shards, shard_rows
from medanon.train.loop import recheck_run_state, refuse_other_data, to_uint8_images, training_images_digest

log = logging.getLogger(__name__)


@dataclass
class SegmenterTrainConfig:
    size: int = 64                              # image side (power of two)
    width: int = 8                              # U-Net full-resolution channels
    levels: int = 3                             # U-Net resolutions
    stages: int = 3                             # U-Net exchange stages
    dropout: float = 0.1                        # channel dropout in the residual blocks
    epochs: int = 25
    batch_size: int = 16
    lr: float = 2e-3                            # peak AdamW learning rate (cosine decay to 1 %)
    weight_decay: float = 1e-4
    patch: int = 0                              # random training crops of this side (0 = whole images)
    val: float = 0.15                           # fraction of patients for validation
    test: float = 0.15                          # fraction of patients for the final test
    seed: int = 0                               # splits, initialisation, batches, augmentation

    def validate(self) -> None:
        if self.size < 16 or self.size & (self.size - 1):
            raise ConfigError(f"size={self.size} must be a power of two of at least 16", fix="use 64")
        step = 2 ** (self.levels - 1)
        if self.patch and (self.patch > self.size or self.patch % step):
            raise ConfigError(f"patch={self.patch} must be at most size={self.size} and divisible by {step}",
                              fix=f"use 0 (whole images) or a multiple of {step} up to {self.size}, e.g. "
                                  f"{max(step, self.size // 2)}")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ConfigError("epochs, batch_size and lr must be positive",
                              fix="e.g. epochs=25, batch_size=16, lr=2e-3")
        if not (0 < self.val < 1 and 0 < self.test < 1 and self.val + self.test < 1):
            raise ConfigError(f"val={self.val}, test={self.test} must be in (0, 1) and sum below 1",
                              fix="the threshold is calibrated on val and the scores come from test")


@dataclass
class SegmentationData:
    images: torch.Tensor                        # (N, C, H, W) float32 in [-1, 1]
    fov: torch.Tensor                           # (N, 1, H, W) bool
    masks: torch.Tensor                         # (N, 1, H, W) bool
    records: list[Record]                       # one per image (patient ids for the split)
    digest: dict[str, Any]                      # checksum of the image and mask files
    crop: str = "fov"                           # how the images were cropped (the checkpoint records it)

    def subset(self, idx: np.ndarray) -> SegmentationData:
        t = torch.as_tensor(idx, dtype=torch.long)
        return SegmentationData(self.images[t], self.fov[t], self.masks[t], [self.records[i] for i in idx],
                                self.digest, self.crop)


def data_from_dataset(ds: ImageDataset, *, progress: bool = True) -> SegmentationData:
    """Images and layout-provided masks (every record must have one): colour fundus photographs only."""
    if ds.modality != "fundus" or ds.channels != 3:
        raise DataError(f"{ds.root} holds {ds.modality or 'unknown'} images with {ds.channels} channel(s): the vessel "
                        "segmenter is trained on colour fundus photographs and their vessel masks (an X-ray "
                        "phantom's masks are lungs)", files=[str(ds.root)],
                        fix="train it on a fundus dataset with vessel masks, or on a folder pair of images and masks")
    lacking = [str(r.path) for r in ds.records if r.mask_path is None]
    if lacking:
        raise DataError(f"{len(lacking)} image(s) of {ds.root} have no vessel mask in the layout:", files=lacking,
                        fix="train on a dataset with masks (fundus phantoms have them), or on a folder pair "
                            "(data_from_folders(images_dir, masks_dir))")
    images, fov = ds.tensors(progress=progress)
    masks = torch.stack([ds.load(i)["mask"] for i in range(len(ds))])
    paths = [r.path for r in ds.records] + [r.mask_path for r in ds.records]
    return SegmentationData(images, fov, masks, list(ds.records), files_digest(paths, root=ds.root), ds.crop)


def data_from_folders(images_dir: str | Path, masks_dir: str | Path, *, size: int, channels: int = 3,
                      crop: str = "fov", progress: bool = True) -> SegmentationData:
    """A DRIVE-style pair of folders; each image is its own patient."""
    pairs = pair_folder(images_dir, masks_dir)
    root = Path(images_dir)
    records = [Record(path=p.resolve(), patient_id=p.stem, record_id=make_record_id(p.name), mask_path=m.resolve())
               for p, m in pairs]
    ds = ImageDataset([Record(r.path, r.patient_id, {}, r.record_id) for r in records], size=size,
                      channels=channels, crop=crop, modality="fundus", layout="folders", root=root)
    images, fov = ds.tensors(progress=progress)
    masks = torch.stack([torch.from_numpy(load_aligned_mask(m, p, size=size, crop=crop))[None] for p, m in pairs])
    digest = files_digest([p for p, _ in pairs] + [m for _, m in pairs], root=None)
    return SegmentationData(images, fov, masks, records, digest, crop)


def split_data(data: SegmentationData, cfg: SegmenterTrainConfig) -> dict[str, SegmentationData]:
    assignment = split_patients(data.records, val=cfg.val, test=cfg.test, seed=cfg.seed)
    out = {}
    for name in ("train", "val", "test"):
        idx = np.array([i for i, r in enumerate(data.records) if assignment[r.patient_id] == name], dtype=np.int64)
        if len(idx) == 0:
            raise DataError(f"the {name} split is empty ({len(data.records)} images of "
                            f"{len({r.patient_id for r in data.records})} patients)",
                            fix="use more patients or larger val and test fractions")
        out[name] = data.subset(idx)
    return out


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy + (1 − soft Dice over the batch)."""
    t = target.float()
    p = torch.sigmoid(logits)
    soft_dice = (2 * (p * t).sum() + 1) / (p.sum() + t.sum() + 1)
    return F.binary_cross_entropy_with_logits(logits, t) + (1 - soft_dice)


def augment(x: torch.Tensor, y: torch.Tensor, *, patch: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random horizontal / vertical flips per batch and, with ``patch``, one random crop per batch."""
    flips = torch.rand(2, generator=g)
    if flips[0] < 0.5:
        x, y = x.flip(-1), y.flip(-1)
    if flips[1] < 0.5:
        x, y = x.flip(-2), y.flip(-2)
    if patch and patch < x.shape[-1]:
        i, j = (int(v) for v in torch.randint(0, x.shape[-1] - patch + 1, (2,), generator=g))
        x, y = x[..., i:i + patch, j:j + patch], y[..., i:i + patch, j:j + patch]
    return x, y


@torch.inference_mode()
def predict(model: FullResUNet, images: torch.Tensor, *, batch_size: int = 64) -> torch.Tensor:
    model.eval()
    dev = next(model.parameters()).device
    return torch.cat([torch.sigmoid(model(c.to(dev))).cpu() for c in images.split(batch_size)])


def score(prob: torch.Tensor, data: SegmentationData, threshold: float) -> dict[str, float]:
    return {"dice": round(dice(prob >= threshold, data.masks, data.fov), 4),
            "auroc": round(auroc(prob, data.masks, data.fov), 4)}


SHARD_SEED_STRIDE = 7919                        # shard s > 0 seeds its dropout from cfg.seed + s * this
SEGMENTER_FILE = "vessel-segmenter.pt"             # the finished network, in the run folder


def _shard_rng(seed: int, s: int) -> torch.Tensor:
    """Initial dropout RNG state of shard s (shard 0: the process's global state, as one process has it)."""
    if s == 0:
        return torch.get_rng_state()
    return torch.Generator().manual_seed(seed + SHARD_SEED_STRIDE * s).get_state()


def _sharded_step(net: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                  rngs: dict[int, torch.Tensor], shards: int, dist: Dist) -> float:
    """One update on this rank's shards of the batch (x, y); returns the batch's size-weighted mean loss."""
    device = dist.device
    n = len(x)
    opt.zero_grad(set_to_none=True)
    total = torch.zeros((), device=device)
    mine = list(rngs)
    for i, s in enumerate(mine):
        xs, ys = shard_rows(x, s, shards), shard_rows(y, s, shards)
        last = i == len(mine) - 1
        with nullcontext() if not dist.enabled or last else net.no_sync():
            torch.set_rng_state(rngs[s])
            if len(xs):
                loss = loss_fn(net(xs.to(device)), ys.to(device)) * (len(xs) / n)
            else:                               # a short last batch: no rows here, still join the reduction
                loss = net(x[:1].to(device)).sum() * 0.0
            (loss * dist.world_size).backward()  # DDP averages over ranks
            rngs[s] = torch.get_rng_state()
        total += loss.detach()
    opt.step()
    return float(dist.all_reduce_sum(total))


def check_segmenter_run(out: str | Path, *, resume: bool) -> Path:
    """``out/last.pt``, checked against ``resume`` before any work (the command calls it before reading the data):
    a new run never starts over a run's state, and a resume needs one."""
    from medanon.train.loop import check_run_state

    # a run killed before its first epoch ended left neither file: a new run may start there
    return check_run_state(Path(out), resume=resume, state="last.pt", finished=(SEGMENTER_FILE,))


def train_segmenter(data: SegmentationData, out: str | Path, cfg: SegmenterTrainConfig, *,
                    device: torch.device | str = "cpu", resume: bool = False, progress: bool = True,
                    command: str = "train segmenter", dist: Dist | None = None, accumulation: int = 1) -> Path:
    """Train, calibrate and test; returns the path of ``vessel-segmenter.pt`` in ``out``.

    Data-parallel (``dist``, every rank calls this) and gradient accumulation: each batch and its
    augmentation are drawn as in one process and split into ``world_size * accumulation`` shards
    (rows ``s::S``); a step minimises the size-weighted mean of the shards' losses (the soft Dice and
    batch normalisation are a shard's, SyncBatchNorm across GPUs on CUDA); each shard has its own
    dropout random state (seeded ``seed + 7919 * s`` for s > 0). Rank 0 validates, writes the
    checkpoints and the result; the other ranks return the same path after training.
    """
    cfg.validate()
    side = int(data.images.shape[-1])
    if side != cfg.size:                        # the checkpoint records cfg.size: a later use would resize to it
        raise ConfigError(f"the segmentation data are {side} px and the config's size is {cfg.size}: the checkpoint "
                          "would record the wrong size, and every later use would resize images to it",
                          fix=f"pass size={side} in the config, or read the data at {cfg.size} px")
    out = Path(out)
    dist = dist or Dist(device=torch.device(device))
    device = dist.device
    shards = dist.world_size * accumulation
    last_path = check_segmenter_run(out, resume=resume)
    data_key = {"files_sha256": data.digest.get("sha256"),
                "patients_sha256": sha256_bytes("\n".join(r.patient_id for r in data.records).encode()),
                # the pixels as read: the same files under another --crop (or reader) are other training images
                "crop": data.crop, "pixels": training_images_digest(to_uint8_images(data.images))}
    held = None
    if resume and last_path.exists():            # before anything is written: a refused resume changes nothing
        held = load_checkpoint(last_path, kind=KIND + "-training")
        if held["config"]["train"] != json.loads(json.dumps(asdict(cfg))):
            raise ConfigError(f"{last_path} was written with other settings "
                              f"({differences(held['config']['train'], json.loads(json.dumps(asdict(cfg))))})",
                              fix="resume with the same options, or start a new run in another folder")
        refuse_other_data(last_path, held["extra"].get("data"), data_key,
                          fix="resume with the data it was started with (the same folders, crop and size), or start "
                              "a new run in another folder")
    dist.barrier()                              # every rank has checked before rank 0 writes
    splits = split_data(data, cfg)
    run = None
    if dist.is_main:
        at = int(held["step"]) if held is not None else None
        run = RunDir(out, config=cfg, command=command, seeds={"train": cfg.seed, "splits": cfg.seed},
                     new_run=not resume, resume_step=at,
                     recheck=recheck_run_state(out, at, state="last.pt", finished=(SEGMENTER_FILE,)))
        run.update(data=data.digest, device=str(device),
                   split_images={k: len(v.records) for k, v in splits.items()},
                   split_patients={k: len({r.patient_id for r in v.records}) for k, v in splits.items()})
        if shards > 1:
            run.update(distributed={**dist.describe(), "accumulation": accumulation, "shards": shards,
                                    "dropout_seeds": {s: cfg.seed + SHARD_SEED_STRIDE * s if s else "global RNG"
                                                      for s in range(shards)}})
    torch.manual_seed(cfg.seed)
    model_cfg = dict(in_channels=data.images.shape[1], width=cfg.width, levels=cfg.levels, stages=cfg.stages,
                     dropout=cfg.dropout)
    model = FullResUNet(**model_cfg).to(device)
    net: torch.nn.Module = model
    if dist.enabled:
        if device.type == "cuda":
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        net = torch.nn.parallel.DistributedDataParallel(   # some U-Net settings leave parameters unused
            model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    mine = list(local_shards(dist, accumulation))
    rngs = {s: _shard_rng(cfg.seed, s) for s in mine} if shards > 1 else {}   # dropout, per shard
    g = torch.Generator().manual_seed(cfg.seed)
    start, best = 0, {"dice": -1.0, "epoch": -1, "state": copy.deepcopy(model.state_dict())}
    if held is not None:
        blob = held
        model.load_state_dict(state_entry(blob, "model"))
        opt.load_state_dict(state_entry(blob, "optimizer"))
        g.set_state(state_entry(blob, "generator"))
        torch.set_rng_state(state_entry(blob, "torch_rng"))          # dropout draws from the global generator
        saved = [state_entry(blob, "torch_rng"), *blob["state"].get("shard_rngs", [])]
        for s_ in rngs:
            if s_ < len(saved):
                rngs[s_] = saved[s_]
        best = {"dice": blob["extra"]["best_dice"], "epoch": blob["extra"]["best_epoch"],
                "state": state_entry(blob, "best")}
        start = blob["step"]                             # RunDir said "resuming at step" (an epoch here)
    train = splits["train"]
    n = len(train.records)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total = cfg.epochs * steps_per_epoch

    def lr_at(step: int) -> float:
        return cfg.lr * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * step / total)))

    for epoch in tqdm(range(start, cfg.epochs), desc="training segmenter", disable=not (progress and dist.is_main),
                      initial=start, total=cfg.epochs, unit="epoch"):
        t0 = time.perf_counter()
        model.train()
        order = torch.randperm(n, generator=g)
        losses = []
        for b, idx in enumerate(order.split(cfg.batch_size)):
            for group in opt.param_groups:
                group["lr"] = lr_at(epoch * steps_per_epoch + b)
            x, y = augment(train.images[idx], train.masks[idx], patch=cfg.patch, g=g)
            if shards > 1:
                losses.append(_sharded_step(net, opt, x, y, rngs, shards, dist))
                continue
            loss = loss_fn(model(x.to(device)), y.to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if shards > 1:
            every: dict[int, torch.Tensor] = {}
            for part in dist.gather_objects(rngs):
                every.update(part)
            if not dist.is_main:
                continue
            torch_rng, shard_rngs = every[0], [every[s_] for s_ in range(1, shards)]
        else:
            torch_rng, shard_rngs = torch.get_rng_state(), None
        val = score(predict(model, splits["val"].images), splits["val"], 0.5)
        if val["dice"] > best["dice"]:
            best = {"dice": val["dice"], "epoch": epoch, "state": copy.deepcopy(model.state_dict())}
        run.log_metrics(step=epoch + 1, epoch=epoch + 1, loss=round(float(np.mean(losses)), 5), val_dice=val["dice"],
                        val_auroc=val["auroc"], seconds=round(time.perf_counter() - t0, 2))
        save_checkpoint(last_path, kind=KIND + "-training", config={"train": asdict(cfg), "model": model_cfg},
                        state={"model": model.state_dict(), "optimizer": opt.state_dict(),
                               "generator": g.get_state(), "torch_rng": torch_rng,
                               "best": best["state"], **({"shard_rngs": shard_rngs} if shard_rngs else {})},
                        step=epoch + 1, extra={"best_dice": best["dice"], "best_epoch": best["epoch"],
                                               "data": data_key})

    if not dist.is_main:
        return out / SEGMENTER_FILE
    model.load_state_dict(best["state"])
    threshold, val_dice = best_threshold(predict(model, splits["val"].images), splits["val"].masks,
                                         splits["val"].fov)
    test = splits["test"]
    results = {"unet": score(predict(model, test.images), test, threshold)}
    for method in ("frangi", "sato"):
        v = Vesselness(method=method)
        prob = v.probability(test.images, test.fov)
        results[method] = {"dice": round(dice(v.binarize(prob, test.fov), test.masks, test.fov), 4),
                           "auroc": round(auroc(prob, test.masks, test.fov), 4)}
    summary = {"test": results, "threshold": threshold, "val_dice_at_threshold": round(val_dice, 4),
               "best_epoch": best["epoch"] + 1, "test_images": len(test.records),
               "test_patients": len({r.patient_id for r in test.records}), "size": cfg.size}
    atomic_write_text(out / "test_metrics.json", json.dumps(summary, indent=2) + "\n")
    run.log_metrics(step="test", **{f"{m}_{k}": v for m, r in results.items() for k, v in r.items()})
    path = save_checkpoint(out / SEGMENTER_FILE, kind=KIND,
                           config={"model": model_cfg, "size": cfg.size, "crop": data.crop, "train": asdict(cfg)},
                           state={"model": {k: v.cpu() for k, v in model.state_dict().items()}},
                           step=cfg.epochs, extra={"threshold": threshold, "metrics": summary,
                                                   "data_sha256": data.digest["sha256"]})
    run.update(results=summary)
    run.finish()
    _warn_if_weak(results, len(test.records))
    return path


WEAK_AUROC = 0.6                                # below: the segmenter barely ranks vessel above background


def _warn_if_weak(results: dict[str, dict[str, float]], n_test: int) -> None:
    """A warning where the trained U-Net is no better than chance or than the untrained Frangi filter on the test
    split: VS-Snow would then perturb pixels that are mostly not vessels (its release says which segmenter it used,
    not how well it segments)."""
    unet, frangi = results["unet"], results["frangi"]
    why = []
    if not unet["auroc"] >= WEAK_AUROC:
        why.append(f"test AUROC {unet['auroc']:.3f} (below {WEAK_AUROC}: near chance)")
    if not unet["dice"] > frangi["dice"]:
        why.append(f"test Dice {unet['dice']:.3f}, no better than the Frangi filter's {frangi['dice']:.3f}")
    if why:
        warnings.warn(f"the trained vessel segmenter is weak on its {n_test} test images: {'; '.join(why)}; VS-Snow "
                      "with it perturbs pixels that are mostly not vessels. Train longer (epochs=), on more "
                      "annotated images, or use vessels='frangi'", UserWarning, stacklevel=3)
