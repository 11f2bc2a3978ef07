"""Throughput of the heavy work on one device (CPU or GPU): prints one JSON line per measurement.

Each line names the device it ran on (``torch.cuda.get_device_name`` or the CPU), the size, the
threads and the 1-minute load, and carries the matmul FLOP/s measured on that device in the same
run, just before it (float32 ``n x n`` products), so that a rate can be read as a fraction of what
the device gave at that moment:

- ``gan_train``: StyleGAN2-ADA training images/s (``StyleGANTrainer.step``: one G and one D update of
  the config's batch, R1 and ADA as configured) of the config for ``--size`` (``cpu64.yaml`` at 64 px,
  ``gpu256.yaml`` at 256), on random images;
- ``inversion``: images/s of ``decode(encode(x))`` of a ReStyle codec of the encoder config for the size
  (``configs/encoder/cpu64.yaml`` or ``gpu256.yaml``; iterations as configured), no gradients, with its FLOPs
  per image (``torch.utils.flop_counter``, a multiply-add counted as 2) and the FLOP/s that rate achieves;
- ``ksalsa``: seconds per cluster of k-SALSA averaging (k = 5, ``--ksalsa-steps`` Adam steps, clusters in
  batches of 8, EfficientNet-Lite0 features at the images' size), and the same scaled to 100 steps (the
  paper's setting; k-SALSA reports 19 s per cluster at 512 px on an RTX 3090);
- ``fid``: images/s of the Inception-v3 FID feature network (299 px inputs, batches of 64);
- ``first_use``: seconds of the evaluation's utility probe (the fast preset's EfficientNet-Lite0 features at
  several depths) on 512 images at 64 px in batches of 64: the first pass in the process, the second, and a pass
  with a new last batch shape. A first pass much slower than the second is one-time cost (loading the network
  and its kernels, cuDNN choosing or compiling kernels for each new shape) that falls on the first release an
  evaluation measures.

On a GPU each line also gives the peak memory allocated (``peak_gpu_mb``), what a batch size must fit in.
Models are untrained (speed does not depend on the weights). Nothing here is a GPU number unless the
line's ``device`` says so: run it on the GPU to get GPU lines.

    python benchmarks/device.py [--device auto|cpu|cuda] [--size 64] [--amp bf16] [--profile 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
from flow import matmul_flops, sync  # benchmarks/flow.py: float32 n x n products on the device
from torch.utils.flop_counter import FlopCounterMode

from medanon.config import build
from medanon.models.stylegan import StyleGANConfig

ROOT = Path(__file__).resolve().parents[1]
GAN = {64: "cpu64.yaml", 256: "gpu256.yaml"}
ENCODER = {64: "cpu64.yaml", 256: "gpu256.yaml"}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


PROFILE_ROWS = 0  # --profile: operators listed per measurement (0: no profile)


def timed(device: torch.device, fn, repeats: int) -> float:
    """Best wall seconds of ``repeats`` calls of ``fn`` after one warm-up call.

    With ``--profile N`` one more call runs under ``torch.profiler`` and the N operators with the most device
    time (CPU time on a CPU) go to stderr, with how often each was called: where a GPU rate is lost.
    """
    fn()
    sync(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    if PROFILE_ROWS:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            fn()
            sync(device)
        key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=PROFILE_ROWS), file=sys.stderr, flush=True)
    return best


def codec_for(size: int, device: torch.device, amp: str | None):
    from medanon.codecs.stylegan import StyleGANCodec
    from medanon.models.encoder import Encoder
    from medanon.models.stylegan import Generator
    from medanon.train.encoder import EncoderConfig

    g = build(StyleGANConfig, path=ROOT / "configs" / "stylegan" / GAN[size])
    e = build(EncoderConfig, path=ROOT / "configs" / "encoder" / ENCODER[size])
    torch.manual_seed(0)
    gen = Generator.from_config(g).requires_grad_(False)
    enc = Encoder(g.resolution, g.channels, gen.num_ws, g.w_dim, iterative=True, channel_base=e.channel_base,
                  channel_max=e.channel_max, head_dim=e.head_dim).requires_grad_(False)
    return StyleGANCodec(gen, enc, e.iterations, amp=amp).to(device)


def gan_train(size: int, device: torch.device, steps: int, batch: int = 0, amp: str | None = None) -> dict:
    """``batch``: images per step (0: the config's); ``amp="bf16"``: the config's ``precision: bf16``."""
    from dataclasses import replace

    from medanon.train.gan import StyleGANTrainer

    cfg = build(StyleGANConfig, path=ROOT / "configs" / "stylegan" / GAN[size])
    cfg = replace(cfg, batch=batch or cfg.batch, precision="bf16" if amp == "bf16" else cfg.precision)
    images = torch.randint(0, 256, (max(64, 2 * cfg.batch), cfg.channels, size, size), dtype=torch.uint8)
    trainer = StyleGANTrainer(cfg, images, device)
    seconds = timed(device, lambda: [trainer.step() for _ in range(steps)], 1)
    return {"img_per_s": cfg.batch * steps / seconds, "batch": cfg.batch, "steps": steps, "config": GAN[size],
            "gan_precision": cfg.precision}


def inversion(size: int, device: torch.device, amp: str | None, batch: int, variant: str = "eager") -> dict:
    """``variant``: ``eager`` as the library runs it; ``channels-last``: models and input in channels-last from
    the start (no format conversions inside); ``compile``: ``torch.compile`` of encode and decode (the first,
    untimed call compiles)."""
    codec = codec_for(size, device, amp)
    x = torch.rand(batch, codec.generator.img_channels, size, size, device=device) * 2 - 1
    encode, decode = codec.encode, codec.decode
    if variant == "channels-last":
        codec = codec.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    elif variant == "compile":
        encode, decode = torch.compile(codec.encode), torch.compile(codec.decode)
    seconds = timed(device, lambda: decode(encode(x)), 2)
    with FlopCounterMode(display=False) as count, torch.no_grad():
        codec.decode(codec.encode(x[:1]))
    gflop = count.get_total_flops() / 1e9          # per image; a multiply-add counts 2
    return {"img_per_s": batch / seconds, "batch": batch, "iterations": codec.iterations, "amp": amp,
            "variant": variant, "gflop_per_img": gflop, "achieved_tflops": gflop * batch / seconds / 1e3}


def ksalsa(size: int, device: torch.device, amp: str | None, steps: int, clusters: int = 8, k: int = 5,
           variant: str = "eager") -> dict:
    """``variant``: ``eager`` as the library runs it; ``compile``: ``torch.compile`` of the rendering (generator)
    and of the feature network, whose forward and backward run at every step (the first, untimed call compiles).
    ``channels-last`` (an inversion variant) runs ``eager`` here, and the line says so."""
    from medanon.anonymize.salsa import KSalsa, SalsaConfig
    from medanon.models.features import get_feature_network

    codec = codec_for(size, device, amp)
    g = codec.generator
    render, features = codec.render, get_feature_network("efficientnet-lite0", device=device)
    if variant == "compile":
        render, features = torch.compile(render), torch.compile(features)
    salsa = KSalsa(render, features, SalsaConfig(steps=steps))
    images = torch.rand(clusters, k, g.img_channels, size, size, device=device) * 2 - 1
    latents = g.w_avg.detach()[None, None, None].expand(clusters, k, g.num_ws, -1).clone()
    latents += 0.1 * torch.randn_like(latents)
    weights = torch.ones(clusters, k, device=device)
    seconds = timed(device, lambda: salsa.average(images, latents, weights), 1)
    return {"s_per_cluster": seconds / clusters, "s_per_cluster_at_100_steps": seconds / clusters * 100 / steps,
            "steps": steps, "k": k, "clusters_per_batch": clusters, "amp": amp,
            "variant": "compile" if variant == "compile" else "eager"}


def fid(size: int, device: torch.device, batch: int = 64) -> dict:
    from medanon.evaluate.fidelity import inception_extractor

    extract, info = inception_extractor(device=device)
    x = torch.rand(batch, 3, size, size, device=device) * 2 - 1
    seconds = timed(device, lambda: extract(x), 2)
    return {"img_per_s": batch / seconds, "batch": batch, "network": info.get("name")}


def first_use(device: torch.device, images: int = 512) -> dict:
    from medanon.evaluate.config import EvalConfig
    from medanon.evaluate.learners import make_learner

    learner = make_learner(EvalConfig.fast(size=64).utility, device=device)
    x = torch.rand(images, 3, 64, 64) * 2 - 1

    def seconds(images: torch.Tensor) -> float:
        t0 = time.perf_counter()
        learner.encode(images)                 # ends with a copy to the host: synchronised
        return time.perf_counter() - t0

    first = seconds(x)
    return {"first_s": first, "second_s": seconds(x), "new_shape_s": seconds(x[:-5]), "images": len(x),
            "network": learner.cfg.network}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--size", type=int, default=64, choices=sorted(GAN))
    ap.add_argument("--amp", default=None, choices=("bf16", "fp16"),
                    help="autocast of the codec (inversion, ksalsa); bf16 also trains the GAN with precision: bf16")
    ap.add_argument("--gan-steps", type=int, default=3)
    ap.add_argument("--gan-batch", type=int, default=0, help="GAN training batch (0: the config's)")
    ap.add_argument("--ksalsa-steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32, help="inversion batch")
    ap.add_argument("--clusters", type=int, default=8, help="k-SALSA clusters optimised together")
    ap.add_argument("--precision", default="tf32", choices=("tf32", "fp32"),
                    help="CUDA float32 products: tf32 as medanon runs them (medanon.runtime.configure_cuda), or fp32")
    ap.add_argument("--only", default="gan_train,inversion,ksalsa,fid")
    ap.add_argument("--variant", default="eager", choices=("eager", "channels-last", "compile"),
                    help="how the inversion and k-SALSA run (see inversion() and ksalsa())")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after timing, profile one more call and print its N costliest operators to stderr")
    args = ap.parse_args()
    global PROFILE_ROWS
    PROFILE_ROWS = args.profile
    dev = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                       ("cpu" if args.device == "auto" else args.device))
    if dev.type == "cuda":
        from medanon.runtime import configure_cuda

        os.environ["MEDANON_STRICT_FP32"] = "1" if args.precision == "fp32" else "0"
        configure_cuda()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({cpu_name()}, {os.cpu_count()} cores)"
    runs = {"gan_train": lambda: gan_train(args.size, dev, args.gan_steps, args.gan_batch, args.amp),
            "inversion": lambda: inversion(args.size, dev, args.amp, args.batch, args.variant),
            "ksalsa": lambda: ksalsa(args.size, dev, args.amp, args.ksalsa_steps, clusters=args.clusters,
                                     variant=args.variant),
            "fid": lambda: fid(args.size, dev),
            "first_use": lambda: first_use(dev)}
    for what in args.only.split(","):
        flops = matmul_flops(dev, n=2048)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        t0 = time.perf_counter()
        res = runs[what]()
        if dev.type == "cuda":                     # what a default batch on a GPU must fit in
            res["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated(dev) / 2**20)
        print(json.dumps({"measure": what, **{k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()},
                          "matmul_tflops_fp32": round(flops / 1e12, 4), "device": name, "size": args.size,
                          "precision": args.precision if dev.type == "cuda" else "fp32",
                          "threads": torch.get_num_threads(), "load_1min": round(os.getloadavg()[0], 2),
                          "wall_s": round(time.perf_counter() - t0, 1), "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
