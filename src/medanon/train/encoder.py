"""Training the ReStyle inversion encoder against a frozen StyleGAN2 generator (k-SALSA §3.3, supplement B).

The generator is frozen. For each batch the latent starts at ``w_avg`` and the reconstruction at
``G(w_avg)``; each of ``iterations`` refinement steps predicts ``Δ = E(concat(x, y_t))``, renders
``y_{t+1} = G(w_t + Δ)``, and back-propagates its own loss into the encoder, the latent and image
being detached before the next step (as the official ReStyle code does); the optimizer steps once
per batch. The loss is ``pixel_weight · mean squared error + perceptual_weight · feature distance``.

The feature distance is :func:`medanon.evaluate.reconstruction.perceptual_distance` on
EfficientNet-Lite0 ImageNet features by default: unit-normalised features compared per position, no
learned layer weights. It is **not LPIPS**, and not the MoCo similarity loss of the k-SALSA encoder:
neither network's weights can be obtained offline (docs/design.md §4). ``perceptual_network: vgg19``
uses a user-supplied VGG19 weights file instead.

``train_restyle(images, generator_ckpt, cfg, out, steps=...)`` writes a run directory::

    out/config.yaml           the EncoderConfig
    out/metrics.jsonl         losses, training-batch PSNR, images/s, one line per ``log_every`` steps
    out/manifest.json         software, seeds, input checksums (images, generator checkpoint), timing
    out/checkpoint.pt         the latest full state (E, the frozen G, optimizer, RNGs), kind "restyle-encoder"
    out/samples/step-NNNNNNN.png   source | reconstruction pairs of fixed training images

``resume=True`` continues from ``out/checkpoint.pt`` at the same step with the same optimizer and
RNG state. :func:`export_codec` strips the training state for shipping; the checkpoint (full or
exported) loads with :func:`medanon.codecs.stylegan.load_codec`.

The pieces both inversion trainers share (:class:`InversionTrainer`, resume checks,
export, held-out evaluation) live here; :mod:`medanon.train.autoencoder` imports them. The step loop
itself is :func:`medanon.train.loop.run_loop`, shared with the GAN.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from medanon.checkpoint import load_checkpoint, load_weights, save_checkpoint, state_entry
from medanon.codecs.stylegan import KIND_COTRAINED, KIND_RESTYLE, StyleGANCodec, build_generator
from medanon.config import from_dict, to_dict, validate
from medanon.errors import ConfigError
from medanon.evaluate.reconstruction import feature_distance_name, iw_ssim, perceptual_distance, psnr, ssim
from medanon.models.encoder import Encoder
from medanon.models.stylegan import Generator, StyleGANConfig
from medanon.runtime import RunDir
from medanon.train.distributed import Dist, local_shards, shard_rows, split_batch
from medanon.train.gan import KIND as GAN_KIND
from medanon.train.gan import load_config, to_uint8
from medanon.train.loop import (
    check_run_state,
    recheck_run_state,
    record_modality,
    run_loop,
    training_images_change,
    training_images_digest,
)
from medanon.train.recon_loss import ReconstructionLoss, check_encoder_fields, check_task_network_unchanged

log = logging.getLogger(__name__)

PAIRS = 16                                      # source | reconstruction pairs per sample grid (4 per row)
TRAINING_STATE = ("opt_E", "opt_G", "opt_D", "rng", "D")   # dropped by export_codec


@dataclass
class EncoderConfig:
    # encoder architecture (medanon.models.encoder.Encoder)
    channel_base: int = 4096                    # feature maps at resolution r: min(channel_base // r, channel_max)
    channel_max: int = 256                      # most feature maps in any layer
    head_dim: int = 256                         # hidden width of each style head
    # ReStyle refinement
    iterations: int = 3                         # refinement steps per batch; also the codec's default at inference
    # losses
    pixel_weight: float = 1.0                   # weight of the mean squared pixel error (images in [-1, 1])
    perceptual_weight: float = 0.8              # weight of the feature distance (not LPIPS; see module docstring)
    perceptual_network: str = "efficientnet-lite0"  # feature network of the distance (efficientnet-lite0 | vgg19)
    perceptual_layers: tuple[str, ...] = ("block1", "block2", "block3", "block5")  # layers compared
    perceptual_input_size: int = 128            # side images are resized to for the feature network (0 = unchanged)
    detail_weight: float = 0.0                  # weight of the MSE of fine detail x - blur(x) (train/recon_loss.py)
    detail_sigma: float = 1.0                   # pixels of that blur at the training resolution
    task_weight: float = 0.0                    # weight of a classifier's feature distance (train/recon_loss.py)
    task_network: str = ""                      # that classifier's checkpoint (medanon train classifier)
    # optimisation
    batch: int = 8                              # images per step
    lr: float = 0.001                           # Adam learning rate (layers use StyleGAN's equalised learning rate)
    beta1: float = 0.9                          # Adam beta1
    beta2: float = 0.99                         # Adam beta2
    seed: int = 0                               # seeds the encoder's weights and the batches

    def validate(self) -> None:
        check_encoder_fields(self)
        if self.iterations < 1:
            raise ConfigError(f"iterations={self.iterations} must be at least 1")
        for name in ("lr", "beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1 or (name == "lr" and self.lr == 0):
                raise ConfigError(f"{name}={getattr(self, name)} must be in (0, 1) for lr, [0, 1) for the betas")


# ---------------------------------------------------------------------------------------------
# what both inversion trainers share


class InversionTrainer:
    """What both inversion trainers share: the training images, seeded batches, the images shown in the
    sample grids, and the step and time counters. Subclasses set ``codec`` and implement ``step`` and
    ``save``."""

    codec: StyleGANCodec

    def __init__(self, images: torch.Tensor, batch: int, device: torch.device, seed: int):
        self.images = images                    # (N, C, H, W) uint8 on the CPU
        self.batch = batch
        self.device = device
        self.data_rng = torch.Generator().manual_seed(seed + 2)   # which real images
        self.shown = images[sample_indices(len(images), seed)]
        self.step_count = 0
        self.seconds = 0.0                      # training wall-clock time so far, over resumed runs
        self.training_images = training_images_digest(images)

    @property
    def nimg(self) -> int:                      # images seen (the batch never changes on resume)
        return self.step_count * self.batch

    def real_batch(self) -> torch.Tensor:
        idx = torch.randint(len(self.images), (self.batch,), generator=self.data_rng)
        return self.images[idx].to(self.device, torch.float32) / 127.5 - 1

    def sample_grid(self) -> torch.Tensor:
        """Source | reconstruction pairs of the fixed sample images, for the sample PNG."""
        x = self.shown.to(self.device, torch.float32) / 127.5 - 1
        return interleave(x, self.codec.reconstruct(x))

    def step(self) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def save(self, path: Path) -> Path:  # pragma: no cover - abstract
        raise NotImplementedError


def sample_indices(n_images: int, seed: int) -> torch.Tensor:
    """The fixed training images shown in every sample grid."""
    g = torch.Generator().manual_seed(seed + 3)
    return torch.randperm(n_images, generator=g)[:PAIRS]


def interleave(sources: torch.Tensor, recons: torch.Tensor) -> torch.Tensor:
    """(N, ...) sources and reconstructions -> (2N, ...) as source, reconstruction, source, ..."""
    return torch.stack([sources.to(recons.device), recons], dim=1).flatten(0, 1)


def previous_run(out: Path, *, resume: bool, kind: str,
                 gan_ckpt: str | Path | None) -> dict[str, Any] | None:
    """The checkpoint of the run in ``out`` to resume (None for a new run, which must not overwrite one).
    ``gan_ckpt``, if given when resuming, must be the ``stylegan2`` checkpoint the run started from."""
    ckpt_path = check_run_state(out, resume=resume)
    if not resume:
        return None
    blob = load_checkpoint(ckpt_path, kind=kind)   # on the CPU, where random states must be
    started = blob["extra"].get("generator_checkpoint")
    if gan_ckpt is not None:
        sha = load_checkpoint(gan_ckpt, kind=GENERATOR_KINDS)["sha256"]
        if started is None or sha != started["sha256"]:
            raise ConfigError(f"generator={gan_ckpt} is not the checkpoint the run in {out} started from",
                              fix="leave out generator= when resuming")
    return blob


def check_resume_config(blob: dict[str, Any], cfg: Any, *, ignore: tuple[str, ...] = ()) -> None:
    """Refuse to resume with another config; a field the run's checkpoint predates counts as its default (the
    behaviour the run was trained with)."""
    saved = to_dict(from_dict(type(cfg), blob["config"]["train"], where="the resumed run's config"))
    diff = sorted(k for k, v in to_dict(cfg).items() if k not in ignore and saved.get(k) != v)
    if diff:
        raise ConfigError(f"the config differs from the run being resumed in {diff}",
                          fix="resume with the run's own config (its config.yaml)")
    check_task_network_unchanged(blob, cfg)


def require_training_state(blob: dict[str, Any], keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if k not in blob["state"]]
    if missing:
        raise ConfigError(f"checkpoint {blob['path']} has no training state ({', '.join(missing)}): it is an "
                          "exported model", fix="resume from the run's own checkpoint.pt")


def rng_state(*generators: torch.Generator) -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "generators": [g.get_state() for g in generators]}


def set_rng_state(state: dict[str, Any], *generators: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    for g, s in zip(generators, state["generators"], strict=True):
        g.set_state(s)


def reconstruction_report(codec: StyleGANCodec, images: torch.Tensor, *, batch: int = 16,
                          iw_ssim_scales: int | None = None, baseline: bool = True) -> dict[str, Any]:
    """Reconstruction quality of ``codec.reconstruct`` on ``images`` (N, C, H, W) in [-1, 1]: PSNR (dB),
    SSIM, IW-SSIM and the EfficientNet-Lite0 feature distance (not LPIPS), mean and standard deviation
    over images, with the names to report them under; with ``baseline`` also the same metrics for the
    generator's mean latent ``G(w_avg)`` (what an encoder has to beat). IW-SSIM uses ``iw_ssim_scales`` pyramid levels,
    by default as many as the image size allows, at most 5 (5 need 176 px; 3 fit 64 px, 2 fit 32 px)."""
    if iw_ssim_scales is None:
        iw_ssim_scales = max(1, min(5, 1 + int(math.log2(min(images.shape[-2:]) / 11))))
    values: dict[str, dict[str, list[torch.Tensor]]] = {"codec": {}, **({"mean_latent": {}} if baseline else {})}
    with torch.no_grad():
        mean_image = codec.decode(codec.start(1)[0])
        for chunk in images.split(batch):
            x = chunk.to(codec.device, torch.float32)
            pairs = [("codec", codec.reconstruct(x))] + ([("mean_latent", mean_image.expand_as(x))] if baseline else [])
            for which, rec in pairs:
                scores = {"psnr": psnr(rec, x), "ssim": ssim(rec, x),
                          "iw_ssim": iw_ssim(rec, x, scales=iw_ssim_scales),
                          "feature_distance": perceptual_distance(rec, x)}
                for k, v in scores.items():
                    values[which].setdefault(k, []).append(v.cpu())
    labels = {"psnr": "PSNR (dB)", "ssim": "SSIM", "iw_ssim": f"IW-SSIM ({iw_ssim_scales} scales)",
              "feature_distance": feature_distance_name()}
    out: dict[str, Any] = {"images": len(images), "codec": codec.name, "iterations": codec.iterations,
                           "labels": labels}
    for which, per in values.items():
        out[which] = {}
        for k, chunks in per.items():
            v = torch.cat(chunks)
            out[which][k] = {"mean": v.mean().item(), "std": v.std().item() if len(v) > 1 else math.nan}
    return out


def export_codec(src: str | Path, dst: str | Path, *, float16: bool = False, discriminator: bool = False) -> Path:
    """Write a small copy of a ReStyle or co-training checkpoint: E, G and config, no optimizer, RNG or D.

    ``float16`` stores the floating-point weights as float16 (half the size; loading casts them back to float32,
    so the export decodes as the run does up to float16 rounding of its weights). ``discriminator`` keeps a
    co-training run's D (and, as always, its ADA probability), so that a new run started from the export
    (``medanon train autoencoder --generator EXPORT``) continues E, G *and* D; only the optimizers' moments start
    fresh. That is the resumable state worth committing when the full checkpoint is too big for a repository.
    """
    blob = load_checkpoint(src, kind=(KIND_RESTYLE, KIND_COTRAINED))
    if discriminator and "D" not in blob["state"]:
        raise ConfigError(f"{src} holds no discriminator (kind {blob['kind']}; an export without one, or a ReStyle "
                          "run, whose generator is frozen)", fix="export a co-training run's checkpoint.pt")
    keep = {"D"} if discriminator else set()
    state = {k: v for k, v in blob["state"].items() if k not in TRAINING_STATE or k in keep}
    if float16:
        state = {k: {n: t.half() if t.is_floating_point() else t for n, t in v.items()} for k, v in state.items()}
    extra = {k: v for k, v in blob["extra"].items() if k != "ada_state"}
    extra["exported_from"] = {"sha256": blob["sha256"], "step": blob["step"], "float16": float16,
                              "discriminator": discriminator}
    return save_checkpoint(dst, kind=blob["kind"], config=blob["config"], state=state, step=blob["step"], extra=extra)


GENERATOR_KINDS = (GAN_KIND, KIND_COTRAINED)     # checkpoints whose generator a ReStyle encoder may invert


def generator_config(blob: dict[str, Any]) -> dict[str, Any]:
    """The generator config dict of a loaded ``stylegan2`` or ``cotrained-autoencoder`` checkpoint."""
    return blob["config"]["generator"] if blob["kind"] == KIND_COTRAINED else blob["config"]


def load_frozen_generator(path: str | Path, device: torch.device) -> tuple[Generator, dict[str, Any], dict[str, Any]]:
    """The generator a ReStyle encoder is trained against, its config dict and provenance (path, sha256, step,
    kind): the EMA generator of a ``stylegan2`` checkpoint, or the co-trained generator of a
    ``cotrained-autoencoder`` checkpoint (GMIA §2.1's decoder, whose mapping network and ``w_avg`` are the
    GAN's it started from), so that an encoder-only codec can use a generator that co-training taught to
    draw fine structure."""
    blob = load_checkpoint(path, kind=GENERATOR_KINDS, map_location="cpu")   # copied into G, then moved
    cfg = from_dict(StyleGANConfig, generator_config(blob), where=f"{path} generator config")
    validate(cfg)
    G = Generator.from_config(cfg)
    load_weights(G, state_entry(blob, "G" if blob["kind"] == KIND_COTRAINED else "G_ema"), path)
    from medanon.data.training_people import model_people

    provenance = {"path": str(path), "sha256": blob["sha256"], "step": blob["step"], "kind": blob["kind"],
                  "trained_people": model_people(blob)}
    return G.to(device).eval().requires_grad_(False), to_dict(cfg), provenance


# ---------------------------------------------------------------------------------------------
# ReStyle


class _RestyleTrainer(InversionTrainer):
    """Encoder, optimizer and random state of one ReStyle run around a frozen generator."""

    def __init__(self, cfg: EncoderConfig, G: Generator, g_config: dict[str, Any], images: torch.Tensor,
                 device: torch.device, provenance: dict[str, Any], *, dist: Dist | None = None, accumulation: int = 1):
        super().__init__(images, cfg.batch, device, cfg.seed)
        self.cfg = cfg
        self.dist = dist or Dist(device=device)
        self.accumulation = accumulation
        self.shards = self.dist.world_size * accumulation
        split_batch(cfg.batch, self.dist.world_size, accumulation)
        self.g_config = g_config
        self.provenance = provenance
        self.G = G.to(device).eval().requires_grad_(False)
        torch.manual_seed(cfg.seed)             # encoder weights
        self.E = Encoder(G.img_resolution, G.img_channels, G.num_ws, G.w_dim, iterative=True,
                         channel_base=cfg.channel_base, channel_max=cfg.channel_max, head_dim=cfg.head_dim,
                         map_resolution=G.synthesis.map_resolution, map_channels=G.synthesis.map_channels).to(device)
        self.codec = StyleGANCodec(self.G, self.E, cfg.iterations)
        self.loss = ReconstructionLoss(cfg, device, channels=G.img_channels)
        self.opt = torch.optim.Adam(self.E.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))

    def step(self) -> dict[str, float]:
        if self.shards > 1:
            return self._step_sharded()
        x = self.real_batch()
        self.E.train()
        self.opt.zero_grad(set_to_none=True)
        ws, recon = self.codec.start(x.shape[0])
        parts: dict[str, float] = {}
        total = 0.0
        for _ in range(self.cfg.iterations):
            ws = self.codec.refine(x, ws, recon)
            recon = self.codec.render(ws)
            loss, parts = self.loss(recon, x)
            loss.backward()
            total += float(loss.detach())
            ws, recon = ws.detach(), recon.detach()
        self.opt.step()
        self.step_count += 1
        return {"loss": total / self.cfg.iterations, **parts}   # parts: of the last iteration

    def _step_sharded(self) -> dict[str, float]:
        """The step of the global batch as shards (rows ``s::S`` of one draw of images, the same on every
        rank); each shard's losses weigh 1 / S, encoder gradients are summed over shards and ranks.
        Rendering is deterministic, so this equals one process at the same batch up to float summation order."""
        x_all = self.real_batch()               # the whole batch's draw: the data stream stays global
        self.E.train()
        self.opt.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        for s in local_shards(self.dist, self.accumulation):
            x = shard_rows(x_all, s, self.shards)
            ws, recon = self.codec.start(x.shape[0])
            for it in range(self.cfg.iterations):
                ws = self.codec.refine(x, ws, recon)
                recon = self.codec.render(ws)
                loss, parts = self.loss(recon, x)
                (loss / self.shards).backward()
                sums["loss"] = sums.get("loss", 0.0) + float(loss.detach()) / self.cfg.iterations
                if it == self.cfg.iterations - 1:       # parts: of the last iteration
                    for k, v in parts.items():
                        if k != "psnr":
                            sums[k] = sums.get(k, 0.0) + v
                ws, recon = ws.detach(), recon.detach()
        self.dist.sum_gradients(self.E.parameters())
        self.opt.step()
        self.step_count += 1
        out = self.dist.mean_over_shards(sums, self.shards)
        out["psnr"] = 10 * math.log10(4.0 / max(out["pixel"], 1e-12))    # of the whole batch's mean squared error
        return {"loss": out.pop("loss"), **out}

    def save(self, path: Path) -> Path:
        if not self.dist.is_main:               # the state is global: rank 0 writes it
            return path
        state = {"E": self.E.state_dict(), "G": self.G.state_dict(), "opt_E": self.opt.state_dict(),
                 "rng": rng_state(self.data_rng)}
        config = {"generator": self.g_config, "encoder": dict(self.E.kwargs),
                  "codec": {"iterations": self.cfg.iterations}, "train": to_dict(self.cfg)}
        extra = {"generator_checkpoint": self.provenance, "losses": self.loss.describe(),
                 "training_images": self.training_images,
                 "images": len(self.images), "seconds": self.seconds}
        return save_checkpoint(path, kind=KIND_RESTYLE, config=config, state=state, step=self.step_count, extra=extra)

    def load(self, blob: dict[str, Any]) -> None:
        require_training_state(blob, ("E", "opt_E", "rng"))
        self.E.load_state_dict(state_entry(blob, "E"))
        self.opt.load_state_dict(state_entry(blob, "opt_E"))
        set_rng_state(state_entry(blob, "rng"), self.data_rng)
        self.step_count = int(blob["step"])
        self.seconds = float(blob["extra"]["seconds"])


def train_restyle(images: torch.Tensor, generator_ckpt: str | Path | None, cfg: EncoderConfig, out: str | Path, *,
                  steps: int, resume: bool = False, device: str | torch.device = "cpu", checkpoint_every: int = 500,
                  sample_every: int = 500, log_every: int = 10, max_seconds: float | None = None,
                  progress: bool = True, command: str = "train encoder", dist: Dist | None = None,
                  accumulation: int = 1, modality: str | None = None,
                  people: dict[str, Any] | None = None) -> Path:
    """Train a ReStyle encoder for the frozen EMA generator of ``generator_ckpt`` on ``images`` (N, C, H, W)
    in [-1, 1], until ``steps`` steps of ``cfg.batch`` images (or ``max_seconds`` of wall-clock time).
    Returns the checkpoint path.

    With ``resume`` the run continues from ``out/checkpoint.pt`` (its config must equal ``cfg``) and
    the generator is the one stored there; ``generator_ckpt``, if given, must be the same file.
    ``dist``/``accumulation``: data-parallel under torchrun and gradient accumulation (the batch as
    shards, see ``_RestyleTrainer._step_sharded``); rank 0 writes the run directory. ``modality`` (the dataset's,
    where known) is recorded with the training images, as the GAN and co-training runs record it; a resume on
    another modality is refused.
    ``people``: the training people's record (:func:`medanon.data.training_people.training_people`), kept with the
    training images, so that an evaluation tells whether the model saw its controls.
    """
    validate(cfg)
    dist = dist or Dist(device=torch.device(device))
    device = dist.device
    out = Path(out)
    blob = previous_run(out, resume=resume, kind=KIND_RESTYLE, gan_ckpt=generator_ckpt)
    if blob is not None:
        check_resume_config(blob, cfg)
        provenance = blob["extra"]["generator_checkpoint"]
        g_config = blob["config"]["generator"]
        G = build_generator(g_config, state_entry(blob, "G"))
    else:
        if generator_ckpt is None:
            raise ConfigError("a ReStyle encoder needs a trained generator",
                              fix="pass generator= (a stylegan2 or co-trained codec checkpoint)")
        G, g_config, provenance = load_frozen_generator(generator_ckpt, device)
    data = to_uint8(images, load_config({"config": g_config}))
    trainer = _RestyleTrainer(cfg, G, g_config, data, device, provenance, dist=dist, accumulation=accumulation)
    record_modality(trainer.training_images, modality, blob, people)
    if blob is not None:
        training_images_change(blob, trainer.training_images)
        trainer.load(blob)
    run = None
    if dist.is_main:
        at = trainer.step_count if blob is not None else None
        run = RunDir(out, config=cfg, command=command, seeds={"seed": cfg.seed}, new_run=blob is None,
                     resume_step=at, recheck=recheck_run_state(out, at))
        run.update(resumed_from_step=trainer.step_count if resume else None, generator_checkpoint=provenance,
                   training_images=trainer.training_images,
                   losses=trainer.loss.describe())
        if trainer.shards > 1:
            run.update(distributed=dist.describe_run(accumulation=accumulation, shards=trainer.shards,
                                                     global_batch=cfg.batch,
                                                     rank_seeds={r: cfg.seed for r in range(dist.world_size)}))
    return run_loop(trainer, run, out, steps=steps, checkpoint_every=checkpoint_every, sample_every=sample_every,
                    log_every=log_every, progress=progress and dist.is_main, dist=dist, desc="restyle",
                    max_seconds=max_seconds,
                    show=lambda m: {"loss": f"{m['loss']:.4f}", "psnr": f"{m['psnr']:.2f}"})

