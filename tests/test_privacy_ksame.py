"""Issue 14, items 2, 3, 8, 9: what a k-Same release claims and carries (PCA basis, augmentation noise, labels per
patient and their homogeneity, --drop-remainder, the option an error names)."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from medanon.anonymize import ksame
from medanon.anonymize.augment import latent_views
from medanon.anonymize.averaging import PCA, pca_averages
from medanon.anonymize.ksame import DEFAULT_VIEW_SIGMA, KSameConfig, privacy_statement, release_ksame
from medanon.anonymize.privacy import DataDependentRelease, LabelHomogeneity
from medanon.cli import cli
from medanon.config import DataConfig, PhantomConfig
from medanon.data.dataset import open_dataset
from medanon.data.records import Record
from medanon.errors import ConfigError
from medanon.phantoms.generate import generate
from medanon.release import ReleaseWriter, read_release
from medanon.release.aggregate import aggregate_labels, homogeneous_labels


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=8, per_patient=2, size=32, workers=1, seed=3),
                    tmp_path_factory.mktemp("src") / "fundus", progress=False)


@pytest.fixture(scope="module")
def public(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=6, per_patient=1, size=32, workers=1, seed=9),
                    tmp_path_factory.mktemp("pub") / "fundus", progress=False)


def _release(out: Path, ds, cfg: KSameConfig, labels=("grade",), **kw):
    with ReleaseWriter(out, method=cfg.method, params={"k": cfg.k}, privacy=privacy_statement(cfg, None),
                       labels=list(labels)) as writer:
        release_ksame(ds, writer, cfg, progress=False, **kw)
    return read_release(out)


# ----------------------------------------------------------------------------------------------- item 2


def test_item2_kpca_basis_from_separate_data_keeps_records_within_their_cluster(tmp_path, data, public):
    ds = open_dataset(data, DataConfig(size=32))
    pub = open_dataset(public, DataConfig(size=32))
    private = KSameConfig(method="kpca", k=2, pca_components=3)
    st = privacy_statement(private, None)
    assert "fitted on the whole private dataset" in st["guarantee"] and "outside its cluster" in st["guarantee"]
    assert "computed only from the images of one cluster" not in st["guarantee"]
    with pytest.warns(DataDependentRelease, match="basis"):
        _release(tmp_path / "priv", ds, private)
    separate = KSameConfig(method="kpca", k=2, pca_components=3, pca_basis="separate")
    assert "computed only from the images of one cluster and a PCA basis fitted on separate data" in \
        privacy_statement(separate, None)["guarantee"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataDependentRelease)
        man, _ = _release(tmp_path / "sep", ds, separate, pca_basis=pub)
    assert man["privacy"]["pca_basis"].startswith("fitted on separate data")
    # negate one image outside a cluster: with the private basis that cluster's record changes, with the
    # separate basis it cannot (the record is a function of its cluster's images only)
    imgs, pub_imgs = ds.tensors(progress=False)[0], pub.tensors(progress=False)[0]
    changed = imgs.clone()
    changed[-1] = -changed[-1]
    members, w = [np.arange(4)], [np.full(4, 0.25)]

    def record(fit_on, images):
        return pca_averages(images[:4], members, w, PCA(3, seed=0).fit(fit_on))

    assert not torch.allclose(record(imgs, imgs), record(changed, changed), atol=1e-4)
    assert torch.equal(record(pub_imgs, imgs), record(pub_imgs, changed))
    with pytest.raises(ConfigError, match="separate"):
        _release(tmp_path / "x", ds, separate)                           # said separate, gave none


# ----------------------------------------------------------------------------------------------- item 3


def test_item3_augmentation_noise_is_secret_and_sigma_is_the_calibrated_default(monkeypatch):
    assert KSameConfig().view_sigma == DEFAULT_VIEW_SIGMA == 0.05
    drawn = []
    real = ksame.secrets.randbits

    def spy(n):
        drawn.append(n)
        return real(n)

    monkeypatch.setattr(ksame.secrets, "randbits", spy)
    g1, g2 = ksame.secret_generator(), ksame.secret_generator()
    assert drawn == [128, 128]
    # the generator keeps every secret bit: seeds that differ only above bit 32 give other noise (torch's CPU
    # generator would give the same)
    low, high = np.random.default_rng(5), np.random.default_rng(5 + 2**100)
    assert not np.array_equal(low.standard_normal(4), high.standard_normal(4))
    ws = torch.zeros(1, 4, 8)
    a = latent_views(ws, views=2, sigma=1.0, scale=torch.ones(8), generator=g1)
    b = latent_views(ws, views=2, sigma=1.0, scale=torch.ones(8), generator=g2)
    assert not torch.equal(a, b)                        # two draws differ: nothing derives them from public data
    cfg = KSameConfig(method="kcentroid", k=2, views=3, seed=0)
    # the noise is secret: the only seed is the public estimate of the prior's scale (a resume must keep it)
    assert ksame.seeds_used(cfg, codec=object()) == {"augmentation_scale": 0}
    assert "secret" in ksame.manifest_params(cfg)["augmentation"]["noise"]
    assert "secret" in privacy_statement(cfg, None)["augmentation"]


# ----------------------------------------------------------------------------------------------- item 8


def _rec(pid: str, grade: float, i: int) -> Record:
    return Record(path=Path(f"/x/{pid}-{i}.png"), patient_id=pid, labels={"grade": grade, "age": 50.0 + i},
                  record_id=f"r{pid}{i}")


def test_item8_labels_are_aggregated_per_patient_not_per_image():
    # one patient with five grade-0 images against two patients with one grade-3 image each
    sources = [_rec("a", 0.0, i) for i in range(5)] + [_rec("b", 3.0, 0), _rec("c", 3.0, 0)]
    out = aggregate_labels(sources, ["grade"])
    assert out["grade"] == 3.0 and out["grade_counts"] == "0:1;3:2"            # patients, not images
    per_image = aggregate_labels([r.labels for r in sources], ["grade"])       # label dicts alone: one each
    assert per_image["grade"] == 0.0 and per_image["grade_counts"] == "0:5;3:2"
    same = aggregate_labels([r.labels for r in sources], ["grade"], patients=[r.patient_id for r in sources])
    assert same == out
    worst = aggregate_labels([_rec("a", 1.0, 0), _rec("a", 4.0, 1)], ["grade"])
    assert worst["grade"] == 4.0 and worst["grade_counts"] == "4:1"           # a patient's worst grade, once
    assert math.isclose(aggregate_labels([_rec("a", 1.0, 0), _rec("a", 1.0, 2), _rec("b", 1, 0)],
                                         ["age"])["age"], 50.5)                # mean of patient means (51, 50)


def test_item8_a_ksame_release_counts_patients_in_its_labels(tmp_path, data):
    ds = open_dataset(data, DataConfig(size=32))                 # 8 patients x 2 images
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, rows = _release(tmp_path / "rel", ds, KSameConfig(method="kpixel", k=2))
    for row in rows:
        counted = sum(int(c.split(":")[1]) for c in row["grade_counts"].split(";"))
        assert counted == int(row["n_people"]) < int(row["n_sources"])      # one count per patient, not image


def test_item8_homogeneous_records_are_warned_and_stated(tmp_path, data):
    assert homogeneous_labels([_rec("a", 2.0, 0), _rec("b", 2.0, 0)], ["grade"]) == ["grade"]
    assert homogeneous_labels([_rec("a", 2.0, 0), _rec("a", 2.0, 1)], ["grade"]) == []     # one patient only
    assert homogeneous_labels([_rec("a", 2.0, 0), _rec("b", 1.0, 0)], ["grade", "age"]) == []
    ds = open_dataset(data, DataConfig(size=32))
    cfg = KSameConfig(method="kpixel", k=2, stratify="grade", drop_remainder=True)
    assert "every record is homogeneous in grade" in privacy_statement(cfg, None)["labels"]
    with pytest.warns(LabelHomogeneity, match="grade in") as caught:
        man, rows = _release(tmp_path / "strat", ds, cfg)
    n = len(rows)
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, LabelHomogeneity))
    assert f"grade in {n} of {n} records" in said                            # stratified: every record
    assert man["privacy"]["homogeneous_records"] == {"grade": f"{n} of {n}"}


# ----------------------------------------------------------------------------------------------- item 9


def test_item9_drop_remainder_statement_and_the_weights_option_the_error_names():
    kept = privacy_statement(KSameConfig(method="kpixel", k=3), None)["guarantee"]
    assert "each patient is in exactly one cluster" in kept and "dropped" not in kept
    dropped = privacy_statement(KSameConfig(method="kpixel", k=3, drop_remainder=True), None)["guarantee"]
    assert "each patient is in exactly one cluster" not in dropped
    assert "each released patient is in exactly one cluster" in dropped and "none of their images is released" \
        in dropped
    from medanon.models.features.vgg import HOW_TO_GET
    assert "features_weights=" in HOW_TO_GET and "--" not in HOW_TO_GET.split("IMAGENET1K_V1")[1]   # library words
    from medanon.cli.anonymize_ksame import FLAGS
    from medanon.cli.library import translate
    assert "--features vgg19 --features-weights PATH" in translate(HOW_TO_GET, FLAGS)     # the command's words
    help_text = CliRunner().invoke(cli, ["anonymize", "ksalsa", "--help"]).output
    assert "--features-weights" in help_text                                  # the option the error names exists


def test_k2_warns_and_names_k_salsas_measured_leak():
    """k = 2 is weak for every method (the paper's Table 3); for k-SALSA the warning adds what the reproduction
    measured on phantoms: it leaked more than k-Centroid at k = 2."""
    for method, extra in (("ksalsa", True), ("kcentroid", False), ("kpixel", False)):
        with pytest.warns(UserWarning, match="k = 2: no method gave strong protection") as got:
            KSameConfig(method=method, k=2).validate()
        assert any("leaked more than k-Centroid" in str(w.message) for w in got) is extra
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KSameConfig(method="ksalsa", k=5).validate()                     # no warning at k = 5


def test_a_source_without_patient_ids_is_refused_by_the_k_same_family(tmp_path):
    """APTOS, or a labels CSV without a patient column, makes every image a "patient" of its own: k images could
    be fewer than k people, so the k-Same family refuses it, through the library and the command; a patient
    column that names each image states that every image is a different person, and is accepted."""
    import csv

    import medanon
    from medanon.errors import DataError

    data = tmp_path / "generic"
    root = generate(PhantomConfig(patients=4, per_patient=2, size=16, workers=1), data / "ph", progress=False)
    with open(root / "labels.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(data / "meta.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "grade", "as_patient"])
        for r in rows:
            w.writerow([f"ph/{r['image']}", r["grade"], r["image"]])
    opts = {"layout": "generic", "labels_csv": data / "meta.csv", "image_col": "file", "label_cols": "grade"}
    with pytest.warns(UserWarning, match="no patient column"):
        ds = medanon.open_dataset(data, size=16, **opts)
    assert not any(r.patient_known for r in ds.records)
    for method in (medanon.anonymize.kpixel, medanon.anonymize.kpca):
        with pytest.raises(DataError, match=r"needs patient ids, and .* has none") as e:
            method(ds, k=2)
        assert "patient_col=" in e.value.fix
    r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "kpixel", str(data), "--layout", "generic",
                                 "--labels", str(data / "meta.csv"), "--image-col", "file", "--label-cols",
                                 "grade", "--size", "16", "--k", "2", "--out", str(tmp_path / "rel")])
    assert r.exit_code == 1 and "needs patient ids" in r.output and "--patient-col" in r.output, r.output
    assert not (tmp_path / "rel").exists() and not (tmp_path / "rel.partial").exists()
    ds = medanon.open_dataset(data, size=16, patient_col="as_patient", **opts)
    medanon.anonymize.kpixel(ds, k=2).save(tmp_path / "rel", progress=False)


def test_the_statement_names_what_released_labels_and_trained_models_leave_unprotected():
    cfg = KSameConfig(method="kpixel", k=3)
    bare = privacy_statement(cfg, None)["not_protected"]
    assert not any("_counts" in s or "memorised" in s for s in bare)
    told = privacy_statement(cfg, None, labels=["grade", "sex", "age"], uses_models=True)["not_protected"]
    assert any(s.startswith("each record's grade_counts, sex_counts: how many of its patients") for s in told)
    assert any(s.startswith("each record's mean age") for s in told)
    assert "sex, age: released (sensitive), protected only by the aggregation above" in told
    assert any("what the models (codec, feature network) memorised" in s for s in told)


def test_the_guarantee_is_per_release_and_several_releases_of_the_same_patients_are_named():
    """Two k-Same releases of one patient set can be differenced (benchmarks/differencing.py): the statement
    assumes one release and lists the others as unprotected; the evaluation notes releases sharing people."""
    from types import SimpleNamespace

    from medanon.anonymize.gmia import GMIAConfig
    from medanon.anonymize.gmia_release import gmia_privacy
    from medanon.evaluate.cautions import shared_people

    s = privacy_statement(KSameConfig(method="kcentroid", k=5), None)
    assert any(a.startswith("this is the only release of these patients' images") for a in s["assumptions"])
    assert s["not_protected"][0].startswith("other releases of the same patients")
    assert "k-SALSA §4.5" in s["not_guaranteed"] and "not the paper's classifier" in s["not_guaranteed"]
    g = gmia_privacy(GMIAConfig(), {})
    assert any(n.startswith("linking by recomputation") for n in g["not_protected"])
    assert any("shipped checkpoints (the defaults) are public" in a for a in g["assumptions"])

    rel = lambda name, sources: SimpleNamespace(name=name, sources=sources)   # noqa: E731
    assert shared_people([rel("a", [[0, 1], [2, 3]]), rel("b", [[4, 5]]), rel("c", None)]) == []
    assert shared_people([rel("a", [[0, 1], [2, 3]]), rel("b", [[3, 5]]), rel("c", [[9]])]) == ["a", "b"]


def test_releases_made_with_the_public_shipped_models_are_named_as_recomputable():
    """GMIA and GAN-Inverted are deterministic per image: made with medanon's shipped checkpoints (public), anyone
    with a candidate image recomputes its record. The evaluation says so; a private model, or a method whose records
    need more than one candidate (k-Same) or secret randomness, is not named."""
    from types import SimpleNamespace

    from medanon.evaluate.cautions import public_models
    from medanon.models_shipped import SHIPPED

    sha = SHIPPED.__getitem__                              # the digests a manifest records, wherever the copy was

    shipped = {"codec": sha("cotrained-map-fundus64.pt"), "identity": sha("identity-fundus64.pt"),
               "utility": sha("classifier-grade-fundus64.pt")}
    rel = lambda name, method, models: SimpleNamespace(name=name, method=method, manifest={"models": models})  # noqa: E731
    named = public_models([rel("g", "gmia", shipped), rel("own", "gmia", {**shipped, "codec": "ab" * 32}),
                           rel("k", "kcentroid", {"codec": shipped["codec"]})])
    assert named == {"g": ["classifier-grade-fundus64.pt", "cotrained-map-fundus64.pt", "identity-fundus64.pt"]}
