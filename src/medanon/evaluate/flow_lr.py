"""Flow likelihood-ratio pathology detection (DP-GLOW Appendix A) and the paper's evaluation built on it.

Two flows, one trained on normal images and one on the mixture of normal and abnormal images,
give the log-posterior of "normal" up to a constant (Eq. A1)::

    log p(normal | x) = log p(x | normal) - log p(x) + log p(normal)

:class:`FlowLikelihoodRatio` scores images with it; the AUROC for pathology detection uses the
negated score (abnormal = positive). :func:`table3` sweeps the privacy budget of DP-GLOW and of the
image-domain baseline as in the paper's Table 3, and :func:`render_marker_figure` draws the
before/after images of the block-marker and flipped (situs inversus) cases as in Figs. 4–7.
Images are rounded to 8 bits before scoring, as a release stores them. Results on phantoms are
phantom results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medanon.anonymize.dpglow import DPGLOW_CENTER, DPGlow
from medanon.anonymize.ldp import CENTERS, ClipCalibration
from medanon.anonymize.ldp_image import ImageLDP
from medanon.errors import ConfigError
from medanon.evaluate.attacks.bootstrap import cluster_summary, weighted_auc
from medanon.evaluate.metrics import roc_auc
from medanon.models.glow.codec import GlowCodec
from medanon.models.glow.dequantize import image_to_flow

MECHANISMS = ("ldp_image", "dpglow")           # the two columns of Table 3
TABLE3_EPSILONS = (1e3, 1e2, 1e1)               # per element: the paper's 10^3, 10^2, 10^1 * H * W
PAPER_TABLE3 = {                                # the paper's AUROCs (RSNA, 512 px), for reference only
    "inf (no clip)": {"ldp_image": 0.807, "dpglow": 0.807},
    "1e3": {"ldp_image": 0.813, "dpglow": 0.679},
    "1e2": {"ldp_image": 0.559, "dpglow": 0.665},
    "1e1": {"ldp_image": 0.643, "dpglow": 0.539},
}


def quantize8(images: torch.Tensor) -> torch.Tensor:
    """Round images in [-1, 1] to the 256 values an 8-bit PNG holds (what a release stores)."""
    return torch.round((images.clamp(-1, 1) + 1) * 127.5) / 127.5 - 1


@torch.no_grad()
def log_likelihood(codec: GlowCodec, images: torch.Tensor, *, batch: int = 64) -> torch.Tensor:
    """log p(x) in nats per image (N,), float64, at the 8-bit bin centres of ``images``."""
    dev = next(codec.parameters()).device
    out = [codec.flow.log_prob(image_to_flow(quantize8(images[i:i + batch]).to(dev))).double().cpu()
           for i in range(0, len(images), batch)]
    return torch.cat(out)


class FlowLikelihoodRatio:
    """The likelihood-ratio classifier of DP-GLOW Appendix A (Shibata et al. 2021)."""

    def __init__(self, normal: GlowCodec, mixture: GlowCodec):
        if normal.dims != mixture.dims:
            raise ConfigError(f"the normal flow takes {normal.dims} values per image, the mixture flow "
                              f"{mixture.dims}", fix="train both flows at the same size and channels")
        self.normal = normal                    # flow trained on normal images only: p(x | normal)
        self.mixture = mixture                  # flow trained on normal and abnormal images: p(x)

    def score(self, images: torch.Tensor, *, batch: int = 64) -> torch.Tensor:
        """log p(x | normal) - log p(x): the log-posterior of "normal" up to a constant (higher = normal)."""
        return log_likelihood(self.normal, images, batch=batch) - log_likelihood(self.mixture, images, batch=batch)

    def auroc(self, images: torch.Tensor, abnormal: Sequence[float] | np.ndarray, *, batch: int = 64) -> float:
        """AUROC for detecting abnormal images (label 1) with the negated score."""
        return roc_auc(np.asarray(abnormal), -self.score(images, batch=batch).numpy())


# ------------------------------------------------------------------------------------------------ Table 3


def auroc_ci(abnormal: np.ndarray, score: np.ndarray, groups: Sequence | None = None, *, seed: int = 0,
             n_resamples: int = 1000) -> list[float]:
    """95 % interval of the AUROC by a cluster bootstrap over ``groups`` (the patient of each image: images of one
    patient are not independent, so whole patients are resampled); ``None``: one image per patient."""
    groups = np.arange(len(score)) if groups is None else np.asarray(groups)
    auc = roc_auc(abnormal, score)
    return cluster_summary(weighted_auc(score, np.asarray(abnormal) == 1), groups, auc, seed=seed,
                           n_resamples=n_resamples)["ci"]


def _budget_label(eps: float) -> str:
    return "inf (no clip)" if math.isinf(eps) else f"{eps:.0e}".replace("e+0", "e")


def table3(classifier: FlowLikelihoodRatio, images: torch.Tensor, abnormal: Sequence[float] | np.ndarray, *,
           latent_calibration: ClipCalibration, pixel_calibration: ClipCalibration, alpha: float = 0.4,
           pixel_alpha: float | None = None, epsilons: Sequence[float] = TABLE3_EPSILONS,
           mechanisms: Sequence[str] = MECHANISMS, center: str = DPGLOW_CENTER, seed: int = 0,
           batch: int = 32, groups: Sequence | None = None) -> dict[str, Any]:
    """AUROC of the likelihood-ratio classifier on privatised images against ε, as the paper's Table 3.

    DP-GLOW runs through the classifier's *mixture* flow (the paper shares it between the two).
    ``epsilons`` are per element (image budget ε·D); a first row "inf (no clip)" scores the
    untouched images (baseline) and their flow reconstructions (DP-GLOW). Noise is seeded from
    ``seed`` (an experiment, not a release). Each AUROC comes with a 95 % cluster-bootstrap interval
    over ``groups``, the patient of each image (None: every image its own patient). ``pixel_alpha``
    (default: ``alpha``) sets the baseline's clip width on its own; ``mechanisms`` picks the columns. A DP-GLOW
    row counts the images the inverse flow diverged on (``dpglow_diverged``: decoded from a latent shrunk towards
    the prior's mode, which measures that fallback rather than the flow). Seeded noise is drawn by the float
    sampler; a release's secret noise comes from the exact discrete sampler, whose scale is rounded up to its grid
    (more noise at a large ε per element such as 10³, a negligible difference at 10² and below). Returns a plain
    dict (JSON-ready).
    """
    import warnings

    pixel_alpha = alpha if pixel_alpha is None else pixel_alpha
    if not set(mechanisms) <= set(MECHANISMS) or not mechanisms:
        raise ConfigError(f"mechanisms={list(mechanisms)} must be a non-empty subset of {list(MECHANISMS)}")
    abnormal = np.asarray(abnormal, dtype=np.float64)
    if len(abnormal) != len(images) or not {0.0, 1.0} <= set(abnormal.tolist()) <= {0.0, 1.0}:
        raise ConfigError("table3 needs one 0/1 label per image with both classes present")
    rows = []
    for eps in (math.inf, *epsilons):
        finite = math.isfinite(eps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # every finite row here is in the "weak budget" regime
            dp = DPGlow(classifier.mixture, latent_calibration, epsilon=eps, alpha=alpha, per_element=True,
                        clip=finite, center=center)
            ldp = ImageLDP(pixel_calibration, epsilon=eps, alpha=pixel_alpha, per_element=True, clip=finite)
        row: dict[str, Any] = {"epsilon": _budget_label(eps), "epsilon_per_element": eps if finite else "inf",
                               "epsilon_image": eps * dp.mechanism.dims if finite else "inf"}
        for name in mechanisms:
            gen = torch.Generator().manual_seed(seed + (name == "ldp_image"))
            if name == "dpglow":                 # with the images the inverse flow diverged on (decoded shrunk)
                dev = next(classifier.mixture.parameters()).device
                parts = [dp.privatise(images[i:i + batch].to(dev), generator=gen) for i in range(0, len(images), batch)]
                out = torch.cat([o.cpu() for o, _ in parts])
                row["dpglow_diverged"] = int(sum(int(d.sum()) for _, d in parts))
            else:
                out = torch.cat([ldp(images[i:i + batch], generator=gen).cpu() for i in range(0, len(images), batch)])
            score = -classifier.score(out).numpy()
            row[f"auroc_{name}"] = roc_auc(abnormal, score)
            row[f"auroc_{name}_ci95"] = auroc_ci(abnormal, score, groups, seed=seed)
        rows.append(row)
    return {
        "table": "DP-GLOW Table 3 (AUROC of flow likelihood-ratio pathology detection on privatised images)",
        "rows": rows, "images": len(images), "abnormal": int(abnormal.sum()), "D": latent_calibration.dims,
        "patients": len(images) if groups is None else len(set(groups)),
        "interval": ("95 % cluster bootstrap over patients (1,000 resamples)" if groups is not None else
                     "95 % bootstrap over images, each taken as its own patient (1,000 resamples)"),
        "alpha": alpha, "pixel_alpha": pixel_alpha, "dpglow_center": center, "noise_seed": seed,
        "calibration": {"latent_sha256": latent_calibration.checksum(), "pixel_sha256": pixel_calibration.checksum(),
                        "latent_samples": latent_calibration.count, "pixel_samples": pixel_calibration.count},
        "flows": {"normal": classifier.normal.sha256, "mixture": classifier.mixture.sha256},
        "paper_table3_rsna_512px": PAPER_TABLE3,
    }


# ------------------------------------------------------------------------------------------------ Figs. 4–7


def _tile(image: torch.Tensor, scale: int) -> np.ndarray:
    a = ((quantize8(image).cpu().numpy() + 1) * 127.5).round().astype(np.uint8)
    a = np.repeat(a, 3, axis=0) if a.shape[0] == 1 else a
    return np.kron(np.transpose(a, (1, 2, 0)), np.ones((scale, scale, 1), dtype=np.uint8))


def render_marker_figure(path: str | Path, cases: torch.Tensor, *, dpglow: DPGlow, image_ldp: ImageLDP,
                         case_names: Sequence[str] = (), seed: int = 0, scale: int = 2) -> Path:
    """One row per case: original | image-domain LDP | DP-GLOW (the paper's Figs. 4–7 side by side).

    ``cases`` (K, C, H, W) are e.g. the block-marker and flipped (situs inversus) phantoms; the two
    mechanisms carry their own budgets (the paper uses ε = 10² · H · W for both). Writes a PNG.
    """
    from PIL import Image, ImageDraw

    dev = next(dpglow.codec.parameters()).device
    out_ldp = image_ldp(cases, generator=torch.Generator().manual_seed(seed + 1))
    out_dp = dpglow(cases.to(dev), generator=torch.Generator().manual_seed(seed)).cpu()
    heads = ["original", f"image LDP eps={image_ldp.mechanism.epsilon_element:g}/element",
             f"DP-GLOW eps={dpglow.mechanism.epsilon_element:g}/element"]
    names = list(case_names) + [f"case {i + 1}" for i in range(len(case_names), len(cases))]
    side, pad, top, left = cases.shape[-1] * scale, 4, 16, 90
    canvas = Image.new("RGB", (left + 3 * (side + pad), top + len(cases) * (side + pad)), "white")
    draw = ImageDraw.Draw(canvas)
    for j, h in enumerate(heads):
        draw.text((left + j * (side + pad), 2), h, fill="black")
    for i in range(len(cases)):
        y = top + i * (side + pad)
        draw.text((2, y + side // 2 - 6), names[i][:14], fill="black")
        for j, img in enumerate((cases[i], out_ldp[i], out_dp[i])):
            canvas.paste(Image.fromarray(_tile(img, scale)), (left + j * (side + pad), y))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path, format="PNG")
    return path


# ------------------------------------------------------------------------------------------------ one call


@dataclass
class _FlowData:
    """A dataset loaded at a flow's size, split as the flow recorded, with the flow's calibration."""

    codec: GlowCodec
    latent_cal: ClipCalibration
    records: list[Any]
    images: torch.Tensor
    parts: dict[str, list[Any]]
    split: dict[str, Any]
    blob: dict[str, Any]
    dataset: Any                                # the folder as read, for comparing another test set with it

    def take(self, recs) -> torch.Tensor:
        index = {r.record_id: i for i, r in enumerate(self.records)}
        return self.images[[index[r.record_id] for r in recs]]


def _load(data_dir: str | Path, flow: str | Path, *, stratify: str, device, progress: bool) -> _FlowData:
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset
    from medanon.data.splits import split_records
    from medanon.train.flow import load_flow

    codec, latent_cal, blob = load_flow(flow, map_location=device)
    if latent_cal is None:
        raise ConfigError(f"{flow} holds no calibration statistics", fix="retrain it with `medanon train flow`")
    cfg = codec.flow.cfg
    ds = open_dataset(data_dir, DataConfig(size=cfg.resolution, channels=cfg.channels))
    sp = blob["extra"].get("data", {}).get("split") or {"val": 0.15, "test": 0.15, "seed": 0, "stratify": stratify}
    parts = split_records(ds.records, val=sp["val"], test=sp["test"], stratify=sp.get("stratify", ""),
                          seed=sp["seed"])
    return _FlowData(codec, latent_cal, ds.records, ds.tensors(progress=progress)[0], parts, sp, blob, ds)


def _phantom_seed(folder: str | Path) -> int | None:
    import json

    p = Path(folder) / "phantom.json"
    try:
        return int(json.loads(p.read_text())["settings"]["seed"]) if p.is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _other_test_set(test_dir: str | Path, data_dir: str | Path, fd: _FlowData, *, progress: bool):
    """Every record and image of ``test_dir`` at the flow's size, refused where it cannot hold other people."""
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset

    try:
        same = Path(test_dir).samefile(data_dir)          # the same folder by any path (links, mounts)
    except OSError:
        same = False
    if same:
        raise ConfigError(f"test_dir {test_dir} is the flows' own dataset", fix="pass a dataset of other people")
    seed = _phantom_seed(test_dir)
    if seed is not None and seed == _phantom_seed(data_dir):
        raise ConfigError(f"test_dir {test_dir} is a phantom of seed {seed}, the seed of the flows' phantom "
                          f"{data_dir}: its patients are the ones the flows were trained on",
                          fix="generate the test phantom with another seed")
    cfg = fd.codec.flow.cfg
    ds = open_dataset(test_dir, DataConfig(size=cfg.resolution, channels=cfg.channels))
    from medanon.data.dataset import subset
    from medanon.data.overlap import images_in_common

    index = {r.record_id: i for i, r in enumerate(fd.records)}
    train = subset(fd.dataset, [index[r.record_id] for r in fd.parts["train"]])
    shared = images_in_common(ds, train)          # a copied, re-saved or resized part of the flows' training split
    if shared:
        raise ConfigError(f"test_dir {test_dir} holds {shared} of the images the mixture flow was trained on (the "
                          f"training split of {data_dir}; compared by file, pixels and as resized or re-encoded "
                          "copies)", fix="pass a dataset of people neither flow saw")
    return ds.records, ds.tensors(progress=progress)[0]


def marker_figure(data_dir: str | Path, *, flow: str | Path, figure: str | Path, epsilon: float = 1e2,
                  alpha: float = 0.4, pixel_alpha: float | None = None, center: str = DPGLOW_CENTER, seed: int = 0,
                  device: torch.device | str = "cpu") -> Path | None:
    """Figs. 4–7 for a phantom dataset and one flow: block-marker and flipped cases, before and after.

    Cases are the flow's test-split images with ``marker_block`` (two) or ``situs_inversus`` (one),
    from any split if the test split has none; both mechanisms at ``epsilon`` per element, pixels
    calibrated on the flow's training split. Returns the PNG path, or None if the data has no
    marker cases (e.g. a real dataset).
    """
    import warnings

    from medanon.anonymize.ldp_image import calibrate_pixels

    fd = _load(data_dir, flow, stratify="", device=device, progress=False)
    cases, names = [], []
    for key, name, n in (("marker_block", "block", 2), ("situs_inversus", "situs inv.", 1)):
        pool = [r for r in fd.parts["test"] if r.labels.get(key) == 1] or \
            [r for r in fd.records if r.labels.get(key) == 1]
        cases += pool[:n]
        names += [name] * len(pool[:n])
    if not cases:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp = DPGlow(fd.codec, fd.latent_cal, epsilon=epsilon, alpha=alpha, per_element=True, center=center)
        ldp = ImageLDP(calibrate_pixels(fd.take(fd.parts["train"])), epsilon=epsilon,
                       alpha=alpha if pixel_alpha is None else pixel_alpha, per_element=True)
    return render_marker_figure(figure, fd.take(cases), dpglow=dp, image_ldp=ldp, case_names=names, seed=seed)


def evaluate_dpglow(data_dir: str | Path, *, mixture_flow: str | Path, normal_flow: str | Path,
                    figure: str | Path | None = None, label: str = "pneumonia", alpha: float = 0.4,
                    pixel_alpha: float | None = None, mechanisms: Sequence[str] = MECHANISMS,
                    center: str = DPGLOW_CENTER, epsilons: Sequence[float] = TABLE3_EPSILONS,
                    figure_epsilon: float = 1e2, seed: int = 0, device: torch.device | str = "cpu",
                    progress: bool = False, test_dir: str | Path | None = None) -> dict[str, Any]:
    """Table 3 (and optionally the Figs. 4–7 PNG) for a dataset and two flows from `medanon train flow`.

    The evaluation images are the *test* split recorded in the mixture flow, checked to hold none of either flow's
    training patients (:func:`medanon.evaluate.flow_unseen.check_unseen`), or every image of ``test_dir``: another
    dataset of people neither flow saw (the caller's assurance; a phantom of the flows' own phantom seed is refused,
    its patients are the flows'). Pixels are calibrated on the flow's training split, the latent on its stored
    statistics. Intervals resample patients.
    """
    from medanon.anonymize.ldp_image import calibrate_pixels
    from medanon.train.flow import load_flow

    fd = _load(data_dir, mixture_flow, stratify=label, device=device, progress=progress)
    normal, _, normal_blob = load_flow(normal_flow, map_location=device)
    if test_dir is None:
        test, images, source = fd.parts["test"], fd.take(fd.parts["test"]), f"the test split of {data_dir}"
        from medanon.evaluate.flow_unseen import check_unseen

        unseen = check_unseen(data_dir, test, [("mixture_flow", mixture_flow, fd.blob),
                                               ("normal_flow", normal_flow, normal_blob)], fd.records)
    else:
        test, images = _other_test_set(test_dir, data_dir, fd, progress=progress)
        source = f"every image of {test_dir}"
        unseen = "the caller's assurance (another dataset; a phantom of the flows' own seed is refused)"
    if any(label not in r.labels for r in test):
        raise ConfigError(f"{source} has no label {label!r} on every image", fix="pass label= NAME")
    result = table3(FlowLikelihoodRatio(normal, fd.codec), images, [r.labels[label] for r in test],
                    latent_calibration=fd.latent_cal, pixel_calibration=calibrate_pixels(fd.take(fd.parts["train"])),
                    alpha=alpha, pixel_alpha=pixel_alpha, epsilons=epsilons, mechanisms=mechanisms, center=center,
                    seed=seed, groups=[r.patient_id for r in test])
    result.update(data={"images_total": len(fd.records), "test_patients": len({r.patient_id for r in test}),
                        "split": fd.split, "label": label, "test_set": source, "test_unseen": unseen},
                  phantom=(Path(data_dir) / "phantom.json").is_file())
    if figure is not None:
        path = marker_figure(data_dir, flow=mixture_flow, figure=figure, epsilon=figure_epsilon, alpha=alpha,
                             pixel_alpha=pixel_alpha, center=center, seed=seed, device=device)
        result["figure"] = None if path is None else str(path)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m medanon.evaluate.flow_lr DATA --mixture M.pt --normal N.pt [--figure F.png]``: print JSON."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description="DP-GLOW Table 3 and Figs. 4-7 on a dataset (prints JSON)")
    ap.add_argument("data_dir")
    ap.add_argument("--mixture", required=True, help="flow trained on the mixture (also DP-GLOW's codec)")
    ap.add_argument("--normal", required=True, help="flow trained on normal images only")
    ap.add_argument("--figure", default=None, help="PNG of the marker cases before and after")
    ap.add_argument("--test-dir", default=None,
                    help="score every image of this dataset of other people instead of the flow's test split")
    ap.add_argument("--label", default="pneumonia")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pixel-alpha", type=float, default=None, help="clip width of the baseline (default 0.4)")
    ap.add_argument("--only", choices=MECHANISMS, default=None, help="compute one column only")
    ap.add_argument("--center", choices=CENTERS, default=DPGLOW_CENTER, help="DP-GLOW clip-box centre")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    res = evaluate_dpglow(args.data_dir, mixture_flow=args.mixture, normal_flow=args.normal, figure=args.figure,
                          label=args.label, seed=args.seed, pixel_alpha=args.pixel_alpha,
                          mechanisms=(args.only,) if args.only else MECHANISMS, center=args.center, progress=True,
                          test_dir=args.test_dir)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
