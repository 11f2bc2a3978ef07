"""Write docs/img/ksalsa_fig2.png: clusters of k = 5 phantom patients and their averages (paper Fig. 2 style).

Run from the repository root:

    python docs/ksalsa_figure.py --model checkpoints/restyle-map-fundus64.pt [--data DIR] [--steps 100]

Without ``--data`` it generates 200 fundus phantom patients with one image each (64 px, seed 5)
in a temporary folder. The clusters are formed in the codec's latent space (people-level same-size
clustering); the ``--clusters`` shown are those with the highest mean DR grade, where lesions are
visible. For each: one source image of each of the first five patients (top), then (bottom) k-SALSA
from the map prior (``map_init="synthetic"``, :mod:`medanon.anonymize.map_prior`, from ``--map-samples``
seeded samples of ``--map-generator``), k-Centroid, the map prior's start itself (the centroid's styles with
the nearest synthetic map, not optimised), k-SALSA with its defaults (the paper's start, the members' mean
map), k-Same-Pixel and k-Same-PCA, all computed on the same cluster. Tiles are
enlarged 2x (nearest neighbour). Every image is a PHANTOM. Prints one JSON line with the style loss of
the start and of the k-SALSA result of each cluster.

With ``--cotrained CODEC`` (repeatable) it also shows, under each cluster's sources, their reconstructions
G(E(x)) by ``--model`` and by each such codec: docs/backbone.md's side-by-side picture of what the backbone
keeps (issue 12, item 5); the averages are always ``--model``'s:

    python docs/ksalsa_figure.py --model checkpoints/restyle-map-fundus64.pt \
        --cotrained checkpoints/cotrained-map-fundus64.pt \
        --cotrained checkpoints/restyle-fundus64.pt --cotrained checkpoints/cotrained-fundus64.pt \
        --out docs/img/backbone_side_by_side.png
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from medanon.anonymize.averaging import centroid_latents, member_weights
from medanon.anonymize.eye_sides import align
from medanon.anonymize.ksame import ClusterAverager, KSameConfig, plan_clusters
from medanon.anonymize.map_prior import build_map_prior, has_map
from medanon.anonymize.salsa import SalsaConfig
from medanon.codecs.stylegan import load_codec
from medanon.config import DataConfig, PhantomConfig
from medanon.data.dataset import open_dataset
from medanon.data.imageio import image_to_uint8
from medanon.models.features import get_feature_network
from medanon.phantoms.generate import generate
from medanon.sampling import load_any_generator

SCALE, LABEL = 2, 14
METHODS = (("ksalsa", "k-SALSA, map prior"), ("kcentroid", "k-Centroid"), ("start", "start: synth. map"),
           ("literal", "k-SALSA (default)"), ("kpixel", "k-Same-Pixel"), ("kpca", "k-Same-PCA"))


def tile(img: torch.Tensor, text: str) -> Image.Image:
    a = image_to_uint8(img)
    im = Image.fromarray(a if a.ndim == 3 else np.repeat(a[..., None], 3, 2), "RGB")
    im = im.resize((im.width * SCALE, im.height * SCALE), Image.Resampling.NEAREST)
    canvas = Image.new("RGB", (im.width, im.height + LABEL), (255, 255, 255))
    canvas.paste(im, (0, LABEL))
    ImageDraw.Draw(canvas).text((2, 1), text, fill=(0, 0, 0))
    return canvas


def label(codec) -> str:
    """What a reconstruction row is called: the codec's kind, and whether its latent carries a spatial map."""
    name = {"restyle": "ReStyle", "cotrained": "co-trained"}.get(codec.name, codec.name)
    return f"{name}{' + map' if codec.latent_space == 'ws+map' else ''} G(E(x))"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default=None)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lam", type=float, default=SalsaConfig.lam)
    ap.add_argument("--clusters", type=int, default=2, help="clusters shown (highest mean grade first)")
    ap.add_argument("--map-generator", default="checkpoints/stylegan2-fundus64-wide.pt",
                    help="the map prior's GAN (a codec with a spatial map)")
    ap.add_argument("--map-samples", type=int, default=SalsaConfig.map_samples, help="the map prior's candidates")
    ap.add_argument("--seed", type=int, default=0, help="the map prior's samples")
    ap.add_argument("--cotrained", action="append", default=[],
                    help="also show reconstructions by --model and this codec (repeatable)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--eye-sides", default=KSameConfig.eye_sides, choices=["auto", "labels", "off"],
                    help="as the methods' eye_sides: images shown and averaged as right eyes (off: as they are)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "img" / "ksalsa_fig2.png"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(args.data) if args.data else generate(
            PhantomConfig(patients=200, per_patient=1, size=64, seed=5, workers=2), Path(tmp) / "fundus",
            progress=False)
        codec = load_codec(args.model)
        codecs = [(c, label(c)) for c in [codec, *map(load_codec, args.cotrained)]]
        ds = align(open_dataset(data, DataConfig(size=codec.generator.img_resolution)), args.eye_sides)
        net = get_feature_network("efficientnet-lite0", input_size=None)
        base = KSameConfig(method="kpca", k=args.k, salsa=SalsaConfig(lam=args.lam, steps=args.steps),
                           eye_sides=args.eye_sides)
        clustering, latents, pca = plan_clusters(ds, base, codec=codec, progress=False)
        prior = build_map_prior(codec, load_any_generator(args.map_generator), samples=args.map_samples,
                                seed=args.seed) if has_map(codec) else None
        grades = [np.mean([ds.records[i].labels.get("grade", 0) for i in c]) for c in clustering.clusters]
        chosen = [clustering.clusters[i] for i in np.argsort(grades, kind="stable")[::-1][:args.clusters]]
        pids = [r.patient_id for r in ds.records]
        weights = [member_weights(c, pids) for c in chosen]
        rows, stats = [], {}
        for n, members in enumerate(chosen):
            first = list({pids[int(i)]: int(i) for i in reversed(members)}.values())[::-1][:args.k]  # 1 per patient
            sources = [tile(ds.load(i)["image"], f"patient {j + 1} (grade {ds.records[i].labels['grade']:g})")
                       for j, i in enumerate(first)]
            recons = []
            if args.cotrained:
                x = torch.stack([ds.load(int(i))["image"] for i in members])
                with torch.no_grad():
                    recons = [[tile(r, name) for r in c.reconstruct(x)] for c, name in codecs]
            outs = []
            for method, name in METHODS:
                if method == "start":
                    if prior is not None:
                        with torch.no_grad():
                            start = prior.start(centroid_latents(latents, [members], [weights[n]]))[1]
                            outs.append(tile(codec.decode(start)[0], name))
                    continue
                salsa, mp = replace(base.salsa, map_init="synthetic"), prior
                if method == "literal":
                    if prior is None:
                        continue
                    method, salsa, mp = "ksalsa", replace(base.salsa, map_init="centroid", rows="all"), None
                cfg = KSameConfig(method=method, k=args.k, salsa=salsa, eye_sides=args.eye_sides)
                avg = ClusterAverager(cfg, ds, codec=codec, features=net, latents=latents, pca=pca, device="cpu",
                                      map_prior=mp if method == "ksalsa" else None)
                outs.append(tile(avg([members], [weights[n]], ["figure"])[0, 0], name))
                if method == "ksalsa":
                    stats[f"cluster{n + 1}_style_loss_start_to_ksalsa_{salsa.map_init}"] = [
                        round(avg.last["style_start"][0], 4), round(avg.last["style_end"][0], 4)]
            rows += [sources, *recons, outs]
        per = len(rows) // len(chosen)                  # rows of one cluster
        w, h = rows[0][0].size
        cols = max(len(r) for r in rows)
        sheet = Image.new("RGB", (cols * w, len(rows) * h + 12), (255, 255, 255))
        for r, row in enumerate(rows):
            for c, t in enumerate(row):
                sheet.paste(t, (c * w, r * h + (12 if r >= per else 0)))
        what = "sources, reconstructions, averages" if args.cotrained else "top: sources, bottom: averages"
        ImageDraw.Draw(sheet).text((2, per * h), f"PHANTOM images; k = {args.k}; {what}", fill=(90, 90, 90))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        sheet.save(args.out)
    print(json.dumps({"figure": args.out, "k": args.k, "steps": args.steps, "lambda": args.lam, "lr": base.salsa.lr,
                      "rows": base.salsa.rows, "map_prior": None if prior is None else prior.describe()["candidates"],
                      "clusters": len(clustering.clusters), **stats}))


if __name__ == "__main__":
    main()
