"""The classifier and identity networks: shapes, losses against references, checkpoints, resume."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.utils.class_weight import compute_class_weight

from medanon.errors import ConfigError
from medanon.models.classifier import ResNet, ResNetConfig, load_classifier, predict_proba, save_classifier
from medanon.models.identity import ArcFaceHead, IdentityConfig, IdentityNet, load_identity
from medanon.train.classifier import ClassifierTrainConfig, class_weights, focal_loss, train_classifier
from medanon.train.identity import IdentityTrainConfig, train_identity


@pytest.mark.parametrize("preset,channels,size", [("small", 3, 32), ("resnet18", 1, 64)])
def test_resnet_shapes(preset, channels, size):
    m = ResNet(ResNetConfig.preset(preset, in_channels=channels, num_classes=5)).eval()
    x = torch.zeros(2, channels, size, size).uniform_(-1, 1)
    assert m(x).shape == (2, 5) and m.features(x).shape == (2, m.feature_dim)
    p = predict_proba(m, x)
    assert torch.allclose(p.sum(1), torch.ones(2))
    if preset == "resnet18":                    # the ResNet-18 layout: 11.2 M parameters without the 1000-way head
        n = sum(q.numel() for q in m.parameters()) - 512 * 5 - 5
        assert abs(n - 11_170_000) < 20_000
    with pytest.raises(ConfigError):
        ResNetConfig.preset("resnet1000")


def test_class_weights_and_focal_loss_references():
    y = np.array([0, 0, 0, 1, 2, 2])
    ref = compute_class_weight("balanced", classes=np.arange(3), y=y)
    assert np.allclose(class_weights(y, 3).numpy(), ref)
    assert class_weights(y, 4)[3] == 0                                 # absent class
    logits, t = torch.randn(8, 3), torch.randint(0, 3, (8,))
    assert torch.allclose(focal_loss(logits, t, gamma=0.0), F.cross_entropy(logits, t))
    p = torch.softmax(logits, 1)[torch.arange(8), t]
    w = torch.tensor([1.0, 2.0, 0.5])
    manual = (-w[t] * (1 - p) ** 2 * p.log()).mean()
    assert torch.allclose(focal_loss(logits, t, gamma=2.0, weight=w), manual)


def test_classifier_learns_and_round_trips(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, 16, 16, generator=g) * 0.2 - 0.9
    y = np.arange(64) % 2
    x[y == 1, :, 4:12, 4:12] += 1.2                                     # a bright square means class 1
    cfg = ClassifierTrainConfig(image_size=16, steps=40, batch=16, seed=0, loss="focal")
    m = train_classifier(x, y, num_classes=2, cfg=cfg)
    acc = (predict_proba(m, x).argmax(1).numpy() == y).mean()
    assert acc > 0.9
    save_classifier(tmp_path / "c.pt", m)
    m2, blob = load_classifier(tmp_path / "c.pt")
    assert blob["kind"] == "classifier" and torch.allclose(predict_proba(m2, x), predict_proba(m, x))
    again = train_classifier(x, y, num_classes=2, cfg=cfg)             # same seed, same model
    assert torch.allclose(predict_proba(again, x), predict_proba(m, x), atol=1e-5)
    bf = train_classifier(x, y, num_classes=2, cfg=ClassifierTrainConfig(image_size=16, steps=40, batch=16,
                                                                         precision="bf16"))
    assert (predict_proba(bf, x).argmax(1).numpy() == y).mean() > 0.9


def test_arcface_logits_match_the_formula():
    head = ArcFaceHead(4, 3, s=10.0, m=0.2)
    emb, t = torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0])
    out = head(emb, t)
    cos = F.normalize(emb) @ F.normalize(head.weight).T
    theta = torch.acos(cos.clamp(-1, 1))
    expected = 10.0 * torch.where(F.one_hot(t, 3).bool(), torch.cos(theta + 0.2), cos)
    ok = theta[torch.arange(5), t] + 0.2 < math.pi                       # away from the fallback region
    assert torch.allclose(out[ok], expected[ok], atol=1e-4)


def _patients(n_pat=6, per=3, size=16, seed=0):
    """Each patient: a fixed random pattern; acquisitions: small noise and brightness changes."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n_pat, 1, size, size, generator=g) * 2 - 1
    x = torch.cat([base + 0.1 * torch.randn(n_pat, 1, size, size, generator=g) for _ in range(per)]).clamp(-1, 1)
    pid = [f"p{i}" for i in range(n_pat)] * per
    return x, pid


def test_identity_network_embeds_and_resumes(tmp_path):
    x, pid = _patients()
    cfg = IdentityTrainConfig(image_size=16, steps=30, batch=12, embed_dim=16, checkpoint_every=10)
    net = train_identity(x, pid, cfg=cfg, out=tmp_path / "id.pt")
    e = net.embed(x)
    assert e.shape == (18, 16) and torch.allclose(e.norm(dim=1), torch.ones(18), atol=1e-5)
    sim = e @ e.T
    same = torch.tensor([[a == b for b in pid] for a in pid])
    off = ~torch.eye(18, dtype=torch.bool)
    assert sim[same & off].mean() > sim[~same].mean() + 0.3            # genuine pairs closer than impostors
    net2, blob = load_identity(tmp_path / "id.pt")
    assert blob["kind"] == "identity" and blob["step"] == 30 and blob["extra"]["patients"] == 6
    assert torch.allclose(net2.embed(x), e, atol=1e-5)
    assert net2.embed(torch.zeros(2, 3, 32, 32)).shape == (2, 16)      # other size and channels are adapted
    xg = x[:2].clone().requires_grad_(True)
    net2.embedding(xg).sum().backward()                                # differentiable (GMIA's identity loss)
    assert xg.grad is not None and torch.allclose(net2.embedding(x).detach(), e, atol=1e-5)
    again = train_identity(x, pid, cfg=cfg, out=tmp_path / "id.pt")     # complete: loads instead of training
    assert torch.allclose(again.embed(x), e, atol=1e-5)
    with pytest.raises(ConfigError, match=r"trained with other settings \(.*steps 30 -> 31\)\n.*resume=False to train"):
        train_identity(x, pid, cfg=IdentityTrainConfig(image_size=16, steps=31, batch=12, embed_dim=16),
                       out=tmp_path / "id.pt")
    with pytest.raises(ConfigError, match=r"trained with other images \(as many images \(18\) and patients \(6\), "
                                          r"but other images\)\n"):               # same ids, other people
        train_identity(x.flip(-1), pid, cfg=cfg, out=tmp_path / "id.pt")
    with pytest.raises(ConfigError, match=r"other patients and images \(trained on 18 images of 6 patients, these "
                                          r"are 12 images of \d patients\)"):
        train_identity(x[:12], pid[:12], cfg=cfg, out=tmp_path / "id.pt")
    swapped = list(pid)                                  # two images traded between patients: same ids, same images
    j = next(i for i in range(1, len(swapped)) if swapped[i] != swapped[0])
    swapped[0], swapped[j] = swapped[j], swapped[0]
    with pytest.raises(ConfigError, match=r"trained with other patients \(as many .*but other patients\)"):
        train_identity(x, swapped, cfg=cfg, out=tmp_path / "id.pt")


def test_identity_resume_continues_an_interrupted_run(tmp_path):
    x, pid = _patients(seed=1)
    full = IdentityTrainConfig(image_size=16, steps=20, batch=12, embed_dim=8, checkpoint_every=10, seed=3)
    ref = train_identity(x, pid, cfg=full)
    # simulate an interruption after step 10: write the step-10 checkpoint only
    import medanon.train.identity as T

    class Stop(Exception):
        pass

    orig = T.save_identity
    def save_then_stop(path, net, *, step, **kw):
        orig(path, net, step=step, **kw)
        if step == 10:
            raise Stop
    T.save_identity = save_then_stop
    try:
        with pytest.raises(Stop):
            train_identity(x, pid, cfg=full, out=tmp_path / "id.pt")
    finally:
        T.save_identity = orig
    assert not (tmp_path / "id.pt").exists()                           # the final name holds finished networks only
    assert load_identity(tmp_path / "id.pt.partial")[1]["step"] == 10
    resumed = train_identity(x, pid, cfg=full, out=tmp_path / "id.pt")
    assert torch.allclose(resumed.embed(x), ref.embed(x), atol=1e-4)
    assert load_identity(tmp_path / "id.pt")[1]["step"] == 20 and not (tmp_path / "id.pt.partial").exists()


def test_identity_needs_repeated_acquisitions():
    from medanon.errors import DataError

    with pytest.raises(DataError, match="two or more acquisitions"):
        train_identity(torch.zeros(3, 1, 16, 16), ["a", "b", "c"], cfg=IdentityTrainConfig(image_size=16, steps=1))
    assert IdentityNet(IdentityConfig(ResNetConfig(in_channels=1), embed_dim=8, image_size=16)).embed(
        torch.zeros(0, 1, 16, 16)).shape == (0, 8)


def test_seeds_trained_side_by_side_equal_the_sequential_ones():
    from dataclasses import replace

    from medanon.runtime import map_in_parallel

    g = torch.Generator().manual_seed(1)
    x = torch.rand(48, 3, 16, 16, generator=g) * 2 - 1
    y = np.arange(48) % 3
    cfg = ClassifierTrainConfig(image_size=16, steps=15, batch=8)

    def probs(seed):
        return predict_proba(train_classifier(x, y, num_classes=3, cfg=replace(cfg, seed=seed)), x)

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)                    # the parallel path needs two threads to share out
        side_by_side = map_in_parallel(probs, [0, 1, 2])
        assert torch.get_num_threads() == 2         # restored
    finally:
        torch.set_num_threads(threads)
    for seed, p in zip([0, 1, 2], side_by_side, strict=True):
        assert torch.allclose(p, probs(seed), atol=1e-4), seed   # each seed its own model, whatever the order
    assert not torch.allclose(side_by_side[0], side_by_side[1])


def test_auto_precision_is_bf16_only_where_native(tmp_path, monkeypatch):
    from medanon import runtime
    from medanon.evaluate.config import EvalConfig

    with_bf16, without = tmp_path / "bf16", tmp_path / "plain"
    with_bf16.write_text("processor : 0\nflags : fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n")
    without.write_text("processor : 0\nflags : fpu sse2 avx2 avx512f\n")
    assert runtime.native_bf16("cpu", cpuinfo=str(with_bf16))
    assert not runtime.native_bf16("cpu", cpuinfo=str(without))
    assert not runtime.native_bf16("cpu", cpuinfo=str(tmp_path / "missing"))
    auto = ClassifierTrainConfig(precision="auto")
    for native, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(runtime, "native_bf16", lambda device, native=native: native)
        assert auto.resolved("cpu").precision == expected
        assert ClassifierTrainConfig(precision="fp32").resolved("cpu").precision == "fp32"   # explicit wins
        cfg = EvalConfig.fast(size=32).resolved("cpu")       # what the report records is what ran
        assert cfg.utility.classifier.precision == expected
        assert cfg.attacks.attribute_classifier.precision == expected
    with pytest.raises(ConfigError, match="precision='half'"):
        ClassifierTrainConfig(precision="half").validate()
