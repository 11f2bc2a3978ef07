"""Training a GLOW flow by maximum likelihood, with checkpoints, ``resume`` and bits/dim.

::

    OUT/
      config.yaml  metrics.jsonl  manifest.json    the run directory (medanon.runtime.RunDir)
      checkpoint.pt                               training state (model, Adam, step, RNG): --resume
      flow.pt                                     the trained flow + calibration statistics (kind "glow")

The loss is the discrete bits/dim of the dequantised 8-bit images (:mod:`medanon.models.glow.dequantize`).
When training ends, the flow's standardised latents of the training images are reduced to their
per-element min and max — DP-GLOW's calibration statistics (paper steps 3–4) — and stored in
``flow.pt`` with their checksum, so that ``medanon anonymize dpglow`` calibrates on the flow's own
training set unless told otherwise.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from medanon.anonymize.dpglow import calibrate_latent
from medanon.anonymize.ldp import ClipCalibration
from medanon.checkpoint import load_checkpoint, load_weights, save_checkpoint, state_entry
from medanon.config import differences, from_dict, to_dict
from medanon.errors import ConfigError
from medanon.models.glow import Glow, GlowCodec, GlowConfig, bits_per_dim, dequantize, image_to_flow
from medanon.models.glow.actnorm import ActNorm, sync_actnorm
from medanon.runtime import RunDir
from medanon.train.distributed import Dist, local_shards, shard_rows, split_batch
from medanon.train.loop import check_run_state, recheck_run_state, refuse_other_data

log = logging.getLogger(__name__)

KIND = "glow"                                   # a trained flow (what anonymize and evaluate load)
KIND_TRAINING = "glow-training"                 # the resumable training state
MAX_BAD_STEPS = 20                              # consecutive non-finite losses before giving up
VAL_IMAGES_AT_CHECKPOINT = 64                   # validation bits/dim at checkpoints uses this many images


@dataclass
class FlowRun:
    """What :func:`train_flow` returns."""

    path: Path                                  # flow.pt
    steps: int
    train_bpd: float                            # bits/dim of the training images (bin centres, no noise)
    val_bpd: float | None                       # bits/dim of the validation images, if any
    seconds: float                              # training time of this run (not counting resumed parts)


# ------------------------------------------------------------------------------------------------ I/O


def save_flow(path: str | Path, flow: Glow, *, calibration: ClipCalibration | None = None, step: int = 0,
              extra: dict[str, Any] | None = None) -> Path:
    state: dict[str, Any] = {"model": flow.state_dict()}
    extra = dict(extra or {})
    if calibration is not None:
        state["calibration"] = calibration.to_state()
        extra["calibration_sha256"] = calibration.checksum()
    return save_checkpoint(path, kind=KIND, config=to_dict(flow.cfg), state=state, step=step, extra=extra)


def load_flow(path: str | Path, *, map_location: str | torch.device = "cpu"
              ) -> tuple[GlowCodec, ClipCalibration | None, dict[str, Any]]:
    """A trained flow as a codec, its stored calibration statistics (or None) and the checkpoint blob."""
    blob = load_checkpoint(path, kind=KIND, map_location=map_location)
    cfg = from_dict(GlowConfig, blob["config"], where=f"{path}: config")
    flow = Glow(cfg).to(map_location)
    load_weights(flow, state_entry(blob, "model"), path)
    cal = blob["state"].get("calibration")
    try:
        calibration = ClipCalibration.from_state(cal) if cal is not None else None
    except ValueError as e:                          # statistics that are not finite, or hi < lo: a damaged file
        raise ConfigError(f"checkpoint {path} is damaged: its clip calibration is not usable ({e})",
                          fix="copy or export the checkpoint again, or retrain it with `medanon train flow`") from None
    codec = GlowCodec(flow, sha256=blob["sha256"], calibration=calibration,
                      trained_on=(blob.get("extra") or {}).get("data"))
    codec.provenance = {"checkpoint": {"path": str(path), "sha256": blob["sha256"]}}   # named in a release's manifest
    return codec, calibration, blob


# ------------------------------------------------------------------------------------------------ metrics


@torch.no_grad()
def evaluate_bpd(flow: Glow, images: torch.Tensor, *, batch: int = 64) -> float:
    """Mean bits/dim of 8-bit images (N, C, H, W) in [-1, 1], at the bin centres (deterministic)."""
    was = flow.training
    flow.eval()
    dev = next(flow.parameters()).device
    total = 0.0
    for i in range(0, len(images), batch):
        y = image_to_flow(images[i:i + batch].to(dev))
        total += float(bits_per_dim(flow.log_prob(y), flow.dims).double().sum())
    flow.train(was)
    return total / len(images)


# ------------------------------------------------------------------------------------------------ loop


class _LogProb(torch.nn.Module):
    """``flow.log_prob`` as a module's forward, for DistributedDataParallel."""

    def __init__(self, flow: Glow):
        super().__init__()
        self.flow = flow

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.flow.log_prob(y)


def train_flow(cfg: GlowConfig, images: torch.Tensor, *, out: str | Path, val_images: torch.Tensor | None = None,
               resume: bool = False, device: torch.device | str = "cpu", progress: bool = True,
               data: dict[str, Any] | None = None, dist: Dist | None = None, accumulation: int = 1) -> FlowRun:
    """Train a flow on ``images`` (N, C, H, W) in [-1, 1]; see the module docstring for the outputs.

    ``data`` (dataset digest, filter, split) goes into the manifest and ``flow.pt``. With ``resume``
    an interrupted run continues from ``OUT/checkpoint.pt``; the number of steps may be raised.

    Data-parallel (``dist`` from :func:`medanon.train.distributed.init_distributed`, under torchrun) and
    gradient accumulation: each step's ``cfg.batch`` images (one draw of batch indices and
    dequantisation noise, identical on every rank) are split into ``world_size * accumulation`` shards;
    DDP averages the gradients, and actnorm's data-dependent initialisation uses the statistics of the
    whole first batch across ranks. A step is the single-process step up to float summation order, so
    a run gives the same flow with any number of ranks and resumes with any number. Rank 0 writes
    everything; the other ranks return a :class:`FlowRun` with ``train_bpd`` NaN.
    """
    cfg.validate()
    dist = dist or Dist(device=torch.device(device))
    device = dist.device
    split_batch(cfg.batch, dist.world_size, accumulation)         # refuses a batch that does not divide into shards
    shards = dist.world_size * accumulation
    out = Path(out)
    if images.ndim != 4 or tuple(images.shape[1:]) != (cfg.channels, cfg.resolution, cfg.resolution):
        raise ConfigError(f"training images are {tuple(images.shape[1:])} but the flow expects "
                          f"({cfg.channels}, {cfg.resolution}, {cfg.resolution})",
                          fix="load the data at the flow's resolution and channel count")
    if len(images) < cfg.batch:
        raise ConfigError(f"{len(images)} training images are fewer than one batch of {cfg.batch}",
                          fix=f"use more images or batch={len(images)} or less")
    ckpt_path = check_run_state(out, resume=resume)    # a new run needs an empty place, a resume a run
    flow = Glow(cfg).to(device)
    opt = torch.optim.Adam(flow.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, order, pos = 0, torch.randperm(len(images), generator=gen), 0
    if resume and ckpt_path.exists():
        blob = load_checkpoint(ckpt_path, kind=KIND_TRAINING)   # on the CPU: the generator state and order live there
        check_same_config(blob, cfg, ckpt_path)
        refuse_other_data(ckpt_path, blob["extra"].get("data"), dict(sorted((data or {}).items())),
                          fix="resume with the same dataset, filter, split, crop and size, or choose another out "
                              "folder")
        flow.load_state_dict(state_entry(blob, "model"))
        opt.load_state_dict(state_entry(blob, "optimizer"))
        gen.set_state(state_entry(blob, "generator"))
        order, pos, step = state_entry(blob, "order"), int(blob["extra"]["pos"]), blob["step"]
        done = _finished(out / "flow.pt", step) if step >= cfg.steps else None
        if done is not None:                    # a finished run: nothing to train, evaluate or log again
            log.info("flow %s is complete (%d steps)", done.path, step)
            return done if dist.is_main else FlowRun(path=done.path, steps=step, train_bpd=math.nan, val_bpd=None,
                                                     seconds=0.0)     # as the other ranks of a run return
    run = None
    if dist.is_main:
        at = step if resume else None
        run = RunDir(out, config=cfg, command="train flow", seeds={"flow": cfg.seed}, new_run=not resume,
                     resume_step=at, recheck=recheck_run_state(out, at))
        run.update(data=data or {}, device=str(device), resumed_from_step=step)
        if shards > 1:                          # every rank draws the same batches: one seed serves all
            run.update(distributed=dist.describe_run(accumulation=accumulation, shards=shards, global_batch=cfg.batch,
                                                     rank_seeds={r: cfg.seed for r in range(dist.world_size)}))
    flow.train()
    model: torch.nn.Module = _LogProb(flow)
    if dist.enabled:
        sync_actnorm(flow)
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    mine = list(local_shards(dist, accumulation))
    t0, seen, bad, window = time.perf_counter(), 0, 0, []
    bar = tqdm(total=cfg.steps, initial=step, desc="train flow", unit="step", disable=not (progress and dist.is_main))
    while step < cfg.steps:
        if pos + cfg.batch > len(order):
            order, pos = torch.randperm(len(images), generator=gen), 0
        idx = order[pos:pos + cfg.batch]
        pos += cfg.batch
        y = dequantize(images[idx], generator=gen).to(device)
        for g in opt.param_groups:
            g["lr"] = cfg.lr * min(1.0, (step + 1) / max(1, cfg.warmup_steps))
        if shards > 1:
            loss = _sharded_backward(flow, model, opt, y, mine, shards, accumulation, dist)
        else:
            loss = bits_per_dim(flow.log_prob(y), cfg.dims).mean()
        if not torch.isfinite(loss):
            bad += 1
            if bad >= MAX_BAD_STEPS:
                raise RuntimeError(f"{bad} consecutive non-finite losses at step {step}: training diverged "
                                   "(lower the config's lr, raise warmup_steps, or resume from the last checkpoint)")
            opt.zero_grad(set_to_none=True)
            continue
        bad = 0
        if shards == 1:
            opt.zero_grad(set_to_none=True)
            loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(flow.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        seen += len(idx)
        window.append(loss.item())
        bar.update(1)
        bar.set_postfix(bpd=f"{sum(window[-50:]) / len(window[-50:]):.3f}")
        if (step % cfg.checkpoint_every == 0 or step == cfg.steps) and dist.is_main:
            metrics: dict[str, Any] = {"step": step, "train_bpd_dequant": sum(window) / len(window),
                                       "lr": opt.param_groups[0]["lr"],
                                       "images_per_s": seen / (time.perf_counter() - t0)}
            if val_images is not None and len(val_images):
                metrics["val_bpd_subset"] = evaluate_bpd(flow, val_images[:VAL_IMAGES_AT_CHECKPOINT])
            run.log_metrics(**metrics)
            window = []
            save_checkpoint(ckpt_path, kind=KIND_TRAINING, config=to_dict(cfg), step=step,
                            state={"model": flow.state_dict(), "optimizer": opt.state_dict(),
                                   "generator": gen.get_state(), "order": order},
                            extra={"pos": pos, "data": data})
    bar.close()
    seconds = time.perf_counter() - t0
    if not dist.is_main:                        # rank 0 evaluates, calibrates and writes flow.pt
        return FlowRun(path=out / "flow.pt", steps=step, train_bpd=math.nan, val_bpd=None, seconds=seconds)
    sync_actnorm(flow, False)
    return _finish(flow, images, val_images, out=out, run=run, step=step, seconds=seconds, data=data)


def _sharded_backward(flow: Glow, model: torch.nn.Module, opt: torch.optim.Optimizer, y: torch.Tensor,
                      mine: list[int], shards: int, accumulation: int, dist: Dist) -> torch.Tensor:
    """Forward and backward of this rank's shards of the global batch ``y``; returns the global mean loss.

    Gradients end up as those of the global batch's mean bits/dim (DDP averages over ranks, each of
    the ``accumulation`` shards of a rank weighs ``1 / accumulation``). Before the first step, one
    forward pass over all of this rank's shards initialises actnorm (synchronised across ranks), so
    that it sees the whole first batch, as in one process.
    """
    if any(isinstance(m, ActNorm) and not bool(m.initialized) for m in flow.modules()):
        with torch.no_grad():
            flow.log_prob(torch.cat([shard_rows(y, s, shards) for s in mine]))
    opt.zero_grad(set_to_none=True)
    total = torch.zeros((), device=y.device)
    for i, s in enumerate(mine):
        sync = not dist.enabled or i == len(mine) - 1
        with nullcontext() if sync else model.no_sync():
            loss = bits_per_dim(model(shard_rows(y, s, shards)), flow.cfg.dims).mean()
            (loss / accumulation).backward()
        total += loss.detach()
    return dist.all_reduce_sum(total) / shards


def check_same_config(blob: dict[str, Any], cfg: GlowConfig, ckpt_path: Path) -> None:
    """Refuse to resume the run of ``blob`` (its training checkpoint) with another config than its own (only
    ``steps`` may change); the command line calls it before it decodes the data."""
    old = {k: v for k, v in blob["config"].items() if k != "steps"}
    now = {k: v for k, v in to_dict(cfg).items() if k != "steps"}
    if old != now:
        raise ConfigError(f"{ckpt_path} was trained with another config ({differences(old, now)})",
                          fix="resume with the same config (only steps may change), or choose another out folder")


def _finished(path: Path, step: int) -> FlowRun | None:
    """The run that wrote ``path`` at ``step``, as :func:`train_flow` returned it, or None (not written yet)."""
    if not path.is_file():
        return None
    blob = load_checkpoint(path, kind=KIND)
    if blob["step"] != step:
        return None
    extra = blob.get("extra") or {}
    return FlowRun(path=path, steps=step, train_bpd=extra.get("train_bpd", math.nan), val_bpd=extra.get("val_bpd"),
                   seconds=0.0)


def _finish(flow: Glow, images: torch.Tensor, val_images: torch.Tensor | None, *, out: Path, run: RunDir,
            step: int, seconds: float, data: dict[str, Any] | None) -> FlowRun:
    """Final bits/dim, calibration statistics of the training set, and ``flow.pt``."""
    flow.eval()
    train_bpd = evaluate_bpd(flow, images)
    val_bpd = evaluate_bpd(flow, val_images) if val_images is not None and len(val_images) else None
    calibration = calibrate_latent(GlowCodec(flow), images)
    extra = {"train_bpd": train_bpd, "val_bpd": val_bpd, "train_images": len(images),
             "val_images": 0 if val_images is None else len(val_images), "data": data or {},
             "seconds_last_run": round(seconds, 1)}
    path = save_flow(out / "flow.pt", flow, calibration=calibration, step=step, extra=extra)
    run.log_metrics(step=step, train_bpd=train_bpd, val_bpd=val_bpd, final=True)
    run.update(result={k: v for k, v in extra.items() if k != "data"},
               calibration={"samples": calibration.count, "sha256": calibration.checksum()})
    run.finish()
    log.info("flow %s: %d steps, train %.3f bits/dim, val %s", path, step, train_bpd,
             "n/a" if val_bpd is None else f"{val_bpd:.3f}")
    return FlowRun(path=path, steps=step, train_bpd=train_bpd,
                   val_bpd=val_bpd if val_bpd is None or math.isfinite(val_bpd) else None, seconds=seconds)
