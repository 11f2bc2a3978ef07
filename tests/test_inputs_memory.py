"""Inputs as users hold them (medanon.data.as_dataset): tensors, arrays, PIL lists, folders; errors name the type."""

import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import medanon
from medanon.data.inputs import as_dataset
from medanon.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):          # module-scoped: made before the per-test temporary folder exists
    ds = medanon.open_dataset(medanon.make_phantom(tmp_path_factory.mktemp("memory") / "fundus", patients=6,
                                                   per_patient=2), size=16)
    x = torch.stack([ds.load(i)["image"] for i in range(len(ds))])
    return ds, x, [r.patient_id for r in ds.records]


def test_every_kind_of_input_gives_the_same_images(phantom):
    ds, x, pids = phantom
    u8 = ((x + 1) * 127.5).round().to(torch.uint8)
    kinds = [(x, (-1, 1)), ((x + 1) / 2, (0, 1)), (u8, None), (u8.numpy().transpose(0, 2, 3, 1), None),
             ([Image.fromarray(a.transpose(1, 2, 0)) for a in u8.numpy()], None), (list(x), (-1, 1))]
    for obj, value_range in kinds:
        m = as_dataset(obj, patient_ids=pids, value_range=value_range)
        assert (len(m), m.channels, m.size, m.modality) == (12, 3, 16, "fundus")
        assert torch.allclose(m.load(3)["image"], x[3], atol=1 / 127.5 + 1e-6)
    assert as_dataset(str(ds.root), size=16).records == ds.records                  # a folder as str
    assert as_dataset(ds) is ds


def test_wrong_inputs_name_the_argument_and_the_type(phantom):
    _, x, pids = phantom
    with pytest.raises(DataError, match="ds= is a float; ds= takes an opened dataset"):
        medanon.anonymize.snow(3.0, p=0.3)
    with pytest.raises(ConfigError, match="kpixel needs patient_ids="):
        medanon.anonymize.kpixel(x, k=2, value_range=(-1, 1))
    with pytest.raises(ConfigError, match="patient_ids= has 3 ids for 12 images"):
        medanon.anonymize.kpixel(x, k=2, patient_ids=pids[:3], value_range=(-1, 1))
    with pytest.raises(ConfigError, match=r"p='0.3' is a str; p takes a number"):
        medanon.anonymize.snow(x, p="0.3", value_range=(-1, 1))
    with pytest.raises(ConfigError, match=r"k=2.0 is a float; k takes an integer"):
        medanon.anonymize.kpixel(x, k=2.0, patient_ids=pids, value_range=(-1, 1))
    with pytest.raises(ConfigError, match="epsilon='1' is a str"):
        medanon.anonymize.ldp_image(x, epsilon="1", value_range=(-1, 1))
    with pytest.raises(DataError, match="16x8 images"):
        as_dataset(torch.zeros(2, 3, 16, 8), value_range=(0, 1))
    with pytest.raises(DataError, match="outside value_range"):
        as_dataset(torch.full((2, 1, 8, 8), 3.0), value_range=(0, 1))
    with pytest.raises(DataError, match=r"floating-point images .* and no value_range"):
        as_dataset(torch.zeros(2, 1, 8, 8))
    with pytest.raises(ConfigError, match="describe images held in memory"):
        medanon.anonymize.snow(phantom[0], p=0.3, patient_ids=pids)
    with pytest.raises(ConfigError, match=r"releases\[0\] is a torch.Tensor"):
        medanon.evaluate(real=x, patient_ids=pids, releases=[x], preset="tiny", value_range=(-1, 1))


def test_release_of_tensors_counts_iterates_and_indexes_records(phantom, tmp_path):
    _, x, pids = phantom
    rel = medanon.anonymize.kpixel(x, k=2, patient_ids=pids, labels={"grade": [0, 1] * 6}, value_range=(-1, 1))
    assert len(rel) == 3                                    # 6 patients, k = 2: planned, nothing computed
    imgs = rel.images(limit=None)
    assert imgs.shape == (3, 3, 16, 16) and torch.equal(rel[0].image, imgs[0]) and rel[-1].people == 2
    published = sorted(sorted(r.labels.items()) for r in rel)
    assert all("grade_counts" in r.labels for r in rel)
    out = rel.save(tmp_path / "k2", mapping=tmp_path / "k2.json", progress=False)
    assert len(rel) == 3 and [r.people for r in rel] == [2, 2, 2] and rel[1].name.startswith("images/")
    assert sorted(sorted(r.labels.items()) for r in rel) == published   # what labels.csv publishes, read back
    assert rel.images(limit=2).shape == (2, 3, 16, 16)
    assert medanon.audit(out, source=rel.dataset, mapping=tmp_path / "k2.json").passed
    with pytest.raises(IndexError):
        rel[3]


def test_subsets_keep_record_ids_and_transform_applies(phantom):
    _, x, pids = phantom
    full = as_dataset(x, patient_ids=pids, value_range=(-1, 1))
    part = as_dataset(x[[1, 4]], patient_ids=[pids[1], pids[4]], value_range=(-1, 1))
    assert [r.record_id for r in part.records] == [full.records[1].record_id, full.records[4].record_id]
    flipped = as_dataset(x, patient_ids=pids, transform=lambda im: im.flip(-1), value_range=(-1, 1))
    assert torch.equal(flipped.load(0)["image"], x[0].flip(-1))
    assert torch.equal(medanon.split_dataset(flipped)["train"].load(0)["image"].flip(-1),
                       medanon.split_dataset(full)["train"].load(0)["image"])
    with pytest.raises(DataError, match="transform= returned"):
        as_dataset(x, patient_ids=pids, transform=lambda im: im[:1], value_range=(-1, 1)).load(0)


@pytest.mark.parametrize("transform, words", [
    (lambda im: (im + 1) * 127.5, "values from 0 to"),                       # 8-bit scale: was clipped to white
    (lambda im: (im - 0.45) / 0.22, "values from"),                          # ImageNet-style normalisation
    (lambda im: im * float("nan"), "NaN or infinite"),
])
def test_a_transform_out_of_range_is_refused_not_clipped(phantom, transform, words):
    ds, x, pids = phantom
    for data in (as_dataset(x, patient_ids=pids, value_range=(-1, 1), transform=transform),
                 medanon.open_dataset(ds.root, size=16, transform=transform)):
        with pytest.raises(DataError, match="transform=") as e:
            data.load(0)
        assert words in str(e.value) and "[-1, 1]" in str(e.value)
    overshoot = as_dataset(x, patient_ids=pids, value_range=(-1, 1), transform=lambda im: im * 1.05)
    assert overshoot.load(0)["image"].abs().max() <= 1                      # an interpolation's overshoot: clamped


def test_a_transform_to_0_1_is_warned_once_and_a_flip_is_not(phantom):
    """A transform returning [0, 1] images (e.g. (x + 1) / 2) was accepted silently: the release came out washed out
    (nothing black), while the same mistake on a tensor raised a ValueRangeWarning."""
    ds, x, pids = phantom
    for data in (as_dataset(x, patient_ids=pids, value_range=(-1, 1), transform=lambda im: (im + 1) / 2),
                 medanon.open_dataset(ds.root, size=16, transform=lambda im: (im + 1) / 2)):
        with pytest.warns(medanon.ValueRangeWarning, match=r"transform= returned values from 0 to .* \[0, 1\]"):
            data.load(0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            data.load(1)                                                     # said once per dataset
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        medanon.open_dataset(ds.root, size=16, transform=lambda im: im.flip(-1)).load(0)


def test_grey_images_held_as_three_channels_need_their_modality(phantom):
    """A grey X-ray repeated into 3 channels was read as a fundus photograph: fundus models by default, and some
    images mirrored by the optic-disc rule before averaging."""
    _, x, pids = phantom
    grey = x[:, :1].expand(-1, 3, -1, -1).contiguous()
    with pytest.raises(DataError, match="three channels are equal") as e:
        as_dataset(grey, patient_ids=pids, value_range=(-1, 1))
    assert "modality='xray'" in e.value.fix
    assert as_dataset(grey, patient_ids=pids, value_range=(-1, 1), modality="fundus").modality == "fundus"
    assert as_dataset(grey[:, :1], patient_ids=pids, value_range=(-1, 1)).modality == "xray"
    assert as_dataset(x, patient_ids=pids, value_range=(-1, 1)).modality == "fundus"     # colour: as before


def test_settings_that_would_change_nothing_are_refused(phantom):
    """eye_sides='labels' on X-rays and alpha= with clip=False were accepted and silently dropped."""
    import math

    _, x, pids = phantom
    xray = as_dataset(x[:, :1], patient_ids=pids, value_range=(-1, 1))
    with pytest.raises(ConfigError, match="X-rays have none"):
        medanon.anonymize.kpixel(xray, k=2, eye_sides="labels")
    with pytest.raises(ConfigError, match="clip=False clips nothing"):
        medanon.anonymize.ldp_image(xray, epsilon=math.inf, clip=False, alpha=0.3)


def test_evaluate_refuses_a_part_of_a_folder_it_would_read_whole(phantom, tmp_path):
    ds = phantom[0]
    parts = medanon.split_dataset(ds)
    assert parts["train"].part_of == len(ds) and ds.part_of is None
    with pytest.raises(ConfigError, match=rf"holds {len(parts['train'])} of the {len(ds)} images") as e:
        medanon.evaluate(real=parts["train"], releases=[medanon.anonymize.kpixel(parts["train"], k=2)], preset="tiny",
                         out=tmp_path / "report")
    assert "real=ds" in e.value.fix and not (tmp_path / "report").exists()


def test_models_by_name_and_defaults(phantom):
    from medanon.models_registry import default_model, find_model

    _, x, pids = phantom
    assert find_model("restyle-map-fundus64") == find_model("restyle-map-fundus64.pt")
    assert default_model("ksame-codec", "fundus") == "restyle-map-fundus64.pt"
    assert default_model("ksame-codec", "xray") is None
    with pytest.raises(ConfigError, match="kcentroid needs codec=: no shipped"):
        medanon.anonymize.kcentroid(np.zeros((2, 1, 64, 64), np.float32), k=1, patient_ids=[0, 1],
                                    value_range=(0, 1))
    with pytest.raises(DataError, match=r"model no-such-codec is not on medanon's model search path"):
        medanon.anonymize.kcentroid(x, k=2, codec="no-such-codec", patient_ids=pids, value_range=(-1, 1))


def test_the_command_line_takes_models_by_name(tmp_path):
    from click.testing import CliRunner

    from medanon.cli import cli

    root = medanon.make_phantom(tmp_path / "ph", modality="xray", patients=3, size=64)
    res = CliRunner().invoke(cli, ["anonymize", "dpglow", "--data", str(root), "--flow", "glow-xray64", "--epsilon",
                                   "1", "--out", str(tmp_path / "dp")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["anonymize", "dpglow", "--data", str(root), "--flow", str(tmp_path / "glow-xray64"),
                                   "--epsilon", "1", "--out", str(tmp_path / "dp2")])
    assert res.exit_code != 0 and "neither a file nor a model" in res.output      # a path is never a name


def test_integers_wider_than_8_bits_need_value_range(phantom):
    _, x, pids = phantom
    u8 = ((x + 1) * 127.5).round()
    for dtype in (torch.int16, torch.int32, torch.int64, torch.uint16):
        with pytest.raises(DataError, match=r"integers spanning \[\d+, \d+\] and no value_range") as e:
            as_dataset(u8.to(dtype), patient_ids=pids)
        assert "value_range=(0, 65535)" in e.value.fix
    wide = as_dataset((u8 * 257).to(torch.int32), patient_ids=pids, value_range=(0, 65535))   # 16-bit, declared
    assert torch.allclose(wide.load(1)["image"], as_dataset(u8.to(torch.uint8), patient_ids=pids).load(1)["image"],
                          atol=1e-5)


@pytest.mark.parametrize("value_range", [1.0, (0, 1, 2), "01", (0, "white")])
def test_a_value_range_that_is_not_two_numbers_is_named(phantom, value_range):
    _, x, pids = phantom
    with pytest.raises(DataError, match="value_range="):
        as_dataset((x + 1) / 2, patient_ids=pids, value_range=value_range)


def test_images_using_a_corner_of_their_declared_range_warn(phantom):
    from medanon.data import ValueRangeWarning

    _, x, pids = phantom
    x01 = (x + 1) / 2
    with pytest.warns(ValueRangeWarning, match="only the upper half of value_range"):
        as_dataset(x01, patient_ids=pids, value_range=(-1, 1))              # [0, 1] declared as [-1, 1]: washed out
    with pytest.warns(ValueRangeWarning, match="only the lowest 1/128"):
        as_dataset(x01, patient_ids=pids, value_range=(0, 255))             # [0, 1] declared as 8-bit: black
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValueRangeWarning)
        as_dataset(x01, patient_ids=pids, value_range=(0, 1))
        as_dataset(x, patient_ids=pids, value_range=(-1, 1))


def test_grey_pil_images_stay_grey_whatever_their_mode(phantom):
    from PIL import Image

    _, x, pids = phantom
    grey = [Image.fromarray(((im.mean(0) + 1) * 127.5).round().byte().numpy(), mode="L") for im in x]
    expected = as_dataset(grey, patient_ids=pids, modality="xray").load(0)["image"]
    for mode in ("LA", "P"):
        ds = as_dataset([im.convert(mode) for im in grey], patient_ids=pids, modality="xray")
        assert ds.channels == 1 and torch.equal(ds.load(0)["image"], expected), mode
    binary = as_dataset([im.convert("1") for im in grey], patient_ids=pids, modality="xray")
    assert binary.channels == 1 and set(binary.load(0)["image"].unique().tolist()) <= {-1.0, 1.0}
    colour = [Image.fromarray(((im.permute(1, 2, 0) + 1) * 127.5).round().byte().numpy()).convert("P") for im in x]
    assert as_dataset(colour, patient_ids=pids).channels == 3                # a palette of colours stays colour
    with pytest.raises(DataError, match="different shapes") as e:
        as_dataset([grey[0], grey[1].convert("RGB")], patient_ids=pids[:2])
    assert "one mode" in e.value.fix


def test_evaluating_images_read_another_way_names_value_range(phantom):
    """Images in memory are known by their pixels as read: evaluated with another value_range than the release was
    made with, they are other records; the error says so (not a temporary folder that is gone)."""
    _, x, pids = phantom
    x01 = (x + 1) / 2
    rel = medanon.anonymize.kpixel(medanon.split_dataset(x01, patient_ids=pids, value_range=(0, 1))["train"], k=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DataError, match="a different value_range") as e:
            medanon.evaluate(real=x01, patient_ids=pids, value_range=(-1, 1), releases=[rel], preset="tiny")
    assert "medanon-eval-" not in str(e.value)


def test_a_folder_is_read_as_the_modality_it_declares(tmp_path):
    root = medanon.make_phantom(tmp_path / "fundus", patients=2)
    with pytest.raises(DataError, match=r"holds fundus images .* modality='xray' would read them as xray"):
        medanon.open_dataset(root, size=16, modality="xray")
    ds = medanon.open_dataset(root, size=16, modality="fundus")
    assert repr(ds) == f"ImageDataset(2 images 3x16x16, 2 patients, modality 'fundus', layout 'medanon', root '{root}')"
    assert "(part of 4)" in repr(medanon.split_dataset(medanon.open_dataset(
        medanon.make_phantom(tmp_path / "four", patients=4), size=16), val=0.25, test=0.25)["train"])


def test_evaluate_refuses_real_images_with_a_transform_it_would_not_apply(phantom, tmp_path):
    ds, x, pids = phantom
    for real in (medanon.open_dataset(ds.root, size=16, transform=lambda im: im.flip(-1)),
                 as_dataset(x, patient_ids=pids, value_range=(-1, 1), transform=lambda im: im.flip(-1))):
        with pytest.raises(ConfigError, match="real= has a transform=, which the evaluation would not apply"):
            medanon.evaluate(real=real, releases=[medanon.anonymize.kpixel(real, k=2)], preset="tiny",
                             out=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_one_image_under_two_patient_ids_is_refused_a_blank_one_is_not():
    """The same (non-blank) image under two patient ids, or twice without ids, is one person counted as two; under
    one id, or blank (a failed capture shows nobody), it is not."""
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    x[3] = x[1]
    with pytest.raises(DataError, match=r"image 3 repeats image 1 \(patients 'b' and 'd'\)") as e:
        as_dataset(x, patient_ids=["a", "b", "c", "d"], value_range=(0, 1))
    assert "patient id of the person" in e.value.fix
    with pytest.raises(DataError, match="without patient_ids= each image counts as its own person"):
        as_dataset(x, value_range=(0, 1))
    assert len(as_dataset(x, patient_ids=["a", "b", "c", "b"], value_range=(0, 1)).patients) == 3
    x[1] = x[3] = 0.5
    assert len(as_dataset(x, patient_ids=["a", "b", "c", "d"], value_range=(0, 1))) == 4


@pytest.mark.parametrize("ids, words", [
    (["P1", "p1", "P2", "P2"], "'P1' / 'p1'"),
    ([10, "010", 2, 2], "'010' / '10'"),
    (["P1 ", "P1", "P2", "P2"], "'P1' / 'P1 '"),
    (["NA", "NA", "P2", "P2"], "'NA' (image 0 and 1 more), a missing-value placeholder")])
def test_patient_ids_in_memory_get_the_checks_of_a_patient_column(ids, words):
    """k and per-patient ε count people by these ids: one person under two spellings would be two people, "NA" one
    person made of strangers (as a dataset's patient column: medanon.data.layouts.patient_ids)."""
    x = torch.rand(4, 3, 16, 16) * 2 - 1
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")) as e:
        as_dataset(x, patient_ids=ids, value_range=(-1, 1))
    assert "patient_ids=" in str(e.value)
    with pytest.raises(ConfigError, match="patient_ids"):
        medanon.anonymize.kpixel(x, k=2, patient_ids=ids, value_range=(-1, 1))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        as_dataset(x, patient_ids=["a", "a", "b", "b"], labels={"sex": [0, 1, 0, 0]}, value_range=(-1, 1))
    assert any("both sexes (e.g. 'a'" in str(m.message) for m in w)
