"""StyleGAN2-ADA training with ``precision: bf16`` against ``fp32``: gradient agreement and speed of `train gan`.

Prints one JSON line:

- ``agreement`` (:func:`gradient_agreement`): from the starting state, the cosine between G's and between D's
  gradients in the two precisions, the relative size of their difference, and both precisions' losses and R1, from
  the same latents, noise, augmentation draws and real batch;
- seconds per training step (G and D update, R1 on its steps, ADA) in each precision (``StyleGANConfig.precision``:
  G's and D's forward passes under bf16 autocast, the rest in float32), interleaved (fp32, bf16, fp32, bf16) so
  that load drifts hit both; the bf16/fp32 ratio; whether the device computes bf16 natively
  (``medanon.runtime.native_bf16``).

Random images: the speed of a step does not depend on what the images show. With ``--resume CKPT`` the networks
start from a training state (e.g. ``checkpoints/stylegan2-fundus64-wide.resume.pt``) instead of their
initialisation.

    python benchmarks/gan_precision.py --config configs/stylegan/cpu64-wide.yaml --threads 1 [--steps 16]
    python benchmarks/gan_precision.py --config configs/stylegan/gpu256.yaml --device cuda --steps 5

The measurements and what they decided are in docs/experiments.md ("bf16 for GAN training").
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch

from medanon.checkpoint import load_checkpoint
from medanon.config import build
from medanon.models.stylegan import StyleGANConfig
from medanon.runtime import configure_cuda, native_bf16
from medanon.train.gan import StyleGANTrainer
from medanon.train.gan_checkpoint import KIND
from medanon.train.gan_loss import discriminator_loss, generator_loss


def _losses_and_gradients(trainer: StyleGANTrainer, amp: torch.dtype | None) -> tuple[list[float], list]:
    cfg, dev = trainer.cfg, trainer.device
    z = torch.randn(cfg.batch, cfg.z_dim, generator=torch.Generator().manual_seed(1)).to(dev)
    real = trainer.images[:cfg.batch].to(dev, torch.float32) / 127.5 - 1
    torch.manual_seed(5)                                    # synthesis noise
    aug = torch.Generator(dev).manual_seed(7)
    with torch.autocast(dev.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
        fake = trainer.G.synthesis(trainer.G.mapping(z))
    loss_g = generator_loss(trainer.D, trainer.augment, fake, aug, amp=amp)
    grad_g = torch.autograd.grad(loss_g, list(trainer.G.synthesis.parameters()))
    loss_d, stats = discriminator_loss(trainer.D, trainer.augment, real, fake.detach(), r1_weight=1.0, generator=aug,
                                       amp=amp)
    grad_d = torch.autograd.grad(loss_d, list(trainer.D.parameters()))
    flat = [torch.cat([g.flatten() for g in gs]).double() for gs in (grad_g, grad_d)]
    return [float(loss_g.detach()), float(loss_d.detach()), float(stats["r1"])], flat


def gradient_agreement(trainer: StyleGANTrainer) -> dict:
    """bf16 against float32 from the trainer's state: cosine of G's and of D's gradients (``cos_G``, ``cos_D``),
    the relative size of their difference, and the two precisions' G loss, D loss and R1. The same latents,
    synthesis noise, augmentation draws and real batch in both (an augmentation probability of 0.5 at least, so
    that the augmentation's gradients take part)."""
    p = trainer.augment.p
    trainer.augment.p = max(p, 0.5)
    try:
        ref_losses, ref = _losses_and_gradients(trainer, None)
        losses, got = _losses_and_gradients(trainer, torch.bfloat16)
    finally:
        trainer.augment.p = p
    out = {}
    for name, a, b in zip(("G", "D"), ref, got, strict=True):
        out[f"cos_{name}"] = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
        out[f"rel_diff_{name}"] = float((a - b).norm() / a.norm())
    for i, name in enumerate(("loss_G", "loss_D", "r1")):
        out[name] = {"fp32": ref_losses[i], "bf16": losses[i]}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--resume", default=None, help="a StyleGAN training checkpoint to start from")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=16, help="timed steps per round (2 rounds per precision)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = build(StyleGANConfig, path=args.config)
    images = torch.randint(0, 256, (256, cfg.channels, cfg.resolution, cfg.resolution), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    device = torch.device(args.device)
    if device.type == "cuda":
        configure_cuda()                                   # TF32 and cuDNN settings as medanon runs them
    trainer = StyleGANTrainer(cfg, images, device)
    if args.resume:
        trainer.load(load_checkpoint(args.resume, kind=KIND, map_location="cpu"))
    agreement = gradient_agreement(trainer)

    def seconds_per_step(precision: str, n: int) -> float:
        trainer.cfg = replace(cfg, precision=precision)        # what a retuned resume does
        sync(device)
        t = time.perf_counter()
        for _ in range(n):
            trainer.step()
        sync(device)
        return (time.perf_counter() - t) / n

    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for _ in range(2):
        for name in times:
            seconds_per_step(name, 2)                                 # warm-up of this precision's kernels
            times[name].append(seconds_per_step(name, args.steps))
    fp32, bf16 = min(times["fp32"]), min(times["bf16"])
    out = {"benchmark": "gan_precision", "config": args.config, "threads": args.threads, "batch": cfg.batch,
           "device": str(device), "native_bf16": native_bf16(device), "fp32_s_per_step": round(fp32, 4),
           "bf16_s_per_step": round(bf16, 4), "bf16_over_fp32": round(bf16 / fp32, 3),
           "rounds": {k: [round(v, 4) for v in vs] for k, vs in times.items()},
           "agreement": {k: round(v, 6) if isinstance(v, float) else {p: round(x, 6) for p, x in v.items()}
                         for k, v in agreement.items()}}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(out))
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
