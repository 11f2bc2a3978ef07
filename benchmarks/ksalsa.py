"""k-SALSA speed: prints one JSON line.

Targets (issue 4), ratios measured in one run:

- batched vs per-cluster reference averaging at equal settings (aim >= 10x): the same clusters, the
  same steps, the batched path (source Grams once, all clusters in one batch, matching as one
  batched product) against :func:`medanon.anonymize.salsa.reference_average` (one cluster at a
  time, per-patch loops, Grams rebuilt every step as in the official code), with the largest latent
  difference of the two after one step and after all steps (float32 differences grow under Adam);
- seconds per cluster at k = 5, 64 px, 100 steps (the paper: 19 s/cluster on one GPU at 512 px);
- clustering time and peak memory at N = 1k, 10k and 35k 512-dimensional latents (aim: 35k in
  <= 30 s and <= 2 GB), each in a fresh process, and the naive O(N²) reference at the largest N
  it can hold (its float64 N×N matrix: 0.8 GB at 10k, 9.9 GB at 35k).

Without ``--model`` the generator is a randomly initialised StyleGAN2 of the shipped 64 px CPU
architecture (speed does not depend on the weights); the feature network is EfficientNet-Lite0
at the images' own size. The clustering data are isotropic Gaussian latents, the hardest case
for the lazy updates (every sum is close to every other). Reported ``cpu_s`` next to ``wall_s``
helps reading numbers taken on a shared machine.

    python benchmarks/ksalsa.py [--model CKPT] [--clusters 8] [--ref-steps 10] [--sizes 1000,10000,35126]
    python benchmarks/ksalsa.py --skip averaging --sizes 35126 --against OLD_CHECKOUT --rounds 2
    python benchmarks/ksalsa.py --skip averaging --sizes 5000,10000,20000,35126 --naive-max 0   # + scaling fit

With several sizes the clustering part also fits time ~ N^a to the CPU seconds (all sizes, and the
largest ones alone) and extrapolates to N = 377,110 (MIMIC-CXR) with max(a, 2).

``--against`` also clusters the largest N with another checkout's code (``OLD_CHECKOUT/src`` first on
``PYTHONPATH``), alternating with this one in fresh processes, and says whether both gave the same
clusters (sha256 of the assignment).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import torch

MIMIC_N = 377_110                              # MIMIC-CXR images (issue 17: N = 377,110 stated from measured scaling)


def _timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def cluster_worker(n: int, naive: bool) -> None:
    """In a fresh process: cluster n Gaussian 512-d points; print time and peak RSS (and, for ours, the CPU
    seconds of the initial blocked pass of distance sums, the rest being the greedy loop, and the distances
    each part evaluates, in units of the n²/2 distinct pairs)."""
    from medanon.anonymize import clustering

    try:                                         # the greedy and its distances in modules of their own
        from medanon.anonymize import clustering_distances as products
        from medanon.anonymize.clustering_greedy import Greedy
        pair_name = "pairwise"
    except ImportError:                          # an older checkout (--against): all in clustering
        products, Greedy, pair_name = clustering, clustering._Greedy, "_pairwise"
    x = np.random.default_rng(0).standard_normal((n, 512)).astype(np.float32)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    initial = []
    real = Greedy._initial_sums

    def timed_sums(self):
        out, _, c = _timed(lambda: real(self))
        initial.append(c)
        return out

    Greedy._initial_sums = timed_sums
    pairs = {"initial": 0, "loop": 0}
    pairwise = getattr(products, pair_name)

    def counted(a, b, a2, b2):
        pairs["loop" if initial else "initial"] += len(a) * len(b)
        return pairwise(a, b, a2, b2)

    setattr(products, pair_name, counted)
    fn = ((lambda: clustering.naive_same_size_clusters(x, 5)) if naive
          else (lambda: clustering.same_size_clusters(x, 5)))
    c, wall, cpu = _timed(fn)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert min(len(m) for m in c.clusters) >= 5
    out = {"n": n, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": round(peak),
           "rss_before_mb": round(base),
           "assignment_sha256": hashlib.sha256(c.assignment(n).tobytes()).hexdigest()[:16]}
    if initial:
        out["initial_sums_cpu_s"] = round(sum(initial), 2)
        out["pairs_over_half_n2"] = {key: round(v / (n * n / 2), 3) for key, v in pairs.items()}
    print(json.dumps(out))


def against(n: int, old: str, rounds: int, env: dict) -> dict:
    """This checkout and ``old`` clustering the same n points, alternately, each in a fresh process."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src")
    runs: dict[str, list[dict]] = {"this": [], "against": []}
    for _ in range(rounds):
        for name, src in (("this", here), ("against", os.path.join(old, "src"))):
            e = {**env, "PYTHONPATH": os.pathsep.join([os.path.abspath(src), env.get("PYTHONPATH", "")])}
            r = subprocess.run([sys.executable, __file__, "--cluster-worker", str(n)], capture_output=True, text=True,
                               env=e, check=True)
            runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    out = {name: {"wall_s": [r["wall_s"] for r in rs], "cpu_s": [r["cpu_s"] for r in rs]} for name, rs in runs.items()}
    out["against"]["checkout"] = old
    out["same_clusters"] = len({r["assignment_sha256"] for rs in runs.values() for r in rs}) == 1
    return out


def clustering(sizes: list[int], naive_max: int, threads: int, old: str | None = None, rounds: int = 2) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    out = {}
    for n in sizes:
        r = subprocess.run([sys.executable, __file__, "--cluster-worker", str(n)], capture_output=True, text=True,
                           env=env, check=True)
        out[str(n)] = json.loads(r.stdout.strip().splitlines()[-1])
    if len(sizes) >= 2:                          # time ~ N^a: the exponent from the CPU seconds, and where it leads
        a = np.polyfit(np.log(sizes), np.log([out[str(n)]["cpu_s"] for n in sizes]), 1)[0]
        last = [n for n in sizes if n >= max(sizes) / 4]    # the local exponent of the largest sizes
        a_top = np.polyfit(np.log(last), np.log([out[str(n)]["cpu_s"] for n in last]), 1)[0] if len(last) > 1 else a
        top = max(sizes)
        out["scaling"] = {"exponent_cpu_s": round(float(a), 3), "exponent_largest_sizes": round(float(a_top), 3),
                          f"cpu_s_at_{MIMIC_N}_extrapolated": round(out[str(top)]["cpu_s"] * (MIMIC_N / top) ** max(
                              float(a_top), 2.0), 0),
                          "extrapolation": f"from N={top} with exponent max(local, 2): the work is O(N^2 d)"}
    n = max([s for s in sizes if s <= naive_max], default=None)
    if n is not None:
        r = subprocess.run([sys.executable, __file__, "--cluster-worker", str(n), "--naive"], capture_output=True,
                           text=True, env=env, check=True)
        out["naive"] = json.loads(r.stdout.strip().splitlines()[-1])
        out["naive_vs_ours_at_n"] = round(out["naive"]["wall_s"] / out[str(n)]["wall_s"], 2)
    if old is not None:
        out["against"] = against(max(sizes), old, rounds, env)
    return out


def style_loss_only(net, images: torch.Tensor, weights: torch.Tensor, targets: torch.Tensor, repeats: int = 3) -> dict:
    """The loss alone (features given): batched (Grams of sources once, one matching product) vs the
    per-cluster, per-patch loops, forward and backward, at the same features."""
    from medanon.anonymize.style import StyleConfig, reference_style_loss, source_grams, style_loss

    cfg = StyleConfig()
    with torch.no_grad():
        src = net(images.flatten(0, 1), layers=["block1"])["block1"]
        src = src.reshape(*images.shape[:2], *src.shape[1:])
        tgt = net(targets, layers=["block1"])["block1"]

    def batched():
        t = tgt.clone().requires_grad_(True)
        style_loss(t, source_grams(src, weights, cfg), cfg).sum().backward()

    def reference():
        for i in range(len(src)):
            t = tgt[i].clone().requires_grad_(True)
            reference_style_loss(t, list(src[i]), weights[i].tolist(), cfg).backward()

    _, b_wall, b_cpu = _timed(lambda: [batched() for _ in range(repeats)])
    _, r_wall, r_cpu = _timed(lambda: [reference() for _ in range(repeats)])
    return {"feature_map": list(src.shape[2:]), "batched_ms_per_cluster": round(1000 * b_wall / repeats / len(src), 2),
            "reference_ms_per_cluster": round(1000 * r_wall / repeats / len(src), 2),
            "batched_vs_reference": round(r_wall / b_wall, 1), "batched_vs_reference_cpu": round(r_cpu / b_cpu, 1)}


def averaging(model: str | None, clusters: int, k: int, steps: int, ref_steps: int) -> dict:
    from medanon.anonymize.salsa import KSalsa, SalsaConfig, reference_average
    from medanon.models.features import get_feature_network

    if model:
        from medanon.codecs.stylegan import load_codec

        codec = load_codec(model)
        synth, g = codec.render, codec.generator
    else:
        from medanon.models.stylegan import Generator, StyleGANConfig

        torch.manual_seed(0)
        g = Generator.from_config(StyleGANConfig(resolution=64, channels=3, z_dim=128, w_dim=128, channel_base=1024,
                                                 channel_max=64)).eval().requires_grad_(False)

        def synth(ws):
            return g.synthesis(ws, noise_mode="const")
    net = get_feature_network("efficientnet-lite0", input_size=None)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        z = torch.randn(clusters * k, g.z_dim, generator=gen)
        latents = g.mapping(z).reshape(clusters, k, g.num_ws, g.w_dim)
        images = synth(latents.flatten(0, 1)).clamp(-1, 1).reshape(clusters, k, g.img_channels, 64, 64)
    weights = torch.ones(clusters, k, dtype=torch.float64)

    def batched(n_steps):
        return KSalsa(synth, net, SalsaConfig(steps=n_steps)).average(images, latents, weights)

    cfg = SalsaConfig(steps=ref_steps)
    one = batched(1).ws                         # also the warm-up: first calls build kernels for each shape
    one_ref = torch.stack([reference_average(synth, net, SalsaConfig(steps=1), images[i], latents[i], weights[i])
                           for i in range(clusters)])
    res, b_wall, b_cpu = _timed(lambda: batched(ref_steps))
    ref, r_wall, r_cpu = _timed(lambda: torch.stack([reference_average(synth, net, cfg, images[i], latents[i],
                                                                       weights[i]) for i in range(clusters)]))
    full, f_wall, f_cpu = _timed(lambda: batched(steps))
    loss_only = style_loss_only(net, images, weights, synth(full.ws).detach())
    return {
        "clusters": clusters, "k": k, "resolution": 64, "generator": model or "random StyleGAN2 (shipped cpu64 arch.)",
        "features": "EfficientNet-Lite0 block1 (style) + pool (content), native size",
        "equal_settings_steps": ref_steps,
        "batched_s": round(b_wall, 2), "reference_s": round(r_wall, 2),
        "batched_vs_reference": round(r_wall / b_wall, 1),
        "batched_vs_reference_cpu": round(r_cpu / b_cpu, 1),
        "max_abs_ws_difference": float((res.ws - ref).abs().max()),
        "max_abs_ws_difference_after_1_step": float((one - one_ref).abs().max()),
        "batched_cpu_s": round(b_cpu, 2), "reference_cpu_s": round(r_cpu, 2),
        "style_loss_only": loss_only,
        "steps": steps, "seconds_per_cluster": round(f_wall / clusters, 2),
        "cpu_seconds_per_cluster": round(f_cpu / clusters, 2),
        "style_loss_start_end": [round(float(full.style_start.mean()), 4), round(float(full.style_end.mean()), 4)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="Codec checkpoint (default: random generator of the same shape).")
    ap.add_argument("--clusters", type=int, default=8)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--ref-steps", type=int, default=10, help="Steps of the batched-vs-reference comparison.")
    ap.add_argument("--sizes", default="1000,10000,35126")
    ap.add_argument("--naive-max", type=int, default=10000, help="Largest N the naive reference is run at.")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", choices=["none", "averaging", "clustering"], default="none")
    ap.add_argument("--against", default=None, metavar="OLD_CHECKOUT",
                    help="Also time another checkout's clustering at the largest N, alternately, and compare clusters.")
    ap.add_argument("--rounds", type=int, default=2, help="Alternating rounds of --against.")
    ap.add_argument("--cluster-worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--naive", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.cluster_worker is not None:
        cluster_worker(args.cluster_worker, args.naive)
        return
    out = {"benchmark": "ksalsa", "threads": args.threads, "load_average": [round(v, 1) for v in os.getloadavg()]}
    if args.skip != "averaging":
        out["averaging"] = averaging(args.model, args.clusters, args.k, args.steps, args.ref_steps)
    if args.skip != "clustering":
        out["clustering"] = clustering([int(s) for s in args.sizes.split(",")], args.naive_max, args.threads,
                                       args.against, args.rounds)
    out["load_average_end"] = [round(v, 1) for v in os.getloadavg()]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
