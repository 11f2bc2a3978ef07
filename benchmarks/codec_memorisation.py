"""Does the codec reconstruct the images it was trained on better than other people's? Seen against unseen patients.

k-Centroid, k-SALSA and GAN-Inverted release images decoded from the codec's latents. If the codec had memorised
its training images, the patients among them would be reconstructed more faithfully than other patients, and a
release or an attack measured on a dataset that contains them would not speak for a hospital's own patients. The
reproduction phantoms of ``benchmarks/reproduce/`` (seed 0) contain, byte for byte, images of the phantom the
shipped fundus codecs were trained on (ph-fundus64: its first 500 patients), so this asks whether that overlap
changes what the codec does.

An image of ``--data`` is **seen** when its file is byte-identical to an image of ``--seen`` (the training phantom);
a patient is seen when any of their images is. For every image: the mean squared error of ``decode(encode(x))``
against ``x`` and the cosine of their identity embeddings (the evaluation's attacker,
``identity-attacker-fundus64.pt``, trained on other patients). Each is averaged per patient (images of one patient
are not independent); the JSON line gives the seen and unseen patients' medians, the difference of means (seen −
unseen) with a 95 % bootstrap interval over patients, and a two-sided Mann-Whitney test of the per-patient values.
No difference (intervals containing 0) means the overlap does not show in the codec's reconstructions::

    medanon phantom --modality fundus --patients 500 --per-patient 4 --size 64 --seed 0 --out ph-fundus64
    OMP_NUM_THREADS=1 python benchmarks/codec_memorisation.py --data REPRO/data --seen ph-fundus64
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

CK = Path(__file__).resolve().parents[1] / "checkpoints"


def file_digests(paths) -> list[str]:
    return [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths]


def per_patient(values: np.ndarray, patients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(patient ids, the mean of ``values`` over each patient's images)."""
    ids, inverse = np.unique(patients, return_inverse=True)
    return ids, np.bincount(inverse, weights=values) / np.bincount(inverse)


def compare(seen: np.ndarray, unseen: np.ndarray, *, reps: int, rng: np.random.Generator) -> dict:
    """Seen − unseen difference of patient means, with a patient bootstrap interval and a Mann-Whitney p."""
    from scipy.stats import mannwhitneyu

    boot = [rng.choice(seen, len(seen)).mean() - rng.choice(unseen, len(unseen)).mean() for _ in range(reps)]
    return {"median": {"seen": round(float(np.median(seen)), 5), "unseen": round(float(np.median(unseen)), 5)},
            "difference_of_means": round(float(seen.mean() - unseen.mean()), 5),
            "ci95": [round(float(q), 5) for q in np.quantile(boot, [0.025, 0.975])],
            "mannwhitney_p": float(mannwhitneyu(seen, unseen, alternative="two-sided").pvalue)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="dataset to reconstruct (e.g. a reproduction phantom)")
    ap.add_argument("--seen", required=True, help="the phantom the codec was trained on")
    ap.add_argument("--codec", default=str(CK / "restyle-map-fundus64.pt"))
    ap.add_argument("--identity", default=str(CK / "identity-attacker-fundus64.pt"))
    ap.add_argument("--n", type=int, default=0, help="images of --data used (0: all)")
    ap.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0, c0 = time.perf_counter(), time.process_time()
    from medanon.anonymize.ksame import load_images
    from medanon.codecs.stylegan import load_codec
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset
    from medanon.models.identity import load_identity

    codec = load_codec(args.codec)
    ident, _ = load_identity(args.identity)
    cfg = DataConfig(size=codec.generator.img_resolution)
    ds, train = open_dataset(args.data, cfg), open_dataset(args.seen, cfg)
    rng = np.random.default_rng(args.seed)
    idx = np.arange(len(ds)) if not args.n else np.sort(rng.choice(len(ds), min(args.n, len(ds)), replace=False))
    trained = set(file_digests(r.path for r in train.records))
    seen_image = np.array([d in trained for d in file_digests(ds.records[i].path for i in idx)])
    patients = np.array([ds.records[i].patient_id for i in idx])
    seen_patients = set(patients[seen_image])
    mse, cos = [], []
    with torch.no_grad():
        for start in range(0, len(idx), 64):
            x = load_images(ds, idx[start:start + 64])
            y = codec.reconstruct(x).clamp(-1, 1)
            mse.append(((y - x) ** 2).flatten(1).mean(1).numpy())
            cos.append((ident.embed(x) * ident.embed(y)).sum(1).numpy())
    ids, mse_p = per_patient(np.concatenate(mse), patients)
    _, cos_p = per_patient(np.concatenate(cos), patients)
    is_seen = np.array([p in seen_patients for p in ids])
    if is_seen.all() or not is_seen.any():
        raise SystemExit(f"{args.data}: {'every' if is_seen.all() else 'no'} patient has an image of {args.seen}; "
                         "nothing to compare (use a dataset with both)")
    print(json.dumps({
        "images": len(idx), "seen_images": int(seen_image.sum()),
        "patients": {"seen": int(is_seen.sum()), "unseen": int((~is_seen).sum())},
        "reconstruction_mse": compare(mse_p[is_seen], mse_p[~is_seen], reps=args.reps, rng=rng),
        "identity_cosine": compare(cos_p[is_seen], cos_p[~is_seen], reps=args.reps, rng=rng),
        "codec": Path(args.codec).name, "identity": Path(args.identity).name,
        "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}))


if __name__ == "__main__":
    main()
