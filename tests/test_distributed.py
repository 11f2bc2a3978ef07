"""Distributed (torchrun / torch.distributed) training on CPU with the gloo backend.

Two processes are started with ``torch.multiprocessing`` and join a gloo process group through the
environment variables torchrun would set; the single-process references run in the test process.
Models are the tiny 32 px configs, a few steps each.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from medanon.checkpoint import load_checkpoint
from medanon.config import build
from medanon.errors import ConfigError
from medanon.models.glow import GlowConfig
from medanon.models.stylegan import StyleGANConfig
from medanon.train.distributed import Dist, init_distributed, shard_rows, shutdown, split_batch

ROOT = Path(__file__).resolve().parents[1]
GAN_CONFIG = ROOT / "configs" / "stylegan" / "tiny32.yaml"
FLOW_CONFIG = ROOT / "configs" / "glow" / "tiny32.yaml"
# ADA's p starts above 0 so that augmentations run; R1 every other step; ADA updates every other step
GAN_OVERRIDES = ("augment_p=0.3", "r1_interval=2", "ada_interval=2", "ada_target=0.3")
TOL = dict(rtol=0, atol=2e-5)                   # float32 summation-order differences, far below an Adam step
# The flow is compared in float64: its shards sum in another order than one batch does, and Adam's first
# steps (lr * g / |g|) turn float32 rounding of near-zero gradients (actnorm right after its
# data-dependent initialisation) into differences of up to lr; in float64 they stay ~1e-13.
FLOW_TOL = dict(rtol=0, atol=1e-9)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def images(n: int = 24, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, 32, 32, generator=g) * 2 - 1


def gan_cfg() -> StyleGANConfig:
    return build(StyleGANConfig, path=GAN_CONFIG, overrides=GAN_OVERRIDES)


def _spawn(fn, port: int, *args) -> None:
    mp.start_processes(fn, args=(2, port, *args), nprocs=2, join=True, start_method="fork")


def _join(rank: int, world: int, port: int) -> Dist:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    return init_distributed("cpu")


def flow_cfg(steps: int = 4) -> GlowConfig:
    return build(GlowConfig, path=FLOW_CONFIG, overrides=(f"steps={steps}", "checkpoint_every=2", "warmup_steps=2",
                                                          "channels=3"))


def labels(n: int = 24) -> torch.Tensor:
    return torch.arange(n) % 3 * (torch.arange(n) % 4 != 0)   # unbalanced: weighted losses differ from ce


def classifier_cfg(loss: str):
    from medanon.train.classifier import ClassifierTrainConfig
    return ClassifierTrainConfig(image_size=16, steps=3, batch=8, loss=loss, seed=1)


def patients(n: int = 24) -> list[str]:
    return [f"p{i // 2}" for i in range(n)]


def identity_cfg():
    from medanon.train.identity import IdentityTrainConfig
    return IdentityTrainConfig(embed_dim=8, image_size=16, steps=3, batch=8, seed=2, checkpoint_every=0)


def float64_flows() -> None:
    """Make ``train_flow`` build float64 flows (see FLOW_TOL)."""
    import medanon.train.flow as module
    from medanon.models.glow import Glow
    module.Glow = lambda cfg: Glow(cfg).double()


def _worker(rank: int, world: int, port: int, root: str) -> None:
    """Every 2-rank run the tests compare, in one process group (one start-up for all)."""
    from medanon.train.autoencoder import train_autoencoder
    from medanon.train.classifier import train_classifier
    from medanon.train.encoder import train_restyle
    from medanon.train.flow import train_flow
    from medanon.train.gan import train_stylegan
    from medanon.train.identity import train_identity
    from medanon.train.segmenter import train_segmenter
    float64_flows()
    d = _join(rank, world, port)
    try:
        for name, steps in (("two-ranks", 4), ("two-ranks-half", 2)):
            train_stylegan(images(), gan_cfg(), Path(root) / "gan" / name, steps=steps, dist=d, progress=False,
                           checkpoint_every=100, sample_every=100, log_every=1)
        train_restyle(images(), Path(root) / "gan" / "two-ranks-half" / "checkpoint.pt", encoder_cfg(),
                      Path(root) / "encoder", steps=3, dist=d, progress=False, sample_every=100)
        train_autoencoder(images(), autoencoder_cfg(), Path(root) / "autoencoder", steps=3, dist=d, progress=False,
                          init_ckpt=Path(root) / "gan" / "two-ranks-half" / "checkpoint.pt", sample_every=100)
        for name, steps in (("two-ranks", 4), ("two-ranks-half", 2)):
            train_flow(flow_cfg(steps), images().double(), out=Path(root) / "flow" / name, dist=d, progress=False)
        for loss in ("ce", "weighted"):
            model = train_classifier(images(), labels(), num_classes=3, cfg=classifier_cfg(loss), dist=d)
            if d.is_main:
                torch.save(model.state_dict(), Path(root) / f"classifier-{loss}.pt")
        train_identity(images(), patients(), cfg=identity_cfg(), out=Path(root) / "identity.pt", dist=d)
        train_segmenter(segmentation_data(Path(root) / "fundus32"), Path(root) / "segmenter", segmenter_cfg(),
                        dist=d, progress=False)
    finally:
        shutdown(d)


def encoder_cfg():
    import dataclasses

    from medanon.train.encoder import EncoderConfig
    cfg = build(EncoderConfig, path=ROOT / "configs" / "encoder" / "tiny32.yaml")
    return dataclasses.replace(cfg, perceptual_weight=0.0, batch=8)


def autoencoder_cfg():
    import dataclasses

    from medanon.train.autoencoder import AutoencoderConfig
    cfg = build(AutoencoderConfig, path=ROOT / "configs" / "autoencoder" / "tiny32.yaml")
    return dataclasses.replace(cfg, perceptual_weight=0.0, batch=8, augment_p=0.3, r1_interval=2)


def segmentation_data(folder: Path):
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset
    from medanon.train.segmenter import data_from_dataset
    return data_from_dataset(open_dataset(folder, DataConfig(size=32)), progress=False)


def segmenter_cfg():
    from medanon.train.segmenter import SegmenterTrainConfig
    return SegmenterTrainConfig(size=32, width=4, levels=2, stages=1, epochs=2, batch_size=8, val=0.2, test=0.2)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    from medanon.config import PhantomConfig
    from medanon.phantoms.generate import generate
    root = tmp_path_factory.mktemp("two-ranks")
    generate(PhantomConfig(patients=10, per_patient=2, size=32, workers=1, seed=5), root / "fundus32", progress=False)
    _spawn(_worker, free_port(), str(root))
    return root


def _state(path: Path) -> dict[str, torch.Tensor]:
    blob = load_checkpoint(path)
    out = {}
    for net in ("G", "D", "G_ema"):
        out.update({f"{net}.{k}": v for k, v in blob["state"][net].items()})
    return out


def _assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: dict | None = None) -> float:
    assert a.keys() == b.keys()
    worst = 0.0
    for k in a:
        if a[k].is_floating_point():
            worst = max(worst, float((a[k] - b[k]).abs().max()))
            torch.testing.assert_close(a[k], b[k], **(tol or TOL), msg=lambda m, k=k: f"{k}: {m}")
        else:
            assert torch.equal(a[k], b[k]), k
    return worst


def test_split_batch_and_shards():
    assert split_batch(8, 2, 2) == 2
    with pytest.raises(ConfigError, match="multiple of 6") as e:
        split_batch(8, 3, 2)
    assert e.value.fix.endswith("or accumulation=") and "--accum" not in str(e.value)     # the library's words
    rows = torch.arange(8)
    assert torch.cat([shard_rows(rows, s, 2) for s in range(2)]).sort().values.equal(rows)
    assert shard_rows(rows, 1, 4).tolist() == [1, 5]
    assert not init_distributed("cpu").enabled   # no torchrun environment: one process, no group


def test_gan_two_ranks_equal_one_rank_and_resume_on_one_rank(two_ranks: Path, tmp_path: Path):
    """2 ranks x 4 images = 1 process x 2 accumulated shards of 4 (the GAN's step depends on the shards:
    each has its own noise and augmentation streams, and minibatch-std groups stay inside one)."""
    import shutil

    from medanon.train.gan import train_stylegan
    shutil.copytree(two_ranks / "gan", tmp_path, dirs_exist_ok=True)
    # one process, the same global batch of 8 as 2 accumulated shards of 4
    one = train_stylegan(images(), gan_cfg(), tmp_path / "one-rank", steps=4, accumulation=2, progress=False,
                         checkpoint_every=100, sample_every=100, log_every=1)
    two = tmp_path / "two-ranks" / "checkpoint.pt"
    worst = _assert_close(_state(two), _state(one))
    b1, b2 = load_checkpoint(one), load_checkpoint(two)
    assert b1["extra"]["ada_state"] == pytest.approx(b2["extra"]["ada_state"])
    assert b2["extra"]["ada_state"]["last_rt"] is not None and b2["extra"]["ada_p"] != 0.3   # ADA did update
    assert b2["extra"]["distributed"] == {"shards": 2, "world_size": 2, "accumulation": 1}
    assert len(b2["state"]["rng"]["shards"]) == 1
    # the 2-rank run stopped at step 2 resumes on one process and ends where the others did
    half = tmp_path / "two-ranks-half"
    train_stylegan(images(), gan_cfg(), half, steps=4, resume=True, accumulation=2, progress=False,
                   checkpoint_every=100, sample_every=100, log_every=1)
    _assert_close(_state(half / "checkpoint.pt"), _state(two))
    # the metrics (rank 0's) are means over both ranks and say the same as the one-process run's
    import json
    m1 = [json.loads(x) for x in (tmp_path / "one-rank" / "metrics.jsonl").read_text().splitlines()]
    m2 = [json.loads(x) for x in (tmp_path / "two-ranks" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in m2] == [1, 2, 3, 4]
    for a, b in zip(m1, m2, strict=True):
        for k in ("loss_G", "loss_D", "D_real", "ada_p"):
            assert a[k] == pytest.approx(b[k], abs=1e-5), k
        assert ("r1" in a) == ("r1" in b)
    manifest = json.loads((tmp_path / "two-ranks" / "manifest.json").read_text())
    assert manifest["distributed"]["world_size"] == 2
    assert set(manifest["distributed"]["shard_seeds"]) == {"0", "1"}
    print(f"max |2 ranks - 1 rank| = {worst:.3g}")
    assert worst < TOL["atol"]


def test_gan_sharded_checkpoint_resumes_as_one_shard(tmp_path: Path):
    """A checkpoint of 2 shards resumes with 1 (shard 0's streams continue) and vice versa."""
    from medanon.train.gan import StyleGANTrainer
    cfg = gan_cfg()
    data = ((images() + 1) * 127.5).round().to(torch.uint8)
    a = StyleGANTrainer(cfg, data, torch.device("cpu"), accumulation=2)
    a.step()
    blob = load_checkpoint(a.save(tmp_path / "two-shards.pt"))
    b = StyleGANTrainer(cfg, data, torch.device("cpu"))
    b.load(blob)
    out = b.step()
    assert b.step_count == 2 and all(torch.isfinite(torch.tensor(v)) for v in out.values())
    c = StyleGANTrainer(cfg, data, torch.device("cpu"), accumulation=4)   # more shards than saved: fresh seeds
    c.load(load_checkpoint(b.save(tmp_path / "one-shard.pt")))
    c.step()
    assert c.step_count == 3


def _flow_state(path: Path) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_checkpoint(path)["state"]["model"].items()}


def test_flow_two_ranks_equal_one_process_and_resume_on_one_rank(two_ranks: Path, tmp_path: Path, monkeypatch):
    """The flow's step does not depend on the sharding at all: 2 ranks x 4 images = 1 process x 8 images
    (today's single-process code path), actnorm initialised from the whole first batch across ranks."""
    import shutil

    import medanon.train.flow as module
    from medanon.models.glow import Glow
    monkeypatch.setattr(module, "Glow", lambda cfg: Glow(cfg).double())
    shutil.copytree(two_ranks / "flow", tmp_path, dirs_exist_ok=True)
    x = images().double()
    one = module.train_flow(flow_cfg(), x, out=tmp_path / "one-process", progress=False)
    acc = module.train_flow(flow_cfg(), x, out=tmp_path / "accumulated", progress=False, accumulation=4)
    two = tmp_path / "two-ranks"
    ref = _flow_state(one.path)
    assert ref["steps.0.0.actnorm.bias"].dtype == torch.float64
    worst = _assert_close(_flow_state(two / "flow.pt"), ref, FLOW_TOL)
    _assert_close(_flow_state(tmp_path / "accumulated" / "flow.pt"), ref, FLOW_TOL)
    assert acc.train_bpd == pytest.approx(one.train_bpd, abs=1e-9)
    moved = max(float((ref[k] - v).abs().max()) for k, v in _flow_state(tmp_path / "two-ranks-half" / "flow.pt").items()
                if v.is_floating_point())
    assert moved > 1e-4                         # steps 3-4 change the flow far more than the tolerance
    # the 2-rank run stopped at step 2 resumes in one process (plain) and ends where the others did
    half = module.train_flow(flow_cfg(), x, out=tmp_path / "two-ranks-half", resume=True, progress=False)
    assert half.steps == 4
    _assert_close(_flow_state(half.path), ref, FLOW_TOL)
    import json
    manifest = json.loads((two / "manifest.json").read_text())
    assert manifest["distributed"]["world_size"] == 2 and manifest["distributed"]["images_per_shard"] == 4
    print(f"flow: max |2 ranks - 1 process| = {worst:.3g}")


@pytest.mark.slow
def test_torchrun_trains_from_the_command_line(tmp_path: Path):
    """docs/distributed.md's command ``torchrun --nproc_per_node 2 -m medanon train gan`` on CPU (gloo); the
    flow's command line (``--accum``) in-process (its torchrun run is the same start-up, ~20 s more)."""
    from click.testing import CliRunner

    from medanon.cli import cli
    data = tmp_path / "ph"
    r = CliRunner().invoke(cli, ["phantom", "--modality", "fundus", "--patients", "6", "--per-patient", "2",
                                 "--size", "32", "--out", str(data), "--workers", "1"])
    assert r.exit_code == 0, r.output
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", str(free_port()), "-m", "medanon", "--device", "cpu", "train"]
    gan = subprocess.run([*torchrun, "gan", "--data", str(data), "--config", str(GAN_CONFIG), "--steps", "4",
                          "--out", str(tmp_path / "gan"), "--sample-every", "2"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert gan.returncode == 0, gan.stderr[-3000:]
    assert gan.stdout.count("wrote") == 1         # rank 0 alone reports (and writes)
    blob = load_checkpoint(tmp_path / "gan" / "checkpoint.pt")
    assert blob["step"] == 4 and blob["extra"]["distributed"]["world_size"] == 2
    assert sorted(p.name for p in (tmp_path / "gan" / "samples").iterdir()) == ["step-0000002.png", "step-0000004.png"]
    rows = [json.loads(x) for x in (tmp_path / "gan" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [4]
    manifest = json.loads((tmp_path / "gan" / "manifest.json").read_text())
    assert manifest["distributed"]["world_size"] == 2 and manifest["distributed"]["backend"] == "gloo"
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "flow", "--data", str(data), "--config", str(FLOW_CONFIG),
                                 "--steps", "2", "--subset", "all", "--accum", "2", "--out", str(tmp_path / "flow")])
    assert r.exit_code == 0, r.output
    assert "2 steps" in r.output
    manifest = json.loads((tmp_path / "flow" / "manifest.json").read_text())
    assert manifest["distributed"]["shards"] == 2 and manifest["distributed"]["world_size"] == 1


@pytest.mark.parametrize("loss", ["ce", "weighted"])
def test_classifier_two_ranks_equal_one_process_with_the_same_shards(two_ranks: Path, loss: str):
    """Parameters equal those of one process computing the same 2 shards (batch-norm statistics are a
    shard's in both); batch-norm running statistics are rank 0's and are not compared."""
    from medanon.train.classifier import train_classifier
    two = torch.load(two_ranks / f"classifier-{loss}.pt")
    one = train_classifier(images(), labels(), num_classes=3, cfg=classifier_cfg(loss), accumulation=2).state_dict()
    plain = train_classifier(images(), labels(), num_classes=3, cfg=classifier_cfg(loss)).state_dict()
    params = [k for k in one if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    _assert_close({k: two[k] for k in params}, {k: one[k] for k in params})
    assert any(not torch.allclose(plain[k], one[k]) for k in params)   # the sharding did change the computation


def test_identity_two_ranks_equal_one_process_with_the_same_shards(two_ranks: Path, tmp_path: Path):
    """Identity network + ArcFace head under DDP: rank 0's checkpoint equals one process computing 2 shards."""
    from medanon.train.identity import train_identity
    train_identity(images(), patients(), cfg=identity_cfg(), out=tmp_path / "one.pt", accumulation=2)
    a, b = load_checkpoint(two_ranks / "identity.pt"), load_checkpoint(tmp_path / "one.pt")
    assert a["step"] == b["step"] == 3
    for part in ("net", "head"):
        keys = [k for k in b["state"][part] if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
        _assert_close({k: a["state"][part][k] for k in keys}, {k: b["state"][part][k] for k in keys})


def test_segmenter_two_ranks_equal_one_process_with_the_same_shards(two_ranks: Path, tmp_path: Path):
    """U-Net under DDP, per-shard soft Dice and dropout streams, a short last batch: the last epoch's
    parameters equal one process computing the same 2 shards; rank 0 alone wrote the results."""
    from medanon.train.segmenter import train_segmenter
    train_segmenter(segmentation_data(two_ranks / "fundus32"), tmp_path / "one", segmenter_cfg(), accumulation=2,
                    progress=False)
    a = load_checkpoint(two_ranks / "segmenter" / "last.pt")
    b = load_checkpoint(tmp_path / "one" / "last.pt")
    assert a["step"] == b["step"] == 2 and len(a["state"]["shard_rngs"]) == 1
    keys = [k for k in b["state"]["model"] if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    _assert_close({k: a["state"]["model"][k] for k in keys}, {k: b["state"]["model"][k] for k in keys})
    assert (two_ranks / "segmenter" / "vessel-segmenter.pt").exists()
    assert (two_ranks / "segmenter" / "test_metrics.json").exists()
    # a last batch of one image leaves shard 1 empty: it still takes part (zero loss) and training goes on
    import dataclasses
    cfg = dataclasses.replace(segmenter_cfg(), epochs=1, batch_size=11)
    data = segmentation_data(two_ranks / "fundus32")
    train_segmenter(data, tmp_path / "short", cfg, accumulation=2, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "short" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["epoch"] == 1 and rows[0]["loss"] > 0


def test_restyle_encoder_two_ranks_equal_one_process_with_the_same_shards(two_ranks: Path, tmp_path: Path):
    from medanon.train.encoder import train_restyle
    gan = two_ranks / "gan" / "two-ranks-half" / "checkpoint.pt"
    one = train_restyle(images(), gan, encoder_cfg(), tmp_path / "one", steps=3, accumulation=2, progress=False,
                        sample_every=100)
    a, b = load_checkpoint(two_ranks / "encoder" / "checkpoint.pt"), load_checkpoint(one)
    assert a["step"] == b["step"] == 3
    _assert_close(a["state"]["E"], b["state"]["E"])
    rows = [json.loads(x) for x in (two_ranks / "encoder" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 3 and rows[-1]["psnr"] > 0


def test_autoencoder_two_ranks_equal_one_process_with_the_same_shards(two_ranks: Path, tmp_path: Path):
    """Co-training (E, G, D with R1, ADA and augmentation): 2 ranks equal 1 process computing the same 2 shards."""
    from medanon.train.autoencoder import train_autoencoder
    gan = two_ranks / "gan" / "two-ranks-half" / "checkpoint.pt"
    one = train_autoencoder(images(), autoencoder_cfg(), tmp_path / "one", steps=3, accumulation=2, init_ckpt=gan,
                            progress=False, sample_every=100)
    a, b = load_checkpoint(two_ranks / "autoencoder" / "checkpoint.pt"), load_checkpoint(one)
    assert a["step"] == b["step"] == 3 and len(a["state"]["rng"]["shards"]) == 1
    for net in ("E", "G", "D"):
        _assert_close(a["state"][net], b["state"][net])
    assert a["extra"]["ada_state"] == pytest.approx(b["extra"]["ada_state"])


def test_train_commands_name_accum_where_the_library_names_accumulation(tmp_path):
    from click.testing import CliRunner

    import medanon
    from medanon.cli import cli

    data = medanon.make_phantom(tmp_path / "data", patients=4, per_patient=2, size=16)
    r = CliRunner().invoke(cli, ["--device", "cpu", "train", "flow", str(data), "--size", "16", "--batch", "8",
                                 "--accum", "3", "--subset", "all", "--steps", "1", "--out", str(tmp_path / "flow")])
    assert r.exit_code == 1 and "multiple of 3" in r.output and r.output.rstrip().endswith("or --accum")
    assert "accumulation=" not in r.output
