"""Generative backbone speed: prints one JSON line.

StyleGAN2-ADA training images/s at 64 px (``configs/stylegan/cpu64.yaml``), generator-only
synthesis images/s and inversion (encode + decode) images/s of both encoders (ReStyle and
co-trained, :func:`inversion.inversion`), each also as a fraction of the matmul FLOP/s measured in the same run (the
machine's practical peak; on a shared machine compare fractions, not absolute rates). Model FLOPs
are counted with forward hooks (2 x the multiply-accumulates of every convolution and fully
connected layer; resampling filters and element-wise ops are left out). A training step per image
costs about 4 generator and 8 discriminator passes (G step: G forward + backward, D forward +
input-gradient backward; D step: G forward, D forward + backward on fakes and on reals), not
counting the lazy R1 pass.

    python benchmarks/backbone.py [--threads N] [--steps 6]

Each part is a function returning a dict; ``main`` merges them (``--skip`` leaves parts out).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from inversion import inversion  # benchmarks/inversion.py (this script's folder is on sys.path)
from torch import nn

from medanon.config import build
from medanon.models.stylegan import Discriminator, Generator, StyleGANConfig
from medanon.runtime import cpu_count
from medanon.train.gan import StyleGANTrainer

CPU64 = Path(__file__).resolve().parents[1] / "configs" / "stylegan" / "cpu64.yaml"
TRAIN_PASSES = {"G": 4, "D": 8}                 # forward-pass equivalents per image in one training step


def matmul_flops(n: int = 2048, repeats: int = 10) -> dict[str, float]:
    """FLOP/s of a large float32 matrix product on the CPU (best of a few timings)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return {"matmul_gflops": 2 * n**3 / best / 1e9}


def count_flops(model: nn.Module, *inputs: torch.Tensor) -> float:
    """FLOPs per sample of one forward pass: 2 x MACs of every module with a 2-D or 4-D ``weight``."""
    macs = 0

    def hook(module: nn.Module, _inputs, output: torch.Tensor) -> None:
        nonlocal macs
        w = module.weight
        per_output = w[0].numel()               # in_features, or in_channels * k * k
        macs += output.numel() // output.shape[0] * per_output

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(getattr(m, "weight", None), nn.Parameter) and m.weight.ndim in (2, 4)]
    with torch.no_grad():
        model(*inputs)
    for h in handles:
        h.remove()
    return 2.0 * macs


def gan_training(cfg: StyleGANConfig, peak_flops: float, steps: int = 6) -> dict[str, float]:
    """Training images/s of ``cfg`` on random images, and the achieved fraction of ``peak_flops``."""
    images = torch.randint(0, 256, (64, cfg.channels, cfg.resolution, cfg.resolution), dtype=torch.uint8)
    trainer = StyleGANTrainer(cfg, images, torch.device("cpu"))
    trainer.augment.p = 0.2                     # a typical mid-run augmentation probability
    for _ in range(2):                          # warm-up (allocator, oneDNN kernels, one R1 step)
        trainer.step()
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.step()
    rate = steps * cfg.batch / (time.perf_counter() - t0)
    g = count_flops(trainer.G, torch.randn(2, cfg.z_dim))
    d = count_flops(trainer.D, torch.randn(4, cfg.channels, cfg.resolution, cfg.resolution))
    per_image = TRAIN_PASSES["G"] * g + TRAIN_PASSES["D"] * d
    return {"gan_train_img_per_s": rate, "gan_train_gflop_per_img": per_image / 1e9,
            "gan_train_fraction_of_matmul": rate * per_image / peak_flops,
            "generator_gflop_per_img": g / 1e9, "discriminator_gflop_per_img": d / 1e9}


def synthesis(cfg: StyleGANConfig, peak_flops: float, batch: int = 64, repeats: int = 3) -> dict[str, float]:
    """Generator-only images/s (mapping + synthesis, no gradients) and the fraction of ``peak_flops``."""
    torch.manual_seed(0)
    G = Generator.from_config(cfg).eval()
    z = torch.randn(batch, cfg.z_dim)
    with torch.no_grad():
        G(z, noise_mode="const")
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            G(z, noise_mode="const")
            best = min(best, time.perf_counter() - t0)
    rate = batch / best
    return {"synthesis_img_per_s": rate,
            "synthesis_fraction_of_matmul": rate * count_flops(G, z[:2]) / peak_flops}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = all cores)")
    ap.add_argument("--steps", type=int, default=6, help="timed training steps")
    ap.add_argument("--skip", nargs="*", default=[], choices=["training", "synthesis", "inversion"],
                    help="parts to leave out")
    args = ap.parse_args()
    threads = args.threads or cpu_count()
    torch.set_num_threads(threads)
    cfg = build(StyleGANConfig, path=CPU64)
    result: dict[str, object] = {"benchmark": "backbone", "config": "cpu64", "resolution": cfg.resolution,
                                 "batch": cfg.batch, "threads": threads,
                                 "parameters_G": sum(p.numel() for p in Generator.from_config(cfg).parameters()),
                                 "parameters_D": sum(p.numel() for p in Discriminator.from_config(cfg).parameters())}
    peak = matmul_flops()
    result.update(peak)
    peak_flops = peak["matmul_gflops"] * 1e9
    if "training" not in args.skip:
        result.update(gan_training(cfg, peak_flops, steps=args.steps))
    if "synthesis" not in args.skip:
        result.update(synthesis(cfg, peak_flops))
    if "inversion" not in args.skip:
        result.update(inversion(peak_flops))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}))


if __name__ == "__main__":
    main()
