"""The StyleGAN2-ADA training loop.

``train_stylegan(images, cfg, out, steps=...)`` trains a generator and a discriminator on an
image tensor and writes a run directory::

    out/config.yaml           the StyleGANConfig
    out/metrics.jsonl         losses, R1, ADA p and r_t, images/s, one line per ``log_every`` steps
    out/manifest.json         software, seeds, input checksum, timing
    out/checkpoint.pt         the latest full state (G, D, G_ema, optimizers, RNGs, ADA state)
    out/samples/step-NNNNNNN.png   EMA generator samples on fixed latents

``resume=True`` continues from ``out/checkpoint.pt`` at the same step with the same optimizer,
RNG and ADA state, so an interrupted run ends where an uninterrupted one would have.
Loading what it writes (``load_generator``, ``load_discriminator``, ``export_checkpoint``) is
:mod:`medanon.train.gan_checkpoint`, re-exported here. The step loop itself (progress, metrics, samples,
checkpoints, time limit) is :func:`medanon.train.loop.run_loop`, shared with the other training loops.
"""

from __future__ import annotations

import copy
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch

from medanon.checkpoint import load_checkpoint, save_checkpoint
from medanon.config import to_dict, validate
from medanon.errors import ConfigError, DataError, user_stacklevel
from medanon.models.stylegan import AdaController, AugmentPipe, Generator, StyleGANConfig, make_discriminator
from medanon.runtime import RunDir, native_bf16
from medanon.train.distributed import Dist, local_shards, shard_rows, split_batch
from medanon.train.gan_checkpoint import (
    KIND,
    config_diff,
    export_checkpoint,
    load_config,
    load_discriminator,
    load_generator,
    resume_changes,
)
from medanon.train.gan_loss import (
    discriminator_loss,
    discriminator_step,
    finish_discriminator_step,
    generator_loss,
    mix_styles,
    sample_ws,
)
from medanon.train.loop import (
    CHECKPOINT,
    check_run_state,
    recheck_run_state,
    record_modality,
    run_loop,
    save_image_grid,
    to_uint8_images,
    training_images_change,
    training_images_digest,
)
from medanon.train.random_state import restore_generator

__all__ = ["KIND", "StyleGANTrainer", "config_diff", "export_checkpoint", "load_config",
           "load_discriminator", "load_generator", "resume_changes", "save_image_grid", "to_uint8", "train_stylegan"]

GRID = 8                                        # sample grids are GRID x GRID images
SHARD_SEED_STRIDE = 1_000_003                   # shard s > 0 seeds its streams from cfg.seed + s * this


# ---------------------------------------------------------------------------------------------
# training


class StyleGANTrainer:
    """Models, optimizers and random state of one run; ``step()`` does one G and one D update.

    ``images`` are (N, C, H, W) uint8 on the CPU (batches move to ``device``). ``save``/``load``
    write and restore everything a resumed run needs. :func:`train_stylegan` drives it; it is
    public for benchmarks and for loops that add their own losses.

    **Shards** (distributed training and gradient accumulation, :mod:`medanon.train.distributed`):
    with ``dist.world_size * accumulation = S > 1`` the global batch ``cfg.batch`` is computed as S
    micro-batches ("shards") of ``cfg.batch / S`` images. Shard s has its own random streams
    (latents, style mixing, augmentation, synthesis noise; shard 0 keeps the single-process ones,
    shard s > 0 is seeded from ``cfg.seed + s * SHARD_SEED_STRIDE``), the real images of a step are
    one draw of the shared data stream of which shard s takes rows ``s::S``, and minibatch-std
    groups stay inside a shard. A step's result therefore depends on S but not on how the shards are
    spread over processes: 2 ranks x 1 shard give the parameters of 1 rank x 2 accumulated shards
    (``tests/test_distributed.py``). Gradients are summed over shards and ranks (each shard's loss
    weighted 1 / S); ADA's ``r_t`` counts the real logits of all shards; ``w_avg`` moves towards the
    mean w of the global batch; the logged R1 and losses are means over shards. With S = 1 the
    step is the single-process code, bit for bit.
    """

    def __init__(self, cfg: StyleGANConfig, images: torch.Tensor, device: torch.device, *,
                 dist: Dist | None = None, accumulation: int = 1):
        self.cfg = cfg
        self.device = device
        self.images = images                    # (N, C, H, W) uint8 on the CPU
        self.dist = dist or Dist(device=device)
        self.accumulation = accumulation
        self.shards = self.dist.world_size * accumulation
        self.micro = split_batch(cfg.batch, self.dist.world_size, accumulation)
        torch.manual_seed(cfg.seed)             # weights and synthesis noise
        self.G = Generator.from_config(cfg).to(device).train()
        self.D = make_discriminator(cfg).to(device).train()
        if hasattr(self.D, "calibrate"):        # the projected D's fixed feature scale (a resume loads its own)
            self.D.calibrate(images[:64].to(device, torch.float32) / 127.5 - 1)
        self.G_ema = copy.deepcopy(self.G).eval().requires_grad_(False)
        if self.amp is not None and not native_bf16(device):
            warnings.warn(f"precision=bf16 on {device}, which does not compute bfloat16 natively: autocast is "
                          "emulated there and slower than float32", RuntimeWarning, stacklevel=user_stacklevel())
        self.augment = AugmentPipe(cfg.augment, p=cfg.augment_p)
        self.ada = AdaController(self.augment, cfg.ada_target, cfg.ada_interval, cfg.ada_kimg, cfg.batch)
        self.opt_G = torch.optim.Adam(self.G.parameters(), lr=cfg.g_lr, betas=(0.0, 0.99), eps=1e-8)
        self.opt_D = torch.optim.Adam(self.D.parameters(), lr=cfg.d_lr, betas=(0.0, 0.99), eps=1e-8)
        self.rng = torch.Generator(device).manual_seed(cfg.seed + 1)  # latents, augmentations
        self.data_rng = torch.Generator().manual_seed(cfg.seed + 2)   # which real images
        self.grid_z = torch.randn(GRID * GRID, cfg.z_dim, generator=torch.Generator().manual_seed(cfg.seed + 3))
        self.step_count = 0
        self.nimg = 0                           # images seen, over resumes (the batch may change on resume)
        self.seconds = 0.0                      # wall-clock training time, over resumes
        self.config_changes: list[dict[str, Any]] = []   # settings changed on resume (retune), over resumes
        self.training_images = training_images_digest(images)
        # per-shard random state: {"latents": Generator, "torch": CPU RNG state, "cuda": CUDA RNG state}
        self.shard_rng: dict[int, dict[str, Any]] = {}
        if self.shards > 1:
            for s in local_shards(self.dist, accumulation):
                self.shard_rng[s] = self._shard_state(s) if s else {
                    "latents": self.rng, "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}

    def _shard_seed(self, s: int, stream: int) -> int:
        """Shard s's seed of a random stream (1: latents, 4: synthesis noise); shard 0's latents seed is the
        single-process one, ``cfg.seed + 1``."""
        return self.cfg.seed + s * SHARD_SEED_STRIDE + stream

    def shard_seeds(self) -> dict[int, dict[str, int | str]]:
        """Every shard's seeds (for the manifest); shard 0's are the single-process ones."""
        out: dict[int, dict[str, int | str]] = {0: {"latents": self._shard_seed(0, 1),
                                                    "noise": f"torch global RNG after manual_seed({self.cfg.seed}) "
                                                             "and weight initialisation"}}
        for s in range(1, self.shards):
            out[s] = {"latents": self._shard_seed(s, 1), "noise": self._shard_seed(s, 4)}
        return out

    def _shard_state(self, s: int) -> dict[str, Any]:
        """Fresh random state of shard s > 0 (a new run, or a resume with more shards than before)."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self._shard_seed(s, 4))
            state = {"torch": torch.get_rng_state(),
                     "cuda": torch.cuda.get_rng_state(self.device) if devices else None}
        state["latents"] = torch.Generator(self.device).manual_seed(self._shard_seed(s, 1))
        return state

    @contextmanager
    def _use_shard(self, s: int):
        """Run with shard s's global torch RNG (synthesis noise) and hand its latents generator over."""
        st = self.shard_rng[s]
        torch.set_rng_state(st["torch"])
        if st["cuda"] is not None:
            torch.cuda.set_rng_state(st["cuda"], self.device)
        try:
            yield st["latents"]
        finally:
            st["torch"] = torch.get_rng_state()
            if st["cuda"] is not None:
                st["cuda"] = torch.cuda.get_rng_state(self.device)

    @property
    def amp(self) -> torch.dtype | None:
        """The autocast dtype of the forward passes (``cfg.precision``; a retuned resume may change it), or None."""
        return torch.bfloat16 if self.cfg.precision == "bf16" else None

    def _autocast(self):
        """The generator's forward passes under ``cfg.precision`` (D's: :func:`medanon.train.gan_loss.logits_of`)."""
        return torch.autocast(self.device.type, dtype=self.amp) if self.amp is not None else nullcontext()

    def real_batch(self) -> torch.Tensor:
        idx = torch.randint(len(self.images), (self.cfg.batch,), generator=self.data_rng)
        return self.images[idx].to(self.device, torch.float32) / 127.5 - 1

    def latents(self) -> torch.Tensor:
        return torch.randn(self.cfg.batch, self.cfg.z_dim, device=self.device, generator=self.rng)

    def step(self) -> dict[str, float]:
        if self.shards > 1:
            return self._step_sharded()
        cfg = self.cfg
        # generator: non-saturating (or hinge) loss through D (D's weights frozen)
        self.D.requires_grad_(False)
        self.G.requires_grad_(True)
        with self._autocast():
            ws = sample_ws(self.G, self.latents(), style_mixing=cfg.style_mixing, generator=self.rng)
            fake = self.G.synthesis(ws)
        loss_G = generator_loss(self.D, self.augment, fake, self.rng, loss=cfg.loss, amp=self.amp)
        self.opt_G.zero_grad(set_to_none=True)
        loss_G.backward()
        self.opt_G.step()
        # discriminator: logistic loss, lazy R1 on reals, ADA
        self.G.requires_grad_(False)
        with torch.no_grad(), self._autocast():
            ws = sample_ws(self.G, self.latents(), style_mixing=cfg.style_mixing, generator=self.rng,
                           update_emas=True)
            fake = self.G.synthesis(ws)
        out = discriminator_step(self.D, self.opt_D, self.augment, self.ada, self.real_batch(), fake,
                                 step=self.step_count, r1_gamma=cfg.r1_gamma, r1_interval=cfg.r1_interval,
                                 generator=self.rng, loss=cfg.loss, amp=self.amp)
        self.step_count += 1
        self.nimg += cfg.batch
        self.update_ema()
        out = {"loss_G": float(loss_G.detach()), **out, "ada_p": self.augment.p}
        if self.ada.last_rt is not None:
            out["rt"] = self.ada.last_rt
        return out

    def _step_sharded(self) -> dict[str, float]:
        """One G and one D update of the global batch computed as shards (see the class docstring)."""
        cfg, d, m, weight = self.cfg, self.dist, self.micro, 1.0 / self.shards
        mine = list(self.shard_rng)
        # generator
        self.D.requires_grad_(False)
        self.G.requires_grad_(True)
        self.opt_G.zero_grad(set_to_none=True)
        loss_G = torch.zeros((), device=self.device)
        for s in mine:
            with self._use_shard(s) as rng:
                z = torch.randn(m, cfg.z_dim, device=self.device, generator=rng)
                with self._autocast():
                    ws = sample_ws(self.G, z, style_mixing=cfg.style_mixing, generator=rng)
                    fake = self.G.synthesis(ws)
                loss = generator_loss(self.D, self.augment, fake, rng, loss=cfg.loss, amp=self.amp)
                (loss * weight).backward()
                loss_G += loss.detach()
        d.sum_gradients(self.G.parameters())
        self.opt_G.step()
        # discriminator (R1 on the same steps as one process), ADA and w_avg over all shards
        self.G.requires_grad_(False)
        self.D.requires_grad_(True)
        self.opt_D.zero_grad(set_to_none=True)
        do_r1 = cfg.r1_gamma > 0 and self.step_count % cfg.r1_interval == 0
        idx = torch.randint(len(self.images), (cfg.batch,), generator=self.data_rng)   # same on every rank
        sums = torch.zeros(4 + self.G.mapping.w_avg.numel(), device=self.device)  # loss_D, fake, real, r1, w
        logits = []
        for s in mine:
            with self._use_shard(s) as rng:
                with torch.no_grad(), self._autocast():
                    z = torch.randn(m, cfg.z_dim, device=self.device, generator=rng)
                    w = self.G.mapping(z).float()
                    sums[4:] += w[:, 0].sum(dim=0)
                    fake = self.G.synthesis(mix_styles(self.G, w, z, style_mixing=cfg.style_mixing, generator=rng))
                real = self.images[shard_rows(idx, s, self.shards)].to(self.device, torch.float32) / 127.5 - 1
                loss, stats = discriminator_loss(self.D, self.augment, real, fake, generator=rng, loss=cfg.loss,
                                                 r1_weight=cfg.r1_gamma * cfg.r1_interval if do_r1 else 0.0,
                                                 amp=self.amp)
                (loss * weight).backward()
            sums[0] += loss.detach()
            sums[1] += stats["loss_fake"]
            sums[2] += stats["loss_real"]
            if do_r1:
                sums[3] += stats["r1"]
            logits.append(stats["real_logits"])
        all_logits = finish_discriminator_step(self.D, self.opt_D, self.ada, logits, d)
        d.all_reduce_sum(sums)
        with torch.no_grad():                   # what Mapping(update_emas=True) does, with the global mean w
            w_avg = self.G.mapping.w_avg
            w_avg.copy_((sums[4:] / cfg.batch).lerp(w_avg, self.G.mapping.w_avg_beta))
        self.step_count += 1
        self.nimg += cfg.batch
        self.update_ema()
        out = {"loss_G": float(d.all_reduce_sum(loss_G) / self.shards), "loss_D": float(sums[0] / self.shards),
               "D_real": float(all_logits.mean())}
        if do_r1:
            out["r1"] = float(sums[3] / self.shards)
        out["ada_p"] = self.augment.p
        if self.ada.last_rt is not None:
            out["rt"] = self.ada.last_rt
        return out

    @torch.no_grad()
    def update_ema(self) -> None:
        ema_nimg = self.cfg.ema_kimg * 1000
        if self.cfg.ema_rampup > 0:
            ema_nimg = min(ema_nimg, self.nimg * self.cfg.ema_rampup)
        beta = 0.5 ** (self.cfg.batch / max(ema_nimg, 1e-8))
        for p_ema, p in zip(self.G_ema.parameters(), self.G.parameters(), strict=True):
            p_ema.copy_(p.detach().lerp(p_ema, beta))
        for b_ema, b in zip(self.G_ema.buffers(), self.G.buffers(), strict=True):
            b_ema.copy_(b)

    # -- checkpoints ---------------------------------------------------------------------------

    @torch.no_grad()
    def sample_grid(self) -> torch.Tensor:
        """EMA generator images of the run's fixed latents (constant noise), for the sample PNGs."""
        return self.G_ema(self.grid_z.to(self.device), noise_mode="const")

    def save(self, path: Path) -> Path:
        """Write the full state (rank 0 only; with several ranks every rank must call it: it gathers
        the shards' random states). Shard 0's states are stored where a one-process run stores its
        own, the other shards' under ``rng["shards"]``, so any checkpoint resumes with any number of ranks."""
        if self.shards == 1:
            rng = {"torch": torch.get_rng_state(), "latents": self.rng.get_state(),
                   "data": self.data_rng.get_state()}
            if self.device.type == "cuda":
                rng["cuda"] = torch.cuda.get_rng_state(self.device)
        else:
            mine = {s: {"torch": st["torch"], "latents": st["latents"].get_state(),
                        **({"cuda": st["cuda"]} if st["cuda"] is not None else {})}
                    for s, st in self.shard_rng.items()}
            every: dict[int, dict[str, torch.Tensor]] = {}
            for part in self.dist.gather_objects(mine):
                every.update(part)
            if not self.dist.is_main:
                return path
            rng = {**every[0], "data": self.data_rng.get_state(),
                   "shards": [every[s] for s in range(1, self.shards)]}
        state = {"G": self.G.state_dict(), "D": self.D.state_dict(), "G_ema": self.G_ema.state_dict(),
                 "opt_G": self.opt_G.state_dict(), "opt_D": self.opt_D.state_dict(), "rng": rng}
        extra = {"images": len(self.images), "ada_p": self.augment.p, "ada_state": self.ada.state_dict(),
                 "nimg": self.nimg, "kimg": self.nimg / 1000,
                 "seconds": self.seconds, "training_images": self.training_images}
        if self.config_changes:
            extra["config_changes"] = self.config_changes
        if self.shards > 1:
            extra["distributed"] = {"shards": self.shards, "world_size": self.dist.world_size,
                                    "accumulation": self.accumulation}
        return save_checkpoint(path, kind=KIND, config=to_dict(self.cfg), state=state, step=self.step_count,
                               extra=extra)

    def load(self, blob: dict[str, Any]) -> None:
        state = blob["state"]
        missing = [k for k in ("G", "opt_G", "opt_D", "rng") if k not in state]
        if missing:
            raise ConfigError(f"checkpoint {blob['path']} has no training state ({', '.join(missing)}): it is an "
                              "exported model", fix="resume from the run's own checkpoint.pt")
        self.G.load_state_dict(state["G"])
        self.D.load_state_dict(state["D"])
        self.G_ema.load_state_dict(state["G_ema"])
        self.opt_G.load_state_dict(state["opt_G"])
        self.opt_D.load_state_dict(state["opt_D"])
        for opt, lr in ((self.opt_G, self.cfg.g_lr), (self.opt_D, self.cfg.d_lr)):
            for group in opt.param_groups:      # the config's rates, not the saved ones (equal unless retuned)
                group["lr"] = lr
        torch.set_rng_state(state["rng"]["torch"])
        step = int(blob["step"])
        restore_generator(self.rng, state["rng"]["latents"], seed=self._shard_seed(0, 1), step=step)
        self.data_rng.set_state(state["rng"]["data"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        saved = [state["rng"], *state["rng"].get("shards", [])]   # shard s's states, as far as they were saved
        for s, st in self.shard_rng.items():    # more shards than the checkpoint's keep their fresh seeds
            if s < len(saved):
                st["torch"] = saved[s]["torch"]
                restore_generator(st["latents"], saved[s]["latents"], seed=self._shard_seed(s, 1), step=step)
                if st["cuda"] is not None and "cuda" in saved[s]:
                    st["cuda"] = saved[s]["cuda"]
        self.ada.load_state_dict(blob["extra"]["ada_state"])
        self.step_count = step
        extra = blob["extra"]   # checkpoints before "nimg" ran one batch size: kimg = steps x batch / 1000
        self.nimg = int(extra["nimg"]) if "nimg" in extra else round(float(extra["kimg"]) * 1000)
        self.seconds = float(extra["seconds"])
        self.config_changes = list(blob["extra"].get("config_changes", []))


def to_uint8(images: torch.Tensor, cfg: StyleGANConfig) -> torch.Tensor:
    """Check the images against the config and store them as 8-bit (a quarter of the memory)."""
    expected = (cfg.channels, cfg.resolution, cfg.resolution)
    if images.ndim != 4 or tuple(images.shape[1:]) != expected:
        raise DataError(f"the images have shape {tuple(images.shape)}, the model expects "
                        f"(N, {cfg.channels}, {cfg.resolution}, {cfg.resolution})",
                        fix=f"open the dataset with size={cfg.resolution} and channels={cfg.channels}")
    if len(images) == 0:
        raise DataError("no training images")
    return to_uint8_images(images)


def train_stylegan(images: torch.Tensor, cfg: StyleGANConfig, out: str | Path, *, steps: int,
                   resume: bool = False, retune: bool = False, device: str | torch.device = "cpu",
                   checkpoint_every: int = 500,
                   sample_every: int = 500, log_every: int = 10, max_seconds: float | None = None,
                   progress: bool = True, command: str = "train gan", dist: Dist | None = None,
                   accumulation: int = 1, modality: str | None = None,
                   people: dict[str, Any] | None = None) -> Path:
    """Train StyleGAN2-ADA on ``images`` (N, C, H, W) in [-1, 1] until ``steps`` steps of ``cfg.batch`` images.

    Writes the run directory described in the module docstring to ``out`` and returns the path of the
    final checkpoint. With ``resume`` the run continues from ``out/checkpoint.pt``; its config must
    equal ``cfg``, unless ``retune``: then the training settings (learning rates, R1, EMA, ADA, augmentations,
    loss, batch) may differ and take effect from the resumed step on, with the optimizer moments, EMA and ADA state
    kept; each change is recorded in the checkpoint and the manifest (``config_changes``). The architecture and
    seed never change. A run resumes on another kind of device (CPU to GPU) with a warning: its random streams
    restart from fixed seeds. ``max_seconds`` ends the run early, after the step that reaches that much wall-clock
    time, with the same final log line, samples and checkpoint as a finished run (useful on shared machines).

    ``dist`` (from :func:`medanon.train.distributed.init_distributed`, under torchrun) and
    ``accumulation`` split each step's ``cfg.batch`` images into shards (see :class:`StyleGANTrainer`);
    every rank calls this function, rank 0 alone writes the run directory. ``modality`` (the dataset's, where
    known) is recorded with the training images; a resume on another modality is refused, even with ``retune``.
    ``people``: the training people's record (:func:`medanon.data.training_people.training_people`), kept with the
    training images, so that an evaluation tells whether the model saw its controls.
    """
    validate(cfg)
    dist = dist or Dist(device=torch.device(device))
    device = dist.device
    out = Path(out)
    ckpt_path = out / CHECKPOINT
    data = to_uint8(images, cfg)
    check_run_state(out, resume=resume)
    if retune and not resume:
        raise ConfigError("retune=True changes the settings of a resumed run", fix="pass resume=True as well")
    trainer = StyleGANTrainer(cfg, data, device, dist=dist, accumulation=accumulation)
    record_modality(trainer.training_images, modality, None, people)
    if resume:
        blob = load_checkpoint(ckpt_path, kind=KIND)   # on the CPU: random states must be; load_state_dict moves
        record_modality(trainer.training_images, modality, blob, people)     # kept when not given again
        changes = resume_changes(cfg, blob, retune=retune)
        changes += training_images_change(blob, trainer.training_images, retune=retune)
        trainer.load(blob)
        trainer.config_changes += changes
    run = None
    if dist.is_main:
        at = trainer.step_count if resume else None
        run = RunDir(out, config=cfg, command=command, seeds={"seed": cfg.seed}, new_run=not resume,
                     resume_step=at, recheck=recheck_run_state(out, at))
        run.update(resumed_from_step=trainer.step_count if resume else None,
                   training_images=trainer.training_images)
        if trainer.config_changes:
            run.update(config_changes=trainer.config_changes)
        if trainer.shards > 1:
            run.update(distributed=dist.describe_run(accumulation=accumulation, shards=trainer.shards,
                                                     global_batch=cfg.batch, shard_seeds=trainer.shard_seeds()))
    return run_loop(trainer, run, out, steps=steps, checkpoint_every=checkpoint_every, sample_every=sample_every,
                    log_every=log_every, progress=progress and dist.is_main, desc="stylegan2", max_seconds=max_seconds,
                    dist=dist,
                    show=lambda m: {"G": f"{m['loss_G']:.3f}", "D": f"{m['loss_D']:.3f}", "p": f"{m['ada_p']:.3f}"})

