"""Models land on the device asked for, and every command runs end to end (the CPU form of the GPU check).

CI has no GPU, so a tensor left on the wrong device cannot fail here the way it fails on CUDA. Two things
stand in for it: every checkpoint loader is asked for the ``meta`` device (which the CPU build has) and must
return modules whose every parameter and buffer is there: a loader that builds its modules on the CPU and
forgets to move them (how ``--device cuda`` k-SALSA and GMIA broke) fails; and ``benchmarks/gpu_check.py``
runs every command at tiny size, so the script the GPU machines run cannot rot. What this cannot catch: a
tensor created inside a computation without ``device=`` (only a GPU run finds those: run gpu_check.py there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CK = ROOT / "checkpoints"


def _all_on(module: torch.nn.Module, device: str) -> list[str]:
    return [name for name, t in [*module.named_parameters(), *module.named_buffers()] if t.device.type != device]


def test_codec_loads_onto_the_device_asked_for():
    from medanon.codecs.stylegan import load_codec

    codec = load_codec(CK / "restyle-map-fundus64.pt", map_location="meta")
    assert codec.device.type == "meta"
    assert _all_on(codec, "meta") == []


@pytest.mark.parametrize("loader", ["identity", "classifier", "generator", "frozen_generator"])
def test_network_loaders_move_their_modules(loader):
    if loader == "identity":
        from medanon.models.identity import load_identity

        net = load_identity(CK / "identity-fundus64.pt", map_location="meta")[0]
    elif loader == "classifier":
        from medanon.models.classifier import load_classifier

        net = load_classifier(CK / "classifier-grade-fundus64.pt", map_location="meta")[0]
    elif loader == "generator":
        from medanon.train.gan_checkpoint import load_generator

        net = load_generator(CK / "stylegan2-fundus64.pt", device="meta")
    else:
        from medanon.train.encoder import load_frozen_generator

        net = load_frozen_generator(CK / "stylegan2-fundus64.pt", torch.device("meta"))[0]
    assert _all_on(net, "meta") == []


def test_clean_warnings_reemits_each_warning_once():
    """A warning raised inside a command's dataset reading is passed on once (it used to be re-recorded while
    being re-emitted: an endless loop that filled memory, seen as `evaluate` never finishing)."""
    from medanon.cli.data import clean_warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with clean_warnings():
            warnings.warn("degrees of freedom <= 0", RuntimeWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["degrees of freedom <= 0"]


@pytest.mark.slow
def test_gpu_check_runs_every_command_on_the_cpu(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--tiny",
                        "--work", str(tmp_path / "work")], capture_output=True, text=True, env=env, timeout=600)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    failed = [(r["check"], r.get("error")) for r in lines if not r["ok"]]
    assert p.returncode == 0 and not failed, (failed, p.stderr[-2000:])
    names = {r["check"] for r in lines}
    methods = {"kpixel", "kpca", "kcentroid", "ksalsa", "inverted", "gmia", "snow", "vs-snow", "dpglow", "ldp-image"}
    trainers = {"gan", "encoder", "autoencoder", "flow", "classifier", "identity", "segmenter"}
    expected = ({f"anonymize-{m}" for m in methods} | {f"train-{t}" for t in trainers}
                | {"evaluate", "generate", "demo", "torchrun-train-gan", "summary"})
    assert expected <= names
    summary = lines[-1]
    assert summary["check"] == "summary" and summary["passed"] == len(lines) - 1


def test_jitter_crops_are_the_per_image_slices():
    """The batched crop of the classifier's augmentation equals cropping each image on its own."""
    import torch.nn.functional as F

    from medanon.train.classifier import jitter

    x = torch.randn(5, 3, 16, 16)
    got = jitter(x, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    p = 1
    padded = F.pad(x, (p, p, p, p), mode="reflect")
    dx = torch.randint(0, 2 * p + 1, (5,), generator=g).tolist()
    dy = torch.randint(0, 2 * p + 1, (5,), generator=g).tolist()
    crops = torch.stack([padded[i, :, dy[i]:dy[i] + 16, dx[i]:dx[i] + 16] for i in range(5)])
    gain = 1.0 + 0.1 * (2 * torch.rand(5, 1, 1, 1, generator=g) - 1)
    bias = 0.1 * (2 * torch.rand(5, 1, 1, 1, generator=g) - 1)
    assert torch.equal(got, (crops * gain + bias).clamp(-1, 1))
