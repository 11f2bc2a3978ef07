"""GMIA in W (the paper's space, the default) against W+ on phantoms, with the shipped networks (docs/gmia.md).

    python docs/gmia_space.py --data DIR [--images 48] [--steps 10]

Prints one JSON line per latent space: the identity cosine under the optimisation's own E_id
(before / after, share at or below the margin), the utility feature distance, and the cosine under
the separately trained identity *attacker* network (checkpoints/identity-attacker-fundus64.pt)
between each source and its released image, with the seconds taken.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from medanon.anonymize.gmia import GMIA, GMIAConfig, IdentityEncoder
from medanon.config import DataConfig
from medanon.data.dataset import open_dataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--images", type=int, default=48)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ckpt", default="checkpoints")
    a = ap.parse_args()
    ds = open_dataset(a.data, DataConfig(size=64))
    x = torch.stack([ds.load(i)["image"] for i in range(min(a.images, len(ds)))])
    attacker = IdentityEncoder.from_checkpoint(f"{a.ckpt}/identity-attacker-fundus64.pt").eval()
    with torch.no_grad():
        ref = attacker(x)
    for space in ("w", "w+"):
        cfg = GMIAConfig(steps=a.steps, latent_space=space)
        gmia = GMIA.from_checkpoints(f"{a.ckpt}/cotrained-fundus64.pt", identity=f"{a.ckpt}/identity-fundus64.pt",
                                     utility=f"{a.ckpt}/classifier-grade-fundus64.pt", cfg=cfg)
        t = time.perf_counter()
        res = gmia.anonymise(x)
        sec = time.perf_counter() - t
        with torch.no_grad():
            att = F.cosine_similarity(ref, attacker(res.images), dim=1)
        print(json.dumps({"space": space, "images": len(x), "steps": a.steps, "seconds": round(sec, 1),
                          "id_cos_before": round(float(res.id_cos_start.mean()), 4),
                          "id_cos_after": round(float(res.id_cos.mean()), 4),
                          "at_or_below_margin": round(float((res.id_cos <= cfg.margin).float().mean()), 4),
                          "ut_dist_before": round(float(res.ut_dist_start.mean()), 4),
                          "ut_dist_after": round(float(res.ut_dist.mean()), 4),
                          "attacker_cos_after": round(float(att.mean()), 4)}))


if __name__ == "__main__":
    main()
