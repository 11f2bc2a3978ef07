"""Images in memory are never read two ways: shapes and value ranges that could mean two things are refused, a
second data argument is read as the first, and GMIA's release is the same whether its data are files or tensors.
Loaded networks of the wrong kind, help() of the callable modules, and where warnings point."""

import json
import math
import pydoc
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from test_api import SIZE, world  # noqa: F401  (the fixture)
from test_inputs_memory import phantom  # noqa: F401  (the fixture: dataset, tensor, patient ids)

import medanon
from medanon.anonymize.privacy import WeakSetting
from medanon.errors import ConfigError, DataError
from medanon.models.glow import Glow, GlowConfig


def test_shapes_that_could_be_read_two_ways_are_refused(phantom):  # noqa: F811
    _, x, _ = phantom
    r = (-1, 1)
    with pytest.raises(DataError, match=r"one \(C, H, W\) colour image, or 3 grey"):
        medanon.anonymize.snow(x[0], p=0.3, value_range=r)
    with pytest.raises(DataError, match=r"one \(H, W, C\) image"):
        medanon.anonymize.snow(x[0].permute(1, 2, 0), p=0.3, value_range=r)
    with pytest.raises(DataError, match="channels last"):
        medanon.anonymize.snow(x.permute(0, 2, 3, 1), p=0.3, value_range=r)
    with pytest.raises(DataError, match=r"list of \(16, 16, 3\) tensors: channels last"):
        medanon.data.as_dataset(list(x.permute(0, 2, 3, 1)), value_range=r)
    grey = medanon.data.as_dataset(x[0], modality="xray", value_range=r)   # said: three grey images
    assert (len(grey), grey.channels) == (3, 1)
    assert len(medanon.data.as_dataset(x[0][None], value_range=r)) == 1    # one colour image, as a batch of one
    with pytest.raises(DataError, match=r"one \(H, W, C\) image"):       # not 48 grey images 64 x 3
        medanon.data.as_dataset(np.zeros((48, 64, 3), np.uint8))
    hwc = [a.transpose(1, 2, 0) for a in ((x[:4] + 1) * 127.5).round().byte().numpy()]   # numpy's images: (H, W, C)
    assert torch.allclose(medanon.data.as_dataset(hwc).load(1)["image"], x[1], atol=1 / 127.5 + 1e-6)
    tiny = np.zeros((6, 3, 3, 3), np.uint8)                 # numpy reads both (N, C, H, W) and (N, H, W, C)
    with pytest.raises(DataError, match=r"\(6, 3, 3, 3\): \(N, C, H, W\) or numpy's \(N, H, W, C\)\?"):
        medanon.data.as_dataset(tiny)
    with pytest.raises(DataError, match=r"list of \(3, 3, 3\) arrays: \(C, H, W\) or \(H, W, C\)\?"):
        medanon.data.as_dataset(list(tiny))
    colour = torch.from_numpy(tiny).clone()
    colour[:, 0] = 9                                                         # (equal channels need modality=)
    assert medanon.data.as_dataset(colour).channels == 3                     # a tensor is (N, C, H, W): said


def test_float_images_need_value_range_so_no_image_changes_how_another_is_read(phantom):  # noqa: F811
    """A range guessed from the values would let one image decide how all are read: one pixel of -0.9 would
    turn a [0, 1] batch into [-1, 1] and move every other image's released values (a per-image guarantee, and
    k-Same's "computed only from its cluster", would then be false). Floats need value_range=."""
    _, x, pids = phantom
    x01 = (x + 1) / 2
    nudged = x01.clone()
    nudged[0, 0, 0, 0] = -1e-4                                          # one pixel a little below 0
    for images in (x01, x, nudged):
        with pytest.raises(DataError, match=r"value_range=\(0, 1\) or value_range=\(-1, 1\)"):
            medanon.anonymize.kpixel(images, k=2, patient_ids=pids)
    u8 = medanon.data.as_dataset((x01 * 255).round().to(torch.uint8), patient_ids=pids)   # 8-bit: 0-255
    assert torch.allclose(u8.load(1)["image"], x[1], atol=1 / 127.5 + 1e-6)
    read = medanon.data.as_dataset(nudged, value_range=(0, 1), patient_ids=pids)
    assert torch.allclose(read.load(1)["image"], x[1], atol=1e-6)      # read as [0, 1], not as [-1, 1]
    rel = medanon.anonymize.kpixel(nudged, k=2, patient_ids=pids, value_range=(0, 1))
    assert rel.privacy["k"] == 2
    for ds_arg in (medanon.make_phantom(patients=2),):                    # a folder has its own range
        with pytest.raises(ConfigError, match="describe images held in memory"):
            medanon.anonymize.snow(ds_arg, p=0.3, value_range=(0, 1))


def test_calibrate_on_in_memory_is_read_as_the_released_images_are(phantom):  # noqa: F811
    _, x, _ = phantom
    x01 = (x + 1) / 2
    box = {}
    for name, cal in (("tensor [0, 1]", x01), ("list [0, 1]", list(x01)),
                      ("dataset [-1, 1]", medanon.data.as_dataset(x, value_range=(-1, 1)))):
        rel = medanon.anonymize.ldp_image(x01, epsilon=1.0, clip_box="calibrated", calibrate_on=cal,
                                          value_range=(0, 1))
        box[name] = rel.params["calibration_sha256"]
    assert len(set(box.values())) == 1, box                             # the same images, the same box
    with pytest.raises(ConfigError, match=r"the calibrate_on images are 1x16px, the released data 3x16px"):
        medanon.anonymize.ldp_image(x01, epsilon=1.0, clip_box="calibrated", calibrate_on=x01[:, :1],
                                    value_range=(0, 1))


def test_split_dataset_and_evaluate_need_patient_ids_for_images_in_memory(phantom):  # noqa: F811
    _, x, pids = phantom
    with pytest.raises(ConfigError, match="split_dataset needs patient_ids="):
        medanon.split_dataset(x, value_range=(-1, 1))
    with pytest.raises(ConfigError, match="evaluate needs patient_ids="):
        medanon.evaluate(real=x, releases=[], preset="tiny", value_range=(-1, 1))
    parts = medanon.split_dataset(x, patient_ids=pids, stratify="", value_range=(-1, 1))
    train, test = ({r.patient_id for r in parts[n].records} for n in ("train", "test"))
    assert train and not train & test


def test_gmia_of_images_in_memory_writes_the_manifest_a_folder_gets(tmp_path, world):  # noqa: F811
    ds, d = world["ds"], world["dir"]
    x = torch.stack([ds.load(i)["image"] for i in range(len(ds))])
    nets = {"model": d / "restyle.pt", "identity": d / "identity.pt", "utility": d / "grade.pt"}
    manifests = {}
    for name, data, kw in (("folder", ds, {}), ("memory", x, {"patient_ids": [r.patient_id for r in ds.records],
                                                              "value_range": (-1, 1)})):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rel = medanon.anonymize.gmia(data, **nets, steps=0, batch=8, **kw)
            out = rel.save(tmp_path / name, progress=False)
        assert any(w.category.__name__ == "NotAnonymised" for w in caught)   # steps=0: warned on both paths
        manifests[name] = json.loads((out / "manifest.json").read_text())
        assert rel.models == manifests[name]["models"] and rel.models
    a, b = manifests["folder"], manifests["memory"]
    assert a["models"] == b["models"]
    assert set(a["privacy"]) == set(b["privacy"]) and "optimisation_outcome" in b["privacy"]
    assert set(a["params"]) == set(b["params"]) and b["params"]["size"] == SIZE


def test_loaded_networks_of_the_wrong_kind_are_named(phantom):  # noqa: F811
    ds, x, _ = phantom
    with pytest.raises(ConfigError, match=r"codec= is a torch\.Linear, not a StyleGAN codec"):
        medanon.anonymize.kcentroid(ds, k=2, codec=torch.nn.Linear(2, 2))
    glow = Glow(GlowConfig(resolution=16, channels=3, levels=2, depth=1, hidden=8))
    with pytest.raises(ConfigError, match=r"wrap the Glow in GlowCodec\(glow\)"):
        medanon.anonymize.dpglow(ds, epsilon=1.0, flow=glow)
    with pytest.raises(ConfigError, match=r"features= is a torch\.Linear, not a feature network"):
        medanon.anonymize.ksalsa(ds, k=2, features=torch.nn.Linear(2, 2))   # the shipped codec
    from medanon.models.features import get_feature_network

    net = get_feature_network("efficientnet-lite0", input_size=None)
    with pytest.raises(ConfigError, match="features= is a loaded network, which has its own weights and input"):
        medanon.anonymize.ksalsa(ds, k=2, features=net, feature_size=64)     # was silently ignored
    with pytest.raises(ConfigError, match=r"source= is a torch\.Tensor"):
        medanon.audit(medanon.anonymize.kpixel(ds, k=2).save(ds.root.parent / "kp", overwrite=True, progress=False),
                      source=x)


def test_gmia_refuses_networks_of_the_other_modality_before_any_image(tmp_path):
    """E_id or E_ut trained on grey X-rays would run on converted fundus images, recognising nobody: refused when the
    release is made, before a preview or save runs them."""
    ds = medanon.open_dataset(medanon.make_phantom(tmp_path / "fundus", patients=2, size=64), size=64)
    with pytest.raises(ConfigError, match="the identity network \\(identity=\\) was trained on 1-channel images"):
        medanon.anonymize.gmia(ds, model="cotrained-map-fundus64", identity="identity-xray64",
                               utility="classifier-grade-fundus64")
    with pytest.raises(ConfigError, match="the utility classifier \\(utility=\\) takes 1-channel images"):
        medanon.anonymize.gmia(ds, model="cotrained-map-fundus64", identity="identity-fundus64",
                               utility="classifier-pneumonia-xray64")


def test_settings_are_refused_when_the_release_is_made_not_after_the_work(phantom, tmp_path):  # noqa: F811
    """Settings a method can check alone are refused by the call that makes the release, before any clustering,
    inversion or preview."""
    ds, _, _ = phantom
    with pytest.raises(ConfigError, match="pca_components=0 must be a count"):
        medanon.anonymize.kpca(ds, k=2, pca_components=0)
    with pytest.raises(ConfigError, match=r"view_sigma=-0\.1 must be a finite number"):
        medanon.anonymize.kcentroid(ds, k=2, views=2, view_sigma=-0.1)
    xray = medanon.open_dataset(medanon.make_phantom(tmp_path / "xray", modality="xray", patients=4), size=16)
    with pytest.raises(ConfigError, match="the basis dataset gives 1x16px images"):
        medanon.anonymize.kpca(ds, k=2, pca_basis=xray)
    with pytest.raises(DataError, match="pca_basis= holds floating-point images") as e:   # ds= is a folder: its
        medanon.anonymize.kpca(ds, k=2, pca_basis=torch.rand(4, 3, 16, 16))      # value_range= would be refused
    assert "pca_basis=medanon.data.as_dataset(images, value_range=(0, 1))" in e.value.fix
    for seed, words in (("a", "noise_seed='a' is a str"), (1.5, "noise_seed=1.5 is a float"), (-1, "negative")):
        with pytest.raises(ConfigError, match=words):
            medanon.anonymize.ldp_image(ds, epsilon=1.0, clip_box="public", noise_seed=seed)
    in_memory = medanon.data.as_dataset(phantom[1], patient_ids=phantom[2], value_range=(-1, 1))
    with pytest.raises(DataError, match="vessels='dataset': 12 of the 12 images have no vessel mask"):
        medanon.anonymize.vs_snow(in_memory, p=0.3, vessels="dataset")


def test_help_of_a_callable_module_shows_the_function_first():
    for module, words in ((medanon.evaluate, "preset"), (medanon.anonymize.dpglow, "epsilon"),
                          (medanon.anonymize.ldp_image, "calibrate_on")):
        text = pydoc.render_doc(module, renderer=pydoc.plaintext)
        head = text.split("DESCRIPTION", 1)[1][:3000]
        assert words in head and "The module" in text, module.__name__


def test_warnings_point_at_the_callers_line_and_are_raised_once(phantom):  # noqa: F811
    ds, _, _ = phantom
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rel = medanon.anonymize.kpixel(ds, k=2)
        rel.save(ds.root.parent / "kp2", overwrite=True, progress=False)
    weak = [w for w in caught if w.category is WeakSetting]
    assert len(weak) == 1, [str(w.message) for w in weak]
    assert all(w.filename == __file__ for w in caught), {(w.filename, w.lineno) for w in caught}


def test_every_statement_has_the_same_keys(phantom):  # noqa: F811
    from medanon.anonymize.privacy import NO_UNIT, STANDARD_FIELDS

    ds = phantom[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rels = {"kpixel": medanon.anonymize.kpixel(ds, k=2), "snow": medanon.anonymize.snow(ds, p=0.3),
                "vs_snow": medanon.anonymize.vs_snow(ds, p=0.3, vessels="dataset"),
                "ldp_image": medanon.anonymize.ldp_image(ds, epsilon=10.0)}
    for name, rel in rels.items():
        assert set(STANDARD_FIELDS) <= set(rel.privacy), name
    assert rels["kpixel"].privacy["k"] == 2 and rels["kpixel"].privacy["epsilon_image"] is None
    assert rels["snow"].privacy["epsilon_image"] is None and rels["snow"].privacy["delta"] > 0
    assert rels["vs_snow"].privacy["unit"] == NO_UNIT and rels["ldp_image"].privacy["epsilon_image"] == 10.0


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_tiny_evaluation_raises_no_numpy_warnings(tmp_path):
    """Two identity networks on a held-out split of a few pairs: their cosine correlation is NaN, not numpy's
    'Degrees of freedom <= 0' and 'divide by zero' warnings leaking to the user."""
    ds = medanon.open_dataset(medanon.make_phantom(tmp_path / "ph", patients=12, per_patient=2, size=32), size=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rel = medanon.anonymize.kpixel(medanon.split_dataset(ds)["train"], k=2)
        res = medanon.evaluate(real=ds, releases=[rel], preset="tiny", out=tmp_path / "report")
    checks = json.loads((tmp_path / "report" / "report.json").read_text())["networks"]["checks"]
    assert res.releases and "cosine_correlation" in checks                # the path that warned was taken


def test_value_range_reaches_calibrate_on_only_for_images_of_the_same_kind(phantom):  # noqa: F811
    """uint8 released images with value_range=(0, 255) and a float [0, 1] calibration set: the range is the uint8
    images', and applied to the floats it would read them as black: the floats need their own (a dataset of
    them). The box comes from calibrate_on alone, so it must be the one the floats give on their own."""
    _, x, _ = phantom
    x01 = (x + 1) / 2
    u8 = (x01 * 255).round().to(torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DataError, match="calibrate_on= holds floating-point images"):
            medanon.anonymize.ldp_image(u8, epsilon=1.0, clip_box="calibrated", calibrate_on=x01,
                                        value_range=(0, 255))
        mixed = medanon.anonymize.ldp_image(u8, epsilon=1.0, clip_box="calibrated", value_range=(0, 255),
                                            calibrate_on=medanon.data.as_dataset(x01, value_range=(0, 1)))
        alone = medanon.anonymize.ldp_image(x01, epsilon=1.0, clip_box="calibrated", calibrate_on=x01,
                                            value_range=(0, 1))
    assert mixed.params["calibration_sha256"] == alone.params["calibration_sha256"]


def test_a_clip_box_is_not_calibrated_on_folders_of_the_other_modality(tmp_path):
    """An X-ray folder given as the calibration set of a fundus release was read at the release's channels and
    fitted its clip box silently."""
    fundus = medanon.make_phantom(tmp_path / "fundus", patients=3, per_patient=1, size=16, seed=3)
    xray = medanon.make_phantom(tmp_path / "xray", modality="xray", patients=3, per_patient=1, size=16, seed=3)
    with pytest.raises(ConfigError, match="the calibrate_on images are xray images, the released data fundus"):
        medanon.anonymize.ldp_image(medanon.open_dataset(fundus, size=16), epsilon=1.0, clip_box="calibrated",
                                    calibrate_on=medanon.open_dataset(xray, size=16, channels=3))


def test_ids_and_labels_without_an_image_order_are_refused():
    """A dict of patient ids was read by its keys (0, 1, 2, 3: four "patients" where there were two, and a k=2
    record of one person); a set in hash order; nested values as strings like '[0]'."""
    x = torch.rand(4, 3, 16, 16) * 2 - 1
    for pids, said in (({0: "A", 1: "A", 2: "B", 3: "B"}, "a dict"), ({"A", "B", "C", "D"}, "a set"),
                       ([[0], [0], [1], [1]], "holds a list values"), ([True, False, True, False], "a truth value")):
        with pytest.raises(ConfigError, match=said):
            medanon.anonymize.kpixel(x, k=2, value_range=(-1, 1), patient_ids=pids)
    pids = ["A", "A", "B", "B"]
    with pytest.raises(ConfigError, match=r"labels\['grade'\]= is a dict"):
        medanon.anonymize.kpixel(x, k=2, value_range=(-1, 1), patient_ids=pids, labels={"grade": {0: 1, 1: 1, 2: 0,
                                                                                                3: 0}})
    with pytest.raises(ConfigError, match=r"labels\['grade'\]: .*infinity"):
        medanon.anonymize.kpixel(x, k=2, value_range=(-1, 1), patient_ids=pids, labels={"grade": [math.inf] * 4})


@pytest.mark.parametrize("name", ["image", "n_people", "n_sources", "grade_counts", "", "a\nb"])
def test_a_label_named_as_a_column_of_labels_csv_is_refused(name):
    """labels.csv has its own image, n_sources, n_people and <label>_counts columns: a label of such a name wrote a
    second column of that name (a k=2 release then failed its audit, or its counts were replaced by the user's)."""
    x = torch.rand(4, 3, 16, 16) * 2 - 1
    with pytest.raises(ConfigError, match=r"a released label becomes a column of labels\.csv"):
        medanon.anonymize.kpixel(x, k=2, value_range=(-1, 1), patient_ids=list("AABB"), labels={name: [0, 0, 1, 1]},
                                 release_labels=[name])


def test_a_value_range_must_be_two_finite_numbers_and_snow_must_leave_something():
    x = torch.rand(4, 3, 16, 16) * 2 - 1
    for r in ((-1, math.inf), (-math.inf, math.inf), ("-1", "1"), (False, True)):
        with pytest.raises(DataError, match="value_range="):
            medanon.anonymize.kpixel(x, k=2, value_range=r, patient_ids=list("AABB"))
    with pytest.raises(ConfigError, match="replaces all 256 pixels of a 16 px image"):   # only the fill is released
        medanon.anonymize.snow(x, p=1.0, value_range=(-1, 1))


def test_a_release_without_patient_ids_does_not_count_people(tmp_path):
    """Images in memory without patient_ids: the manifest said "people: 6" (the images) beside "the source has no
    patient ids"; the number of people is not known."""
    x = torch.rand(6, 3, 16, 16) * 2 - 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = medanon.anonymize.ldp_image(x, epsilon=8.0, value_range=(-1, 1)).save(tmp_path / "n", progress=False)
        known = medanon.anonymize.ldp_image(x, epsilon=8.0, value_range=(-1, 1), patient_ids=list("aabbcc")).save(
            tmp_path / "k", progress=False)
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["people"] is None and "no patient ids" in counts["people_unknown"]
    assert json.loads((known / "manifest.json").read_text())["counts"]["people"] == 3
    assert medanon.audit(out).passed


def test_a_statement_edited_after_the_method_made_it_is_not_written(tmp_path):
    """rel.privacy["epsilon_image"] = 0.1 on an epsilon 8 release was written as is, and the audit passed it."""
    x = torch.rand(6, 3, 16, 16) * 2 - 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = medanon.anonymize.ldp_image(x, epsilon=8.0, value_range=(-1, 1), patient_ids=list("aabbcc"))
        rel.privacy["epsilon_image"] = 0.1
        with pytest.raises(ConfigError, match="the release's privacy statement was changed after the method"):
            rel.save(tmp_path / "edited", progress=False)
        assert not (tmp_path / "edited").exists()
        rel = medanon.anonymize.kpixel(x, k=2, value_range=(-1, 1), patient_ids=list("aabbcc"))
        rel.params["k"] = 3
        with pytest.raises(ConfigError, match="params was changed"):
            rel.save(tmp_path / "k", progress=False)
        rel = medanon.anonymize.kpixel(x, k=2, value_range=(-1, 1), patient_ids=list("aabbcc"))
        rel.images(limit=1)
        out = rel.save(tmp_path / "ok", progress=False)                 # saved twice: the statement it wrote
        assert rel.save(tmp_path / "ok", overwrite=True, progress=False) == out


def test_evaluate_refuses_settings_it_would_ignore_or_misread(tmp_path, world):  # noqa: F811
    """preset= beside config= was ignored; config= of another type, mappings= as a list, splits= of a missing file
    and to_html(5) were Python errors naming nothing."""
    from medanon.evaluate.config import preset

    ds, rel = world["ds"], tmp_path / "none"
    cases = [({"preset": "tiny", "config": preset("tiny")}, "preset= and config= are both given"),
             ({"config": 5}, "config= is an int"), ({"config": "tiny"}, "config= is a str"),
             ({"config": {"sizes": 32}}, "sizes"), ({"mappings": ["m.json"]}, "mappings= is a list"),
             ({"mappings": {"r": 5}}, r"mappings\['r'\]=5 is an int"),
             ({"splits": tmp_path / "nope.csv"}, "no such file")]
    for kw, said in cases:
        with pytest.raises(ConfigError, match=said):
            medanon.evaluate(real=ds, releases=[rel], **kw)
    assert not rel.exists()


def test_settings_that_would_change_nothing_are_refused(world):  # noqa: F811
    """view_sigma= without views, map_samples= without the synthetic map start, lr= without steps, the midrange
    centre of the public box (its midpoint is 0) and vessel_fraction= for masks that are not computed by a
    vesselness filter were accepted and ignored. Each is refused before any model is read."""
    ds, d = world["ds"], world["dir"]
    with pytest.raises(ConfigError, match=r"view_sigma=0\.5 with views=1"):
        medanon.anonymize.kcentroid(ds, k=3, codec=d / "restyle.pt", view_sigma=0.5)
    with pytest.raises(ConfigError, match="map_samples=5 with map_init='centroid'"):
        medanon.anonymize.ksalsa(ds, k=3, codec=d / "restyle.pt", map_samples=5, steps=1)
    with pytest.raises(ConfigError, match=r"lr=0\.1 with steps=0: no optimisation step"):
        medanon.anonymize.ksalsa(ds, k=3, codec=d / "restyle.pt", steps=0, lr=0.1)
    with pytest.raises(ConfigError, match=r"center='midrange' changes nothing with clip_box='public'"):
        medanon.anonymize.dpglow(ds, epsilon=5.0, flow=d / "nonexistent-flow.pt", center="midrange")
    with pytest.raises(ConfigError, match=r"vessel_fraction=0\.3 is for vessels='frangi' or 'sato', not 'dataset'"):
        medanon.anonymize.vs_snow(ds, p=0.3, vessels="dataset", vessel_fraction=0.3)


def test_odd_arguments_are_named_not_python_errors(tmp_path, phantom):  # noqa: F811
    """Each of these was a TypeError, ValueError or NotImplementedError from deep inside, naming no argument."""
    ds, x, pids = phantom
    cases = [
        (lambda: medanon.anonymize.snow(ds, p=0.5, fill=5), ConfigError, "fill=5"),
        (lambda: medanon.anonymize.snow(ds, p=0.5, fill=None), ConfigError, "fill=None"),
        (lambda: medanon.anonymize.kpixel(np.empty((6, 1, 16, 16), dtype=object), k=2, patient_ids=pids[:6]),
         DataError, "cannot be read as numbers"),
        (lambda: medanon.anonymize.kpixel(x.to("meta"), k=2, patient_ids=pids, value_range=(-1, 1)), DataError,
         "cannot be read as numbers"),
        (lambda: medanon.anonymize.ldp_image(ds, epsilon=1.0, clip_box="calibrated",
                                             calibrate_on=medanon.data.as_dataset(x[:1], value_range=(-1, 1))),
         ConfigError, "at least two calibration images"),
        (lambda: medanon.open_dataset(ds.root, max_pixels="a"), ConfigError, "max_pixels="),
        (lambda: medanon.open_dataset(ds.root, max_pixels=-1), ConfigError, "max_pixels=-1 must be at least 1"),
        (lambda: medanon.make_phantom(5), ConfigError, "out=5"),
        (lambda: medanon.anonymize.snow(ds, p=0.5).grid(0), ConfigError, "n=0"),
        # truthy strings: progress="no" drew bars
        (lambda: medanon.anonymize.snow(ds, p=0.5).save(tmp_path / "s", progress="no"), ConfigError,
         "progress='no' is a str; progress takes True or False"),
        (lambda: medanon.open_dataset(ds.root, progress="no"), ConfigError, "progress='no'"),
        (lambda: medanon.make_phantom(tmp_path / "p", progress="no"), ConfigError, "progress='no'"),
        (lambda: medanon.evaluate(real=ds.root, releases=[tmp_path / "s"], progress="no"), ConfigError,
         "progress='no'"),
        # "~" is not expanded by Python: a folder named "~" would be made here
        (lambda: medanon.anonymize.snow(ds, p=0.5).save("~/medanon-release"), ConfigError,
         r"path='~/medanon-release' starts with '~', which Python does not expand"),
        (lambda: medanon.make_phantom("~/phantom"), ConfigError, "out='~/phantom' starts with '~'"),
        (lambda: medanon.evaluate(real=ds.root, releases=[tmp_path / "s"], out="~/ev"), ConfigError,
         "out='~/ev' starts with '~'"),
        # names no file system takes: Python's own ValueError / OSError named no argument
        (lambda: medanon.anonymize.snow(ds, p=0.5).save(tmp_path / "a\x00b"), ConfigError, "holds a NUL character"),
        (lambda: medanon.anonymize.snow(ds, p=0.5).save(tmp_path / ("a" * 300)), ConfigError,
         "has a name of 300 bytes; the file system takes names of at most"),
        (lambda: medanon.open_dataset(tmp_path / ("a" * 300)), ConfigError, "path='.*' has a name of 300 bytes"),
        (lambda: medanon.anonymize.snow(ds, p=0.5).save(tmp_path / ("a" * 300) / "r"), ConfigError,
         "has a name of 300 bytes"),                      # a long name above the last: its lookup fails too
        (lambda: medanon.anonymize.snow(ds, p=0.5).save(tmp_path.joinpath(*["b" * 200] * 25)), ConfigError,
         "bytes long; the system takes paths shorter than"),
    ]
    for call, kind, said in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(kind, match=said):
                call()
    assert not list(tmp_path.iterdir()) and not Path("~").exists()


def test_a_refused_save_keeps_the_earlier_one_and_evaluate_names_releases_as_given(tmp_path):
    """A save refused (the folder exists) made the Release forget its first save: audit said "not saved", and the
    images were drawn again. An evaluation error about a release it saved for itself named its deleted temporary
    folder, and left the Release pointing there."""
    from medanon.errors import DataError, OutputExistsError

    data = medanon.make_phantom(tmp_path / "ph", patients=16, per_patient=2, size=16, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = medanon.anonymize.snow(data, p=0.3)
        rel.save(tmp_path / "snow", mapping=tmp_path / "snow.json", progress=False)
        with pytest.raises(OutputExistsError):
            rel.save(tmp_path / "snow", progress=False)
    assert rel.path == tmp_path / "snow" and rel.mapping == tmp_path / "snow.json"
    assert medanon.audit(rel).passed
    unsaved = medanon.anonymize.kpixel(data, k=3)                   # every patient: not evaluable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DataError) as got:
            medanon.evaluate(real=data, releases=[unsaved], preset="tiny", size=16, progress=False)
    said = str(got.value)
    assert "releases[0] (kpixel, not saved)" in said and "medanon-eval-" not in said and "--split" not in said
    assert unsaved.path is None and unsaved.mapping is None


def test_a_result_and_a_release_say_how_to_take_what_a_position_or_slice_asked():
    from medanon import EvaluationResult
    from medanon.release.release import Release

    res = EvaluationResult(releases=[{"name": "k5"}], controls={}, real={}, phantom=True, notes=[], seconds=0.0,
                           report={}, html="")
    with pytest.raises(TypeError, match=r"not int: \['k5'\]; by position, use .releases\[i\]"):
        res.release(0)
    with pytest.raises(TypeError, match=r"use release.images\(limit=N\)"):
        Release.__getitem__(object.__new__(Release), slice(0, 2))
