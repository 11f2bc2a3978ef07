"""Inversion speed of both StyleGAN codecs at 64 px: prints one JSON line.

Images per second of ``decode(encode(x))`` (no gradients, batches of 64) for the ReStyle codec
(``configs/encoder/cpu64.yaml``: one encoder and one generator pass per refinement step; rates for
1 .. ``iterations`` steps) and the co-trained one-pass codec (``configs/autoencoder/cpu64.yaml``),
both around the 64 px generator of ``configs/stylegan/cpu64.yaml``; each also as a fraction of the
matmul FLOP/s measured in the same run. Model FLOPs are counted with ``torch.utils.flop_counter``
(every convolution and matrix product, the [1, 3, 3, 1] resampling filters included).
Speed does not depend on the weights, so untrained models of the shipped architecture are timed.

Target (issue 3): >= 100 images/s on 2 CPU cores at 64 px (k-SALSA reports 0.85 s/image at 512 px
on one GPU). On a shared machine compare the fractions, not the absolute rates.

    python benchmarks/inversion.py [--threads N] [--batch 64]
    python benchmarks/inversion.py --threads 1 --against OLD_CHECKOUT [--rounds 3]

``--against`` compares this source tree with another checkout of the repository (e.g. the
previous commit, ``git worktree add /tmp/old HEAD~1`` or ``git archive``): both run in fresh
subprocesses, alternately, ``--rounds`` times each, so that a shared machine's changing load hits
both alike; it prints the range of images/s of each and the largest absolute difference between
their reconstructions of the same images (untrained models, and the shipped checkpoints if present).

``benchmarks/backbone.py`` imports :func:`inversion` and merges its dict into its own line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from medanon.codecs.stylegan import StyleGANCodec
from medanon.config import build
from medanon.models.encoder import Encoder
from medanon.models.stylegan import Generator, StyleGANConfig
from medanon.runtime import cpu_count
from medanon.train.autoencoder import AutoencoderConfig
from medanon.train.encoder import EncoderConfig

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TARGET_IMG_PER_S = 100.0
CHECKPOINTS = {"restyle_fundus64": "checkpoints/restyle-fundus64.pt",
               "cotrained_fundus64": "checkpoints/cotrained-fundus64.pt"}

# Run in a subprocess with one checkout's src/ and benchmarks/ first on sys.path (see compare_checkouts).
_CHILD = """
import json, sys, time, torch
root, ckpt_root, out, threads, batch, repeats = sys.argv[1:7]
sys.path[:0] = [root + "/src", root + "/benchmarks"]
torch.set_num_threads(int(threads))
import medanon
assert medanon.__file__.startswith(root), medanon.__file__
from inversion import build_codecs
from medanon.codecs.stylegan import load_codec
codecs = build_codecs()
for name, rel in json.loads(sys.argv[7]).items():
    codecs[name] = load_codec(ckpt_root + "/" + rel)
x = torch.rand(int(batch), 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
rates, recons = {}, {}
for name, codec in codecs.items():
    recons[name] = codec.decode(codec.encode(x))
    best = float("inf")
    for _ in range(int(repeats)):
        t0 = time.perf_counter()
        codec.decode(codec.encode(x))
        best = min(best, time.perf_counter() - t0)
    rates[name] = len(x) / best
torch.save(recons, out)
print(json.dumps(rates))
"""


def build_codecs(seed: int = 0) -> dict[str, StyleGANCodec]:
    """Untrained ReStyle and co-trained codecs with the cpu64 architectures (frozen, eval mode)."""
    g = build(StyleGANConfig, path=CONFIGS / "stylegan" / "cpu64.yaml")
    e = build(EncoderConfig, path=CONFIGS / "encoder" / "cpu64.yaml")
    a = build(AutoencoderConfig, path=CONFIGS / "autoencoder" / "cpu64.yaml")
    torch.manual_seed(seed)
    G = Generator.from_config(g).requires_grad_(False)
    restyle = Encoder(g.resolution, g.channels, G.num_ws, g.w_dim, iterative=True, channel_base=e.channel_base,
                      channel_max=e.channel_max, head_dim=e.head_dim).requires_grad_(False)
    onepass = Encoder(g.resolution, g.channels, G.num_ws, g.w_dim, iterative=False, channel_base=a.channel_base,
                      channel_max=a.channel_max, head_dim=a.head_dim).requires_grad_(False)
    return {"restyle": StyleGANCodec(G, restyle, e.iterations), "cotrained": StyleGANCodec(G, onepass, 1)}


def _rate(codec: StyleGANCodec, x: torch.Tensor, repeats: int) -> float:
    codec.decode(codec.encode(x))               # warm-up (allocator, oneDNN kernels, G(w_avg) cache)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        codec.decode(codec.encode(x))
        best = min(best, time.perf_counter() - t0)
    return len(x) / best


def _flops_per_image(codec: StyleGANCodec, x: torch.Tensor) -> float:
    codec.decode(codec.encode(x[:1]))           # fill the G(w_avg) cache: it is computed once, not per image
    with FlopCounterMode(display=False) as counter:
        codec.decode(codec.encode(x[:2]))
    return counter.get_total_flops() / 2


def inversion(peak_flops: float, *, batch: int = 64, repeats: int = 3) -> dict[str, float | int | bool]:
    """Encode + decode images/s of both codecs at 64 px and their fractions of ``peak_flops`` (FLOP/s)."""
    codecs = build_codecs()
    g = codecs["restyle"].generator
    x = torch.rand(batch, g.img_channels, g.img_resolution, g.img_resolution,
                   generator=torch.Generator().manual_seed(0)) * 2 - 1
    out: dict[str, float | int | bool] = {}
    for name, codec in codecs.items():
        trained = codec.iterations
        for n in range(1, trained + 1):
            codec.iterations = n
            rate = _rate(codec, x, repeats)
            flops = _flops_per_image(codec, x)
            key = name if n == trained else f"{name}_{n}it"
            out[f"{key}_img_per_s"] = rate
            out[f"{key}_gflop_per_img"] = flops / 1e9
            out[f"{key}_fraction_of_matmul"] = rate * flops / peak_flops
        codec.iterations = trained
        out[f"{name}_iterations"] = trained
        out[f"{name}_target_met"] = out[f"{name}_img_per_s"] >= TARGET_IMG_PER_S
    return out


def compare_checkouts(other: Path, *, rounds: int = 3, threads: int = 1, batch: int = 64,
                      repeats: int = 3) -> dict[str, object]:
    """Images/s of both codecs in this checkout and in ``other``, alternating, and their output difference."""
    checkpoints = {k: v for k, v in CHECKPOINTS.items() if (ROOT / v).exists()}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": ""}
    rates: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for tag, root in (("other", Path(other).resolve()), ("this", ROOT)):
                cmd = [sys.executable, "-c", _CHILD, str(root), str(ROOT), f"{tmp}/{tag}.pt", str(threads),
                       str(batch), str(repeats), json.dumps(checkpoints)]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
                if done.returncode:
                    raise SystemExit(f"{tag} checkout ({root}) failed:\n{done.stderr[-2000:]}")
                rates[tag].append(json.loads(done.stdout.strip().splitlines()[-1]))
        a, b = torch.load(f"{tmp}/this.pt"), torch.load(f"{tmp}/other.pt")
    out: dict[str, object] = {"against": str(other), "rounds": rounds, "threads": threads, "batch": batch}
    for name in rates["this"][0]:
        for tag in ("this", "other"):
            vals = [r[name] for r in rates[tag]]
            out[f"{name}_img_per_s_{tag}"] = [min(vals), max(vals)]
        out[f"{name}_speedup_median"] = (sorted(r[name] for r in rates["this"])[rounds // 2]
                                         / sorted(r[name] for r in rates["other"])[rounds // 2])
        out[f"{name}_max_abs_diff"] = (a[name] - b[name]).abs().max().item()
    return out


def _rounded(v: object) -> object:
    if isinstance(v, float):
        return round(v, 4) if abs(v) >= 1e-3 else float(f"{v:.3g}")
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = all cores)")
    ap.add_argument("--batch", type=int, default=64, help="images per encode/decode call")
    ap.add_argument("--against", type=Path, help="another checkout to compare speed and outputs with")
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs per checkout with --against")
    args = ap.parse_args()
    if args.against:
        result = compare_checkouts(args.against, rounds=args.rounds, threads=args.threads or cpu_count(),
                                   batch=args.batch)
        print(json.dumps({"benchmark": "inversion-compare", **{k: _rounded(v) for k, v in result.items()}}))
        return
    from backbone import matmul_flops  # the backbone benchmark's peak measurement (it imports this file too)

    threads = args.threads or cpu_count()
    torch.set_num_threads(threads)
    peak = matmul_flops()["matmul_gflops"]
    result: dict[str, object] = {"benchmark": "inversion", "resolution": 64, "threads": threads, "batch": args.batch,
                                 "matmul_gflops": peak, "target_img_per_s": TARGET_IMG_PER_S}
    result.update(inversion(peak * 1e9, batch=args.batch))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}))


if __name__ == "__main__":
    main()
