from pathlib import Path

import pytest
import torch

from medanon.checkpoint import load_checkpoint, save_checkpoint
from medanon.errors import ConfigError


def test_round_trip_and_kind_check(tmp_path: Path):
    model = torch.nn.Linear(3, 2)
    p = save_checkpoint(tmp_path / "m.pt", kind="toy", config={"width": 3}, state={"model": model.state_dict()},
                        step=7, extra={"loss": 0.5})
    blob = load_checkpoint(p, kind="toy")
    again = torch.nn.Linear(3, 2)
    again.load_state_dict(blob["state"]["model"])
    x = torch.randn(4, 3)
    assert torch.equal(model(x), again(x))
    assert blob["step"] == 7 and blob["config"] == {"width": 3} and len(blob["sha256"]) == 64
    with pytest.raises(ConfigError, match="expected glow"):
        load_checkpoint(p, kind="glow")


def test_refuses_pickled_objects_and_foreign_files(tmp_path: Path):
    torch.save({"format": "medanon-checkpoint", "obj": object()}, tmp_path / "pickled.pt")
    with pytest.raises(ConfigError, match="safely"):
        load_checkpoint(tmp_path / "pickled.pt")
    torch.save({"a": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ConfigError, match="not a medanon checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(ConfigError, match="does not exist"):
        load_checkpoint(tmp_path / "none.pt")


def test_an_empty_truncated_or_foreign_file_is_said_to_be_one(tmp_path: Path):
    """torch's own errors for these read as a corrupt pickle, and the fix blamed pickled models."""
    save_checkpoint(tmp_path / "ok.pt", kind="toy", config={}, state={"w": torch.zeros(3)})
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "ok.pt").read_bytes()[:200])
    (tmp_path / "text.pt").write_text("not a model")
    import zipfile

    with zipfile.ZipFile(tmp_path / "zip.pt", "w") as z:                # a zip, but not torch's
        z.writestr("x.txt", "hello")
    for name, said in (("empty.pt", "is empty"), ("cut.pt", "is not a checkpoint file"),
                       ("text.pt", "is not a checkpoint file"), ("zip.pt", "not one written by torch.save")):
        with pytest.raises(ConfigError, match=said) as e:
            load_checkpoint(tmp_path / name)
        assert "pickled" not in str(e.value) + e.value.fix and "inline_container" not in str(e.value)


def test_damaged_weights_are_said_to_be_damaged_for_every_loader(tmp_path: Path):
    """NaN weights, or tensors that do not fit the architecture the checkpoint's config describes (a copy cut short
    inside the archive, a hand edit), are a named error with a fix, never torch's RuntimeError listing every key."""
    from medanon.checkpoint import load_weights
    from medanon.models.classifier import load_classifier

    net = torch.nn.Linear(3, 2)
    with pytest.raises(ConfigError, match="is damaged: 1 weight tensor"):
        load_weights(net, {"weight": torch.full((2, 3), float("nan")), "bias": torch.zeros(2)}, "x.pt")
    with pytest.raises(ConfigError, match=r"does not fit the Linear its config describes \(1 problem") as e:
        load_weights(net, {"weight": torch.zeros(1, 3), "bias": torch.zeros(2)}, "x.pt")
    assert "retrain" in e.value.fix
    shipped = Path(__file__).resolve().parents[1] / "checkpoints" / "classifier-pneumonia-xray64.pt"
    blob = torch.load(shipped, map_location="cpu", weights_only=True)
    blob["state"]["model"] = {k: v[:1] if v.dim() else v for k, v in blob["state"]["model"].items()}
    torch.save(blob, tmp_path / "cut.pt")
    with pytest.raises(ConfigError, match=r"cut\.pt does not fit the ResNet"):
        load_classifier(tmp_path / "cut.pt")


def test_a_checkpoint_of_an_unknown_format_version_is_refused(tmp_path: Path):
    save_checkpoint(tmp_path / "ok.pt", kind="toy", config={}, state={"w": torch.zeros(3)})
    blob = torch.load(tmp_path / "ok.pt", weights_only=True)
    for version in (99, 0, "1"):
        blob["version"] = version
        torch.save(blob, tmp_path / "v.pt")
        with pytest.raises(ConfigError, match="has format version"):
            load_checkpoint(tmp_path / "v.pt")


CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.mark.parametrize("name, key, load", [
    ("stylegan2-fundus64.pt", "G_ema", "medanon.train.gan_checkpoint:load_generator"),
    ("restyle-map-fundus64.pt", "E", "medanon.codecs.stylegan:load_codec"),
    ("identity-fundus64.pt", "net", "medanon.models.identity:load_identity"),
    ("glow-xray64.pt", "model", "medanon.train.flow:load_flow"),
    ("unet-vessels64.pt", "model", "medanon.segment.learned:LearnedSegmenter.from_checkpoint"),
])
def test_a_checkpoint_missing_its_weights_is_named_not_a_key_error(tmp_path, name, key, load):
    """A damaged or partial export without one of its networks raised KeyError (a traceback in every command);
    the loaders now say which file lacks what."""
    import importlib

    if not (CHECKPOINTS / name).is_file():
        pytest.skip("no source checkout")
    blob = torch.load(CHECKPOINTS / name, weights_only=True)
    del blob["state"][key]
    torch.save(blob, tmp_path / name)
    module, attr = load.split(":")
    fn = importlib.import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    with pytest.raises(ConfigError, match=f"holds no '{key}' weights .* it is damaged or incomplete"):
        fn(tmp_path / name)
    from medanon.models_registry import ENV, list_models

    with pytest.MonkeyPatch.context() as mp:                # `medanon models` lists it as damaged
        mp.setenv(ENV, str(tmp_path))
        listed = next(m for m in list_models() if m.path == tmp_path / name)
    assert listed.kind.endswith(f"(damaged: no '{key}' weights)"), listed.kind


def test_every_shipped_checkpoint_holds_the_networks_of_its_kind():
    """The table of the networks each exported kind holds covers every shipped kind and fits every shipped file."""
    from medanon.checkpoint import EXPORTED_STATE, missing_state

    files = [p for p in sorted(CHECKPOINTS.glob("*.pt")) if not p.name.endswith(".resume.pt")]
    if not files:
        pytest.skip("no source checkout")
    for path in files:
        blob = load_checkpoint(path)
        assert blob["kind"] in EXPORTED_STATE and missing_state(blob) == [], path.name
