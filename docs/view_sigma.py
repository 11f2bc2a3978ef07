"""Measure the latent spread behind the default augmentation noise of k-SALSA supplement E (docs/ksalsa.md).

    python docs/view_sigma.py --data DIR --model checkpoints/restyle-fundus64.pt --k 5 [--images 400]

Inverts the images with the codec, forms the k-Same clusters (people-level, k), and prints one JSON
line: the encoder's per-dimension latent std (median over dimensions) against the generator prior's,
the distance from each cluster average to its own members and to the nearest other cluster average
(flattened W+, medians), and for several σ the norm of a view's shift and the share of views whose
nearest cluster average is their own. The default σ is chosen from these numbers (docs/ksalsa.md).
"""

from __future__ import annotations

import argparse
import json

import torch

from medanon.anonymize.augment import latent_views, prior_w_std
from medanon.anonymize.averaging import centroid_latents, member_weights
from medanon.anonymize.clustering import cluster_people
from medanon.codecs.stylegan import load_codec
from medanon.config import DataConfig
from medanon.data.dataset import open_dataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="checkpoints/restyle-fundus64.pt")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--sigmas", default="0.02,0.05,0.1,0.25")
    a = ap.parse_args()
    torch.manual_seed(0)
    codec = load_codec(a.model)
    ds = open_dataset(a.data, DataConfig(size=codec.generator.img_resolution))
    idx = list(range(min(a.images, len(ds))))
    with torch.no_grad():
        x = torch.stack([ds.load(i)["image"] for i in idx])
        ws = torch.cat([codec.encode(x[i:i + 64]) for i in range(0, len(x), 64)]).double()
    pids = [ds.records[i].patient_id for i in idx]
    cl = cluster_people(ws.flatten(1), pids, a.k)
    weights = [member_weights(c, pids) for c in cl.clusters]
    cent = centroid_latents(ws, cl.clusters, weights)                       # (M, num_ws, w_dim)
    flat = cent.flatten(1)
    d = torch.cdist(flat, flat)
    d.fill_diagonal_(float("inf"))
    nn = d.min(1).values
    own = torch.tensor([float((ws[c].flatten(1) - flat[j]).norm(dim=1).mean()) for j, c in enumerate(cl.clusters)])
    s = prior_w_std(codec.generator).double()
    enc_std = ws[:, 0].std(0)
    out = {"images": len(idx), "patients": len(set(pids)), "clusters": len(cl.clusters), "k": a.k,
           "num_ws": ws.shape[1], "w_dim": ws.shape[2],
           "prior_std_median": float(s.median()), "encoder_std_median": float(enc_std.median()),
           "encoder_over_prior_median": float((enc_std / s).median()),
           "centroid_to_own_members_median": float(own.median()),
           "centroid_to_nearest_centroid_median": float(nn.median()),
           "centroid_to_nearest_centroid_p10": float(nn.quantile(0.1)), "sigma": {}}
    g = torch.Generator().manual_seed(1)
    for sig in [float(v) for v in a.sigmas.split(",")]:
        views = latent_views(cent.float(), views=9, sigma=sig, scale=s.float(), generator=g).double()[:, 1:]
        shift = (views - cent[:, None]).flatten(2).norm(dim=2)                # (M, 8)
        dist = torch.cdist(views.flatten(2).reshape(-1, flat.shape[1]), flat)   # (M*8, M)
        own_nearest = (dist.argmin(1) == torch.arange(len(flat)).repeat_interleave(8)).double().mean()
        out["sigma"][f"{sig:g}"] = {"view_shift_median": float(shift.median()),
                                    "views_nearest_own_average": float(own_nearest)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
