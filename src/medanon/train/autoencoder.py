"""GMIA co-training (Li et al. 2025, §2.1): encoder and generator trained jointly as an autoencoder-GAN.

Each step has two updates:

1. **encoder + generator**: ``x̂ = G(w_avg + E(x))`` and
   ``L_E,G = pixel_weight · MSE(x̂, x) + perceptual_weight · feature distance(x̂, x)
   + adversarial_weight · softplus(-D(aug(x̂)))`` (the StyleGAN2 non-saturating generator loss; with
   ``generator.loss: hinge``, ``-D(aug(x̂))``);
2. **discriminator**: the StyleGAN2 logistic loss (or the hinge loss) on the real batch ``x`` against ``x̂``
   (the reconstructions of step 1, rendered before its update, so no extra generator pass), with lazy R1
   and adaptive augmentation (ADA), exactly as in :mod:`medanon.train.gan_loss`.

``texture_from_noise`` (default off) splits ``x̂`` in two: the pixel,
feature and detail losses compare the rendering *without* per-pixel noise, and the adversarial terms use a
second rendering of the same latent *with* fresh noise. At 64 px the phantoms' film grain decides much of the
Inception FID (real X-ray phantoms blurred by a 0.5 / 1 px Gaussian score 43 / 127 against a real control of
34), but grain is unpredictable from a latent, so a pixel loss averages it away; with the split, the noise
strengths learn it from the discriminator alone. Decoding renders with the codec's constant noise, one draw of
that texture. It costs a second generator pass per step.

The encoder is the one-pass variant of :class:`medanon.models.encoder.Encoder` (the residual
trunk of the GMIA paper's encoder, with a pSp-style head); only the generator's synthesis network
is trained (the encoder replaces its mapping network), and ``G.w_avg`` stays fixed as the origin of
the encoder's offsets. Rendering uses the constant per-layer noise the codec decodes with.

Deviations from the paper, stated: the perceptual term is the EfficientNet-Lite0 feature distance,
**not LPIPS** (docs/design.md §4); the loss weights are not given in the paper and are ours (see the
configs). To save CPU time the generator and discriminator can start from a trained ``stylegan2``
checkpoint (``init_ckpt``: its EMA generator and its discriminator), or the encoder and generator from a
co-trained codec (e.g. to add a spatial latent map to a shipped codec); the paper trains the AE-GAN
without saying from where. After co-training, ``G(mapping(z))`` samples are no longer what the
GAN was trained for: the co-trained generator is a decoder for the encoder's latents.

The run directory has the same layout as a ReStyle run (:mod:`medanon.train.encoder`); the
checkpoint's kind is ``"cotrained-autoencoder"`` and it also holds D, the three optimizers and the
ADA state.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from medanon.checkpoint import save_checkpoint
from medanon.codecs.stylegan import KIND_COTRAINED, StyleGANCodec
from medanon.config import from_dict, to_dict, validate
from medanon.errors import ConfigError
from medanon.models.encoder import Encoder
from medanon.models.stylegan import AUGMENTS, AdaController, AugmentPipe, Generator, StyleGANConfig, make_discriminator
from medanon.models.stylegan.config import ARCHITECTURE, MAP_FIELDS
from medanon.runtime import RunDir
from medanon.train.autoencoder_init import init_from, load_init_generator, load_new_parts
from medanon.train.distributed import Dist, local_shards, shard_rows, split_batch
from medanon.train.encoder import (
    InversionTrainer,
    check_resume_config,
    previous_run,
    require_training_state,
    rng_state,
)
from medanon.train.gan import SHARD_SEED_STRIDE, to_uint8
from medanon.train.gan_loss import discriminator_loss, discriminator_step, finish_discriminator_step, generator_loss
from medanon.train.loop import recheck_run_state, record_modality, run_loop, training_images_change
from medanon.train.random_state import restore_generator
from medanon.train.recon_loss import ReconstructionLoss, check_encoder_fields

# ARCHITECTURE: the StyleGANConfig fields that define the networks (an init checkpoint's win); of the rest of the
# nested config only ``loss`` (the adversarial loss: nonsaturating | hinge) is used here. MAP_FIELDS: the spatial
# latent map is the codec's, not the GAN's: an init GAN (which has none) leaves it as configured; a resumed run's
# checkpoint fixes it like the rest of the architecture.


ADVERSARIAL = {"nonsaturating": "non-saturating logistic (StyleGAN2)", "hinge": "hinge (Lim & Ye 2017)"}


@dataclass
class AutoencoderConfig:
    generator: StyleGANConfig = field(default_factory=StyleGANConfig)  # G/D architecture; an init checkpoint's wins
    # encoder architecture (medanon.models.encoder.Encoder, one pass)
    channel_base: int = 4096                    # feature maps at resolution r: min(channel_base // r, channel_max)
    channel_max: int = 256                      # most feature maps in any layer
    head_dim: int = 256                         # hidden width of each style head
    # losses of the encoder + generator update
    pixel_weight: float = 1.0                   # weight of the mean squared pixel error (images in [-1, 1])
    perceptual_weight: float = 0.8              # weight of the feature distance (not LPIPS)
    perceptual_network: str = "efficientnet-lite0"  # feature network of the distance (efficientnet-lite0 | vgg19)
    perceptual_layers: tuple[str, ...] = ("block1", "block2", "block3", "block5")  # layers compared
    perceptual_input_size: int = 128            # side images are resized to for the feature network (0 = unchanged)
    detail_weight: float = 0.0                  # weight of the MSE of fine detail x - blur(x) (train/recon_loss.py)
    detail_sigma: float = 1.0                   # pixels of that blur at the training resolution
    task_weight: float = 0.0                    # weight of a classifier's feature distance (train/recon_loss.py)
    task_network: str = ""                      # that classifier's checkpoint (medanon train classifier)
    adversarial_weight: float = 0.05            # weight of the non-saturating generator loss on reconstructions
    texture_from_noise: bool = False            # pixel losses on the noise-free rendering, D on one with fresh noise
    # optimisation
    batch: int = 8                              # images per step
    e_lr: float = 0.001                         # encoder Adam learning rate, betas (0.9, 0.99)
    g_lr: float = 0.0005                        # synthesis network Adam learning rate, betas (0, 0.99)
    d_lr: float = 0.001                         # discriminator Adam learning rate, betas (0, 0.99)
    r1_gamma: float = 1.0                       # R1 regularisation weight
    r1_interval: int = 16                       # lazy regularisation: R1 every this many steps
    # adaptive discriminator augmentation
    augment: tuple[str, ...] = ("translate", "scale", "rotate", "brightness", "contrast", "saturation", "cutout")
    augment_p: float = -1.0                     # initial augmentation probability; -1 = the init checkpoint's, or 0
    ada_target: float = 0.6                     # target of r_t = E[sign(D(real))]; 0 keeps p fixed
    ada_interval: int = 4                       # steps between updates of p
    ada_kimg: float = 100.0                     # thousands of images for p to move from 0 to 1 at the most
    seed: int = 0                               # seeds the weights, batches and augmentations

    def validate(self) -> None:
        check_encoder_fields(self)
        if self.generator.precision != "fp32":
            raise ConfigError(f"generator.precision={self.generator.precision!r}: co-training runs in float32; the "
                              "precision setting applies to StyleGAN training alone", fix="leave generator.precision "
                              "at fp32")
        if self.adversarial_weight < 0:
            raise ConfigError(f"adversarial_weight={self.adversarial_weight} must not be negative")
        for name in ("e_lr", "g_lr", "d_lr", "ada_kimg"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be positive")
        if self.r1_gamma < 0 or self.r1_interval < 1 or self.ada_interval < 1:
            raise ConfigError("r1_gamma must be >= 0, r1_interval and ada_interval >= 1")
        if not (self.augment_p == -1 or 0 <= self.augment_p <= 1) or not 0 <= self.ada_target <= 1:
            raise ConfigError("augment_p must be -1 (from the init checkpoint) or in [0, 1]; ada_target in [0, 1]")
        unknown = sorted(set(self.augment) - set(AUGMENTS))
        if unknown:
            raise ConfigError(f"unknown augmentation(s) {unknown}", fix=f"choose from {', '.join(AUGMENTS)}")


def _augment_seed(seed: int, s: int) -> int:
    """The seed of shard s's augmentation generator (shard 0's is the single-process one, ``seed + 1``)."""
    return seed + 1 + SHARD_SEED_STRIDE * s


class _CotrainTrainer(InversionTrainer):
    """Encoder, generator, discriminator, optimizers, ADA and random state of one co-training run."""

    def __init__(self, cfg: AutoencoderConfig, images: torch.Tensor, device: torch.device,
                 init: dict[str, Any] | None, *, dist: Dist | None = None, accumulation: int = 1):
        super().__init__(images, cfg.batch, device, cfg.seed)
        self.cfg = cfg
        self.dist = dist or Dist(device=device)
        self.accumulation = accumulation
        self.shards = self.dist.world_size * accumulation
        split_batch(cfg.batch, self.dist.world_size, accumulation)
        self.init_provenance = None if init is None else init["provenance"]
        g = cfg.generator
        torch.manual_seed(cfg.seed)             # weights of whatever does not come from the init checkpoint
        self.G = Generator.from_config(g).to(device)
        self.D = make_discriminator(g).to(device)
        if hasattr(self.D, "calibrate"):        # the projected D's fixed feature scale (an init state brings its own)
            self.D.calibrate(images[:64].to(device, torch.float32) / 127.5 - 1)
        if init is not None:
            load_init_generator(self.G, init["G"])
            if init["D"] is not None:
                self.D.load_state_dict(init["D"])
        self.G.mapping.requires_grad_(False)    # the encoder replaces the mapping network; w_avg stays fixed
        self.E = Encoder(g.resolution, g.channels, self.G.num_ws, g.w_dim, iterative=False,
                         channel_base=cfg.channel_base, channel_max=cfg.channel_max, head_dim=cfg.head_dim,
                         map_resolution=g.map_resolution, map_channels=g.map_channels).to(device)
        if init is not None and init["E"] is not None:  # a co-trained codec's encoder; a new map head stays fresh
            load_new_parts(self.E, init["E"], "map_head.", "encoder")
        self.codec = StyleGANCodec(self.G, self.E, 1)
        self.loss = ReconstructionLoss(cfg, device, channels=g.channels)
        p0 = cfg.augment_p if cfg.augment_p >= 0 else (init or {}).get("ada_p", 0.0)
        self.augment = AugmentPipe(cfg.augment, p=p0)
        self.ada = AdaController(self.augment, cfg.ada_target, cfg.ada_interval, cfg.ada_kimg, cfg.batch)
        self.opt_E = torch.optim.Adam(self.E.parameters(), lr=cfg.e_lr, betas=(0.9, 0.99))
        self.opt_G = torch.optim.Adam(self.G.synthesis.parameters(), lr=cfg.g_lr, betas=(0.0, 0.99), eps=1e-8)
        self.opt_D = torch.optim.Adam(self.D.parameters(), lr=cfg.d_lr, betas=(0.0, 0.99), eps=1e-8)
        self.rng = torch.Generator(device).manual_seed(cfg.seed + 1)   # augmentations
        # shards > 1: shard s augments with its own generator (shard 0: self.rng; s > 0: seed + 1 + s * stride)
        self.shard_rng = {s: self.rng if s == 0 else
                          torch.Generator(device).manual_seed(_augment_seed(cfg.seed, s))
                          for s in local_shards(self.dist, accumulation)} if self.shards > 1 else {}

    def step(self) -> dict[str, float]:
        if self.shards > 1:
            return self._step_sharded()
        cfg = self.cfg
        x = self.real_batch()
        # encoder + generator: reconstruction and adversarial losses (D frozen)
        self.E.train()
        self.G.train()
        self.D.requires_grad_(False)
        self.G.synthesis.requires_grad_(True)
        recon, fake = self._renders(x)
        loss_rec, parts = self.loss(recon, x)
        loss = loss_rec
        out: dict[str, float] = {}
        if cfg.adversarial_weight > 0:
            loss_adv = generator_loss(self.D, self.augment, fake, self.rng, loss=cfg.generator.loss)
            loss = loss + cfg.adversarial_weight * loss_adv
            out["loss_adv"] = float(loss_adv.detach())
        self.opt_E.zero_grad(set_to_none=True)
        self.opt_G.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_E.step()
        self.opt_G.step()
        # discriminator: real batch against its reconstructions, lazy R1, ADA
        self.G.synthesis.requires_grad_(False)
        stats = discriminator_step(self.D, self.opt_D, self.augment, self.ada, x, fake.detach(),
                                   step=self.step_count, r1_gamma=cfg.r1_gamma, r1_interval=cfg.r1_interval,
                                   generator=self.rng, loss=cfg.generator.loss)
        self.step_count += 1
        out.update({"loss": float(loss.detach()), **parts, **stats, "ada_p": self.augment.p})
        return out

    def _renders(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The reconstruction the pixel losses see and the one the discriminator sees (the same tensor unless
        ``texture_from_noise``: then the first is rendered without noise and the second with fresh per-pixel
        noise, so the noise strengths learn texture such as film grain from D alone, while the pixel losses, which
        would average any unpredictable texture away, train the image's structure)."""
        ws = self.codec.refine(x, *self.codec.start(x.shape[0]))
        if not self.cfg.texture_from_noise:
            recon = self.codec.render(ws)
            return recon, recon
        return self.codec.render(ws, noise_mode="none"), self.codec.render(ws, noise_mode="random")

    def _step_sharded(self) -> dict[str, float]:
        """The step of the global batch as shards (as :class:`medanon.train.gan.StyleGANTrainer` does):
        rows ``s::S`` of one draw of images, each shard's losses weighted 1 / S, gradients summed over
        shards and ranks, augmentation from the shard's own generator, minibatch-std inside a shard, ADA
        from the real logits of all shards, R1 on the same steps as one process."""
        cfg, d, weight = self.cfg, self.dist, 1.0 / self.shards
        x_all = self.real_batch()
        self.E.train()
        self.G.train()
        self.D.requires_grad_(False)
        self.G.synthesis.requires_grad_(True)
        self.opt_E.zero_grad(set_to_none=True)
        self.opt_G.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}

        def add(k: str, v: float) -> None:
            sums[k] = sums.get(k, 0.0) + v

        recons = {}
        for s, rng in self.shard_rng.items():
            x = shard_rows(x_all, s, self.shards)
            recon, fake = self._renders(x)
            loss, parts = self.loss(recon, x)
            for k, v in parts.items():
                if k != "psnr":
                    add(k, v)
            if cfg.adversarial_weight > 0:
                loss_adv = generator_loss(self.D, self.augment, fake, rng, loss=cfg.generator.loss)
                loss = loss + cfg.adversarial_weight * loss_adv
                add("loss_adv", float(loss_adv.detach()))
            (loss * weight).backward()
            add("loss", float(loss.detach()))
            recons[s] = fake.detach()
        d.sum_gradients(self.E.parameters())
        d.sum_gradients(self.G.synthesis.parameters())
        self.opt_E.step()
        self.opt_G.step()
        self.G.synthesis.requires_grad_(False)
        self.D.requires_grad_(True)
        self.opt_D.zero_grad(set_to_none=True)
        do_r1 = cfg.r1_gamma > 0 and self.step_count % cfg.r1_interval == 0
        logits = []
        for s, rng in self.shard_rng.items():
            loss, stats = discriminator_loss(self.D, self.augment, shard_rows(x_all, s, self.shards), recons[s],
                                             r1_weight=cfg.r1_gamma * cfg.r1_interval if do_r1 else 0.0,
                                             generator=rng, loss=cfg.generator.loss)
            (loss * weight).backward()
            add("loss_D", float(loss.detach()))
            if do_r1:
                add("r1", float(stats["r1"]))
            logits.append(stats["real_logits"])
        all_logits = finish_discriminator_step(self.D, self.opt_D, self.ada, logits, d)
        self.step_count += 1
        out = d.mean_over_shards(sums, self.shards)
        out["psnr"] = 10 * math.log10(4.0 / max(out["pixel"], 1e-12))    # of the whole batch's mean squared error
        out["D_real"] = float(all_logits.mean())
        out["ada_p"] = self.augment.p
        return out

    def save(self, path: Path) -> Path:
        """Rank 0 writes (every rank must call it with several shards: it gathers their generators)."""
        rng = rng_state(self.rng, self.data_rng)
        if self.shards > 1:
            every: dict[int, torch.Tensor] = {}
            for part in self.dist.gather_objects({s: g.get_state() for s, g in self.shard_rng.items()}):
                every.update(part)
            if not self.dist.is_main:
                return path
            rng = {"torch": torch.get_rng_state(), "generators": [every[0], self.data_rng.get_state()],
                   "shards": [every[s] for s in range(1, self.shards)]}
        state = {"E": self.E.state_dict(), "G": self.G.state_dict(), "D": self.D.state_dict(),
                 "opt_E": self.opt_E.state_dict(), "opt_G": self.opt_G.state_dict(),
                 "opt_D": self.opt_D.state_dict(), "rng": rng}
        config = {"generator": to_dict(self.cfg.generator), "encoder": dict(self.E.kwargs), "codec": {"iterations": 1},
                  "train": to_dict(self.cfg)}
        extra = {"losses": self.loss.describe(), "images": len(self.images), "ada_p": self.augment.p,
                 "training_images": self.training_images,
                 "ada_state": self.ada.state_dict(), "seconds": self.seconds}
        if self.init_provenance is not None:
            extra["generator_checkpoint"] = self.init_provenance
        return save_checkpoint(path, kind=KIND_COTRAINED, config=config, state=state, step=self.step_count,
                               extra=extra)

    def load(self, blob: dict[str, Any]) -> None:
        require_training_state(blob, ("D", "opt_E", "opt_G", "opt_D", "rng"))
        s = blob["state"]
        self.E.load_state_dict(s["E"])
        self.G.load_state_dict(s["G"])
        self.D.load_state_dict(s["D"])
        self.opt_E.load_state_dict(s["opt_E"])
        self.opt_G.load_state_dict(s["opt_G"])
        self.opt_D.load_state_dict(s["opt_D"])
        step = int(blob["step"])
        torch.set_rng_state(s["rng"]["torch"])
        augment, data = s["rng"]["generators"]  # the augmentation generator lives on the device (CPU or CUDA)
        restore_generator(self.rng, augment, seed=_augment_seed(self.cfg.seed, 0), step=step)
        self.data_rng.set_state(data)
        saved = s["rng"].get("shards", [])       # shards beyond the saved ones keep their seeds
        for k, g in self.shard_rng.items():
            if 0 < k <= len(saved):
                restore_generator(g, saved[k - 1], seed=_augment_seed(self.cfg.seed, k), step=step)
        self.ada.load_state_dict(blob["extra"]["ada_state"])
        self.step_count = step
        self.seconds = float(blob["extra"]["seconds"])


def with_generator(cfg: AutoencoderConfig, arch: StyleGANConfig, fields: tuple[str, ...] = ARCHITECTURE
                   ) -> AutoencoderConfig:
    """``cfg`` with the architecture ``fields`` of its generator config taken from ``arch``."""
    g = dataclasses.replace(cfg.generator, **{k: getattr(arch, k) for k in fields})
    return dataclasses.replace(cfg, generator=g)


def train_autoencoder(images: torch.Tensor, cfg: AutoencoderConfig, out: str | Path, *, steps: int,
                      init_ckpt: str | Path | None = None, resume: bool = False, device: str | torch.device = "cpu",
                      checkpoint_every: int = 500, sample_every: int = 500, log_every: int = 10,
                      max_seconds: float | None = None, progress: bool = True,
                      command: str = "train autoencoder", dist: Dist | None = None, accumulation: int = 1,
                      modality: str | None = None,
                   people: dict[str, Any] | None = None) -> Path:
    """Co-train an encoder and a StyleGAN2 generator (with its discriminator) on ``images`` (N, C, H, W) in
    [-1, 1] until ``steps`` steps of ``cfg.batch`` images (or ``max_seconds`` of wall-clock time).
    Returns the checkpoint path.

    ``init_ckpt`` starts G and D from a trained ``stylegan2`` checkpoint, or E and G (and D if it holds one) from a
    co-trained codec; its architecture replaces ``cfg.generator``'s, and the encoder's widths must match. With
    ``resume`` the run continues from ``out/checkpoint.pt``; ``init_ckpt`` is then not needed (and, if given, must
    be the file the run started from).
    ``dist``/``accumulation``: data-parallel under torchrun and gradient accumulation (the batch as
    shards, see ``_CotrainTrainer._step_sharded``); rank 0 writes the run directory. ``modality`` (the dataset's,
    where known) is recorded with the training images, so the codec is refused on the other modality by what it
    records rather than by its channel count; a resume keeps the one recorded.
    ``people``: the training people's record (:func:`medanon.data.training_people.training_people`), kept with the
    training images, so that an evaluation tells whether the model saw its controls.
    """
    dist = dist or Dist(device=torch.device(device))
    device = dist.device
    out = Path(out)
    blob = previous_run(out, resume=resume, kind=KIND_COTRAINED, gan_ckpt=init_ckpt)
    init = None
    if blob is not None:
        arch = from_dict(StyleGANConfig, blob["config"]["generator"], where=f"{blob['path']} generator config")
        cfg = with_generator(cfg, arch, ARCHITECTURE + MAP_FIELDS)
        check_resume_config(blob, cfg, ignore=("generator",))
    elif init_ckpt is not None:
        init = init_from(init_ckpt, device)
        has_map = bool(init["config"].map_resolution)
        cfg = with_generator(cfg, init["config"], ARCHITECTURE + (MAP_FIELDS if has_map else ()))
    validate(cfg)
    data = to_uint8(images, cfg.generator)
    trainer = _CotrainTrainer(cfg, data, device, init, dist=dist, accumulation=accumulation)
    record_modality(trainer.training_images, modality, blob, people)
    if blob is not None:
        trainer.init_provenance = blob["extra"].get("generator_checkpoint")
        training_images_change(blob, trainer.training_images)
        trainer.load(blob)
    run = None
    if dist.is_main:
        at = trainer.step_count if blob is not None else None
        run = RunDir(out, config=cfg, command=command, seeds={"seed": cfg.seed}, new_run=blob is None,
                     resume_step=at, recheck=recheck_run_state(out, at))
        run.update(resumed_from_step=trainer.step_count if resume else None,
                   generator_checkpoint=trainer.init_provenance,
                   training_images=trainer.training_images,
                   losses={**trainer.loss.describe(), "adversarial": {"kind": ADVERSARIAL[cfg.generator.loss],
                                                                      "weight": cfg.adversarial_weight}})
        if trainer.shards > 1:
            run.update(distributed=dist.describe_run(
                accumulation=accumulation, shards=trainer.shards, global_batch=cfg.batch,
                augment_seeds={s: _augment_seed(cfg.seed, s) for s in range(trainer.shards)}))
    return run_loop(trainer, run, out, steps=steps, checkpoint_every=checkpoint_every, sample_every=sample_every,
                    log_every=log_every, progress=progress and dist.is_main, dist=dist, desc="co-train",
                    max_seconds=max_seconds,
                    show=lambda m: {"loss": f"{m['loss']:.4f}", "psnr": f"{m['psnr']:.2f}", "D": f"{m['loss_D']:.3f}"})
