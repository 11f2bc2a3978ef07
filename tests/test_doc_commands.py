"""Every ``medanon`` command the docs show still parses: its commands exist, its options exist and get their values,
and nothing is left over. A renamed option or command fails here, not in a user's terminal.

Commands are read from the fenced code blocks of every Markdown page (continuation lines joined, comments cut,
shell variables assigned earlier in the block substituted, ``torchrun … -m medanon`` and ``nice``/``VAR=`` prefixes
allowed) and from inline code that starts with ``medanon``. They are parsed with Click's own parser, which checks
options and arity without running anything or converting values (so ``--data DIR`` need not exist).
"""

import re
import shlex
from pathlib import Path

import click
import pytest

from medanon.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("checkpoints/*.md"),
                           *ROOT.glob("benchmarks/**/*.md")]
               if p.name != "CHANGELOG.md")                    # history may name what has since been renamed
FENCE = re.compile(r"```.*?```", re.S)
ASSIGN = re.compile(r"(?:^|;\s*)(?:export\s+)?([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|[^\s;]+)")
START = re.compile(r"(?:^\s*|\b(?:do|then|time)\s+|\bnice -n \d+\s+|\b\w+=\S+\s+|-m\s+)(medanon)\s")
ALTERNATIVES = re.compile(r"[a-z-]+(\|[a-z-]+)+")           # "ksalsa|kcentroid|..." in prose: each one is checked


def documented(text: str):
    """(command line, shell variables in force, fenced?) for every medanon command of a page."""
    for m in FENCE.finditer(text):
        env: dict[str, str] = {}
        for line in re.sub(r"\\\n\s*", " ", m.group(0)).splitlines():
            line = re.split(r"\s#\s|^\s*#", line)[0]
            for name, value in ASSIGN.findall(line):
                env[name] = value.strip("\"'")
            k = START.search(line)
            if k:
                yield line[k.start(1):], dict(env), True
    for m in re.finditer(r"`(medanon [^`]+)`", FENCE.sub("", text)):
        yield m.group(1), {}, False


def arguments(line: str, env: dict[str, str]) -> list[list[str]]:
    """The arguments after ``medanon`` (one list per alternative); unknown variables stand for one value."""
    for name, value in env.items():
        line = re.sub(r"\$\{?" + name + r"\}?(?!\w)", lambda _, v=value: v, line)
    line = re.split(r"\s(?:;|&&|\|\||\|)\s|;\s*(?:done|fi)\b|\s*;\s*$", line)[0]
    words = ["VALUE" if "$" in w else w for w in shlex.split(line, comments=True)[1:] if w not in ("...", "…")]
    for i, w in enumerate(words):
        if ALTERNATIVES.fullmatch(w):
            return [[*words[:i], alt, *words[i + 1:]] for alt in w.split("|")]
    return [words]


def problem(args: list[str]) -> str | None:
    """Why ``medanon ARGS`` would not parse, or None."""
    cmd, name, ctx, chain = cli, "medanon", None, ["medanon"]
    while True:
        try:
            cmd.make_parser(click.Context(cmd, info_name=name, parent=ctx)).parse_args(list(args))
        except click.UsageError as e:
            return f"{' '.join(chain)}: {e.format_message()}"
        ctx = cmd.make_context(name, list(args), parent=ctx, resilient_parsing=True)
        if not isinstance(cmd, click.Group):
            return f"{' '.join(chain)}: unexpected arguments {ctx.args}" if ctx.args else None
        protected = vars(ctx).get("_protected_args")               # Click >= 8.2; before, ``protected_args``
        rest = [*(ctx.protected_args if protected is None else protected), *ctx.args]
        if not rest:
            return None
        sub = cmd.get_command(ctx, rest[0])
        if sub is None:
            return f"{' '.join(chain)} has no command {rest[0]!r}"
        chain.append(rest[0])
        cmd, name, args = sub, rest[0], rest[1:]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_commands_parse(page):
    bad = []
    for line, env, fenced in documented(page.read_text(encoding="utf-8")):
        if "<" in line:
            continue                                           # a template such as "medanon <group> <command>"
        for args in arguments(line, env):
            why = problem(args)
            if why and not (not fenced and "requires an argument" in why):   # prose may name an option alone
                bad.append(f"{line.strip()[:90]} -> {why}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("line, expect", [
    ("medanon anonymize kpixel --data D --kk 5 --out R", "No such option '--kk'"),
    ("medanon anonymise kpixel --data D", "has no command 'anonymise'"),
    ("medanon anonymize kpixel --data D --k", "requires an argument"),
    ("medanon evaluate --real D extra", "unexpected arguments"),
    ("medanon --devic cuda models", "No such option '--devic'"),
    ("medanon --device cuda anonymize kpixel --data D --k 5 --out R", None),
])
def test_the_check_can_fail(line, expect):
    why = problem(arguments(line, {})[0])
    assert (why is None) if expect is None else (expect in why), why


def test_the_pages_show_commands():
    counts = {p.relative_to(ROOT).as_posix(): sum(1 for _ in documented(p.read_text(encoding="utf-8"))) for p in PAGES}
    assert counts["README.md"] >= 10 and sum(counts.values()) >= 150, counts


def test_variables_are_read_in_order():
    block = '```bash\nE="--model m.pt"\nmedanon anonymize kcentroid --data D $E --out R\nE="--real D"\n' \
            'medanon evaluate $E --out R2\n```'
    found = [arguments(line, env)[0] for line, env, _ in documented(block)]
    assert found == [["anonymize", "kcentroid", "--data", "D", "--model", "m.pt", "--out", "R"],
                     ["evaluate", "--real", "D", "--out", "R2"]]
    assert all(problem(a) is None for a in found)
