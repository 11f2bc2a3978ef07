"""An ε-LDP release states no guarantee when its mechanism depends on the released images (a clip box calibrated
on them, a flow trained on them), and the default (exact) noise is the noise the bound needs."""

import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
import torch

import medanon
from medanon.anonymize.ldp import EXACT_CLAUSE, GRID_STEPS, ClipCalibration, LaplaceMechanism
from medanon.anonymize.privacy import CalibrationOverlap, DataDependentRelease, NoFormalGuarantee
from medanon.config import PhantomConfig
from medanon.data.layouts import scan
from medanon.models.glow import Glow, GlowCodec, GlowConfig
from medanon.phantoms.generate import generate
from medanon.runtime import files_digest
from medanon.train.flow import save_flow


@pytest.fixture(scope="module")
def phantoms(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ph")
    made = [generate(PhantomConfig(modality="xray", patients=4, per_patient=2, size=16, workers=1, seed=s),
                     root / f"seed{s}", progress=False) for s in (3, 4)]
    return made[0], made[1]


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def test_a_box_calibrated_on_the_released_images_withdraws_the_guarantee(phantoms):
    data, other = phantoms
    with pytest.warns(DataDependentRelease, match="no formal guarantee"):
        rel = _quiet_but(DataDependentRelease, medanon.anonymize.ldp_image, data, epsilon=50.0,
                         clip_box="calibrated")
    p = rel.privacy
    assert p["guarantee"] == "none: the clip box was calibrated on the released images"
    assert p["epsilon_image"] is None and p["without_guarantee"]["epsilon_image"] == 50.0
    assert p["statement"].startswith("NO FORMAL GUARANTEE") and p["delta"] is None

    # calibrated on other people: the guarantee stands
    rel = _quiet(medanon.anonymize.ldp_image, data, epsilon=50.0, clip_box="calibrated", calibrate_on=other)
    assert rel.privacy["guarantee"] == "epsilon-LDP" and rel.privacy["epsilon_image"] == 50.0


def test_a_calibration_set_holding_released_images_under_other_names_withdraws_it(phantoms, tmp_path):
    data, other = phantoms
    mixed = tmp_path / "mixed"
    shutil.copytree(other, mixed)                            # another folder: other people plus two copied images
    copied = sorted((data / "images").iterdir())[:2]
    for i, f in enumerate(copied):
        shutil.copyfile(f, mixed / "images" / f"renamed{i}.png")
    lines = (mixed / "labels.csv").read_text().splitlines()
    first = lines[1].split(",")
    for i in range(len(copied)):
        lines.append(",".join([f"images/renamed{i}.png", "", f"EXTRA{i}", *first[3:]]))
    (mixed / "labels.csv").write_text("\n".join(lines) + "\n")
    assert len(scan(mixed).records) == 10
    with pytest.warns(CalibrationOverlap, match="2 of the 8 images being released"):
        rel = _quiet_but(CalibrationOverlap, medanon.anonymize.ldp_image, data, epsilon=50.0,
                         clip_box="calibrated", calibrate_on=mixed)
    p = rel.privacy
    assert p["guarantee"] == "none: 2 released images are among the images the clip box was calibrated on"


def test_a_flow_trained_on_the_released_folder_withdraws_the_guarantee(phantoms, tmp_path):
    data, _ = phantoms
    codec = GlowCodec(Glow(GlowConfig(channels=1, resolution=16, levels=2, depth=1, hidden=8)).eval())
    digest = files_digest([r.path for r in scan(data).records], root=data)
    flow = save_flow(tmp_path / "flow.pt", codec.flow,
                     extra={"data": {"source": digest, "modality": "xray", "subset": "all"}})
    with pytest.warns(CalibrationOverlap, match="flow's own training data"):
        rel = _quiet_but(CalibrationOverlap, medanon.anonymize.dpglow, medanon.open_dataset(data, size=16),
                         epsilon=1e4, flow=flow)
    p = rel.privacy
    assert p["guarantee"] == "none: the released images are the flow's own training data"
    assert any("trained on people who are not in this release" in a for a in p["assumptions"])


def test_a_seeded_release_does_not_claim_the_exact_sampler(phantoms):
    data, _ = phantoms
    with pytest.warns(NoFormalGuarantee):
        rel = _quiet_but(NoFormalGuarantee, medanon.anonymize.ldp_image, data, epsilon=50.0, noise_seed=1)
    p = rel.privacy
    assert p["sampler"] == "float" and EXACT_CLAUSE not in p["statement"]
    assert "Mersenne Twister" in p["noise_source"]


def test_the_default_noise_has_the_scale_the_bound_needs():
    """The default path (secret, exact) adds discrete Laplace noise of scale ``grid_scale`` grid steps: its mean
    absolute value and its spread match the pmf, so a mechanism adding less noise than its statement says fails."""
    dims = 4
    mech = _quiet(LaplaceMechanism, ClipCalibration.public_box("pixel", dims), epsilon=dims * GRID_STEPS / 50.0)
    t = mech.grid_scale
    assert t == 50 and mech.sampler == "exact"
    v = torch.zeros(5000, dims, dtype=torch.float64)        # the box's centre: grid step 2048, far from its ends
    steps = ((mech(v) - v) / (mech.width / GRID_STEPS)).round()
    q = math.exp(-1 / t)
    mean_abs = 2 * q / (1 - q * q)                           # E|X| of the discrete Laplace pmf ∝ q^|x|
    n = steps.numel()
    var = 2 * q / (1 - q) ** 2                               # Var(X) = E[X^2]
    assert abs(float(steps.abs().mean()) - mean_abs) < 6 * math.sqrt(var - mean_abs ** 2) / math.sqrt(n)
    assert abs(float(steps.mean())) < 6 * math.sqrt(var / n)
    within = float((steps.abs() <= t).double().mean())       # P(|X| <= t) = 1 - 2 q^(t+1) / (1 + q)
    assert abs(within - (1 - 2 * q ** (t + 1) / (1 + q))) < 0.02


def _quiet_but(keep, fn, *a, **kw):
    """``fn`` with every warning but ``keep`` silenced (the test asserts that one)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", keep)
        return fn(*a, **kw)


def test_flow_training_compares_the_released_people_with_the_flows_training_folder(phantoms, tmp_path):
    """With the flow's training folder given, released images found in it withdraw the guarantee (even when the
    released folder is another one), a folder the flow did not record is refused, and a disjoint one keeps it."""
    from medanon.errors import ConfigError

    data, other = phantoms
    codec = GlowCodec(Glow(GlowConfig(channels=1, resolution=16, levels=2, depth=1, hidden=8)).eval())
    digest = files_digest([r.path for r in scan(other).records], root=other)
    flow = save_flow(tmp_path / "flow.pt", codec.flow,
                     extra={"data": {"source": digest, "modality": "xray", "subset": "train"}})
    mixed = tmp_path / "mixed"                                # the released folder: data plus one of the flow's images
    shutil.copytree(data, mixed)
    shutil.copyfile(sorted((other / "images").iterdir())[0], mixed / "images" / "zz.png")
    lines = (mixed / "labels.csv").read_text().splitlines()
    lines.append(",".join(["images/zz.png", "", "NEW", *lines[1].split(",")[3:]]))
    (mixed / "labels.csv").write_text("\n".join(lines) + "\n")
    released = medanon.open_dataset(mixed, size=16)
    with pytest.warns(CalibrationOverlap, match="1 released images are in the folder the flow was trained on"):
        rel = _quiet_but(CalibrationOverlap, medanon.anonymize.dpglow, released, epsilon=1e4, flow=flow,
                         flow_training=other)
    assert rel.privacy["guarantee"] == "none: 1 released images are in the folder the flow was trained on"
    both = _quiet(medanon.anonymize.dpglow, released, epsilon=1e4, flow=flow, flow_training=other,
                  clip_box="calibrated", calibrate_on=released)                 # two reasons: both are stated
    assert both.privacy["guarantee"] == ("none: 1 released images are in the folder the flow was trained on; "
                                         "9 released images are among the images the clip box was calibrated on")
    with pytest.raises(ConfigError, match="is not the folder the flow was trained on"):
        _quiet(medanon.anonymize.dpglow, released, epsilon=1e4, flow=flow, flow_training=data)
    clean = _quiet(medanon.anonymize.dpglow, medanon.open_dataset(data, size=16), epsilon=1e4, flow=flow,
                   flow_training=other)
    assert clean.privacy["guarantee"] == "epsilon-LDP"
    assert any("none of them is in it" in n for n in clean.notes)


def test_a_calibration_folder_given_as_a_relative_path_is_an_input_not_the_working_directory(phantoms, tmp_path,
                                                                                          monkeypatch):
    """calibrate_on=Path("cal") was taken for the dataset it names only when opened: its inputs were read off the
    path object itself (``Path.root``, the empty string: the working directory), so every release saved there was
    refused as written "inside the input"."""
    data, other = phantoms
    shutil.copytree(other, tmp_path / "cal")
    monkeypatch.chdir(tmp_path)
    rel = _quiet(medanon.anonymize.ldp_image, medanon.open_dataset(data, size=16), epsilon=50.0,
                 clip_box="calibrated", calibrate_on=Path("cal"))
    out = _quiet(rel.save, "release", progress=False)
    assert (out / "manifest.json").is_file() and rel.privacy["guarantee"] == "epsilon-LDP"


def test_a_phantom_of_the_flows_training_people_withdraws_the_guarantee(tmp_path):
    """A phantom's patients are fixed by its seed: a smaller phantom of the seed a flow was trained on holds its
    training people, whatever its size or number of patients. `medanon train flow` records the phantom it read;
    a release of such people states no guarantee, one of another seed keeps it; the shipped flows' training
    phantoms are known (the default seed 0), so the README's workflow is caught too."""
    from click.testing import CliRunner

    from medanon.cli import cli
    from medanon.phantoms.provenance import shared_people

    root = Path(__file__).resolve().parents[1]
    train = medanon.make_phantom(tmp_path / "train", modality="xray", patients=5, per_patient=2, size=32, seed=11)
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "flow", str(train), "--config",
                                 str(root / "configs/glow/tiny32.yaml"), "--steps", "1", "--val", "0", "--test", "0",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    flow = tmp_path / "run" / "flow.pt"
    same = medanon.open_dataset(medanon.make_phantom(tmp_path / "same", modality="xray", patients=8, per_patient=1,
                                                     size=32, seed=11), size=32)
    with pytest.warns(CalibrationOverlap, match="5 released patients are people of the phantom the flow"):
        rel = _quiet_but(CalibrationOverlap, medanon.anonymize.dpglow, same, epsilon=1e4, flow=flow)
    assert rel.privacy["guarantee"] == ("none: 5 released patients are people of the phantom the flow was trained "
                                        "on (seed 11, 5 patients)")
    assert "P0000" not in json.dumps(rel.privacy)                              # public: a count, never an id
    other = medanon.make_phantom(tmp_path / "other", modality="xray", patients=8, per_patient=1, size=32, seed=12)
    kept = _quiet(medanon.anonymize.dpglow, medanon.open_dataset(other, size=32), epsilon=1e4, flow=flow)
    assert kept.privacy["guarantee"] == "epsilon-LDP"

    small = medanon.make_phantom(tmp_path / "default", modality="xray", patients=3, per_patient=1, size=16)
    shipped = {"modality": "xray", "seed": 0, "patients": 400}
    assert shared_people(shipped, small, ["P00001", "P00002", "P00003"]) == ["P00001", "P00002", "P00003"]
    assert shared_people(shipped, other, ["P00001"]) == []                      # seed 12: other people
    assert shared_people({**shipped, "pneumonia_rate": 0.5}, small, ["P00001"]) == []   # other settings
    assert shared_people(shipped, tmp_path / "run", ["P00001"]) == []           # not a phantom folder


def _exported_copy(src: Path, dst: Path, how: str) -> Path:
    """``src`` exported again as a user might: every image re-saved as PNG at another compression, converted to
    JPEG, or resized to twice its side; same names, same labels."""
    from PIL import Image

    shutil.copytree(src, dst)
    for f in sorted((dst / "images").iterdir()):
        im = Image.open(f)
        im.load()
        if how == "png":
            im.save(f, compress_level=1)
        elif how == "resized":
            im.resize((im.width * 2, im.height * 2), Image.BICUBIC).save(f)
        else:
            im.save(f.with_suffix(".jpg"), quality=90)
            f.unlink()
    if how == "jpeg":
        lines = (dst / "labels.csv").read_text().splitlines()
        rows = [lines[0]] + [ln.replace(".png,", ".jpg,", 1) for ln in lines[1:]]
        (dst / "labels.csv").write_text("\n".join(rows) + "\n")
    return dst


@pytest.mark.parametrize("how", ["png", "jpeg", "resized"])
def test_a_box_calibrated_on_a_re_exported_copy_of_the_released_images_withdraws_it(phantoms, tmp_path, how):
    """A copy of the released folder re-saved, converted or resized has other file contents: it is still the
    released people's images, so the clip box depends on them and the release states no guarantee."""
    data, _ = phantoms
    copy = _exported_copy(data, tmp_path / how, how)
    with pytest.warns(CalibrationOverlap, match="8 of the 8 images being released"):
        rel = _quiet_but(CalibrationOverlap, medanon.anonymize.ldp_image, data, epsilon=50.0,
                         clip_box="calibrated", calibrate_on=copy)
    assert rel.privacy["guarantee"] == "none: 8 released images are among the images the clip box was calibrated on"


def test_a_box_calibrated_on_other_images_of_the_released_patients_withdraws_it(phantoms, tmp_path):
    """The first image of each patient released, the box calibrated on their second images (one folder, the same
    ids): no image in common, but every released patient shaped the box. The same people in another phantom folder
    of the same seed (another size) too; a phantom of another seed (the same ids, other people) keeps it."""
    from medanon.data.dataset import subset

    data, other = phantoms
    ds = medanon.open_dataset(data, size=16)
    first = subset(ds, [i for i, r in enumerate(ds.records) if r.path.name.endswith("_01.png")])
    second = subset(ds, [i for i, r in enumerate(ds.records) if r.path.name.endswith("_02.png")])
    with pytest.warns(CalibrationOverlap, match="4 released patients have other images among those the clip box"):
        rel = _quiet_but(CalibrationOverlap, medanon.anonymize.ldp_image, first, epsilon=50.0, clip_box="calibrated",
                         calibrate_on=second)
    assert rel.privacy["guarantee"] == ("none: 4 released patients have other images among those the clip box was "
                                        "calibrated on")
    with pytest.raises(medanon.errors.ConfigError, match="holds other images of 4 of the patients being released"):
        _quiet(medanon.anonymize.kpca, first, k=2, pca_components=2, pca_basis=second).images(limit=1)
    larger = generate(PhantomConfig(modality="xray", patients=4, per_patient=2, size=24, workers=1, seed=3),
                      tmp_path / "seed3-24px", progress=False)          # the people of `data`, drawn at 24 px
    rel = _quiet(medanon.anonymize.ldp_image, first, epsilon=50.0, clip_box="calibrated",
                 calibrate_on=medanon.open_dataset(larger, size=16))
    assert rel.privacy["guarantee"].startswith("none: ")
    rel = _quiet(medanon.anonymize.ldp_image, first, epsilon=50.0, clip_box="calibrated", calibrate_on=other)
    assert rel.privacy["guarantee"] == "epsilon-LDP"


def test_releasing_one_split_of_the_flows_folder_is_compared_with_its_training_split(tmp_path):
    """A flow records its whole folder's digest and its training records; a release of the folder's train split
    (the usual `train flow DIR` then `anonymize dpglow DIR --split train`) was stated epsilon-LDP with no warning.
    Its held-out split keeps the guarantee, and only then does the stored box's assumption say it was checked."""
    from medanon.anonymize.dpglow import calibrate_latent
    from medanon.data.records import records_digest
    from medanon.data.splits import select_split, split_records

    made = generate(PhantomConfig(modality="xray", patients=12, per_patient=1, size=16, workers=1, seed=7),
                    tmp_path / "ph", progress=False)
    real = tmp_path / "real"                                  # not a phantom: no phantom record to recognise it by
    shutil.copytree(made, real)
    (real / "phantom.json").unlink()
    whole = medanon.open_dataset(real, size=16)
    split = {"val": 0.15, "test": 0.15, "seed": 0, "stratify": "pneumonia"}       # `medanon train flow`'s defaults
    train = split_records(whole.records, val=0.15, test=0.15, seed=0, stratify="pneumonia")["train"]
    data = {"source": files_digest([r.path for r in whole.records], root=real), "modality": "xray",
            "subset": "train", "split": split, "where": {}, "records": {"train": records_digest(train)}}
    codec = GlowCodec(Glow(GlowConfig(channels=1, resolution=16, levels=2, depth=1, hidden=8)).eval())
    index = {r.record_id: i for i, r in enumerate(whole.records)}
    images = whole.tensors()[0][[index[r.record_id] for r in train]]
    stored = _quiet(calibrate_latent, codec, images)           # the box `train flow` stores: its training images'
    flow = (codec, stored, data)

    released = select_split(whole, "train")
    with pytest.warns(CalibrationOverlap, match="released patients are among the flow's training patients"):
        rel = _quiet_but(CalibrationOverlap, medanon.anonymize.dpglow, released, epsilon=1e4, flow=flow)
    assert rel.privacy["guarantee"].startswith("none: ") and "flow's training patients" in rel.privacy["guarantee"]

    held_out = select_split(whole, "test")
    assert not {r.patient_id for r in held_out.records} & {r.patient_id for r in train}
    rel = _quiet(medanon.anonymize.dpglow, held_out, epsilon=1e4, flow=flow, clip_box="calibrated")
    assert rel.privacy["guarantee"] == "epsilon-LDP"
    assert any("part of the folder the flow was trained on; compared by patient" in n for n in rel.notes)
    assert any("medanon found none of the released images" in a for a in rel.privacy["assumptions"])

    unknown = (codec, stored, {**data, "records": {}})        # a flow that recorded no training records
    with pytest.warns(CalibrationOverlap, match="could not be recomputed"):
        rel = _quiet_but(CalibrationOverlap, medanon.anonymize.dpglow, held_out, epsilon=1e4, flow=unknown)
    assert rel.privacy["guarantee"].startswith("none: the released images are part of the folder")

    other = generate(PhantomConfig(modality="xray", patients=4, per_patient=1, size=16, workers=1, seed=8),
                     tmp_path / "other", progress=False)
    elsewhere = select_split(medanon.open_dataset(other, size=16), "test")   # another folder: nothing compared
    rel = _quiet(medanon.anonymize.dpglow, elsewhere, epsilon=1e4, flow=flow, clip_box="calibrated")
    said = " ".join(rel.privacy["assumptions"])
    assert rel.privacy["guarantee"] == "epsilon-LDP"
    assert "an assumption medanon did not check" in said and "medanon found none" not in said
