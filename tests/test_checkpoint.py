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
