"""The Python API: every method through ``medanon.anonymize.<method>(ds, ...)`` on a 32 px phantom, saved through
the release writer and audited; the plan holds no images; privacy arguments are keyword-only; the library warns and
names parameters; the API and the CLI write the same release."""

import inspect
import json
import math
import pydoc
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

import medanon
from medanon.anonymize.privacy import CalibrationOverlap, DataDependentRelease, NoFormalGuarantee, NotAnonymised
from medanon.checkpoint import save_checkpoint
from medanon.cli import cli
from medanon.config import to_dict
from medanon.errors import ConfigError
from medanon.models.classifier import ResNet, ResNetConfig, save_classifier
from medanon.models.encoder import Encoder
from medanon.models.glow import Glow, GlowConfig
from medanon.models.identity import IdentityConfig, IdentityNet, save_identity
from medanon.models.stylegan import Generator, StyleGANConfig
from medanon.release import read_release
from medanon.runtime import files_digest
from medanon.train.flow import save_flow

SIZE = 32


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A 32 px fundus phantom and tiny random checkpoints for every model a method needs."""
    d = tmp_path_factory.mktemp("api")
    data = medanon.make_phantom(d / "fundus", patients=12, per_patient=2, size=SIZE, seed=5)
    torch.manual_seed(0)
    gcfg = StyleGANConfig(resolution=SIZE, channels=3, z_dim=16, w_dim=16, channel_base=128, channel_max=16)
    G = Generator.from_config(gcfg)
    E = Encoder(SIZE, 3, G.num_ws, G.w_dim, iterative=True, channel_base=128, channel_max=16, head_dim=16)
    save_checkpoint(d / "restyle.pt", kind="restyle-encoder", state={"G": G.state_dict(), "E": E.state_dict()},
                    config={"generator": to_dict(gcfg), "encoder": dict(E.kwargs), "codec": {"iterations": 1}})
    small = ResNetConfig(in_channels=3, widths=(8, 16), blocks=(1, 1))
    save_identity(d / "identity.pt", IdentityNet(IdentityConfig(small, embed_dim=8, image_size=SIZE)))
    save_classifier(d / "grade.pt", ResNet(small), extra={"label": "grade", "train_config": {"image_size": SIZE}})
    flow = Glow(GlowConfig(resolution=SIZE, channels=3, levels=2, depth=1, hidden=8))
    flow.train()
    flow.log_prob(torch.rand(8, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0)) - 0.5)   # data init
    ds = medanon.open_dataset(data, size=SIZE)
    trained_on = {"source": files_digest([r.path for r in ds.records], root=data), "subset": "all"}
    save_flow(d / "flow.pt", flow.eval(), extra={"data": trained_on})     # as if trained on this very data
    return {"dir": d, "data": data, "ds": ds}


def build(method: str, w: dict):
    """One release per method, with tiny settings; privacy arguments named as a user must."""
    A, ds, d = medanon.anonymize, w["ds"], w["dir"]
    return {
        "kpixel": lambda: A.kpixel(ds, k=3),
        "kpca": lambda: A.kpca(ds, k=3, pca_components=4),
        "kcentroid": lambda: A.kcentroid(ds, k=3, codec=d / "restyle.pt", views=2),
        "ksalsa": lambda: A.ksalsa(ds, k=4, codec=d / "restyle.pt", steps=2, batch=2),
        "inverted": lambda: A.inverted(ds, codec=d / "restyle.pt"),
        "gmia": lambda: A.gmia(ds, model=d / "restyle.pt", identity=d / "identity.pt", utility=d / "grade.pt",
                               steps=2, batch=8),
        "snow": lambda: A.snow(ds, p=0.3),
        "vs_snow": lambda: A.vs_snow(ds, p=0.5, vessels="dataset"),
        "dpglow": lambda: A.dpglow(ds, epsilon=10.0, flow=d / "flow.pt"),
        "ldp_image": lambda: A.ldp_image(ds, epsilon=1e2, per_element=True, clip_box="calibrated", calibrate_on=ds),
    }[method]()


MIN_PEOPLE = {"kpixel": 3, "kpca": 3, "kcentroid": 3, "ksalsa": 4}


@pytest.mark.parametrize("method", medanon.anonymize.METHODS)
def test_every_method_saves_an_audited_release(tmp_path, world, method):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                       # weak budgets, k < 5, inverted: asserted elsewhere
        rel = build(method, world)
        assert isinstance(rel, medanon.Release) and not rel.summary and rel.path is None
        out = rel.save(tmp_path / "rel", mapping=tmp_path / "private" / "map.json", progress=False)
    manifest, rows = read_release(out)
    assert manifest["method"] == method.replace("_", "-") == rel.method
    assert manifest["privacy"] == json.loads(json.dumps(rel.privacy))
    assert manifest["labels"] == ["grade"] == rel.labels and manifest["phantom"]
    assert rel.path == out and rel.summary
    people = [int(r["n_people"]) for r in rows]
    if method in MIN_PEOPLE:                                  # k-anonymous: every record >= k people, all present
        assert min(people) >= MIN_PEOPLE[method] and manifest["counts"]["people"] == 12
    else:                                                     # one record per image
        assert len(rows) == len(world["ds"]) and set(people) == {1}
    assert manifest["counts"]["sources"] == len(world["ds"])  # distinct images, however many views each record has
    report = medanon.audit(rel, source=world["ds"])           # the mapping the release was saved with
    assert report.passed, report.format()
    assert any("mapping" in c.name for c in report.checks)


def test_a_release_is_a_plan_until_saved(tmp_path, world):
    rel = medanon.anonymize.kpixel(world["ds"], k=4)
    assert rel.privacy["k"] == 4 and rel.params["k"] == 4 and not list(tmp_path.iterdir())
    first = list(rel.images(limit=1))
    assert len(first) == 1 and first[0].shape == (3, SIZE, SIZE) and -1 <= first[0].min() <= first[0].max() <= 1
    assert len(list(rel.images(limit=None))) == 3             # 12 patients, k = 4: three records
    assert not list(tmp_path.iterdir())                       # still nothing on disk
    out = rel.save(tmp_path / "k4", progress=False)
    saved = sorted(np.asarray(Image.open(p), np.int16).sum() for p in (out / "images").iterdir())
    again = sorted(int(np.clip(np.rint((im.numpy() + 1) * 127.5), 0, 255).astype(np.int16).sum())
                   for im in rel.images(limit=None))
    assert len(saved) == 3 and np.allclose(saved, again, atol=SIZE * SIZE * 3)   # same images, to rounding
    assert rel.grid(2).shape == (3, SIZE, 2 * SIZE)


def test_privacy_arguments_are_keyword_only_and_required(world):
    ds, A = world["ds"], medanon.anonymize
    for call in (lambda: A.kpixel(ds, 5), lambda: A.kpixel(ds), lambda: A.ldp_image(ds, 10.0),
                 lambda: A.ldp_image(ds), lambda: A.snow(ds, 0.1), lambda: A.dpglow(ds, flow="x")):
        with pytest.raises(TypeError):
            call()
    for fn in (A.kpixel, A.kpca, A.kcentroid, A.ksalsa, A.dpglow, A.ldp_image, A.snow, A.vs_snow):
        params = inspect.signature(fn).parameters
        assert [p for p in params.values() if p.kind is not p.KEYWORD_ONLY] == [params["ds"]]
        privacy = params.get("k") or params.get("epsilon") or params.get("p")
        assert privacy.default is inspect.Parameter.empty, fn.__name__


def test_the_library_refuses_and_warns_in_parameter_names(tmp_path, world):
    ds, A = world["ds"], medanon.anonymize
    with pytest.raises(ConfigError, match="stratify='colour'"):
        A.kpixel(ds, k=3, stratify="colour")
    with pytest.raises(ConfigError, match="clip=False"):
        A.ldp_image(ds, epsilon=10.0, clip=False, calibrate_on=ds)
    with pytest.raises(ConfigError, match="epsilon"):
        A.ldp_image(ds, epsilon=0.0, calibrate_on=ds)
    with pytest.raises(ConfigError, match="ablation='style-only' fixes lam"):
        A.ksalsa(ds, k=3, codec=world["dir"] / "restyle.pt", lam=0.5, ablation="style-only")
    with pytest.raises(ConfigError, match="open the dataset with size=32"):
        A.kcentroid(medanon.open_dataset(world["data"], size=64), k=3, codec=world["dir"] / "restyle.pt")
    with pytest.warns(DataDependentRelease, match="no formal guarantee"):
        A.ldp_image(ds, epsilon=math.inf, clip_box="calibrated")     # no calibrate_on: the released images' bounds
    with pytest.warns(NoFormalGuarantee, match="noise_seed=3"):
        rel = A.ldp_image(ds, epsilon=10.0, noise_seed=3)
    assert "TESTING ONLY" in rel.privacy["noise_source"] and rel.privacy["guarantee"].startswith("none")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel.save(tmp_path / "seeded", progress=False)
    assert read_release(tmp_path / "seeded")[0]["privacy"] == rel.privacy
    with pytest.warns(CalibrationOverlap):                   # releasing the flow's own training data
        A.dpglow(ds, epsilon=10.0, flow=world["dir"] / "flow.pt")
    with pytest.warns(NotAnonymised, match="NOT anonymised"):
        A.inverted(ds, codec=world["dir"] / "restyle.pt").images(limit=1)


def test_api_and_cli_write_the_same_release(tmp_path, world):
    rel = medanon.anonymize.kpca(world["ds"], k=3, pca_components=4, seed=2)
    rel.save(tmp_path / "api", progress=False)
    r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "kpca", "--data", str(world["data"]), "--size",
                                 str(SIZE), "--k", "3", "--pca-components", "4", "--seed", "2", "--out",
                                 str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    ma, mc = read_release(tmp_path / "api")[0], read_release(tmp_path / "cli")[0]
    for key in ("method", "params", "privacy", "labels", "seeds", "models", "counts"):
        assert ma[key] == mc[key], key
    pixels = [sorted(np.asarray(Image.open(p)).tobytes() for p in (tmp_path / n / "images").iterdir())
              for n in ("api", "cli")]
    assert pixels[0] == pixels[1]


def test_open_dataset_and_help_show_documented_signatures(world):
    ds = medanon.open_dataset(world["data"], size=SIZE, channels=1)
    assert ds.channels == 1 and ds.load(0)["image"].shape == (1, SIZE, SIZE)
    with pytest.raises(ConfigError, match="labels_csv"):
        medanon.open_dataset(world["data"], image_col="file")
    text = pydoc.render_doc(medanon.anonymize.ksalsa, renderer=pydoc.plaintext)
    assert "ksalsa(ds: 'DataLike', *, k: 'int', codec" in text and "-> 'Release'" in text
    assert "Example" in text and ">>> rel = medanon.anonymize.ksalsa" in text
    for name in ("gmia", "snow", "dpglow", "ldp_image"):      # modules that are also the API functions
        module = getattr(medanon.anonymize, name)
        assert inspect.ismodule(module) and callable(module) and "ds" in inspect.signature(module).parameters
    assert inspect.ismodule(medanon.evaluate) and list(inspect.signature(medanon.evaluate).parameters)[:2] == \
        ["real", "releases"]


def test_evaluate_returns_a_typed_result(tmp_path, world):
    from conftest import smallest_eval_config
    from medanon.data.dataset import subset
    from medanon.data.splits import split_patients, write_splits_csv

    ds = world["ds"]
    split = split_patients(ds.records, val=0.25, test=0.25, stratify="", seed=0)
    write_splits_csv(tmp_path / "splits.csv", ds.records, split)
    train = subset(ds, [i for i, r in enumerate(ds.records) if split[r.patient_id] == "train"])
    rels = []
    for k in (2, 3):
        rel = medanon.anonymize.kpixel(train, k=k)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rel.save(tmp_path / f"k{k}", mapping=tmp_path / f"k{k}.mapping.json", progress=False)
        rels.append(rel)
    cfg = smallest_eval_config(SIZE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = medanon.evaluate(real=ds, releases=rels, config=cfg, splits=tmp_path / "splits.csv",
                               out=tmp_path / "report", progress=False)
    assert isinstance(res, medanon.EvaluationResult) and res.phantom
    assert [r["name"] for r in res.releases] == ["k2", "k3"] and res.release("k3")["method"] == "kpixel"
    assert res.to_dict()["releases"] == res.releases and json.dumps(res.to_dict(), default=str)
    html = res.to_html(tmp_path / "elsewhere" / "report.html")
    assert html.read_text() == (tmp_path / "report" / "report.html").read_text() and "k3" in html.read_text()
    # what it read, wherever it lies (an opened dataset's image folders, the splits, the mappings) is never written
    read = {p.resolve() for p in res.reads}
    assert {ds.records[0].path.resolve().parent, (tmp_path / "splits.csv").resolve(),
            (tmp_path / "k2.mapping.json").resolve(), (tmp_path / "k3").resolve()} <= read


def test_ksame_commands_take_config_files_and_overrides(tmp_path, world):
    (tmp_path / "k.yaml").write_text("k: 6\nbatch: 2\n")

    def k_of(*extra):
        out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "kpixel", str(world["data"]), "--size", str(SIZE),
                                     "--out", str(out), *extra])
        assert r.exit_code == 0, r.output
        return read_release(out)[0]["params"]["k"]

    r = CliRunner().invoke(cli, ["anonymize", "kpixel", str(world["data"]), "--out", str(tmp_path / "no-k")])
    assert r.exit_code == 2 and "--k is required" in r.output    # the privacy claim has no default
    assert k_of("--config", str(tmp_path / "k.yaml")) == 6  # the file over the default
    assert k_of("--config", str(tmp_path / "k.yaml"), "--set", "k=4") == 4   # --set over the file
    assert k_of("--config", str(tmp_path / "k.yaml"), "--k", "3") == 3   # an explicit option over the file
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", str(world["data"]), "--set", "k=4", "--k", "3", "--out",
                                 str(tmp_path / "twice")])
    assert r.exit_code == 1 and "k set twice" in r.output    # --set and its own option: which was meant is unclear
    r = CliRunner().invoke(cli, ["anonymize", "kpixel", str(world["data"]), "--set", "colour=1", "--out",
                                 str(tmp_path / "bad")])
    assert r.exit_code == 1 and "unknown key" in r.output and "colour" in r.output


def test_kpca_basis_from_separate_data(tmp_path, world):
    public = medanon.open_dataset(medanon.make_phantom(tmp_path / "public", patients=4, size=SIZE, seed=9), size=SIZE)
    rel = medanon.anonymize.kpca(world["ds"], k=3, pca_components=3, pca_basis=public)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel.save(tmp_path / "rel", progress=False)
    assert rel.privacy["pca_basis"].startswith("fitted on separate data")
    r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "kpca", str(world["data"]), "--size", str(SIZE),
                                 "--k", "3", "--pca-components", "3", "--basis-from", str(tmp_path / "public"),
                                 "--out", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    assert read_release(tmp_path / "cli")[0]["privacy"]["pca_basis"] == rel.privacy["pca_basis"]


def test_kpca_records_and_warns_the_components_its_basis_could_give(tmp_path, world):
    from medanon.anonymize.averaging import FewerComponents

    public = medanon.open_dataset(medanon.make_phantom(tmp_path / "public", patients=3, per_patient=1, size=SIZE,
                                                       seed=9), size=SIZE)
    rel = medanon.anonymize.kpca(world["ds"], k=3, pca_components=50, pca_basis=public)
    with pytest.warns(FewerComponents, match=r"pca_components=50: a basis of 3 image\(s\) .* only 2 principal"):
        rel.save(tmp_path / "rel", progress=False)
    manifest = read_release(tmp_path / "rel")[0]
    assert manifest["params"]["pca"]["components"] == 50                 # the setting, as asked
    assert manifest["privacy"]["pca_components"] == {"components": 2, "asked": 50, "fit_images": 3}
    assert medanon.audit(tmp_path / "rel").passed


def test_kpca_refuses_a_basis_that_holds_the_released_images(tmp_path, world):
    """A basis "separate" in name only would make the statement claim what is not true."""
    import shutil

    shutil.copytree(world["data"], tmp_path / "copy")
    x = torch.stack([world["ds"].load(i)["image"] for i in range(len(world["ds"]))])
    pids = [r.patient_id for r in world["ds"].records]
    in_memory = medanon.data.as_dataset(x, patient_ids=pids, modality="fundus", value_range=(-1, 1))
    for basis in (world["ds"], medanon.open_dataset(tmp_path / "copy", size=SIZE), in_memory):
        with pytest.raises(ConfigError, match="holds 24 of the images being released"):
            medanon.anonymize.kpca(world["ds"], k=3, pca_components=3, pca_basis=basis).images(limit=1)
    with pytest.raises(ConfigError, match="holds 24 of the images being released"):    # both in memory
        medanon.anonymize.kpca(x, k=3, pca_components=3, pca_basis=in_memory, patient_ids=pids,
                               value_range=(-1, 1)).images(limit=1)
    from PIL import Image

    shutil.copytree(world["data"], tmp_path / "resaved")     # the same images in other files: re-saved, enlarged
    for i, f in enumerate(sorted((tmp_path / "resaved" / "images").iterdir())):
        im = Image.open(f)
        im.load()
        (im.resize((im.width * 3, im.height * 3), Image.LANCZOS) if i % 2 else im).save(f, compress_level=1)
    r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "kpca", str(world["data"]), "--size", str(SIZE),
                                 "--k", "3", "--pca-components", "3", "--basis-from", str(tmp_path / "resaved"),
                                 "--out", str(tmp_path / "cli")])
    assert r.exit_code == 1 and "holds 24 of the images being released" in r.output, r.output
    assert not (tmp_path / "cli").exists()


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    """The first block of README.md's "Python API" section, as a user would paste it (the second evaluates)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## Python API"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    code = code[:code.index("```")]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    manifest, rows = read_release(tmp_path / "api-demo" / "k5")
    assert manifest["method"] == "kpixel" and min(int(r["n_people"]) for r in rows) >= 5
    assert (tmp_path / "api-demo" / "private" / "k5.json").is_file() and (tmp_path / "api-demo" / "snow").is_dir()


def test_dp_commands_take_config_files_and_overrides(tmp_path, world):
    (tmp_path / "ldp.yaml").write_text("epsilon: 8\nbatch: 5\n")
    base = ["--device", "cpu", "anonymize", "ldp-image", str(world["data"]), "--size", str(SIZE)]
    r = CliRunner().invoke(cli, [*base, "--config", str(tmp_path / "ldp.yaml"), "--set", "per_element=true",
                                 "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    privacy = read_release(tmp_path / "a")[0]["privacy"]
    assert privacy["epsilon_element"] == 8 and privacy["epsilon_image"] == 8 * 3 * SIZE * SIZE
    r = CliRunner().invoke(cli, [*base, "--config", str(tmp_path / "ldp.yaml"), "--epsilon", "2", "--out",
                                 str(tmp_path / "b")])
    assert r.exit_code == 0 and read_release(tmp_path / "b")[0]["privacy"]["epsilon_image"] == 2
    r = CliRunner().invoke(cli, [*base, "--out", str(tmp_path / "c")])            # the budget has no default
    assert r.exit_code == 1 and "no epsilon given" in r.output and "--epsilon" in r.output
    assert not (tmp_path / "c").exists()


def test_a_loaded_flow_brings_its_stored_calibration_and_training_record(world, tmp_path):
    """A flow passed as a loaded codec decides as its path does: the clip box from the statistics stored with it
    (not from the released images) and the warning that the release is its training data."""
    from medanon.anonymize.dpglow import calibrate_latent
    from medanon.train.flow import load_flow, save_flow

    codec, _, blob = load_flow(world["dir"] / "flow.pt")
    other = torch.rand(6, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(9)) * 2 - 1
    path = save_flow(tmp_path / "calibrated.pt", codec.flow, calibration=calibrate_latent(codec, other),
                     extra=blob["extra"])
    loaded, stored, _ = load_flow(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        by_object = medanon.anonymize.dpglow(world["ds"], epsilon=10.0, flow=loaded, clip_box="calibrated")
    assert any(issubclass(w.category, CalibrationOverlap) for w in caught)
    assert not any("holds no calibration statistics" in str(w.message) for w in caught)
    with pytest.warns(CalibrationOverlap):
        by_path = medanon.anonymize.dpglow(world["ds"], epsilon=10.0, flow=path, clip_box="calibrated")
    assert by_object.params["calibration_sha256"] == by_path.params["calibration_sha256"] == stored.checksum()
    # load_flow's whole triple, as its docs offer it, decides and is recorded as its codec is (the file named)
    with pytest.warns(CalibrationOverlap):
        by_triple = medanon.anonymize.dpglow(world["ds"], epsilon=10.0, flow=load_flow(path), clip_box="calibrated")
    assert by_triple.params["calibration_sha256"] == stored.checksum()
    assert by_triple.params["model_files"] == by_object.params["model_files"] == \
        {"flow": {"file": "calibrated.pt", "chosen": "loaded"}}


def test_calibration_streams_and_equals_the_whole_tensor_one(world):
    """Calibrated clip boxes are running min/max over batches: never every image in memory, the same statistics."""
    from medanon.anonymize.dpglow import calibrate_latent
    from medanon.anonymize.ldp_image import calibrate_pixels
    from medanon.api.dp import _batches, _calibrate, load_flow_for

    ds = world["ds"]
    images = ds.tensors(progress=False)[0]
    assert _calibrate(_batches(ds, batch=5)).checksum() == calibrate_pixels(images).checksum()
    codec = load_flow_for(world["dir"] / "flow.pt")[0]
    assert _calibrate(_batches(ds, batch=7), codec=codec).checksum() == calibrate_latent(codec, images).checksum()


def test_an_interrupted_save_resumes(tmp_path, world, interrupted_after):
    rel = medanon.anonymize.ldp_image(world["ds"], epsilon=5.0, batch=4)
    with interrupted_after(6), pytest.raises(KeyboardInterrupt):
        rel.save(tmp_path / "rel", progress=False)
    assert not (tmp_path / "rel").exists() and (tmp_path / "rel.partial").is_dir() and rel.path is None
    rel.save(tmp_path / "rel", progress=False)
    assert rel.summary["resumed_records"] == 5 and rel.summary["written"] == len(world["ds"]) - 5
    assert len(read_release(tmp_path / "rel")[1]) == len(world["ds"]) and rel.path == tmp_path / "rel"


def test_a_preview_of_a_noisy_release_is_said_to_be_another_release(world):
    """images() before save() of a method with secret randomness draws its own: a second, independent release of
    the same images, which the statement of the saved one does not cover; said once per preview, and not for a
    deterministic method."""
    from medanon.anonymize.privacy import LabelHomogeneity, PrivacyWarning

    noisy = medanon.anonymize.ldp_image(world["ds"], epsilon=1e2, per_element=True, clip_box="public")
    with pytest.warns(PrivacyWarning, match="a second release of these images"):
        noisy.images(limit=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        warnings.simplefilter("ignore", LabelHomogeneity)    # what the clusters hold, not a second draw
        noisy.images(limit=2)                                # the same preview, kept: no new draw
        medanon.anonymize.kpixel(world["ds"], k=3).images(limit=1)
        medanon.anonymize.kcentroid(world["ds"], k=3, codec=world["dir"] / "restyle.pt").images(limit=1)
    with pytest.warns(PrivacyWarning, match="latent views"):              # secret view noise, drawn again
        medanon.anonymize.kcentroid(world["ds"], k=3, codec=world["dir"] / "restyle.pt", views=2).images(limit=1)


def test_a_noisy_release_saved_twice_is_said_to_be_two_releases(world, tmp_path, monkeypatch):
    """A second save() of a release with secret randomness draws it again: two different releases of the same
    images (checked: their pixels differ), warned. A seeded release gives the same images: no warning. After
    evaluate() of an unsaved release (saved to a temporary folder), a save() is told that the report measured
    another draw."""
    from medanon.anonymize.privacy import PrivacyWarning
    from medanon.evaluate import harness

    def as_set(images):
        return sorted(im.numpy().tobytes() for im in images)

    rel = medanon.anonymize.ldp_image(world["ds"], epsilon=1e2, per_element=True, clip_box="public")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        rel.save(tmp_path / "a", progress=False)
        first = rel.images(None)
    with pytest.warns(PrivacyWarning, match=r"already saved to .*a; saving it again draws new secret randomness"):
        rel.save(tmp_path / "b", progress=False)
    assert as_set(first) != as_set(rel.images(None))
    with pytest.warns(PrivacyWarning, match="written over the first"):
        rel.save(tmp_path / "b", progress=False, overwrite=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)      # refused before any draw: nothing to warn of
        with pytest.raises(medanon.errors.OutputExistsError):
            rel.save(tmp_path / "b", progress=False)

    seeded = medanon.anonymize.snow(world["ds"], p=0.3, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        warnings.simplefilter("ignore", medanon.anonymize.privacy.NoFormalGuarantee)   # the seed's, not a 2nd draw
        seeded.save(tmp_path / "s1", progress=False)
        once = seeded.images(None)
        seeded.save(tmp_path / "s2", progress=False)
    assert as_set(once) == as_set(seeded.images(None))     # (file order is random)

    def report_only(real, specs, out, **_):                 # the harness's run, not its measurements
        out.mkdir(parents=True)
        (out / "report.html").write_text("<html></html>")
        (out / "report.json").write_text(json.dumps({"releases": [{"name": s.path.name} for s in specs]}))

    monkeypatch.setattr(harness, "evaluate", report_only)
    fresh = medanon.anonymize.snow(world["ds"], p=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # the evaluation's own save: not a second release
        res = medanon.evaluate(real=world["ds"], releases=[fresh], preset="tiny", progress=False)
    assert res.releases == [{"name": "snow-0"}] and fresh.path is None
    with pytest.warns(UserWarning, match="evaluate\\(\\) measured another draw"):
        fresh.save(tmp_path / "snow", progress=False)


def test_a_folder_is_opened_at_the_size_of_the_model_that_reads_it(world):
    """A folder given by path was opened at 64 px whatever the model: a 32 px codec refused it, with a fix that
    meant opening it by hand. It is opened again at the codec's side (the default model, chosen by the folder's
    modality, needs it opened once first)."""
    rel = medanon.anonymize.kcentroid(world["data"], k=3, codec=world["dir"] / "restyle.pt")
    assert rel.dataset.size == SIZE and rel.images(limit=1).shape[-1] == SIZE
    assert medanon.anonymize.kpixel(world["data"], k=3).dataset.size == 64       # no model: the CPU default


def test_a_network_given_in_memory_is_recorded_by_its_weights(world):
    """A codec built in memory has no checkpoint file: the manifest recorded nothing of it. Its weights' sha256
    is recorded, the same for the same weights and another for others."""
    from medanon.checkpoint import weights_sha256
    from medanon.codecs.stylegan import StyleGANCodec
    from medanon.models.encoder import Encoder
    from medanon.models.stylegan import Generator

    def codec(seed):
        torch.manual_seed(seed)
        G = Generator(z_dim=16, w_dim=16, img_resolution=SIZE, img_channels=3, channel_base=128, channel_max=16)
        E = Encoder(SIZE, 3, G.num_ws, G.w_dim, iterative=False, channel_base=128, channel_max=16, head_dim=16)
        return StyleGANCodec(G, E)

    models = [medanon.anonymize.kcentroid(world["ds"], k=3, codec=codec(s)).models for s in (0, 0, 1)]
    (key, digest), = models[0].items()
    assert key.endswith(":weights") and len(digest) == 64 and models[1] == models[0] and models[2][key] != digest
    assert digest == weights_sha256(codec(0)) and weights_sha256(object()) is None
    from_file = medanon.anonymize.kcentroid(world["ds"], k=3, codec=world["dir"] / "restyle.pt").models
    assert not any(k.endswith(":weights") for k in from_file)                   # a file: its own sha256


def test_a_resume_that_reads_the_images_otherwise_is_refused(tmp_path, world, interrupted_after):
    """The size, channels and crop the images were read with were not part of a k-Same or LDP release's settings: a
    save interrupted at 32 px and resumed at 64 px mixed records of both sides (and the audit passed it)."""
    from medanon.errors import ConfigError

    with interrupted_after(2), pytest.raises(KeyboardInterrupt):
        medanon.anonymize.kpixel(world["ds"], k=3).save(tmp_path / "rel", progress=False)
    assert medanon.anonymize.kpixel(world["ds"], k=3).params["size"] == SIZE
    with pytest.raises(ConfigError, match=r"other settings.*size 32 -> 64"):
        medanon.anonymize.kpixel(medanon.open_dataset(world["data"], size=64), k=3).save(tmp_path / "rel",
                                                                                          progress=False)
    # what else the records depend on, kept private: k-Same-PCA's separate basis, a testing noise seed
    basis = [medanon.data.as_dataset(torch.rand(6, 3, SIZE, SIZE) * 2 - 1, value_range=(-1, 1)) for _ in range(2)]
    cases = [(lambda b: medanon.anonymize.kpca(world["ds"], k=3, pca_components=3, pca_basis=b), basis),
             (lambda seed: medanon.anonymize.ldp_image(world["ds"], epsilon=1e3, noise_seed=seed), (3, 4))]
    for i, (make, (first, second)) in enumerate(cases):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with interrupted_after(2), pytest.raises(KeyboardInterrupt):
                make(first).save(tmp_path / f"r{i}", progress=False)
            with pytest.raises(ConfigError, match="interrupted release of other sources"):
                make(second).save(tmp_path / f"r{i}", progress=False)
            make(first).save(tmp_path / f"r{i}", progress=False)                   # the same: resumed


def test_gmia_refuses_settings_of_a_loss_it_does_not_optimise(world):
    """losses='ut' with identity= or margin=: nothing uses them, and the user would believe the identity pushed."""
    d = world["dir"]
    for kw, named in (({"identity": d / "identity.pt"}, "identity="), ({"margin": 0.5}, "margin="),
                      ({"lambda_id": 2.0}, "lambda_id=")):
        with pytest.raises(ConfigError, match=f"losses='ut' does not optimise the loss of {named}"):
            medanon.anonymize.gmia(world["ds"], model=d / "restyle.pt", utility=d / "grade.pt", losses="ut", **kw)
    with pytest.raises(ConfigError, match="losses='id' does not optimise the loss of utility="):
        medanon.anonymize.gmia(world["ds"], model=d / "restyle.pt", identity=d / "identity.pt",
                               utility=d / "grade.pt", losses="id")


def test_a_release_evaluated_without_its_mapping_is_warned(world, tmp_path, monkeypatch):
    """A saved release whose mapping lies elsewhere than ``<release>.mapping.json`` (as the README's examples name
    them) lost its membership, linkability and singling-out rows with one note among many: it is warned, naming the
    argument; with the mapping given, or beside the release, it is not."""
    from medanon.evaluate import harness
    from medanon.evaluate.inputs import NoMapping

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(harness, "evaluate", stop)          # what happens before the evaluation is what is tested
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        medanon.anonymize.kpixel(world["ds"], k=3).save(tmp_path / "k3", mapping=tmp_path / "private-k3.json")
    with pytest.warns(NoMapping, match=r"release k3: no private mapping given \(mappings=\{'k3': FILE\}\)"), \
            pytest.raises(Stop):
        medanon.evaluate(real=world["ds"], releases=[tmp_path / "k3"], preset="tiny", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoMapping)
        with pytest.raises(Stop):
            medanon.evaluate(real=world["ds"], releases=[tmp_path / "k3"], preset="tiny", progress=False,
                             mappings={"k3": tmp_path / "private-k3.json"})
        (tmp_path / "private-k3.json").rename(tmp_path / "k3.mapping.json")
        with pytest.raises(Stop):
            medanon.evaluate(real=world["ds"], releases=[tmp_path / "k3"], preset="tiny", progress=False)
