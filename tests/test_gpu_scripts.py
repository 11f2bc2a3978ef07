"""The GPU session scripts parse, and their shared budget caps every step at the call's time left."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", ["gpu_session.sh", "gpu_demo_session.sh", "gpu_budget.sh"])
def test_scripts_parse(script):
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / script)], check=True)


def test_budget_caps_steps_and_makes_the_output_absolute(tmp_path: Path):
    out = subprocess.run(["bash", "-c", f'set -u; OUT=rel; TOTAL_S=100; source {ROOT}/benchmarks/gpu_budget.sh; '
                                        'echo "$OUT|$(pwd)|$(within 30)|$(within 200)"; SECONDS=99; '
                                        'echo "$(within 30)"'],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout.splitlines()
    first, last = out
    # never past the call's end (100 s less 5 s of margin, less the second that may tick while bash starts), >= 1 s
    assert first.rsplit("|", 1)[0] == f"{tmp_path / 'rel'}|{ROOT}|30" and first.rsplit("|", 1)[1] in ("94", "95")
    assert last == "1"
    assert (tmp_path / "rel").is_dir()
