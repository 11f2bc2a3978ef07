"""The StyleGAN2-ADA training loop, and loading of what it writes.

``train_stylegan(images, cfg, out, steps=...)`` trains a generator and a discriminator on an
image tensor and writes a run directory::

    out/config.yaml           the StyleGANConfig
    out/metrics.jsonl         losses, R1, ADA p and r_t, images/s, one line per ``log_every`` steps
    out/manifest.json         software, seeds, input checksum, timing
    out/checkpoint.pt         the latest full state (G, D, G_ema, optimizers, RNGs, ADA state)
    out/samples/step-NNNNNNN.png   EMA generator samples on fixed latents

``resume=True`` continues from ``out/checkpoint.pt`` at the same step with the same optimizer,
RNG and ADA state, so an interrupted run ends where an uninterrupted one would have.
``load_generator`` returns a checkpoint's EMA generator; ``export_checkpoint`` strips the
training state for shipping. The step loop itself (progress, metrics, samples, checkpoints, time
limit) is :func:`medanon.train.loop.run_loop`, shared with the other training loops.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from medanon.checkpoint import load_checkpoint, save_checkpoint
from medanon.config import from_dict, to_dict, validate
from medanon.errors import ConfigError, DataError
from medanon.fsutil import atomic_write_text, sha256_bytes
from medanon.models.stylegan import AdaController, AugmentPipe, Discriminator, Generator, StyleGANConfig
from medanon.runtime import RunDir
from medanon.train.gan_loss import discriminator_step, generator_loss, sample_ws
from medanon.train.loop import CHECKPOINT, run_loop, save_image_grid

__all__ = ["KIND", "StyleGANTrainer", "export_checkpoint", "keep_metrics_until", "load_config", "load_discriminator",
           "load_generator", "save_image_grid", "to_uint8", "train_stylegan"]

KIND = "stylegan2"
GRID = 8                                        # sample grids are GRID x GRID images


# ---------------------------------------------------------------------------------------------
# loading and exporting


def load_config(blob: dict[str, Any]) -> StyleGANConfig:
    cfg = from_dict(StyleGANConfig, blob["config"], where=f"checkpoint {blob.get('path', '')} config")
    validate(cfg)
    return cfg


def load_generator(path: str | Path, *, device: str | torch.device = "cpu") -> Generator:
    """The EMA generator of a ``stylegan2`` checkpoint (full or exported), in eval mode, without gradients."""
    blob = load_checkpoint(path, kind=KIND, map_location=device)
    G = Generator.from_config(load_config(blob))
    G.load_state_dict(blob["state"]["G_ema"])
    return G.to(device).eval().requires_grad_(False)


def load_discriminator(path: str | Path, *, device: str | torch.device = "cpu") -> Discriminator:
    """The discriminator of a ``stylegan2`` checkpoint, in eval mode (for fine-tuning or co-training)."""
    blob = load_checkpoint(path, kind=KIND, map_location=device)
    D = Discriminator.from_config(load_config(blob))
    D.load_state_dict(blob["state"]["D"])
    return D.to(device).eval()


def export_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """Write a small copy of a training checkpoint: EMA generator, discriminator, config and statistics."""
    blob = load_checkpoint(src, kind=KIND)
    state = {"G_ema": blob["state"]["G_ema"], "D": blob["state"]["D"]}
    extra = {k: v for k, v in blob["extra"].items() if k != "ada_state"}
    return save_checkpoint(dst, kind=KIND, config=blob["config"], state=state, step=blob["step"], extra=extra)


# ---------------------------------------------------------------------------------------------
# training


class StyleGANTrainer:
    """Models, optimizers and random state of one run; ``step()`` does one G and one D update.

    ``images`` are (N, C, H, W) uint8 on the CPU (batches move to ``device``). ``save``/``load``
    write and restore everything a resumed run needs. :func:`train_stylegan` drives it; it is
    public for benchmarks and for loops that add their own losses.
    """

    def __init__(self, cfg: StyleGANConfig, images: torch.Tensor, device: torch.device):
        self.cfg = cfg
        self.device = device
        self.images = images                    # (N, C, H, W) uint8 on the CPU
        torch.manual_seed(cfg.seed)             # weights and synthesis noise
        self.G = Generator.from_config(cfg).to(device).train()
        self.D = Discriminator.from_config(cfg).to(device).train()
        self.G_ema = copy.deepcopy(self.G).eval().requires_grad_(False)
        self.augment = AugmentPipe(cfg.augment, p=cfg.augment_p)
        self.ada = AdaController(self.augment, cfg.ada_target, cfg.ada_interval, cfg.ada_kimg, cfg.batch)
        self.opt_G = torch.optim.Adam(self.G.parameters(), lr=cfg.g_lr, betas=(0.0, 0.99), eps=1e-8)
        self.opt_D = torch.optim.Adam(self.D.parameters(), lr=cfg.d_lr, betas=(0.0, 0.99), eps=1e-8)
        self.rng = torch.Generator(device).manual_seed(cfg.seed + 1)  # latents, augmentations
        self.data_rng = torch.Generator().manual_seed(cfg.seed + 2)   # which real images
        self.grid_z = torch.randn(GRID * GRID, cfg.z_dim, generator=torch.Generator().manual_seed(cfg.seed + 3))
        self.batch = cfg.batch
        self.step_count = 0
        self.seconds = 0.0                      # wall-clock training time, over resumes

    @property
    def nimg(self) -> int:
        return self.step_count * self.cfg.batch

    def real_batch(self) -> torch.Tensor:
        idx = torch.randint(len(self.images), (self.cfg.batch,), generator=self.data_rng)
        return self.images[idx].to(self.device, torch.float32) / 127.5 - 1

    def latents(self) -> torch.Tensor:
        return torch.randn(self.cfg.batch, self.cfg.z_dim, device=self.device, generator=self.rng)

    def step(self) -> dict[str, float]:
        cfg = self.cfg
        # generator: non-saturating loss through D (D's weights frozen)
        self.D.requires_grad_(False)
        self.G.requires_grad_(True)
        ws = sample_ws(self.G, self.latents(), style_mixing=cfg.style_mixing, generator=self.rng)
        loss_G = generator_loss(self.D, self.augment, self.G.synthesis(ws), self.rng)
        self.opt_G.zero_grad(set_to_none=True)
        loss_G.backward()
        self.opt_G.step()
        # discriminator: logistic loss, lazy R1 on reals, ADA
        self.G.requires_grad_(False)
        with torch.no_grad():
            ws = sample_ws(self.G, self.latents(), style_mixing=cfg.style_mixing, generator=self.rng,
                           update_emas=True)
            fake = self.G.synthesis(ws)
        out = discriminator_step(self.D, self.opt_D, self.augment, self.ada, self.real_batch(), fake,
                                 step=self.step_count, r1_gamma=cfg.r1_gamma, r1_interval=cfg.r1_interval,
                                 generator=self.rng)
        self.step_count += 1
        self.update_ema()
        out = {"loss_G": float(loss_G.detach()), **out, "ada_p": self.augment.p}
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
        rng = {"torch": torch.get_rng_state(), "latents": self.rng.get_state(), "data": self.data_rng.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {"G": self.G.state_dict(), "D": self.D.state_dict(), "G_ema": self.G_ema.state_dict(),
                 "opt_G": self.opt_G.state_dict(), "opt_D": self.opt_D.state_dict(), "rng": rng}
        extra = {"images": len(self.images), "ada_p": self.augment.p, "ada_state": self.ada.state_dict(),
                 "kimg": self.nimg / 1000, "seconds": self.seconds}
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
        torch.set_rng_state(state["rng"]["torch"])
        self.rng.set_state(state["rng"]["latents"])
        self.data_rng.set_state(state["rng"]["data"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        self.ada.load_state_dict(blob["extra"]["ada_state"])
        self.step_count = int(blob["step"])
        self.seconds = float(blob["extra"]["seconds"])


def to_uint8(images: torch.Tensor, cfg: StyleGANConfig) -> torch.Tensor:
    """Check the images against the config and store them as 8-bit (a quarter of the memory)."""
    expected = (cfg.channels, cfg.resolution, cfg.resolution)
    if images.ndim != 4 or tuple(images.shape[1:]) != expected:
        raise DataError(f"the images have shape {tuple(images.shape)}, the model expects "
                        f"(N, {cfg.channels}, {cfg.resolution}, {cfg.resolution})",
                        fix="load the dataset with --size equal to the config's resolution and matching channels")
    if len(images) == 0:
        raise DataError("no training images")
    return ((images.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


def keep_metrics_until(path: Path, step: int) -> None:
    """On resume, drop metric lines written after the checkpoint (the run repeats those steps)."""
    if not path.exists():
        return
    lines = [line for line in path.read_text(encoding="utf-8").splitlines()
             if line.strip() and json.loads(line).get("step", 0) <= step]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def train_stylegan(images: torch.Tensor, cfg: StyleGANConfig, out: str | Path, *, steps: int,
                   resume: bool = False, device: str | torch.device = "cpu", checkpoint_every: int = 500,
                   sample_every: int = 500, log_every: int = 10, max_seconds: float | None = None,
                   progress: bool = True, command: str = "train gan") -> Path:
    """Train StyleGAN2-ADA on ``images`` (N, C, H, W) in [-1, 1] until ``steps`` steps of ``cfg.batch`` images.

    Writes the run directory described in the module docstring to ``out`` and returns the path of the
    final checkpoint. With ``resume`` the run continues from ``out/checkpoint.pt``; its config must
    equal ``cfg``. ``max_seconds`` ends the run early, after the step that reaches that much wall-clock
    time, with the same final log line, samples and checkpoint as a finished run (useful on shared machines).
    """
    validate(cfg)
    device = torch.device(device)
    out = Path(out)
    ckpt_path = out / CHECKPOINT
    data = to_uint8(images, cfg)
    if not resume and ckpt_path.exists():
        raise ConfigError(f"{out} already holds a training run ({CHECKPOINT})",
                          fix="pass --resume to continue it, or choose another --out")
    trainer = StyleGANTrainer(cfg, data, device)
    if resume:
        blob = load_checkpoint(ckpt_path, kind=KIND, map_location=device)
        diff = sorted(k for k, v in to_dict(cfg).items() if blob["config"].get(k) != v)
        if diff:
            raise ConfigError(f"the config differs from the run being resumed in {diff}",
                              fix="resume with the run's own config (its config.yaml)")
        trainer.load(blob)
        keep_metrics_until(out / "metrics.jsonl", trainer.step_count)
    run = RunDir(out, config=cfg, command=command, seeds={"seed": cfg.seed})
    run.update(resumed_from_step=trainer.step_count if resume else None,
               training_images={"count": len(data), "sha256_uint8": sha256_bytes(data.numpy().tobytes())})
    return run_loop(trainer, run, out, steps=steps, checkpoint_every=checkpoint_every, sample_every=sample_every,
                    log_every=log_every, progress=progress, desc="stylegan2", max_seconds=max_seconds,
                    show=lambda m: {"G": f"{m['loss_G']:.3f}", "D": f"{m['loss_D']:.3f}", "p": f"{m['ada_p']:.3f}"})

