"""benchmarks/evaluation_demo.py finds a demo's releases in its report, or, for a demo stopped before its
evaluation finished, in its metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script


def test_releases_come_from_the_report_else_from_the_metrics(tmp_path: Path):
    releases_of = load_script("benchmarks/evaluation_demo.py").releases_of

    demo = tmp_path / "demo"
    (demo / "report-xray").mkdir(parents=True)
    (demo / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": "phantoms", "modality": "fundus", "seconds": 1.0},
        {"step": "anonymise", "modality": "fundus", "release_seconds": {"kpixel-k2": 3.2, "gmia": 2.4}},
        {"step": "anonymise", "modality": "xray", "release_seconds": {"dpglow-eps1e1": 4.4}}]) + "\n")
    assert releases_of(demo, "fundus") == [demo / "releases" / "kpixel-k2", demo / "releases" / "gmia"]
    (demo / "report-xray" / "report.json").write_text(json.dumps({"releases": [{"path": "/r/ldp-image-eps1e1"}]}))
    assert releases_of(demo, "xray") == [Path("/r/ldp-image-eps1e1")]         # the report wins
    (demo / "metrics.jsonl").write_text("")
    with pytest.raises(SystemExit, match="neither"):
        releases_of(demo, "fundus")
