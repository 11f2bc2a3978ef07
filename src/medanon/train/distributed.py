"""Data-parallel training with ``torchrun``: one process per device, ``torch.distributed`` underneath.

Every trainer launched by ``torchrun`` reads its place from the environment torchrun sets
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``PORT``) through
:func:`init_distributed`; a plain ``medanon train ...`` (no torchrun, or ``--nproc_per_node 1``) gets a
:class:`Dist` of one rank that does no communication at all, so single-process runs are unchanged.

The backend is NCCL when the rank trains on a CUDA device (``cuda:LOCAL_RANK``) and gloo on CPU.

How a step is shared (the same for every trainer):

- The **global batch** (the config's ``batch``) is split into ``world_size * accumulation`` equal
  **shards** (micro-batches); rank ``r`` computes shards ``r * accumulation ... r * accumulation +
  accumulation - 1`` one after the other (gradient accumulation), and gradients are summed over
  shards and ranks before the optimizer step, so the update is that of the global batch's mean loss.
- Which training images a step uses is drawn from one data stream that every rank advances
  identically (same seed); each shard takes its rows of that draw (:func:`shard_rows`), as
  ``DistributedSampler`` does with ``indices[rank::world_size]``. The images themselves are in every
  rank's memory (the trainers keep the whole training set as one tensor).
- Only rank 0 writes (checkpoints, metrics, samples, manifest) and shows progress; every rank takes
  part in the collectives a checkpoint needs (gathering per-shard random states).

Gradients are averaged with DDP (``DistributedDataParallel``, ``no_sync`` for accumulation) where a
trainer's update is one forward and backward pass of one module (the flow); the GAN averages them
with one flat ``all_reduce`` per optimizer step (:meth:`Dist.sum_gradients`), as NVlabs'
StyleGAN2-ADA does, because its R1 penalty differentiates twice and its alternating G/D updates
freeze each network in turn, which DDP's reducer does not support.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from medanon.errors import ConfigError

__all__ = ["Dist", "bind_local_gpu", "init_distributed", "shard_rows", "shutdown", "split_batch", "threads_per_rank"]

ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass
class Dist:
    """This process's place in a run: rank, world size, device, and the collectives trainers use.

    With ``world_size == 1`` every collective is the identity and nothing is communicated.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None                  # None: no process group (one process)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def describe(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "backend": self.backend,
                "master": f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
                if self.enabled else None}

    def describe_run(self, *, accumulation: int, shards: int, global_batch: int, **seeds: Any) -> dict[str, Any]:
        """What a run's manifest records of its sharding: processes, shards per process, images per shard,
        which shards each rank ran, and the seeds that make them reproducible (``seeds``)."""
        return {**self.describe(), "accumulation": accumulation, "shards": shards,
                "images_per_shard": global_batch // shards, "global_batch": global_batch,
                "rank_shards": {r: list(range(r * accumulation, (r + 1) * accumulation))
                                for r in range(self.world_size)}, **seeds}

    # -- collectives -------------------------------------------------------------------------------

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over ranks, in place (and returned)."""
        if self.enabled:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any (e.g. rank 0's time limit)."""
        if not self.enabled:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self._comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def sum_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum every parameter's ``.grad`` over ranks with one flat ``all_reduce`` per dtype.

        The trainers scale each shard's loss by ``1 / shards``, so the sum is the global mean's
        gradient. A parameter without a gradient on this rank contributes zeros (and gets the sum).
        """
        if not self.enabled:
            return
        params = [p for p in params if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for p in params:
            by_dtype.setdefault(p.grad.dtype, []).append(p.grad)
        for grads in by_dtype.values():
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

    def mean_over_shards(self, sums: dict[str, float], shards: int) -> dict[str, float]:
        """Per-key sums of this rank's shards -> means over all ``shards`` (the same keys on every rank)."""
        keys = sorted(sums)
        t = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=self._comm_device())
        return dict(zip(keys, (self.all_reduce_sum(t) / shards).tolist(), strict=True))

    def all_gather_cat(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate (along dim 0, in rank order) a tensor that has the same shape on every rank."""
        if not self.enabled:
            return t
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts)

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def _comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


def init_distributed(device: str | torch.device = "cpu", *, timeout_minutes: float = 60.0) -> Dist:
    """Join the process group torchrun describes in the environment, or return a one-process :class:`Dist`.

    Under torchrun a CUDA ``device`` becomes ``cuda:LOCAL_RANK`` (one GPU per process) and the backend
    NCCL; a CPU device uses gloo. Call :func:`shutdown` when training ends.
    """
    device = torch.device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or not all(k in os.environ for k in ENV):
        return Dist(device=device)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        if torch.cuda.device_count() <= local_rank:
            raise ConfigError(f"rank {rank} wants GPU {local_rank} but this node has {torch.cuda.device_count()}",
                              fix="start at most one process per GPU (torchrun --nproc_per_node)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    elif device.type == "cpu":
        backend = "gloo"
    else:
        raise ConfigError(f"distributed training on {device.type} is not supported", fix="use device='cuda' or 'cpu'")
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=timeout_minutes))
    return Dist(rank=rank, world_size=world, local_rank=local_rank, device=device, backend=backend)


def bind_local_gpu() -> int:
    """Under torchrun, make ``cuda`` mean this process's GPU (``cuda:LOCAL_RANK``) and return the rank; else 0.

    Called before any model is loaded by commands that do not join a training group themselves
    (``medanon anonymize`` under torchrun, :mod:`medanon.release.sharded`), so that ``--device cuda``
    puts each process on its own GPU. Without a GPU (or without torchrun) it changes nothing.
    """
    if not all(k in os.environ for k in ENV) or int(os.environ["WORLD_SIZE"]) <= 1:
        return 0
    local = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available() and local < torch.cuda.device_count():
        torch.cuda.set_device(local)
    return int(os.environ["RANK"])


def shutdown(d: Dist) -> None:
    """Leave the process group (no-op for one process)."""
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()


def threads_per_rank(requested: int, cpu_count: int) -> int:
    """CPU threads for one rank: ``requested`` if given, else this node's cores shared among its ranks."""
    if requested:
        return requested
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, cpu_count // max(local, 1))


def split_batch(global_batch: int, world_size: int, accumulation: int, *, what: str = "batch") -> int:
    """Images per shard when ``global_batch`` is split over ``world_size`` ranks x ``accumulation`` micro-batches."""
    if accumulation < 1:
        raise ConfigError(f"accumulation={accumulation} must be >= 1")
    shards = world_size * accumulation
    if global_batch % shards:
        raise ConfigError(f"the global {what} {global_batch} does not split into {world_size} ranks x "
                          f"{accumulation} accumulation steps (= {shards} equal shards)",
                          fix=f"choose a {what} that is a multiple of {shards}, or another number of processes "
                              "(torchrun --nproc_per_node) or accumulation=")
    return global_batch // shards


def shard_rows(rows: torch.Tensor, shard: int, shards: int) -> torch.Tensor:
    """Shard ``shard`` of a global batch (DistributedSampler's ``indices[rank::world_size]``)."""
    return rows[shard::shards]


def local_shards(d: Dist, accumulation: int) -> Sequence[int]:
    """The shards rank ``d.rank`` computes, in order."""
    return range(d.rank * accumulation, (d.rank + 1) * accumulation)
