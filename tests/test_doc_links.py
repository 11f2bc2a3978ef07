"""The docs hold together: every relative link in a Markdown file resolves to a file, and every ``#anchor`` to a
heading of its page (GitHub's heading slugs); no page narrates numbered work periods."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("checkpoints/*.md"),
                           *ROOT.glob("benchmarks/**/*.md")])
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"```.*?```", re.S)


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found, seen = set(), {}
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            s = _slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    bad = []
    for m in LINK.finditer(FENCE.sub("", page.read_text(encoding="utf-8"))):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue                                     # http:, mailto: ...
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"missing {target}")
        elif frag and dest.suffix == ".md" and frag not in _anchors(dest):
            bad.append(f"no heading #{frag} in {dest.relative_to(ROOT)}")
    assert not bad, bad


def test_no_page_narrates_work_periods():
    """Pages describe the system as it is; what happened when belongs in the CHANGELOG and the experiments pages."""
    history = ("CHANGELOG.md", "experiments")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in PAGES
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"\bsessions? ?\d|\bwork period", line, re.I)
            or (not any(h in p.name for h in history) and re.search(r"\b20[2-9]\d-[01]\d-[0-3]\d\b", line))]
    assert not hits, hits


def test_the_report_reference_names_the_results_version():
    from medanon.evaluate.harness import RESULTS_VERSION

    text = (ROOT / "docs" / "evaluation-reference.md").read_text(encoding="utf-8")
    assert f"version ({RESULTS_VERSION}: `medanon.evaluate.harness.RESULTS_VERSION`)" in text


def test_anchor_slugs_follow_github():
    assert _slug("Intervals, and their unit") == "intervals-and-their-unit"
    assert _slug("On a GPU: the command check") == "on-a-gpu-the-command-check"
