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


def test_a_benchmarks_scratch_folder_is_emptied_only_where_a_benchmark_made_it(tmp_path: Path):
    """`--work DIR` of known_answers.py and gpu_check.py: a folder the user named by mistake is refused, not
    removed; the benchmark's own folder from an earlier run is emptied."""
    from script_module import load_script

    scratch = load_script("benchmarks/_scratch.py")
    mine = tmp_path / "data"
    mine.mkdir()
    (mine / "precious.png").write_bytes(b"x")
    with pytest.raises(SystemExit, match="was not made by a medanon benchmark"):
        scratch.fresh_work(mine)
    assert (mine / "precious.png").read_bytes() == b"x"
    work = scratch.fresh_work(tmp_path / "work")
    (work / "old-result.json").write_text("{}")
    assert scratch.fresh_work(work) == work and [p.name for p in work.iterdir()] == [scratch.MARKER]
    assert scratch.fresh_work(tmp_path / "new" / "work").is_dir()
