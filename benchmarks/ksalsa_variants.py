"""k-SALSA settings compared by FID at equal N: one JSON line per variant (and for the real floor and baselines).

The release phantom (``--data``) is clustered once in the codec's latent space (people-level, k per cluster,
as ``medanon anonymize`` does); every method then averages **the same clusters**, one record per cluster
(N = number of clusters). Each set of N records is compared by FID (Inception, the offline FID network of
:func:`medanon.evaluate.fidelity.inception_extractor`) with ``--subsets`` random subsets of N images drawn from
a *reference* phantom of other patients (``--reference``); the line gives the mean and standard deviation over
the subsets. ``real`` is N real images of the release phantom (one per cluster, a random member), the floor
at this N. ``kcentroid-mapprior`` is G of the map prior's start (the centroid's style rows with the nearest
synthetic map, :mod:`medanon.anonymize.map_prior`), not optimised: what the map alone gives. Every k-SALSA line
also gives the mean |k-SALSA − k-Centroid| over pixels in 8-bit levels (/255), the style loss before and after
the optimisation, and ``move_vs_member_spread``: how far the optimised latent moved from its start per
coordinate, beside how far the cluster's members lie from that start (weighted mean |w_i − start|), for the
style rows and the map rows. A variant whose settings have ``map_init=synthetic`` (an option; the default is
``centroid``) starts from the map prior, built once from ``--map-samples`` seeded samples of ``--map-generator``
inverted by the codec.

    medanon phantom --modality fundus --patients 100 --per-patient 4 --size 64 --seed 11 --out ph-rel
    medanon phantom --modality fundus --patients 100 --per-patient 4 --size 64 --seed 12 --out ph-ref
    OMP_NUM_THREADS=1 nice -n 15 python benchmarks/ksalsa_variants.py --data ph-rel --reference ph-ref \\
        --model checkpoints/restyle-map-fundus64.pt --variant default --variant "mapprior:map_init=synthetic"

A variant is ``NAME`` or ``NAME:key=value,...`` with keys of :class:`medanon.anonymize.salsa.SalsaConfig`
(``lam``, ``steps``, ``lr``, ``style_layer`` (``+`` joins several layers), ``content_layer``, ``rows``,
``feature_size``, ``map_init``; the prior's size is ``--map-samples``) and ``grid`` (the style grid); unset keys
take the defaults. ``--grid-dir`` writes one PNG per variant: for each of the first clusters its members,
k-Centroid, k-Same-Pixel, the variant's start and the variant.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from medanon.anonymize.averaging import member_weights, pad_clusters, pixel_averages
from medanon.anonymize.eye_sides import LEFT, align
from medanon.anonymize.ksame import KSameConfig, load_images, plan_clusters
from medanon.anonymize.map_prior import build_map_prior, has_map
from medanon.anonymize.salsa import KSalsa, SalsaConfig
from medanon.anonymize.style import StyleConfig
from medanon.codecs.stylegan import load_codec
from medanon.config import DataConfig
from medanon.data.dataset import open_dataset
from medanon.evaluate.fidelity import extract_features, fd_from_features, inception_extractor
from medanon.models.features import get_feature_network
from medanon.sampling import load_any_generator


def quantise(images: torch.Tensor) -> torch.Tensor:
    """Round to the 256 levels of an 8-bit PNG, as the real images are."""
    return ((images.clamp(-1, 1) + 1) * 127.5).round() / 127.5 - 1


def parse_variant(spec: str) -> tuple[str, SalsaConfig]:
    name, _, rest = spec.partition(":")
    cfg = SalsaConfig()
    style = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key == "grid":
            style["grid"] = int(value)
            continue
        current = getattr(cfg, key)
        if isinstance(current, bool):
            value = value.lower() in ("1", "true", "yes")
        elif isinstance(current, int) or (current is None and value.isdigit()):
            value = int(value)
        elif isinstance(current, float):
            value = float(value)
        elif value == "none":
            value = None
        cfg = replace(cfg, **{key: value})
    if style:
        cfg = replace(cfg, style=StyleConfig(**style))
    cfg.validate()
    return name, cfg


def fid_over_subsets(ref: np.ndarray, feats: np.ndarray, *, subsets: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    vals = [fd_from_features(ref[rng.choice(len(ref), len(feats), replace=False)], feats) for _ in range(subsets)]
    return float(np.mean(vals)), float(np.std(vals, ddof=1))


def save_grid(path: Path, rows: list[list[torch.Tensor]]) -> None:
    from PIL import Image

    from medanon.data.imageio import image_to_uint8

    tiles = [[image_to_uint8(t) for t in row] for row in rows]
    h, w = tiles[0][0].shape[:2]
    cols = max(len(r) for r in tiles)
    sheet = np.full((len(tiles) * (h + 2), cols * (w + 2), 3), 255, np.uint8)
    for r, row in enumerate(tiles):
        for c, a in enumerate(row):
            sheet[r * (h + 2):r * (h + 2) + h, c * (w + 2):c * (w + 2) + w] = a if a.ndim == 3 else a[..., None]
    im = Image.fromarray(sheet)
    im.resize((im.width * 2, im.height * 2), Image.Resampling.NEAREST).save(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="release phantom (patients no model saw)")
    ap.add_argument("--reference", required=True, help="reference phantom of other patients")
    ap.add_argument("--model", default="checkpoints/restyle-map-fundus64.pt", help="inversion codec")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--variant", action="append", default=[], help="NAME[:key=value,...] (repeatable)")
    ap.add_argument("--subsets", type=int, default=50, help="reference subsets of N images")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=10, help="clusters optimised together")
    ap.add_argument("--grid-dir", default=None, help="write one PNG per variant here")
    ap.add_argument("--grid-clusters", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eye-sides", default=KSameConfig.eye_sides, choices=["auto", "labels", "off"],
                    help="as the methods' eye_sides: averaged as right eyes, each record shown as its majority side")
    ap.add_argument("--cache", default=None, help="a .npy file to keep the reference features in between runs")
    ap.add_argument("--skip-baselines", action="store_true", help="print no real/kpixel/kcentroid lines")
    ap.add_argument("--map-generator", default="checkpoints/stylegan2-fundus64-wide.pt",
                    help="GAN whose samples' maps the map prior chooses from (variants with map_init=synthetic)")
    ap.add_argument("--map-samples", type=int, default=SalsaConfig().map_samples, help="the map prior's candidates")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start, cpu0 = time.perf_counter(), time.process_time()
    codec = load_codec(args.model)
    size = codec.generator.img_resolution
    raw = open_dataset(args.data, DataConfig(size=size))
    ds = align(raw, args.eye_sides)                       # the images as the methods read them
    ref_ds = open_dataset(args.reference, DataConfig(size=size))
    clustering, latents, _ = plan_clusters(ds, KSameConfig(method="kcentroid", k=args.k), codec=codec,
                                           progress=False)
    clusters = clustering.clusters
    pids = [r.patient_id for r in ds.records]
    sides = ds.eye_sides
    left = torch.tensor([sides.aligned and sides.record_side(c, pids) == LEFT for c in clusters])

    def as_released(images: torch.Tensor) -> torch.Tensor:        # one per cluster: mirrored back where released so
        return torch.where(left[:, None, None, None], images.flip(-1), images)

    weights = [member_weights(c, pids) for c in clusters]
    n = len(clusters)
    extractor, provenance = inception_extractor(device="cpu")
    cache = Path(args.cache) if args.cache else None
    if cache is not None and cache.exists():
        ref = np.load(cache)
    else:
        ref = extract_features(extractor, load_images(ref_ds, range(len(ref_ds))), batch=32)
        if cache is not None:
            np.save(cache, ref)
    rng = np.random.default_rng(args.seed)
    common = {"data": args.data, "reference": args.reference, "model": args.model, "k": args.k, "n": n,
              "n_reference_pool": len(ref), "subsets": args.subsets, "eye_sides": args.eye_sides,
              "feature_network": provenance.get("display_name") or provenance.get("name")}

    def emit(name: str, images: torch.Tensor, **extra) -> None:
        feats = extract_features(extractor, quantise(images), batch=32)
        mean, sd = fid_over_subsets(ref, feats, subsets=args.subsets, seed=args.seed)
        print(json.dumps({"variant": name, "fid_mean": round(mean, 2), "fid_sd": round(sd, 2), **extra, **common}),
              flush=True)

    real_idx = [int(rng.choice(c)) for c in clusters]
    pixel = torch.cat([pixel_averages(load_images(ds, c), [np.arange(len(c))], [w])
                       for c, w in zip(clusters, weights, strict=True)])
    if not args.skip_baselines:
        emit("real", load_images(raw, real_idx))
        emit("kpixel", as_released(pixel))
    idx, w = pad_clusters(clusters, weights)
    w0 = (w / w.sum(1, keepdim=True)).float()
    w0 = (w0[:, :, None, None] * latents[torch.from_numpy(idx)]).sum(1)
    centroid = codec.decode(w0)
    if not args.skip_baselines:
        emit("kcentroid", as_released(centroid))
    specs = [parse_variant(spec) for spec in args.variant]
    prior, prior_start = None, None
    if has_map(codec) and (any(cfg.map_init == "synthetic" for _, cfg in specs) or not args.skip_baselines):
        t0 = time.perf_counter()
        prior = build_map_prior(codec, load_any_generator(args.map_generator), samples=args.map_samples,
                                seed=args.seed, provenance={"generator": Path(args.map_generator).name})
        common["map_prior"] = {"generator": Path(args.map_generator).name, "samples": args.map_samples,
                               "seed": args.seed, "build_s": round(time.perf_counter() - t0, 1)}
        prior_start = prior.start(w0)[1]
        if not args.skip_baselines:
            emit("kcentroid-mapprior", as_released(codec.decode(prior_start)))
    first = []                                   # one image of each of the first k patients of every cluster
    for c in clusters:
        one = {pids[int(i)]: int(i) for i in reversed(c)}
        first.append(list(load_images(ds, list(one.values())[::-1][:args.k])))
    nets: dict = {}
    for name, cfg in specs:
        use_prior = prior is not None and cfg.map_init == "synthetic"
        t0, c0 = time.perf_counter(), time.process_time()
        net = nets.setdefault("lite0", get_feature_network("efficientnet-lite0", input_size=None))
        salsa = KSalsa(codec.render, net, cfg, style_rows=codec.generator.num_ws)
        outs, s0, s1, moved, spread = [], [], [], [], []
        for b in range(0, n, args.batch):
            sel = list(range(b, min(b + args.batch, n)))
            bi, bw = pad_clusters([clusters[i] for i in sel], [weights[i] for i in sel])
            images = load_images(ds, bi.reshape(-1)).reshape(*bi.shape, *ds[0]["image"].shape)
            start = prior.start(w0[sel])[1] if use_prior else None
            res = salsa.average(images, latents[torch.from_numpy(bi)], bw.float(), start=start)
            outs.append(codec.decode(res.ws))
            lat = latents[torch.from_numpy(bi)]
            bn = (bw / bw.sum(1, keepdim=True)).float()
            spread.append((bn[:, :, None, None] * (lat - res.w0[:, None]).abs()).sum(1).mean((0, 2)))
            moved.append((res.ws - res.w0).abs().mean((0, 2)))
            s0 += res.style_start.tolist()
            s1 += res.style_end.tolist()
        out = torch.cat(outs)
        diff = float((quantise(out) - quantise(centroid)).abs().mean() * 127.5)
        rows = codec.generator.num_ws           # per coordinate, mean over clusters: styles, then a map
        mv, sp = torch.stack(moved).mean(0), torch.stack(spread).mean(0)
        move = {"styles": [round(float(mv[:rows].mean()), 3), round(float(sp[:rows].mean()), 3)]}
        if mv.shape[0] > rows:
            move["map"] = [round(float(mv[rows:].mean()), 3), round(float(sp[rows:].mean()), 3)]
        emit(name, as_released(out), settings=cfg.describe(), start="map prior" if use_prior else "centroid",
             diff_vs_kcentroid_255=round(diff, 2), move_vs_member_spread=move,
             style_start=round(float(np.mean(s0)), 4), style_end=round(float(np.mean(s1)), 4),
             seconds=round(time.perf_counter() - t0, 1), cpu_s=round(time.process_time() - c0, 1))
        if args.grid_dir:
            Path(args.grid_dir).mkdir(parents=True, exist_ok=True)
            starts = codec.decode(prior_start[:args.grid_clusters]) if use_prior else centroid
            rows = [first[j] + [centroid[j], pixel[j], starts[j], out[j]] for j in range(min(args.grid_clusters, n))]
            save_grid(Path(args.grid_dir) / f"{name}.png", rows)
    print(json.dumps({"done": True, "wall_s": round(time.perf_counter() - t_start, 1),
                      "cpu_s": round(time.process_time() - cpu0, 1)}), flush=True)


if __name__ == "__main__":
    main()
