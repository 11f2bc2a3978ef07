"""Does k-SALSA's map prior copy a person? Synthetic maps against the generator's training patients and unseen ones.

k-SALSA's map prior (``medanon.anonymize.map_prior``) starts each cluster from the spatial map of a synthetic image
(a sample of the map generator, inverted by the codec). If the generator had memorised people it was trained on,
a record could carry one of *their* vessel trees. This benchmark asks whether the candidates lie closer to the
generator's training patients than to patients it never saw, as memorisation would make them:

- ``--train``: a phantom the generator was trained on (the shipped ``stylegan2-fundus64-wide.pt``: ph-fundus64,
  ``medanon phantom --modality fundus --patients 500 --per-patient 4 --size 64 --seed 0``);
- ``--unseen``: a phantom of other patients (PH2: ``--patients 100 --per-patient 4 --seed 2``);
- both are subsampled to the same number of images (``--n``), so nearest-neighbour distances are comparable.

For every candidate: the distance of its map rows to the nearest training image's and to the nearest unseen image's
(in the codec's latent), and the cosine of its identity embedding (the evaluation's attacker,
``identity-attacker-fundus64.pt``, trained on other patients) to the nearest image of each set. Prints one JSON
line: medians, the share of candidates closer to a training image than to any unseen one (0.5 without
memorisation), a Mann-Whitney test of the two distance samples, the largest identity cosines, and the share of
candidates whose best match in each set beats what 99 % of real strangers reach there (an unseen image's best cosine
among the training images, and the reverse): about 1 % each when the candidates resemble training patients no more
than strangers do::

    medanon phantom --modality fundus --patients 500 --per-patient 4 --size 64 --seed 0 --out ph-fundus64
    medanon phantom --modality fundus --patients 100 --per-patient 4 --size 64 --seed 2 --out ph2
    OMP_NUM_THREADS=1 python benchmarks/map_prior_memorisation.py --train ph-fundus64 --unseen ph2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

CK = Path(__file__).resolve().parents[1] / "checkpoints"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True, help="phantom the map generator was trained on")
    ap.add_argument("--unseen", required=True, help="phantom of patients the generator never saw")
    ap.add_argument("--codec", default=str(CK / "restyle-map-fundus64.pt"))
    ap.add_argument("--generator", default=str(CK / "stylegan2-fundus64-wide.pt"))
    ap.add_argument("--identity", default=str(CK / "identity-attacker-fundus64.pt"))
    ap.add_argument("--samples", type=int, default=1024, help="candidates (the map prior's default)")
    ap.add_argument("--n", type=int, default=400, help="images of each phantom compared")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0, c0 = time.perf_counter(), time.process_time()
    from scipy.stats import mannwhitneyu

    from medanon.anonymize.ksame import load_images
    from medanon.anonymize.map_prior import build_map_prior
    from medanon.codecs.stylegan import load_codec
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset
    from medanon.models.identity import load_identity
    from medanon.sampling import load_any_generator, sample_images

    codec = load_codec(args.codec)
    gen = load_any_generator(args.generator)
    rows = codec.generator.num_ws
    prior = build_map_prior(codec, gen, samples=args.samples, seed=args.seed)
    cand_maps = prior.maps.flatten(1)
    cand_images = sample_images(gen, args.samples, seed=args.seed)       # the same draws the prior inverted
    ident, _ = load_identity(args.identity)
    rng = np.random.default_rng(args.seed)

    def side(root: str) -> tuple[torch.Tensor, torch.Tensor, int]:
        ds = open_dataset(root, DataConfig(size=codec.generator.img_resolution))
        idx = np.sort(rng.choice(len(ds), min(args.n, len(ds)), replace=False))
        images = load_images(ds, idx)
        maps = torch.cat([codec.encode(images[i:i + 64]) for i in range(0, len(images), 64)])[:, rows:].flatten(1)
        return maps, ident.embed(images), len(idx)

    train_maps, train_emb, n_train = side(args.train)
    unseen_maps, unseen_emb, n_unseen = side(args.unseen)
    cand_emb = ident.embed(cand_images)
    d_train = torch.cdist(cand_maps, train_maps).min(1).values.numpy()
    d_unseen = torch.cdist(cand_maps, unseen_maps).min(1).values.numpy()
    cos_train = (cand_emb @ train_emb.T).max(1).values.numpy()
    cos_unseen = (cand_emb @ unseen_emb.T).max(1).values.numpy()
    test = mannwhitneyu(d_train, d_unseen, alternative="less")
    # best-match thresholds at 1 % of strangers: an unseen image's best cosine among the training images, and a
    # training image's best among the unseen ones (the same N of candidates each time)
    cross = (unseen_emb @ train_emb.T).numpy()
    t_train, t_unseen = float(np.quantile(cross.max(1), 0.99)), float(np.quantile(cross.max(0), 0.99))
    print(json.dumps({
        "candidates": args.samples, "n_train_images": n_train, "n_unseen_images": n_unseen,
        "map_distance_median": {"train": round(float(np.median(d_train)), 3),
                                "unseen": round(float(np.median(d_unseen)), 3)},
        "share_closer_to_train": round(float((d_train < d_unseen).mean()), 3),
        "mannwhitney_train_less_p": float(test.pvalue),
        "identity_cosine_max": {"train": round(float(cos_train.max()), 3), "unseen": round(float(cos_unseen.max()), 3)},
        "identity_cosine_median": {"train": round(float(np.median(cos_train)), 3),
                                   "unseen": round(float(np.median(cos_unseen)), 3)},
        "best_match_threshold_1pct": {"train": round(t_train, 3), "unseen": round(t_unseen, 3)},
        "share_above_best_match_threshold": {"train": round(float((cos_train > t_train).mean()), 3),
                                             "unseen": round(float((cos_unseen > t_unseen).mean()), 3)},
        "generator": Path(args.generator).name, "codec": Path(args.codec).name,
        "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}))


if __name__ == "__main__":
    main()
