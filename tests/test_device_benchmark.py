"""benchmarks/device.py in its CPU form: the inversion line carries its FLOPs, a variant and a profile; the
first-use measure times its three passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_inversion_line_counts_flops_and_profiles():
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device.py"), "--device", "cpu", "--size", "64",
                        "--only", "inversion", "--batch", "2", "--variant", "channels-last", "--profile", "4"],
                       capture_output=True, text=True, timeout=300, check=True, cwd=ROOT / "benchmarks")
    (line,) = [json.loads(s) for s in p.stdout.splitlines() if s.startswith("{")]
    assert line["measure"] == "inversion" and line["variant"] == "channels-last" and line["batch"] == 2
    # the shipped 64 px ReStyle config: a few hundred MFLOP per image (0.51 GFLOP with 2 iterations), and the
    # achieved rate is the count times the images per second
    assert 0.1 < line["gflop_per_img"] < 5
    assert abs(line["achieved_tflops"] - line["gflop_per_img"] * line["img_per_s"] / 1e3) < 1e-3
    assert "Self CPU" in p.stderr and "aten::" in p.stderr


def test_first_use_line_times_three_passes_of_the_probe(monkeypatch):
    """The first-use measure runs the evaluation's probe three times (first, again, a new last batch shape)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))               # device.py imports its sibling flow.py
    device = load_script("benchmarks/device.py")

    out = device.first_use(torch.device("cpu"), images=70)       # batches of 64: 64 + 6, then 64 + 1
    assert out["images"] == 70 and out["network"] == "efficientnet-lite0"
    assert all(out[k] > 0 for k in ("first_s", "second_s", "new_shape_s"))
