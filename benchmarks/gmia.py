"""GMIA latent optimisation speed at 64 px: seconds per image, batched vs one image at a time; prints one JSON line.

Both are measured in the same run on the same images with the default GMIA config (``GMIAConfig()``:
its steps, both losses): the encoder pass, every Adam step (generator, identity network and utility
network forward and backward) and the final render. The networks have the shipped architectures
(co-trained codec of ``configs/autoencoder/cpu64.yaml`` around ``configs/stylegan/cpu64.yaml``, the
"small" identity ResNet with 128-d embeddings, the "small" classifier); speed does not depend on the
weights, so untrained ones are timed unless ``--model`` gives a codec checkpoint. Batched and single
runs give the same images (tests/test_gmia.py), so the ratio is pure speed.

    python benchmarks/gmia.py [--images 16] [--single 4] [--steps N] [--threads 2] [--model CKPT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inversion import build_codecs

from medanon.anonymize.gmia import GMIA, GMIAConfig, IdentityEncoder, UtilityEncoder
from medanon.codecs.stylegan import load_codec
from medanon.models.classifier import ResNet, ResNetConfig
from medanon.models.identity import IdentityConfig, IdentityNet
from medanon.runtime import cpu_count


def networks(codec, seed: int = 0) -> tuple[IdentityEncoder, UtilityEncoder]:
    g = codec.generator
    torch.manual_seed(seed)
    backbone = ResNetConfig.preset("small", in_channels=g.img_channels)
    ident = IdentityEncoder(IdentityNet(IdentityConfig(backbone, embed_dim=128, image_size=g.img_resolution)))
    util = UtilityEncoder(ResNet(backbone), image_size=g.img_resolution)
    return ident.eval(), util.eval()


def seconds_per_image(gmia: GMIA, images: torch.Tensor) -> float:
    t0 = time.perf_counter()
    gmia.anonymise(images)
    return (time.perf_counter() - t0) / len(images)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=16, help="images optimised as one batch")
    ap.add_argument("--single", type=int, default=4, help="of those, how many are also optimised one at a time")
    ap.add_argument("--steps", type=int, default=GMIAConfig().steps, help="Adam steps (default: GMIA's default)")
    ap.add_argument("--threads", type=int, default=min(2, cpu_count()))
    ap.add_argument("--model", type=Path, default=None, help="codec checkpoint (default: untrained cpu64 codec)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    codec = load_codec(args.model) if args.model else build_codecs()["cotrained"]
    ident, util = networks(codec)
    g = codec.generator
    images = torch.rand(args.images, g.img_channels, g.img_resolution, g.img_resolution,
                        generator=torch.Generator().manual_seed(0)) * 2 - 1
    cfg = GMIAConfig(steps=args.steps, batch_size=args.images)
    batched = GMIA(codec, identity=ident, utility=util, cfg=cfg)
    single = GMIA(codec, identity=ident, utility=util, cfg=GMIAConfig(steps=args.steps, batch_size=1))
    GMIA(codec, identity=ident, utility=util, cfg=GMIAConfig(steps=2, batch_size=2)).anonymise(images[:2])  # warm-up
    t_single = seconds_per_image(single, images[:args.single])
    t_batched = seconds_per_image(batched, images)
    print(json.dumps({
        "benchmark": "gmia-latent-optimisation", "resolution": g.img_resolution, "channels": g.img_channels,
        "steps": args.steps, "losses": cfg.losses, "batch": args.images, "single_images": args.single,
        "s_per_image_batched": round(t_batched, 3), "s_per_image_single": round(t_single, 3),
        "speedup_batched": round(t_single / t_batched, 2), "threads": args.threads,
        "codec": "checkpoint" if args.model else "untrained cpu64 architecture", "device": "cpu",
    }))


if __name__ == "__main__":
    main()
