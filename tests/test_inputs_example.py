"""docs/examples/in_memory.py runs as written: in-memory tensors, a codec chosen by name, the tiny evaluation."""

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "in_memory.py"


@pytest.mark.slow
def test_in_memory_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), str(tmp_path)])
    ns = runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert ns["kc"].params["model_files"]["codec"] == {"file": "restyle-map-fundus64.pt", "chosen": "given"}
    assert ns["released"].shape[1:] == (3, 64, 64) and len(ns["kc"]) == ns["released"].shape[0]
    names = sorted(r["name"] for r in ns["res"].releases)
    assert names == ["kcentroid-k2", "snow-1"]                # a saved release by its folder, the other by method
    assert ns["rows"] and {r["release"] for r in ns["rows"] if r["attack"] != "differencing"} == {"kcentroid-k2",
                                                                                                  "snow-1"}
    assert {r["release"] for r in ns["rows"] if r["attack"] == "differencing"} == {"kcentroid-k2 + snow-1"}
    said = capsys.readouterr().out
    assert "kcentroid-k2" in said and "averages rows [" in said
    first = ns["entry"]["sources"]                            # the rows named are the images of the record's people
    assert {ns["ids"][r] for r in ns["kc"].dataset.rows_of(first)} == set(ns["entry"]["patients"])
    assert not list(tmp_path.glob("medanon-eval-*"))          # nothing of the evaluation's temporary folder is left
