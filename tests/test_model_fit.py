"""A model used on images of another modality, channel count or size is refused, naming both (issue 12)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from medanon.cli import cli
from medanon.codecs.stylegan import check_model_fits, load_codec
from medanon.config import PhantomConfig
from medanon.errors import ConfigError
from medanon.phantoms.generate import generate

CKPT = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def xray(tmp_path_factory) -> Path:
    return generate(PhantomConfig(modality="xray", patients=4, per_patient=1, size=32, workers=1),
                    tmp_path_factory.mktemp("fit") / "xray", progress=False)


def test_codec_records_what_it_was_trained_on():
    trained = load_codec(CKPT / "restyle-fundus64.pt").provenance["trained_on"]
    assert trained == {"modality": "fundus", "modality_recorded": False, "channels": 3, "resolution": 64}


@pytest.mark.parametrize("command", [
    ["anonymize", "kcentroid", "{data}", "--k", "2", "--model", str(CKPT / "restyle-fundus64.pt")],
    ["anonymize", "gmia", "--data", "{data}", "--model", str(CKPT / "cotrained-fundus64.pt"),
     "--identity", str(CKPT / "identity-fundus64.pt"), "--utility", str(CKPT / "classifier-grade-fundus64.pt")],
])
def test_fundus_codec_on_chest_xrays_is_refused(tmp_path, xray, command):
    args = [a.format(data=xray) for a in command] + ["--out", str(tmp_path / "rel")]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code != 0
    assert "trained on fundus" in r.output and "xray" in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert not (tmp_path / "rel").exists() and not (tmp_path / "rel.partial").exists()


def test_size_and_channel_mismatch_named():
    from types import SimpleNamespace

    trained = {"modality": "fundus", "modality_recorded": True, "channels": 3, "resolution": 64}
    with pytest.raises(ConfigError, match="32px"):
        check_model_fits("m.pt", trained, SimpleNamespace(modality="fundus", channels=3, size=32, root="d"))
    with pytest.raises(ConfigError, match="as recorded"):
        check_model_fits("m.pt", trained, SimpleNamespace(modality="xray", channels=3, size=64, root="d"))
    check_model_fits("m.pt", trained, SimpleNamespace(modality="fundus", channels=3, size=64, root="d"))


def test_images_in_memory_are_told_to_resize_not_to_open_a_dataset():
    """Images held in memory were not opened at a size: the fix resizes them (a folder's fix: size=)."""
    from types import SimpleNamespace

    trained = {"modality": "fundus", "modality_recorded": True, "channels": 3, "resolution": 64}
    with pytest.raises(ConfigError, match="held in memory are 3x32px") as e:
        check_model_fits("m.pt", trained, SimpleNamespace(modality="fundus", channels=3, size=32, root=None))
    assert "interpolate(x, size=64" in e.value.fix and "open the dataset" not in e.value.fix
    with pytest.raises(ConfigError, match="are xray images") as e:
        check_model_fits("m.pt", trained, SimpleNamespace(modality="xray", channels=1, size=64, root=None))
    assert "pass them with 3 channel(s)" in e.value.fix
    with pytest.raises(ConfigError, match="held in memory are 1x64px") as e:
        check_model_fits("m.pt", trained, SimpleNamespace(modality="fundus", channels=1, size=64, root=None))
    assert "give the images 3 channel(s) (x.expand" in e.value.fix and "interpolate" not in e.value.fix
