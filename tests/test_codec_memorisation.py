"""benchmarks/codec_memorisation.py: which images count as seen (byte-identical files of the training phantom), the
per-patient summary, and the refusal when there is nothing to compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from script_module import load_script

from medanon.config import PhantomConfig
from medanon.phantoms.generate import generate

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "codec_memorisation.py"


def test_per_patient_means_and_the_bootstrap_interval():
    m = load_script("benchmarks/codec_memorisation.py")
    ids, means = m.per_patient(np.array([1.0, 3.0, 10.0]), np.array(["b", "b", "a"]))
    assert ids.tolist() == ["a", "b"] and means.tolist() == [10.0, 2.0]
    got = m.compare(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]), reps=200, rng=np.random.default_rng(0))
    assert got["difference_of_means"] == 0 and got["ci95"][0] <= 0 <= got["ci95"][1]


@pytest.mark.skipif(not (ROOT / "checkpoints" / "restyle-map-fundus64.pt").exists(), reason="shipped codec absent")
def test_seen_images_are_the_training_phantoms_files(tmp_path):
    """Seed 0 with more patients contains the smaller phantom's images byte for byte: its patients are seen."""
    data = generate(PhantomConfig(patients=5, per_patient=2, size=64, workers=1), tmp_path / "data", progress=False)
    seen = generate(PhantomConfig(patients=3, per_patient=2, size=64, workers=1), tmp_path / "seen", progress=False)
    run = subprocess.run([sys.executable, str(SCRIPT), "--data", str(data), "--seen", str(seen), "--reps", "50"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["seen_images"] == 6 and got["patients"] == {"seen": 3, "unseen": 2}
    assert 0 <= got["identity_cosine"]["mannwhitney_p"] <= 1
    other = generate(PhantomConfig(patients=2, per_patient=2, size=64, workers=1, seed=7), tmp_path / "other",
                     progress=False)
    run = subprocess.run([sys.executable, str(SCRIPT), "--data", str(data), "--seen", str(other), "--reps", "50"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "no patient has an image of" in run.stderr
