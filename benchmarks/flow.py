"""GLOW speed at 64 px: prints one JSON line.

Measures, in one run and with the same thread count: the dense matmul FLOP/s of this machine
(1024 x 1024 float32, before and after, averaged), flow training images/s and encode+decode images/s with the ``cpu64``
preset, the FLOPs per image of each (counted by ``torch.utils.flop_counter``), and each rate as a
fraction of the matmul FLOP/s (the ratio is what to compare on a busy machine, not absolute times).

    python benchmarks/flow.py [--threads 1] [--channels 1] [--steps 6] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from medanon.config import build
from medanon.models.glow import Glow, GlowConfig, dequantize

PRESET = Path(__file__).resolve().parents[1] / "configs" / "glow" / "cpu64.yaml"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops(device: torch.device, n: int = 1024, seconds: float = 2.0) -> float:
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    for _ in range(3):
        a @ b
    sync(device)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared machine)")
    ap.add_argument("--channels", type=int, default=1, choices=(1, 3))
    ap.add_argument("--steps", type=int, default=6, help="timed training steps (and encode+decode batches)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    cfg = build(GlowConfig, path=PRESET, channels=args.channels)
    flow = Glow(cfg).to(dev)
    opt = torch.optim.Adam(flow.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(cfg.batch, cfg.channels, cfg.resolution, cfg.resolution, generator=gen) * 2 - 1

    def step() -> None:
        loss = -flow.log_prob(dequantize(x, generator=gen).to(dev)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    peak_before = matmul_flops(dev)
    flow.train()
    step()                                      # data-dependent init and warm-up
    with FlopCounterMode(display=False) as fc:
        step()
    train_flop = fc.get_total_flops() / cfg.batch
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(dev)
    train_ips = args.steps * cfg.batch / (time.perf_counter() - t0)

    flow.eval()
    y = (x * 0.5).to(dev)
    with torch.no_grad():
        with FlopCounterMode(display=False) as fc:
            flow.decode(flow.encode(y))
        codec_flop = fc.get_total_flops() / cfg.batch
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            back = flow.decode(flow.encode(y))
        sync(dev)
        codec_ips = args.steps * cfg.batch / (time.perf_counter() - t0)
        err = float((back - y).abs().max())
    peak = (peak_before + matmul_flops(dev)) / 2   # before and after: load changes on a shared machine
    print(json.dumps({
        "benchmark": "flow", "preset": "cpu64", "resolution": cfg.resolution, "channels": cfg.channels,
        "batch": cfg.batch, "device": str(dev), "threads": args.threads,
        "matmul_gflop_per_s": round(peak / 1e9, 2),
        "train_images_per_s": round(train_ips, 2),
        "train_gflop_per_image": round(train_flop / 1e9, 4),
        "train_fraction_of_matmul": round(train_ips * train_flop / peak, 4),
        "encode_decode_images_per_s": round(codec_ips, 2),
        "encode_decode_gflop_per_image": round(codec_flop / 1e9, 4),
        "encode_decode_fraction_of_matmul": round(codec_ips * codec_flop / peak, 4),
        "round_trip_max_error": err,
    }))


if __name__ == "__main__":
    main()
