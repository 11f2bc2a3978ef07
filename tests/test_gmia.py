"""GMIA latent optimisation on tiny stand-in networks: identity below the margin, utility kept by L_ut, only W_A
changes, batching does not change results, and the release through the CLI (audit, resume, errors)."""

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from PIL import Image
from torch import nn

from medanon.anonymize.gmia import GMIA, GMIAConfig, IdentityEncoder, UtilityEncoder
from medanon.anonymize.gmia_release import gmia_release
from medanon.anonymize.privacy import NotAnonymised
from medanon.checkpoint import save_checkpoint
from medanon.cli import cli
from medanon.codecs.stylegan import KIND_COTRAINED, StyleGANCodec
from medanon.config import DataConfig, PhantomConfig, build, to_dict
from medanon.data.dataset import open_dataset
from medanon.data.layouts import scan
from medanon.data.tensors import resize_to
from medanon.errors import ConfigError
from medanon.models.classifier import ResNet, ResNetConfig, save_classifier
from medanon.models.encoder import Encoder
from medanon.models.identity import IdentityConfig, IdentityNet, save_identity
from medanon.models.stylegan import Generator, StyleGANConfig
from medanon.phantoms.generate import generate
from medanon.release import ReleaseWriter, audit_release, read_release

ROOT = Path(__file__).resolve().parents[1]
TINY_GAN = ROOT / "configs" / "stylegan" / "tiny32.yaml"
MARGIN = 0.3
FAST = dict(steps=30, lr=0.05, margin=MARGIN, lambda_ut=1.0)


class FineIdentity(nn.Module):
    """Stand-in E_id: a fixed random projection of the image's fine detail (image minus its blur), batch-normed."""

    def __init__(self, channels: int, size: int, dim: int = 32):
        super().__init__()
        self.proj = nn.Linear(channels * size * size, dim, bias=False)
        self.bn = nn.BatchNorm1d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blur = F.interpolate(F.avg_pool2d(x, 4), scale_factor=4, mode="bilinear", align_corners=False)
        return self.bn(self.proj((x - blur).flatten(1)))


class CoarseUtility(nn.Module):
    """Stand-in E_ut: a fixed random projection of the 4x4 average-pooled image (coarse content)."""

    def __init__(self, channels: int, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(channels * 16, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.adaptive_avg_pool2d(x, 4).flatten(1))


def tiny_codec(channels: int = 3) -> StyleGANCodec:
    cfg = dataclasses.replace(build(StyleGANConfig, path=TINY_GAN), channels=channels)
    torch.manual_seed(0)
    G = Generator.from_config(cfg).eval()
    E = Encoder(32, channels, G.num_ws, G.w_dim, iterative=False, channel_base=256, channel_max=16, head_dim=16)
    return StyleGANCodec(G, E.eval())


@pytest.fixture(scope="module")
def setup():
    codec = tiny_codec()
    torch.manual_seed(1)
    ident = FineIdentity(3, 32)
    torch.manual_seed(2)
    util = CoarseUtility(3)
    G = codec.generator
    with torch.no_grad():
        ws = G.mapping(torch.randn(16, G.z_dim, generator=torch.Generator().manual_seed(3)))
        images = G.synthesis(ws, noise_mode="const").clamp(-1, 1)     # sources the generator can render
    # the start W is an imperfect inversion, as a real encoder's is: from the exact latent both losses would sit at
    # a stationary point (cosine 1, utility distance 0) and only float noise could move the optimisation
    start = ws + 0.05 * ws.std() * torch.randn(ws.shape, generator=torch.Generator().manual_seed(4))
    return codec, ident, util, start, images


def run(setup, **cfg):
    codec, ident, util, ws, images = setup
    return GMIA(codec, identity=ident, utility=util, cfg=GMIAConfig(**{**FAST, **cfg})).optimise(ws, images)


def test_identity_cosine_falls_below_the_margin(setup):
    res = run(setup)
    assert (res.id_cos_start > 0.9).all() and (res.id_cos_start < 1 - 1e-4).all(), res.id_cos_start  # near, not at
    assert (res.id_cos <= MARGIN).float().mean() >= 0.75, res.id_cos
    assert res.history[0]["id_cos"] > 0.95 and res.history[-1]["id_cos"] < MARGIN + 0.1
    assert res.history[-1]["loss"] < res.history[0]["loss"]


def test_utility_loss_keeps_the_utility_features_closer(setup):
    both, id_only, ut_only = run(setup, losses="id+ut"), run(setup, losses="id"), run(setup, losses="ut")
    assert both.ut_dist.mean() < 0.5 * id_only.ut_dist.mean(), (both.ut_dist, id_only.ut_dist)
    assert (both.ut_dist < id_only.ut_dist).float().mean() >= 0.75
    assert (both.id_cos <= MARGIN).float().mean() >= 0.75            # identity still removed with L_ut on
    assert (id_only.id_cos <= MARGIN).float().mean() >= 0.75
    # L_ut alone does not aim at identity: most images stay recognisable (above the margin), unlike with L_id
    assert (ut_only.id_cos > MARGIN).float().mean() >= 0.75 and ut_only.id_cos.mean() > both.id_cos.mean() + 0.3
    assert "id_cos" not in ut_only.history[0] and "ut_dist" not in id_only.history[0]


def _snapshot(*modules: nn.Module) -> list[dict[str, torch.Tensor]]:
    return [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in modules]


def test_only_the_latent_changes(setup):
    codec, ident, util, ws, images = setup
    ident.train()                                   # train mode would update batch-norm statistics
    util.proj.weight.requires_grad_(True)
    codec.generator.synthesis.requires_grad_(True)
    before = _snapshot(codec.generator, codec.encoder, ident, util)
    ws_before = ws.clone()
    res = GMIA(codec, identity=ident, utility=util, cfg=GMIAConfig(**FAST)).anonymise(images)
    after = _snapshot(codec.generator, codec.encoder, ident, util)
    for b, a in zip(before, after, strict=True):
        assert b.keys() == a.keys()
        assert all(torch.equal(b[k], a[k]) for k in b), [k for k in b if not torch.equal(b[k], a[k])]
    for m in (codec, ident, util):
        assert all(p.grad is None for p in m.parameters())
    assert ident.training and ident.bn.training and not codec.generator.training     # modes restored
    assert util.proj.weight.requires_grad and codec.generator.synthesis.blocks[0].const.requires_grad
    codec.generator.synthesis.requires_grad_(False)
    ident.eval()
    assert torch.equal(ws, ws_before)
    start = codec.encode(images)
    assert not torch.allclose(res.ws, start, atol=1e-3)                      # W_A moved away from W ...
    assert torch.allclose(codec.decode(res.ws), res.images, atol=1e-5)      # ... and is all the release depends on


@pytest.mark.parametrize("space", ["w", "w+"])
def test_the_optimiser_gets_only_the_latent(setup, monkeypatch, space):
    codec, ident, util, ws, images = setup
    seen: list[list[torch.Tensor]] = []
    adam = torch.optim.Adam

    def spy(params, **kw):
        params = list(params)
        seen.append(params)
        return adam(params, **kw)

    monkeypatch.setattr(torch.optim, "Adam", spy)
    cfg = GMIAConfig(**{**FAST, "steps": 2, "latent_space": space})
    res = GMIA(codec, identity=ident, utility=util, cfg=cfg).optimise(ws[:3], images[:3])
    assert len(seen) == 1 and len(seen[0]) == 1                          # one optimiser, one tensor: W_A
    (w_a,) = seen[0]
    assert w_a.is_leaf and w_a.requires_grad
    if space == "w+":
        assert w_a.shape == ws[:3].shape and torch.equal(w_a.detach(), res.ws)
    else:                                   # the paper's W: one w_dim vector, the same for every layer
        assert w_a.shape == (3, 1, ws.shape[2])
        shift = res.ws - ws[:3]
        assert torch.allclose(shift, shift[:, :1].expand_as(shift), atol=1e-6) and shift.abs().max() > 0
        assert torch.allclose(shift[:, 0], w_a.detach()[:, 0], atol=1e-6)
    network_params = {id(p) for m in (codec, ident, util) for p in m.parameters()}
    assert id(w_a) not in network_params


def test_project_networks_through_the_adapters(setup):
    """The same two properties with the project's own E_id (IdentityNet, batch norm in eval mode) and E_ut
    (ResNet penultimate features) through IdentityEncoder / UtilityEncoder: tiny, untrained, batch norm
    calibrated on rendered images. W starts off the source's exact latent, as an encoder's does: at the exact
    latent the cosine is at its maximum 1, where its gradient vanishes."""
    codec, _, _, ws, images = setup
    G = codec.generator
    with torch.no_grad():
        calib = G.synthesis(G.mapping(torch.randn(64, G.z_dim, generator=torch.Generator().manual_seed(6))),
                            noise_mode="const").clamp(-1, 1)
    torch.manual_seed(5)
    small = ResNetConfig(in_channels=3, widths=(8, 16), blocks=(1, 1))
    net = IdentityNet(IdentityConfig(small, embed_dim=16, image_size=32))
    for m in net.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.momentum = None                       # cumulative average: the calibration batch's statistics
    with torch.no_grad():
        net.train()(calib)
    ident = IdentityEncoder(net.eval())
    util = UtilityEncoder(ResNet(small).eval(), image_size=32)
    start = ws + 0.2 * torch.randn(ws.shape, generator=torch.Generator().manual_seed(7))
    cfg = dict(steps=30, lr=0.05, margin=MARGIN, lambda_ut=1.0)
    both = GMIA(codec, identity=ident, utility=util, cfg=GMIAConfig(**cfg)).optimise(start, images)
    id_only = GMIA(codec, identity=ident, utility=util, cfg=GMIAConfig(**cfg, losses="id")).optimise(start, images)
    assert (both.id_cos_start > MARGIN).float().mean() >= 0.75            # the start is recognised ...
    assert (both.id_cos <= MARGIN).float().mean() >= 0.75, both.id_cos    # ... the optimised image mostly not
    assert (id_only.id_cos <= MARGIN).float().mean() >= 0.75, id_only.id_cos
    assert both.ut_dist.mean() < 0.5 * id_only.ut_dist.mean(), (both.ut_dist, id_only.ut_dist)


def test_batching_does_not_change_the_result(setup):
    codec, ident, util, _, images = setup
    cfg = GMIAConfig(**{**FAST, "steps": 8})
    batched = GMIA(codec, identity=ident, utility=util, cfg=cfg).anonymise(images[:6])
    single = GMIA(codec, identity=ident, utility=util, cfg=dataclasses.replace(cfg, batch_size=1)).anonymise(images[:6])
    assert torch.allclose(batched.ws, single.ws, atol=1e-4)
    assert torch.allclose(batched.images, single.images, atol=1e-4)
    assert torch.allclose(batched.id_cos, single.id_cos, atol=1e-4)
    assert batched.history[-1]["loss"] == pytest.approx(single.history[-1]["loss"], rel=1e-4)


def test_zero_steps_release_the_reconstruction(setup):
    codec, ident, util, _, images = setup
    res = GMIA(codec, identity=ident, utility=util, cfg=GMIAConfig(steps=0)).anonymise(images[:4])
    assert torch.allclose(res.images, codec.reconstruct(images[:4]), atol=1e-6)
    assert res.history == []
    from medanon.anonymize.gmia_networks import frozen

    with frozen(ident), torch.no_grad():            # the reported cosine is that of the source and its release
        want = F.cosine_similarity(ident(images[:4]), ident(res.images), dim=1)
    assert torch.allclose(res.id_cos, want, atol=1e-5)
    assert any("reconstruction" in w and c is NotAnonymised for w, c in GMIAConfig(steps=0).warnings())


@pytest.mark.parametrize("bad, match", [
    ({"losses": "id+pixel"}, "losses"), ({"margin": 1.0}, "margin"), ({"lr": 0.0}, "lr"),
    ({"losses": "id+ut", "lambda_ut": 0.0}, "utility loss off"), ({"steps": -1}, "steps"),
])
def test_config_is_validated(bad, match):
    with pytest.raises(ConfigError, match=match):
        GMIAConfig(**bad).validate()


def test_missing_networks_are_named(setup):
    codec, ident, util, _, _ = setup
    with pytest.raises(ConfigError, match="pass identity=") as e:        # the library's words (the CLI's: --identity)
        GMIA(codec, identity=None, utility=util, cfg=GMIAConfig(losses="id+ut"))
    assert "--" not in str(e.value)
    with pytest.raises(ConfigError, match="pass utility="):
        GMIA(codec, identity=ident, utility=None, cfg=GMIAConfig(losses="ut"))
    GMIA(codec, identity=ident, utility=None, cfg=GMIAConfig(losses="id"))       # L_id alone needs no E_ut


def test_adapters_match_the_networks_and_pass_gradients():
    torch.manual_seed(0)
    small = ResNetConfig(in_channels=3, widths=(8, 16), blocks=(1, 1))
    net = IdentityNet(IdentityConfig(small, embed_dim=8, image_size=16)).eval()
    model = ResNet(small).eval()
    x = (torch.rand(5, 3, 32, 32) * 2 - 1).requires_grad_(True)
    e = IdentityEncoder(net)(x)
    assert torch.allclose(e, net.embed(x.detach()), atol=1e-5)
    assert torch.allclose(e.norm(dim=1), torch.ones(5), atol=1e-5)
    u = UtilityEncoder(model, image_size=16)(x)
    assert torch.allclose(u, model.features(resize_to(x.detach(), 16)), atol=1e-6)
    (e.sum() + u.sum()).backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------------------- releases


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    d = tmp_path_factory.mktemp("gmia")
    data = generate(PhantomConfig(patients=6, per_patient=2, size=32, workers=1), d / "fundus", progress=False)
    codec = tiny_codec()
    g = codec.generator
    gen_cfg = dataclasses.replace(build(StyleGANConfig, path=TINY_GAN), channels=3)
    save_checkpoint(d / "codec.pt", kind=KIND_COTRAINED,
                    config={"generator": to_dict(gen_cfg), "encoder": dict(codec.encoder.kwargs),
                            "codec": {"iterations": 1}},
                    state={"G": g.state_dict(), "E": codec.encoder.state_dict()})
    torch.manual_seed(4)
    small = ResNetConfig(in_channels=3, widths=(8, 16), blocks=(1, 1))
    save_identity(d / "identity.pt", IdentityNet(IdentityConfig(small, embed_dim=8, image_size=32)))
    train_cfg = {"train_config": {"image_size": 32}}
    save_classifier(d / "grade.pt", ResNet(small), extra={"label": "grade", **train_cfg})
    save_classifier(d / "sex.pt", ResNet(dataclasses.replace(small, num_classes=2)),
                    extra={"label": "sex", **train_cfg})
    save_classifier(d / "gray.pt", ResNet(dataclasses.replace(small, in_channels=1)), extra={"label": "grade"})
    save_identity(d / "identity-gray.pt",
                  IdentityNet(IdentityConfig(dataclasses.replace(small, in_channels=1), embed_dim=8, image_size=32)))
    return d, data


def _cli(d: Path, data: Path, out: Path, *extra: str):
    args = ["--device", "cpu", "anonymize", "gmia", "--data", str(data), "--model", str(d / "codec.pt"),
            "--identity", str(d / "identity.pt"), "--out", str(out), "--steps", "2", *extra]
    return CliRunner().invoke(cli, args)


def test_cli_release_is_audited_clean(tmp_path, checkpoints):
    d, data = checkpoints
    out, mapping = tmp_path / "rel", tmp_path / "private" / "map.json"
    res = _cli(d, data, out, "--utility", str(d / "grade.pt"), "--mapping", str(mapping), "--batch-size", "5")
    assert res.exit_code == 0, res.output
    manifest, rows = read_release(out)
    records = scan(data).records
    assert len(rows) == len(records) == 12 and {r["n_people"] for r in rows} == {"1"}
    assert [c for c in rows[0] if c not in ("image", "n_sources", "n_people")] == ["grade", "grade_counts"]
    assert manifest["method"] == "gmia" and manifest["params"]["losses"] == "id+ut"
    assert manifest["params"]["utility_label"] == "grade" and "batch_size" not in manifest["params"]
    assert manifest["privacy"]["guarantee"].startswith("none")
    assert manifest["privacy"]["optimisation_outcome"]["images"] == 12
    assert set(manifest["models"]) == {"codec", "identity", "utility"} and manifest["phantom"]
    assert "optimisation_outcome" in res.output and "NO formal guarantee" in res.output
    rep = audit_release(out, mapping=mapping, source_records=records)
    assert rep.passed, rep.format()
    assert len(json.loads(mapping.read_text())["records"]) == 12


def test_default_space_is_the_papers_w_and_w_plus_is_an_option(tmp_path, checkpoints):
    """Issue 14.7: the paper's W by default (recorded in the manifest), W+ on request."""
    assert GMIAConfig().latent_space == "w"
    with pytest.raises(ConfigError, match="latent_space"):
        GMIAConfig(latent_space="z").validate()
    d, data = checkpoints
    for extra, want in (((), "W: W_A = E(X_R) + one w_dim offset"), (("--latent-space", "w+"), "W+")):
        out = tmp_path / f"rel{len(extra)}"
        res = _cli(d, data, out, "--losses", "id", *extra)
        assert res.exit_code == 0, res.output
        assert read_release(out)[0]["params"]["latent_space"].startswith(want)


def test_cli_split_selects_patients(tmp_path, checkpoints):
    d, data = checkpoints
    res = _cli(d, data, tmp_path / "rel", "--losses", "id", "--split", "train", "--mapping", str(tmp_path / "m.json"))
    assert res.exit_code == 0, res.output
    patients = {p for r in json.loads((tmp_path / "m.json").read_text())["records"].values() for p in r["patients"]}
    assert 0 < len(patients) < 6


def test_release_resumes_after_interruption(tmp_path, checkpoints, monkeypatch):
    d, data = checkpoints
    ds = open_dataset(data, DataConfig(size=32))
    gmia = GMIA(tiny_codec(), identity=IdentityEncoder.from_checkpoint(d / "identity.pt"), utility=None,
                cfg=GMIAConfig(losses="id", steps=2, batch_size=4))
    calls = []
    original = GMIA.anonymise
    monkeypatch.setattr(GMIA, "anonymise", lambda self, x: calls.append(len(x)) or original(self, x))
    add = ReleaseWriter.add

    def interrupted(self, key, image, sources):
        if len(self) == 5:
            raise KeyboardInterrupt
        return add(self, key, image, sources)

    monkeypatch.setattr(ReleaseWriter, "add", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gmia_release(ds, tmp_path / "rel", gmia=gmia, progress=False)
    monkeypatch.setattr(ReleaseWriter, "add", add)
    calls.clear()
    _, outcome = gmia_release(ds, tmp_path / "rel", gmia=gmia, progress=False)
    assert sum(calls) == 12 - 5 and outcome["images"] == 7 and "last run" in outcome["scope"]
    assert len(read_release(tmp_path / "rel")[1]) == 12


def test_cli_errors_and_warnings(tmp_path, checkpoints):
    d, data = checkpoints
    res = _cli(d, data, tmp_path / "a", "--utility", str(d / "gray.pt"))
    assert res.exit_code == 1 and "--utility" in res.output and "1-channel" in res.output
    res = _cli(d, data, tmp_path / "b", "--utility", str(d / "identity.pt"))
    assert res.exit_code == 1 and "expected classifier" in res.output
    res = _cli(d, data, tmp_path / "c", "--utility", str(d / "sex.pt"), "--margin", "0.8")
    assert res.exit_code == 0, res.output
    assert "PRESERVE that sensitive attribute" in res.stderr and "--margin 0.8" in res.stderr
    res = _cli(d, data, tmp_path / "d")                   # no --utility: the modality's shipped E_ut, and said so
    assert res.exit_code == 0 and "--utility: classifier-grade-fundus64.pt, the shipped" in res.output, res.output
    res = _cli(d, data, tmp_path / "e", "--losses", "id", "--size", "64")
    assert res.exit_code != 0 and "--size" in res.output
    res = _cli(d, data, tmp_path / "f", "--utility", str(d / "grade.pt"), "--identity", str(d / "identity-gray.pt"))
    assert res.exit_code == 1 and "--identity" in res.output and "1-channel" in res.output, res.output
    assert not (tmp_path / "f").exists()


def test_benchmark_prints_batched_and_single_seconds_per_image(capsys, monkeypatch):
    import sys

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gmia as bench

    monkeypatch.setattr(bench, "build_codecs", lambda: {"cotrained": tiny_codec()})
    monkeypatch.setattr(sys, "argv", ["gmia.py", "--images", "3", "--single", "1", "--steps", "2", "--threads", "1"])
    bench.main()
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["steps"] == 2 and line["batch"] == 3 and line["single_images"] == 1 and line["resolution"] == 32
    assert line["s_per_image_batched"] > 0 and line["s_per_image_single"] > 0 and line["speedup_batched"] > 0


def test_release_dataset_side_by_side_keeps_order_and_results(tmp_path):
    """``release_dataset(side_by_side=2)`` (GMIA's CPU path) privatises two batches at once, one torch thread each,
    and writes every record, in dataset order, with what one batch at a time gives."""
    import threading

    from medanon.anonymize.per_image import release_dataset

    class Writer:
        def __init__(self):
            self.settings, self.privacy, self.rows = {"method": "test"}, {}, []

        def done(self, record_id):
            return False

        def add(self, record_id, image, sources):
            self.rows.append((record_id, image))

    class Data:
        def __init__(self, n):
            self.records = [type("R", (), {"record_id": f"r{i}"})() for i in range(n)]

        def load(self, i):
            return {"image": torch.full((1, 4, 4), float(i))}

    seen = []

    def privatise(images, generator=None):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return images * 2 + 1

    written = {}
    for side, threads in ((1, 1), (2, 2)):
        torch.set_num_threads(threads)
        w = Writer()
        assert release_dataset(Data(7), privatise, w, batch=2, side_by_side=side, progress=False) == 7
        written[side] = w.rows
    assert [r for r, _ in written[2]] == [f"r{i}" for i in range(7)]
    assert all(torch.equal(a[1], b[1]) for a, b in zip(written[1], written[2], strict=True))
    assert any(name != threading.main_thread().name and n == 1 for name, n in seen[4:])


def test_a_release_without_an_identity_loss_claims_no_identity_push(tmp_path, checkpoints):
    """--losses ut and --steps 0 remove no identity: the manifest says no margin applies (it said the identity was
    pushed below the margin), and an option of a loss that is not optimised is refused before any work."""
    d, data = checkpoints
    base = ["--device", "cpu", "anonymize", "gmia", str(data), "--model", str(d / "codec.pt"), "--utility",
            str(d / "grade.pt"), "--steps", "1"]
    for losses, extra, flag in (("ut", ["--margin", "0.5"], "--margin"), ("ut", ["--lambda-id", "3"], "--lambda-id"),
                                ("ut", ["--identity", str(d / "identity.pt")], "--identity"),
                                ("ut", ["--set", "margin=0.5"], "--margin"),
                                ("id", ["--lambda-ut", "0.5"], "--lambda-ut")):
        r = CliRunner().invoke(cli, [*base, "--losses", losses, *extra, "--out", str(tmp_path / "x")])
        said = " ".join(r.output.split())
        assert r.exit_code == 2 and f"--losses {losses} optimises no" in said and f"so {flag} would change" in said
        assert not (tmp_path / "x").exists()
    r = CliRunner().invoke(cli, [*base, "--losses", "ut", "--out", str(tmp_path / "ut")])
    assert r.exit_code == 0, r.output
    meaning = read_release(tmp_path / "ut")[0]["privacy"]["margin_meaning"]
    assert meaning.startswith("no margin applies: no identity loss was optimised (losses=ut)"), meaning
    r = _cli(d, data, tmp_path / "s0", "--utility", str(d / "grade.pt"), "--steps", "0")
    assert r.exit_code == 0, r.output
    meaning = read_release(tmp_path / "s0")[0]["privacy"]["margin_meaning"]
    assert meaning.startswith("no margin applies: no optimisation step was run (steps=0)"), meaning
    r = _cli(d, data, tmp_path / "m", "--utility", str(d / "grade.pt"))
    assert read_release(tmp_path / "m")[0]["privacy"]["margin_meaning"].startswith("an optimisation target")


def test_a_release_of_the_shipped_models_training_people_says_so(tmp_path, checkpoints):
    """The shipped GMIA networks were trained on the seed-0 phantom: GMIA claims no guarantee, but its images then
    carry what the weights memorised of those people and its identity outcome comes from a network that knows them.
    The statement says so (a count, never ids), before saving and in the manifest, and saving warns."""
    import warnings

    import medanon
    from medanon.anonymize.privacy import CalibrationOverlap, NoFormalGuarantee

    seed0 = medanon.make_phantom(tmp_path / "seed0", patients=3, per_patient=1, size=64, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = medanon.anonymize.gmia(seed0, steps=1, device="cpu")
    assert rel.privacy["models_trained_on_released"]["released_patients"] == 3
    with pytest.warns(CalibrationOverlap, match="holds 3 of the released patients"), \
            pytest.warns(NoFormalGuarantee, match=r"shipped codec \(cotrained-map-fundus64.pt\).*they are public"):
        rel.save(tmp_path / "rel", progress=False)
    privacy = read_release(tmp_path / "rel")[0]["privacy"]
    assert set(privacy["public_models"]) == {"codec", "identity", "utility"}
    assert privacy["models_trained_on_released"] == rel.privacy["models_trained_on_released"]
    assert any("memorised of the 3 released patients" in item for item in privacy["not_protected"])
    assert "P0000" not in json.dumps(privacy)
    other = medanon.make_phantom(tmp_path / "seed5", patients=3, per_patient=1, size=64, seed=5, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert "models_trained_on_released" not in medanon.anonymize.gmia(other, steps=1, device="cpu").privacy
    d, data = checkpoints                               # the user's own networks: not public
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        own = medanon.anonymize.gmia(medanon.open_dataset(data, size=32), model=d / "codec.pt",
                                     identity=d / "identity.pt", steps=1, device="cpu", losses="id")
    assert "public_models" not in own.privacy


def test_a_loaded_network_in_the_wrong_role_is_refused_when_the_release_is_planned(tmp_path, checkpoints):
    """By path a classifier given as identity= was refused; loaded, it became the identity network (the release
    written with no warning), and any module with a forward passed until torch failed mid-release. A tuple passed
    every role's check."""
    import medanon
    from medanon.anonymize.gmia import IdentityEncoder, UtilityEncoder
    from medanon.errors import ConfigError

    d, data = checkpoints
    ds = medanon.open_dataset(data, size=32)
    common = {"model": d / "codec.pt", "steps": 1, "device": "cpu"}
    ut = UtilityEncoder.from_checkpoint(d / "grade.pt")
    for kw, said in (({"identity": ut, "utility": ut}, "identity= is a medanon.UtilityEncoder of a 'classifier'"),
                     ({"identity": torch.nn.Linear(2, 2)}, "identity= cannot take this data's images"),
                     ({"identity": d / "identity.pt", "utility": torch.nn.Identity()}, "utility= gives (2, 3, 32, 32)"),
                     ({"identity": (1, 2)}, "identity= is a tuple of 2, not one model"),
                     # the bare networks medanon's loaders return: the other one, or without GMIA's wrapper
                     ({"identity": ut.model}, "identity= is a classifier (ResNet), not an identity network"),
                     ({"identity": IdentityEncoder.from_checkpoint(d / "identity.pt").net},
                      "identity= is an identity network (IdentityNet) as loaded, without GMIA's wrapper"),
                     ({"identity": d / "identity.pt", "utility": ut.model},
                      "utility= is a classifier (ResNet) as loaded, without GMIA's wrapper")):
        with pytest.raises(ConfigError, match=re.escape(said)):
            medanon.anonymize.gmia(ds, **common, **kw)
    assert len(medanon.anonymize.gmia(ds, **common, identity=d / "identity.pt", utility=ut).images(limit=1)) == 1


def test_frozen_holds_until_the_last_thread_leaves_and_probing_keeps_every_mode():
    """Two batches side by side each enter ``frozen`` over the same networks: the first to leave restored training
    mode while the other still ran (batch norm then used and updated batch statistics). And the release's probe of a
    loaded network set the wrapper's flag back to True on every submodule, batch norm included."""
    import threading

    from medanon.anonymize.gmia_networks import frozen
    from medanon.anonymize.gmia_release import _probe

    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    net.train()
    entered, leave = threading.Barrier(2), threading.Event()
    seen = []

    def batch(first: bool):
        with frozen(net):
            entered.wait()
            if first:
                return                                  # leaves while the other batch still runs
            leave.wait()
            seen.append(net[1].training)

    other = threading.Thread(target=batch, args=(False,))
    other.start()
    batch(True)
    seen.append(net[1].training)                        # the other batch is still inside
    leave.set()
    other.join()
    assert seen == [False, False] and net.training and net[1].training and net[0].weight.requires_grad

    class Wrapper(nn.Module):                           # as IdentityEncoder: trains, its loaded network in eval mode
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 14 * 14, 5))

        def forward(self, x):
            return self.net(x)

    w = Wrapper()
    w.net.eval()
    before = [m.training for m in w.modules()]
    _probe(w, "identity", type("D", (), {"channels": 3, "size": 16})(), "cpu")
    assert [m.training for m in w.modules()] == before


def test_a_release_two_batches_at_a_time_equals_one_at_a_time_and_leaves_the_networks_as_they_were(
        tmp_path, checkpoints):
    """GMIA's CPU path (two batches side by side) gives the images of one batch at a time, and the identity network's
    batch-norm buffers are those it was loaded with (they moved during a release, which differed between runs)."""
    d, data = checkpoints
    ds = open_dataset(data, DataConfig(size=32))
    identity = IdentityEncoder.from_checkpoint(d / "identity.pt")
    buffers = {k: v.clone() for k, v in identity.state_dict().items()}
    gmia = GMIA(tiny_codec(), identity=identity, utility=None, cfg=GMIAConfig(losses="id", steps=2, batch_size=3))
    images = {}
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            out, mapping = tmp_path / f"rel{n}", tmp_path / f"map{n}.json"
            gmia_release(ds, out, gmia=gmia, mapping=mapping, progress=False)
            by_source = {tuple(v["sources"]): k for k, v in json.loads(mapping.read_text())["records"].items()}
            images[n] = {s: np.asarray(Image.open(out / name)) for s, name in by_source.items()}
    finally:
        torch.set_num_threads(threads)
    assert images[1].keys() == images[2].keys() and len(images[1]) == 12
    worst = max(np.abs(images[1][s].astype(int) - images[2][s].astype(int)).max() for s in images[1])
    assert worst <= 1, worst                            # float rounding at most
    assert all(torch.equal(buffers[k], v) for k, v in identity.state_dict().items())


def test_a_release_short_of_the_identity_margin_warns(tmp_path, checkpoints):
    """Fewer than half the images at or below the margin (the method's only push away from the person) warns; the
    count was only in the manifest's optimisation_outcome."""
    import warnings

    from medanon.anonymize.privacy import WeakSetting

    d, data = checkpoints
    ds = open_dataset(data, DataConfig(size=32))
    identity = IdentityEncoder.from_checkpoint(d / "identity.pt")
    for margin, warned in ((-0.99, True), (0.999, False)):
        gmia = GMIA(tiny_codec(), identity=identity, utility=None,
                    cfg=GMIAConfig(losses="id", steps=1, batch_size=6, margin=margin))
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            _, outcome = gmia_release(ds, tmp_path / f"rel{margin}", gmia=gmia, progress=False)
        said = [w for w in got if issubclass(w.category, WeakSetting) and "reached the identity margin" in
                str(w.message)]
        assert bool(said) == warned == (outcome["fraction_at_or_below_margin"] < 0.5), (margin, outcome)
