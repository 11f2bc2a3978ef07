"""StyleGAN2-ADA training steps with ``precision: bf16`` against ``fp32``: the speed of `train gan`'s two precisions.

Prints one JSON line: seconds per training step (G and D update, R1 on its steps, ADA) of a config in each
precision (``StyleGANConfig.precision``: G's and D's forward passes under bf16 autocast, the rest in float32),
interleaved (fp32, bf16, fp32, bf16, ...) so that load drifts hit both, the bf16/fp32 ratio, and whether the device
computes bf16 natively (``medanon.runtime.native_bf16``). Random images: the speed of a step does not depend on what
the images show. With ``--resume CKPT`` the networks start from a training state (e.g.
``checkpoints/stylegan2-fundus64-wide.resume.pt``) instead of their initialisation.

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
           "rounds": {k: [round(v, 4) for v in vs] for k, vs in times.items()}}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(out))
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
