"""Does the generative backbone keep what carries identity and disease? The targets of issue 12, one JSON line.

On phantom images of patients no model was trained on (``--data``, e.g. seed 1), for a generator and its
codecs:

- ``vessel_auroc``: Frangi vesselness on the green channel of each image (:class:`medanon.segment.vesselness.
  Vesselness`) scored against the *source's* true vessel mask inside its field of view (pooled pixels,
  ``sklearn.metrics.roc_auc_score``), for the sources themselves and for every codec's reconstruction
  G(E(x)). Target: >= 0.80 for each codec (a blurred disc scores about 0.5).
- ``fid``: Inception FID of ``N`` generator samples (psi = 1) and of the ``N`` reconstructions against ``N``
  real images of *other* patients, and the real-vs-real floor at the same N (``benchmarks/generator_fid.py``).
  Targets: reconstructions <= 50, samples <= 60.
- ``identity``: the attacker identity network links x to G(E(x)): true-accept rate of the genuine pairs
  (x_i, G(E(x_i))) at a false-accept rate of 1 % on all impostor pairs (x_i, G(E(x_j))) of different
  patients (``sklearn.metrics.roc_curve``). Target: outer TAR >= 0.5.
- ``grade``: quadratic kappa of a DR-grade classifier trained on real images, on the sources and on the
  reconstructions (``sklearn.metrics.cohen_kappa_score``). Target: reconstructions keep >= 60 % of it.
  ``--classifier`` may be repeated: the first gives ``kappa`` / ``kappa_retained`` as before, every one (the
  first too) is reported under ``by_classifier`` with its own target check. A codec trained with a task term
  (``task_network``) must be judged by classifiers other than its task network.

    python benchmarks/backbone_targets.py --data PH1 --generator checkpoints/stylegan2-fundus64.pt \\
        --codec checkpoints/restyle-fundus64.pt --codec checkpoints/cotrained-fundus64.pt \\
        --identity checkpoints/identity-attacker-fundus64.pt --classifier checkpoints/classifier-grade-fundus64.pt \\
        --n 200 --threads 1
    # PH1 = medanon phantom --modality fundus --patients 100 --per-patient 4 --size 64 --seed 1 --out PH1

``--skip-fid`` leaves out the Inception passes (the slow part: ~0.25 CPU-s per image).

Chest X-ray phantoms (the dataset's modality says which): no vessel AUROC; ``--classifier`` is a pneumonia
classifier and ``utility`` is its AUROC (``sklearn.metrics.roc_auc_score``) on the sources and on the
reconstructions, with the share kept; ``--generator`` may be left out (a co-trained X-ray codec is a
decoder for encoder latents, not a sampler), and then no sample FID is measured. Target: reconstruction
FID <= 50.

    python benchmarks/backbone_targets.py --data XPH1 --codec runs/cotrained-xray64.pt \
        --identity checkpoints/identity-attacker-xray64.pt --classifier checkpoints/classifier-pneumonia-xray64.pt
    # XPH1 = medanon phantom --modality xray --patients 100 --per-patient 4 --size 64 --seed 1 --out XPH1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generator_fid import fid_table, generate, quantise, split_by_patient

from medanon.config import DataConfig
from medanon.data.dataset import open_dataset

TARGETS = {"vessel_auroc": 0.80, "recon_fid": 50.0, "sample_fid": 60.0, "outer_tar_far1": 0.5,
           "kappa_retained": 0.60}


def vessel_auroc(images: torch.Tensor, masks: torch.Tensor, fov: torch.Tensor) -> float:
    """Frangi vesselness of ``images`` against the true vessel ``masks``, pooled over the pixels inside ``fov``."""
    from sklearn.metrics import roc_auc_score

    from medanon.segment.vesselness import Vesselness

    prob = Vesselness("frangi").probability(images, fov).numpy()
    inside = fov.numpy().astype(bool)
    return float(roc_auc_score(masks.numpy().astype(bool)[inside], prob[inside]))


def outer_tar(sources: torch.Tensor, released: torch.Tensor, patients: np.ndarray, identity: Path,
              far: float = 0.01) -> dict:
    """TAR at ``far`` of genuine pairs (x_i, r_i) against all impostor pairs (x_i, r_j) of other patients."""
    from sklearn.metrics import roc_curve

    from medanon.models.identity import load_identity

    net, _ = load_identity(identity)
    a = torch.nn.functional.normalize(net.embed(sources), dim=1)
    b = torch.nn.functional.normalize(net.embed(released), dim=1)
    sim = (a @ b.T).numpy()
    genuine = np.diag(sim)
    impostor = sim[patients[:, None] != patients[None, :]]
    fpr, tpr, _ = roc_curve(np.r_[np.ones(len(genuine)), np.zeros(len(impostor))], np.r_[genuine, impostor])
    return {"tar": float(tpr[fpr <= far].max()), "far": far, "n_genuine": len(genuine),
            "n_impostor": len(impostor), "median_genuine_cos": float(np.median(genuine))}


def predictions(images: torch.Tensor, model: torch.nn.Module, *, fundus: bool) -> np.ndarray:
    """The classifier's grade (fundus: argmax of 5) or pneumonia probability (X-ray) for each image."""
    from medanon.models.classifier import predict_proba

    p = predict_proba(model, images)
    return p.argmax(1).numpy() if fundus else p[:, 1].numpy()


def utility_score(labels: np.ndarray, pred: np.ndarray, *, fundus: bool) -> float:
    """Quadratic kappa of the grades (fundus) or AUROC of the pneumonia probabilities (X-ray)."""
    from sklearn.metrics import cohen_kappa_score, roc_auc_score

    if fundus:
        return float(cohen_kappa_score(labels.astype(int), pred, weights="quadratic", labels=list(range(5))))
    return float(roc_auc_score(labels.astype(int), pred))


def kept_share(value: float, source: float, *, fundus: bool) -> float | None:
    """Share of the sources' kappa kept (fundus), or of their AUROC above chance (X-ray)."""
    if fundus:
        return value / source if source > 0 else None
    return (value - 0.5) / (source - 0.5) if source != 0.5 else None


def bootstrap_kept(labels: np.ndarray, src: np.ndarray, rec: np.ndarray, patients: np.ndarray, *, fundus: bool,
                   reps: int = 1000, seed: int = 0) -> dict:
    """95 % percentile intervals of the reconstruction's score and of the share kept, resampling *patients* with
    replacement (their images together; the same draw for sources and reconstructions)."""
    rng = np.random.default_rng(seed)
    ids = np.unique(patients)
    rows = {p: np.flatnonzero(patients == p) for p in ids}
    vals, shares = [], []
    for _ in range(reps):
        idx = np.concatenate([rows[p] for p in rng.choice(ids, len(ids))])
        if not fundus and len(np.unique(labels[idx])) < 2:
            continue
        v, s = utility_score(labels[idx], rec[idx], fundus=fundus), utility_score(labels[idx], src[idx], fundus=fundus)
        share = kept_share(v, s, fundus=fundus)
        vals.append(v)
        if share is not None:
            shares.append(share)
    ci = lambda a: [float(np.percentile(a, 2.5)), float(np.percentile(a, 97.5))] if a else None  # noqa: E731
    return {"ci95": ci(vals), "kept_ci95": ci(shares), "bootstrap": f"{len(vals)} patient resamples"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="phantom folder of patients no model saw (fundus: with masks)")
    ap.add_argument("--generator", default=None, help="GAN for the sample FID (required for fundus)")
    ap.add_argument("--codec", action="append", default=[])
    ap.add_argument("--identity", default=None, help="attacker identity network (kind identity)")
    ap.add_argument("--classifier", action="append", default=[],
                    help="DR-grade (X-ray: pneumonia) classifier trained on real images; repeatable")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-fid", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from medanon.codecs.stylegan import load_codec
    from medanon.sampling import load_any_generator

    t_start = time.perf_counter()
    ds = open_dataset(args.data, DataConfig(size=64))
    ref_idx, ctl_idx = split_by_patient(ds, args.n)
    items = [ds.load(i) for i in ctl_idx]
    fundus = ds.modality == "fundus"
    if fundus and args.generator is None:
        ap.error("--generator is required for fundus data (the sample FID target)")
    x = torch.stack([it["image"] for it in items])
    patients = np.array([it["patient_id"] for it in items])
    out: dict = {"data": args.data, "modality": ds.modality, "n": len(ctl_idx), "targets": TARGETS, "sources": {},
                 "codecs": {}}
    if fundus:
        masks = torch.stack([it["mask"] for it in items]).bool()
        fov = torch.stack([it["fov"] for it in items]).bool()
        grades = np.array([it["labels"]["grade"] for it in items])
        out["sources"]["vessel_auroc"] = vessel_auroc(x, masks, fov)
    else:
        pneumonia = np.array([it["labels"]["pneumonia"] for it in items])

    labels = grades if fundus else pneumonia
    key = "kappa" if fundus else "pneumonia_auroc"
    kept_key = "kappa_retained" if fundus else "auroc_above_chance_retained"
    from medanon.models.classifier import load_classifier

    classifiers = {Path(c).stem: load_classifier(c)[0] for c in args.classifier}     # loaded once
    src_pred = {name: predictions(x, m, fundus=fundus) for name, m in classifiers.items()}
    sources_by = {c: utility_score(labels, p, fundus=fundus) for c, p in src_pred.items()}
    if args.classifier:
        out["sources"][key] = sources_by[Path(args.classifier[0]).stem]
        out["sources"]["by_classifier"] = sources_by
    recons = {}
    for path in args.codec:
        codec = load_codec(path).eval()
        with torch.no_grad():
            r = quantise(torch.cat([codec.decode(codec.encode(x[i:i + 64])) for i in range(0, len(x), 64)]))
        recons[Path(path).stem] = r
        res: dict = {"vessel_auroc": vessel_auroc(r, masks, fov)} if fundus else {}
        if args.identity:
            res["identity"] = outer_tar(x, r, patients, Path(args.identity))
        if args.classifier:
            by = {}
            for name, model in classifiers.items():
                pred = predictions(r, model, fundus=fundus)
                v = utility_score(labels, pred, fundus=fundus)
                by[name] = {key: v, kept_key: kept_share(v, sources_by[name], fundus=fundus),
                            **bootstrap_kept(labels, src_pred[name], pred, patients, fundus=fundus)}
            res.update({k: by[Path(args.classifier[0]).stem][k] for k in (key, kept_key)})
            res["by_classifier"] = by
        out["codecs"][Path(path).stem] = res
    if not args.skip_fid:
        from medanon.evaluate.fidelity import inception_extractor

        ref = torch.stack([ds.load(i)["image"] for i in ref_idx])
        sets = {"control": x, **{f"recon_{k}": v for k, v in recons.items()}}
        if args.generator:
            G = load_any_generator(args.generator)
            sets["samples"] = lambda: generate(G, args.n)
        out["fid"] = fid_table(ref, sets, extractor=inception_extractor(device="cpu")[0])
    met = {}
    for name, res in out["codecs"].items():
        if "vessel_auroc" in res:
            met[f"{name}.vessel_auroc"] = res["vessel_auroc"] >= TARGETS["vessel_auroc"]
        if "identity" in res:
            met[f"{name}.outer_tar"] = res["identity"]["tar"] >= TARGETS["outer_tar_far1"]
        if res.get("kappa_retained") is not None:
            met[f"{name}.kappa_retained"] = res["kappa_retained"] >= TARGETS["kappa_retained"]
        for clf, r in res.get("by_classifier", {}).items():
            if r.get("kappa_retained") is not None:
                met[f"{name}.kappa_retained@{clf}"] = r["kappa_retained"] >= TARGETS["kappa_retained"]
        if "fid" in out:
            met[f"{name}.recon_fid"] = out["fid"][f"recon_{name}"]["fid"] <= TARGETS["recon_fid"]
    if "fid" in out and "samples" in out["fid"]:
        met["samples.fid"] = out["fid"]["samples"]["fid"] <= TARGETS["sample_fid"]
    out["met"] = met
    out["seconds"] = time.perf_counter() - t_start
    print(json.dumps(out, default=float))


if __name__ == "__main__":
    main()
