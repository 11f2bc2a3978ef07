"""The flow likelihood-ratio classifier (DP-GLOW Appendix A), Table 3 and the marker figure."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.metrics import roc_auc_score

from medanon.anonymize.dpglow import DPGlow, calibrate_latent
from medanon.anonymize.ldp_image import ImageLDP, calibrate_pixels
from medanon.config import PhantomConfig
from medanon.evaluate.flow_lr import (
    FlowLikelihoodRatio,
    evaluate_dpglow,
    log_likelihood,
    quantize8,
    render_marker_figure,
    table3,
)
from medanon.models.glow import GlowCodec, GlowConfig, image_to_flow
from medanon.phantoms.generate import generate
from medanon.train.flow import load_flow, train_flow


def blobs(n: int, *, spot: bool, seed: int) -> torch.Tensor:
    """16 px grey discs; 'abnormal' ones carry a bright spot at a random place inside."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 16), torch.linspace(-1, 1, 16), indexing="ij")
    img = torch.where(xx**2 + yy**2 < 0.7, 0.0, -0.8).expand(n, 1, 16, 16).clone()
    img = img + 0.05 * torch.randn(n, 1, 16, 16, generator=g)
    if spot:
        c = (torch.rand(n, 2, generator=g) - 0.5) * 0.8
        d = (xx - c[:, 0, None, None]) ** 2 + (yy - c[:, 1, None, None]) ** 2
        img = img + 0.9 * torch.exp(-d / 0.02)[:, None]
    return quantize8(img.clamp(-1, 1))


def cfg(**kw) -> GlowConfig:
    return GlowConfig(**{**dict(resolution=16, channels=1, levels=2, depth=2, hidden=(16,), batch=16, lr=3e-3,
                                warmup_steps=5, steps=80, checkpoint_every=80), **kw})


@pytest.fixture(scope="module")
def flows(tmp_path_factory) -> tuple[GlowCodec, GlowCodec, torch.Tensor, np.ndarray]:
    tmp = tmp_path_factory.mktemp("flows")
    normal = blobs(64, spot=False, seed=0)
    mixture = torch.cat([normal[:32], blobs(32, spot=True, seed=1)])
    n = load_flow(train_flow(cfg(), normal, out=tmp / "normal", progress=False).path)[0]
    m = load_flow(train_flow(cfg(seed=1), mixture, out=tmp / "mixture", progress=False).path)[0]
    test = torch.cat([blobs(24, spot=False, seed=2), blobs(24, spot=True, seed=3)])
    labels = np.r_[np.zeros(24), np.ones(24)]
    return n, m, test, labels


def test_score_is_the_log_likelihood_difference(flows):
    normal, mixture, test, labels = flows
    clf = FlowLikelihoodRatio(normal, mixture)
    s = clf.score(test, batch=7)
    with torch.no_grad():
        ref = (normal.flow.log_prob(image_to_flow(test)) - mixture.flow.log_prob(image_to_flow(test))).double()
    assert torch.allclose(s, ref, rtol=1e-5, atol=1e-3)
    assert torch.equal(log_likelihood(normal, test), log_likelihood(normal, quantize8(test + 1e-4)))
    assert clf.auroc(test, labels) == pytest.approx(roc_auc_score(labels, -s.numpy()))
    same = FlowLikelihoodRatio(mixture, mixture)
    assert torch.all(same.score(test) == 0) and same.auroc(test, labels) == 0.5


def test_classifier_detects_the_abnormal_images(flows):
    normal, mixture, test, labels = flows
    assert FlowLikelihoodRatio(normal, mixture).auroc(test, labels) > 0.8


def test_table3_rows_and_baseline(flows):
    normal, mixture, test, labels = flows
    clf = FlowLikelihoodRatio(normal, mixture)
    lat = calibrate_latent(mixture, blobs(40, spot=False, seed=5))
    pix = calibrate_pixels(blobs(40, spot=True, seed=6))
    res = table3(clf, test, labels, latent_calibration=lat, pixel_calibration=pix, epsilons=(1e3, 1e1), seed=0)
    assert [r["epsilon"] for r in res["rows"]] == ["inf (no clip)", "1e3", "1e1"]
    first = res["rows"][0]
    assert first["auroc_ldp_image"] == pytest.approx(clf.auroc(test, labels))          # identity
    assert abs(first["auroc_dpglow"] - first["auroc_ldp_image"]) < 0.02              # exact reconstruction
    assert res["rows"][1]["epsilon_image"] == pytest.approx(1e3 * 256)
    assert all(0 <= r[k] <= 1 for r in res["rows"] for k in ("auroc_ldp_image", "auroc_dpglow"))
    # one finite cell per column recomputed apart (the mechanism at that ε, seeded as the table seeds it, scored by
    # scikit-learn): zero noise, a scale off by D, or ε read per image would each move the cell
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mechs = {"ldp_image": ImageLDP(pix, epsilon=1e3, alpha=0.4, per_element=True),
                 "dpglow": DPGlow(mixture, lat, epsilon=1e3, alpha=0.4, per_element=True)}
    for name, mech in mechs.items():
        gen = torch.Generator().manual_seed(int(name == "ldp_image"))
        out = torch.cat([mech(test[i:i + 32], generator=gen) for i in range(0, len(test), 32)])
        want = roc_auc_score(np.asarray(labels), -clf.score(out).numpy())
        assert res["rows"][1][f"auroc_{name}"] == pytest.approx(want, abs=1e-12), name
        assert res["rows"][1][f"auroc_{name}"] != res["rows"][0][f"auroc_{name}"], name     # the noise counts
    assert all(isinstance(r["dpglow_diverged"], int) and 0 <= r["dpglow_diverged"] <= 48 for r in res["rows"])
    assert res["calibration"]["latent_sha256"] == lat.checksum() and res["images"] == 48
    again = table3(clf, test, labels, latent_calibration=lat, pixel_calibration=pix, epsilons=(1e3, 1e1), seed=0)
    assert again["rows"] == res["rows"]                                              # seeded: reproducible


def test_marker_figure_png(tmp_path: Path, flows):
    _, mixture, test, _ = flows
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp = DPGlow(mixture, calibrate_latent(mixture, test), epsilon=1e2, per_element=True)
        ldp = ImageLDP(calibrate_pixels(test), epsilon=1e2, per_element=True)
    p = render_marker_figure(tmp_path / "fig.png", test[:3], dpglow=dp, image_ldp=ldp, case_names=["block"],
                             scale=2)
    with Image.open(p) as im:
        assert im.size == (90 + 3 * (32 + 4), 16 + 3 * (32 + 4)) and im.mode == "RGB"
        a = np.asarray(im)
    assert a[16:48, 90:122].std() > 0                                              # the original is drawn


def _run_record(ds, root, split: dict, *, subset: str = "train", where: dict | None = None):
    """What `medanon train flow` records of its data (cli/train_flow.py), and the images it trains on."""
    from medanon.data.records import records_digest
    from medanon.data.splits import split_records
    from medanon.runtime import files_digest

    train = split_records(ds.records, val=split["val"], test=split["test"], stratify=split["stratify"],
                          seed=split["seed"])["train"] if subset == "train" else list(ds.records)
    train = [r for r in train if all(r.labels.get(n) == v for n, v in (where or {}).items())]
    images, _ = ds.tensors(progress=False)
    index = {r.record_id: i for i, r in enumerate(ds.records)}
    data = {"source": files_digest([r.path for r in ds.records], root=root), "subset": subset, "split": split,
            "where": where or {}, "records": {"train": records_digest(train)}}
    return images[[index[r.record_id] for r in train]], data


def test_evaluate_dpglow_end_to_end(tmp_path: Path):
    """Flows trained as `medanon train flow --subset train` records them: the test split is checked to hold none of
    their training patients. Flows trained on every image (the test split is training data) are refused; flows that
    record nothing of their data warn, and the result says the check was not made."""
    import warnings

    from medanon.errors import ConfigError

    data = generate(PhantomConfig(modality="xray", patients=16, per_patient=2, size=16, workers=1, seed=1,
                                  pneumonia_rate=0.5, marker_rate=0.3, situs_inversus_rate=0.3),
                    tmp_path / "xray", progress=False)
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset

    ds = open_dataset(data, DataConfig(size=16))
    small = cfg(steps=10, checkpoint_every=10, batch=8)
    split = {"val": 0.15, "test": 0.3, "seed": 0, "stratify": "pneumonia"}
    mix_images, mix_data = _run_record(ds, data, split)
    nor_images, nor_data = _run_record(ds, data, split, where={"pneumonia": 0})
    mix = train_flow(small, mix_images, out=tmp_path / "mix", progress=False, data=mix_data)
    nor = train_flow(small, nor_images, out=tmp_path / "nor", progress=False, data=nor_data)
    res = evaluate_dpglow(data, mixture_flow=mix.path, normal_flow=nor.path, figure=tmp_path / "f.png",
                          epsilons=(1e2,))
    assert res["phantom"] is True and res["data"]["split"] == split and len(res["rows"]) == 2
    assert res["images"] < len(ds) and Path(res["figure"]).is_file()
    assert all(math.isfinite(r["auroc_dpglow"]) for r in res["rows"])
    assert res["data"]["test_unseen"].startswith("checked")

    every_images, every = _run_record(ds, data, split, subset="all")
    leaky = train_flow(small, every_images, out=tmp_path / "all", progress=False, data=every)
    with pytest.raises(ConfigError, match=r"mixture_flow .* every image of this folder"):
        evaluate_dpglow(data, mixture_flow=leaky.path, normal_flow=nor.path, epsilons=(1e2,))
    bare = train_flow(small, every_images, out=tmp_path / "bare", progress=False, data={"split": split})
    with pytest.warns(UserWarning, match="mixture_flow record"):
        res = evaluate_dpglow(data, mixture_flow=bare.path, normal_flow=nor.path, epsilons=(1e2,))
    assert res["data"]["test_unseen"].startswith("not checked")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = generate(PhantomConfig(modality="xray", patients=16, per_patient=2, size=16, workers=1, seed=3,
                                       pneumonia_rate=0.5), tmp_path / "other", progress=False)
    with pytest.raises(ConfigError, match="another folder"):          # the flows' record is of another folder
        evaluate_dpglow(other, mixture_flow=mix.path, normal_flow=nor.path, epsilons=(1e2,))


def test_intervals_resample_patients_not_images():
    """Images of one patient are not independent: with every patient's images identical in score and label, the
    interval over patients is that of a quarter of the images, wider than one that counts each image."""
    from medanon.evaluate.flow_lr import auroc_ci

    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(25), np.ones(25)]
    s = rng.normal(size=50) + y
    y4, s4, g4 = np.repeat(y, 4), np.repeat(s, 4), np.repeat(np.arange(50), 4)
    as_images, as_patients = auroc_ci(y4, s4), auroc_ci(y4, s4, g4)
    assert as_patients[1] - as_patients[0] > 1.5 * (as_images[1] - as_images[0])
    assert as_patients == pytest.approx(auroc_ci(y, s), abs=0.02)   # the 50 patients' own interval


def test_evaluate_dpglow_on_another_phantom(tmp_path: Path):
    """A test set of other people: every image of a phantom of another seed, intervals over its patients; the flows'
    own phantom seed is refused (its patients are the ones the flows were trained on)."""
    kw = dict(modality="xray", size=16, workers=1, pneumonia_rate=0.5, marker_rate=0.3, situs_inversus_rate=0.3)
    data = generate(PhantomConfig(patients=16, per_patient=2, seed=1, **kw), tmp_path / "xray", progress=False)
    other = generate(PhantomConfig(patients=12, per_patient=2, seed=4, **kw), tmp_path / "other", progress=False)
    same = generate(PhantomConfig(patients=6, per_patient=2, seed=1, **kw), tmp_path / "same", progress=False)
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset
    from medanon.errors import ConfigError

    images, _ = open_dataset(data, DataConfig(size=16)).tensors(progress=False)
    small = cfg(steps=4, checkpoint_every=4, batch=8)
    split = {"val": 0.15, "test": 0.3, "seed": 0, "stratify": "pneumonia"}
    mix = train_flow(small, images, out=tmp_path / "mix", progress=False, data={"split": split})
    nor = train_flow(small, images[:8], out=tmp_path / "nor", progress=False, data={"split": split})
    res = evaluate_dpglow(data, mixture_flow=mix.path, normal_flow=nor.path, epsilons=(1e2,), test_dir=other)
    assert res["images"] == 24 and res["patients"] == 12 and res["data"]["test_patients"] == 12
    assert str(other) in res["data"]["test_set"] and "patients" in res["interval"]
    link = tmp_path / "link-to-data"
    link.symlink_to(data, target_is_directory=True)
    for bad in (same, data, link):
        with pytest.raises(ConfigError, match="flows"):
            evaluate_dpglow(data, mixture_flow=mix.path, normal_flow=nor.path, epsilons=(1e2,), test_dir=bad)
    import shutil  # a copy of the flows' folder that no longer says it is a phantom

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    (copy / "phantom.json").unlink()
    with pytest.raises(ConfigError, match=r"holds .* of the images the mixture flow was trained on"):
        evaluate_dpglow(data, mixture_flow=mix.path, normal_flow=nor.path, epsilons=(1e2,), test_dir=copy)


def test_the_report_counts_dpglow_images_decoded_by_the_fallback_and_says_what_was_checked():
    """Table 3 dropped how many DP-GLOW images the inverse flow diverged on (those measure the fallback); its caption
    said the test patients were unseen by both flows whether or not that was checked."""
    from medanon.evaluate.report import _dpglow_table3

    row = {"epsilon": "1e1", "epsilon_per_element": 10.0, "epsilon_image": 2560.0, "auroc_dpglow": 0.5,
           "auroc_dpglow_ci95": [0.4, 0.6], "dpglow_diverged": 3}
    t = {"rows": [row], "images": 40, "abnormal": 20, "alpha": 0.4, "pixel_alpha": 0.4, "D": 256,
         "data": {"label": "pneumonia", "test_patients": 10, "test_unseen": "checked: ..."}}
    html = _dpglow_table3({"studies": {"dpglow_table3": t}})
    assert "3 of 40 at ε = 1e1" in html and "neither flow was trained on (checked" in html
    t["data"]["test_unseen"] = "not checked for mixture_flow"
    assert "not checked against the flows' training data" in _dpglow_table3({"studies": {"dpglow_table3": t}})
