"""Shared parts of the paper-reproduction scripts (benchmarks/reproduce/<paper>.py).

Each script: builds a phantom at a stated scale, splits it by patient as the demo does, writes the training
split as its own dataset, makes the paper's releases with the shipped models (the demo's defaults), audits them,
evaluates them with :func:`medanon.evaluate.harness.evaluate` (the demo's CPU-sized protocol, the calibrated
attacks, verdicts and validity), then puts the paper's table cells next to ours (value, 95 % interval, N) and
judges each claim of the paper. Every step reuses what is on disk: phantoms with the same settings, release
folders (a release resumes by itself), and the evaluation cache, so an interrupted run resumes.

Verdicts compare 95 % intervals: a claimed order ``a < b`` **holds** when a's interval lies wholly below b's,
**does not hold** when it lies wholly above, otherwise it is **cannot tell at this N**. Where two releases are
tested on the same held-out images (utility), the claim is judged on their **paired** difference (the
evaluation's ``utility.compare``: a patient cluster bootstrap of a − b, :func:`compare_cell`): it holds when the
difference's interval excludes 0 on the claimed side. Unpaired intervals (FID, membership) that overlap can hide a
real difference, so "cannot tell" is the conservative answer there, never a pass.
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOLDS, FAILS, UNSURE = "holds", "does not hold", "cannot tell at this N"


@dataclass
class Cell:
    """One of our numbers: value, 95 % interval, N (and a note, e.g. an invalid attack)."""

    value: float | None
    lo: float | None = None
    hi: float | None = None
    n: int | str | None = None
    note: str = ""

    def fmt(self, digits: int = 3, scale: float = 1.0) -> str:
        if self.value is None:
            return "—" + (f" ({self.note})" if self.note else "")
        v = f"{self.value * scale:.{digits}f}"
        ci = f" [{self.lo * scale:.{digits}f}, {self.hi * scale:.{digits}f}]" if self.lo is not None else ""
        n = f" N {self.n}" if self.n is not None else ""
        return v + ci + n + (f" ({self.note})" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "ci": [self.lo, self.hi], "n": self.n, **({"note": self.note} if self.note
                                                                             else {})}


def less(a: Cell, b: Cell) -> str:
    """Verdict on the claim ``a < b`` from the two 95 % intervals (see the module docstring)."""
    if a.value is None or b.value is None or a.lo is None or b.lo is None:
        return UNSURE
    if a.hi < b.lo:
        return HOLDS
    if a.lo > b.hi:
        return FAILS
    return UNSURE


def below_zero(d: Cell) -> str:
    """Verdict on ``d < 0`` from a (paired) difference interval."""
    if d.value is None or d.lo is None:
        return UNSURE
    return HOLDS if d.hi < 0 else FAILS if d.lo > 0 else UNSURE


def all_of(verdicts: list[str]) -> str:
    """A claim made of several orders: holds if all hold, does not hold if any fails, else cannot tell."""
    if any(v == FAILS for v in verdicts):
        return FAILS
    return HOLDS if verdicts and all(v == HOLDS for v in verdicts) else UNSURE


@dataclass
class Claim:
    claim: str                                  # one line, with the paper's table and row
    paper: str                                  # the paper's numbers
    ours: str                                   # ours, with intervals and N
    verdict: str
    reason: str = ""

    def to_dict(self) -> dict[str, str]:
        return dict(vars(self))


# ---------------------------------------------------------------- reading report.json


def release(report: dict, name: str) -> dict | None:
    return next((r for r in report.get("releases", []) if r.get("name") == name), None)


def fid_cell(rel: dict | None) -> Cell:
    f = ((rel or {}).get("fidelity") or {}).get("fid")
    if not f:
        return Cell(None, note="not run" if rel is None else "no Inception")
    return Cell(f["value"], *f.get("ci", [None, None])[:2], n=f.get("n"))


def utility_cell(rel: dict | None, task: str, metric: str, which: str = "release") -> Cell:
    """``which``: release, real_same_n (real images, same N) or difference (release − real_same_n, paired bootstrap)."""
    u = ((rel or {}).get("utility") or {}).get(task) or {}
    b = (u.get("paired_bootstrap") or {}).get(metric, {}).get(which)
    if not b:
        return Cell(None, note="not run" if rel is None else "no utility")
    n = f"{u.get('n_train')}/{u.get('n_test')}"               # training records / test images
    return Cell(b["value"], *b.get("ci", [None, None])[:2], n=n)


def compare_cell(report: dict, a: str, b: str, task: str, metric: str) -> Cell:
    """Release ``a`` minus release ``b`` on the same held-out images: the evaluation's paired comparison
    (``report["comparisons"]``, from ``utility.compare``), N = test images / patients resampled."""
    for c in report.get("comparisons") or []:
        if c.get("task") != task or {c.get("a"), c.get("b")} != {a, b}:
            continue
        m = (c.get("metrics") or {}).get(metric, {}).get("difference")
        if not m:
            break
        sign = 1.0 if c["a"] == a else -1.0
        lo, hi = (sign * x for x in m["ci"][:2])
        return Cell(sign * m["value"], min(lo, hi), max(lo, hi), n=f"{c.get('n')} img/{c.get('n_patients')} pat")
    return Cell(None, note="not compared")


def above_zero(d: Cell) -> str:
    """Verdict on ``d > 0`` from a paired difference interval."""
    if d.value is None or d.lo is None:
        return UNSURE
    return HOLDS if d.lo > 0 else FAILS if d.hi < 0 else UNSURE


def full_real_cell(report: dict, task: str, metric: str) -> Cell:
    u = ((report.get("controls") or {}).get("utility_full_real") or {}).get(task) or {}
    b = (u.get("bootstrap") or {}).get(metric, {}).get("release")
    if not b:
        return Cell(None, note="not run")
    return Cell(b["value"], *b["ci"][:2], n=f"{u.get('n_train')}/{u.get('n_test')}")


def real_fid_floor(report: dict, n: int | None) -> Cell:
    """FID of held-out real images at the same N (the evaluation's control): the best a release can do."""
    f = (((report.get("controls") or {}).get("fidelity_by_n") or {}).get(str(n)) or {}).get("fid")
    if not f:
        return Cell(None, note="no control")
    return Cell(f["value"], *f["ci"][:2], n=f.get("n"))


def attack_cell(rel: dict | None, attack: str, key: str, ci_key: str = "ci") -> Cell:
    a = ((rel or {}).get("attacks") or {}).get(attack)
    if not a or key not in a:
        return Cell(None, note="not run")
    valid = ((rel or {}).get("validity") or {}).get(attack) or {"valid": True}
    n = f"{a.get('records_evaluated', a.get('n'))} rec/{a.get('slots', a.get('n'))} slots" \
        if "slots" in a else a.get("n")
    lo, hi = (a.get(ci_key) or [None, None])[:2]
    return Cell(a[key], lo, hi, n=n, note="" if valid.get("valid", True) else "INVALID attack")


def attack_valid(rel: dict | None, attack: str) -> tuple[bool, str]:
    v = ((rel or {}).get("validity") or {}).get(attack) or {"valid": True, "reason": None}
    return bool(v.get("valid", True)), v.get("reason") or ""


# ---------------------------------------------------------------- markdown


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(out)


def claims_table(claims: list[Claim]) -> str:
    return md_table(["claim (paper's table, row)", "paper", "ours (95 % interval, N)", "verdict", "reason"],
                    [[c.claim, c.paper, c.ours, f"**{c.verdict}**", c.reason] for c in claims])


# ---------------------------------------------------------------- running


@dataclass
class Scale:
    name: str
    patients: int
    per_patient: int
    note: str                                    # what the scale stands for
    overrides: dict[str, Any] = field(default_factory=dict)     # EvalConfig fields (dotted) changed at this scale


def setup_threads(threads: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch

    torch.set_num_threads(threads)


def phantom(out: Path, *, modality: str, patients: int, per_patient: int, size: int, seed: int) -> Path:
    """The phantom dataset in ``out`` (reused when it holds the same settings; regenerated otherwise)."""
    from medanon.config import PhantomConfig, to_dict
    from medanon.phantoms.generate import generate

    cfg = PhantomConfig(modality=modality, patients=patients, per_patient=per_patient, size=size, seed=seed)
    info = out / "phantom.json"
    if info.exists() and json.loads(info.read_text())["settings"] == {k: v for k, v in to_dict(cfg).items()
                                                                        if k != "workers"}:
        return out
    return generate(cfg, out, overwrite=True, progress=False)


def split(data: Path, out: Path, *, stratify: str, size: int, seed: int):
    """The demo's patient split (15 % val = the attackers' patients, 15 % test = held-out controls), its CSV and
    the training split as its own dataset folder. Returns (dataset, splits_csv, train_dir)."""
    from medanon.config import DataConfig
    from medanon.data.dataset import open_dataset
    from medanon.data.splits import split_patients, write_splits_csv
    from medanon.demo import write_subset

    ds = open_dataset(data, DataConfig(size=size))
    assignment = split_patients(ds.records, val=0.15, test=0.15, stratify=stratify, seed=seed)
    csv = out / "splits.csv"
    if not csv.exists():
        write_splits_csv(csv, ds.records, assignment)
    train = write_subset(data, [r for r in ds.records if assignment[r.patient_id] == "train"], out / "train")
    return ds, csv, train


def make_release(dest: Path, make, log: list[str], command: str) -> Path:
    """Save ``make()`` to ``dest`` with its private mapping beside it unless it is complete already (a partly
    written release resumes inside ``save``).

    The command that makes a release is recorded beside it (``NAME.command``) before any work, and a folder is
    reused only when its recorded command is this one: a re-run with other settings (another k-SALSA start, say)
    stops with an error instead of silently reporting the old release under the new settings.
    """
    from medanon.errors import DataError
    from medanon.fsutil import atomic_write_text

    line = f"medanon {command}"
    log.append(f"{line} --out {dest}")
    recipe = dest.with_name(dest.name + ".command")
    recorded = recipe.read_text().strip() if recipe.is_file() else None
    started = dest.exists() or dest.with_name(dest.name + ".partial").exists()     # complete, or to be resumed
    if recorded is None and started:
        raise DataError(f"release folder {dest} (complete or .partial) exists but does not record the command that "
                        f"made it ({recipe.name} is missing), so it cannot be told whether it is `{line}`",
                        fix=f"remove {dest}, or, if `{line}` made it, write that line to {recipe}")
    if started and recorded != line:
        raise DataError(f"release folder {dest} (complete or .partial) was made by `{recorded}`, not by `{line}`",
                        fix="move it away or choose another output folder")
    if recorded != line:
        atomic_write_text(recipe, line + "\n")
    if not (dest / "manifest.json").exists():
        make().save(dest, mapping=dest.with_name(dest.name + ".mapping.json"), progress=False)
    return dest


def audit_all(releases: list[Path], source_records) -> None:
    from medanon.errors import DataError
    from medanon.release.audit import audit_release

    for rel in releases:
        mapping = rel.with_name(rel.name + ".mapping.json")
        rep = audit_release(rel, mapping=mapping if mapping.exists() else None, source_records=source_records)
        if not rep.passed:
            raise DataError(f"release {rel} failed its audit: {rep.format()}", fix="this is a bug: please report it")


def apply_overrides(cfg, overrides: dict[str, Any]):
    """``cfg`` with dotted EvalConfig fields replaced (``fidelity.max_samples``: 1000)."""
    from dataclasses import replace

    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        cfg = replace(cfg, **{head: apply_overrides(getattr(cfg, head), {rest: value}) if rest else value})
    return cfg


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Timer:
    def __init__(self):
        self.t0, self.c0, self.stages = time.perf_counter(), cpu_seconds(), {}

    def stage(self, name: str, t_wall: float, t_cpu: float) -> None:
        self.stages[name] = {"wall_s": round(time.perf_counter() - t_wall, 1), "cpu_s": round(cpu_seconds() - t_cpu, 1)}

    def total(self) -> dict[str, float]:
        return {"wall_s": round(time.perf_counter() - self.t0, 1), "cpu_s": round(cpu_seconds() - self.c0, 1)}


def git_commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_paper(args, *, paper: str, scale: Scale, modality: str, stratify: str, make_releases, assemble,
              script: str, compare: tuple[tuple[str, str], ...] = ()) -> dict:
    """The common pipeline: phantom -> split -> releases (``make_releases(train, rel_dir, ckpt, seed=, device=,
    log=)``) -> audit -> the demo's evaluation -> ``assemble(report, scale=, note=, command=, timing=)`` ->
    OUT/table.md, OUT/result.json and one JSON line on stdout. Every step resumes from what is on disk."""
    setup_threads(args.threads)
    from medanon.demo import default_checkpoints, eval_config
    from medanon.evaluate.harness import evaluate
    from medanon.runtime import resolve_device, seed_everything

    out = args.out or Path(f"/work/repro-runs/{paper}-{scale.name}")
    out.mkdir(parents=True, exist_ok=True)
    import sys

    command = f"python benchmarks/reproduce/{script} " + " ".join(sys.argv[1:])
    if args.tables_only:
        report = json.loads((out / "report" / "report.json").read_text())
        old = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
        md, result = assemble(report, scale=scale.name, note=scale.note, command=old.get("command", command),
                              timing=old.get("timing", {}))
        result = {**old, **result}
    else:
        claim_out(out, paper=paper, scale=scale, seed=args.seed)
        timer, commit = Timer(), git_commit()            # the code that runs (others may commit meanwhile)
        seed_everything(args.seed)
        dev = resolve_device(args.device)
        ckpt = default_checkpoints()
        t, c = time.perf_counter(), cpu_seconds()
        data = phantom(out / "data", modality=modality, patients=scale.patients, per_patient=scale.per_patient,
                       size=64, seed=args.seed)
        ds, splits, train = split(data, out, stratify=stratify, size=64, seed=args.seed)
        timer.stage("phantom", t, c)
        t, c, log = time.perf_counter(), cpu_seconds(), []
        rels = make_releases(train, out / "releases", ckpt, seed=args.seed, device=dev, log=log)
        audit_all(rels, ds.records)
        timer.stage("releases", t, c)
        t, c = time.perf_counter(), cpu_seconds()
        cfg = eval_config(modality, 64, ckpt, scale.patients, scale.per_patient, args.seed,
                          inception=not args.no_inception)
        overrides = {**scale.overrides, **({"utility.compare": compare} if compare else {})}
        report = evaluate(data, rels, out / "report", config=apply_overrides(cfg, overrides), splits=splits,
                          device=dev, cache_dir=out / "cache", progress=False)
        timer.stage("evaluate", t, c)
        timing = {**timer.total(), "stages": timer.stages, "device": str(dev), "threads": args.threads}
        md, result = assemble(report, scale=scale.name, note=scale.note, command=command, timing=timing)
        result.update(command=command, out=str(out), commit=commit, timing=timing, releases_commands=log,
                      patients=scale.patients, images=scale.patients * scale.per_patient)
    (out / "table.md").write_text(md)
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    line = {k: result.get(k) for k in ("paper", "scale", "scale_note", "verdicts", "out", "commit", "timing")}
    line["claims"] = [[c["claim"], c["verdict"]] for c in result["claims"]]
    line["table"] = str(out / "table.md")
    print(json.dumps(line))
    return result


def parser(doc: str, scales: dict[str, Scale]):
    import argparse

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", choices=sorted(scales), default="small")
    p.add_argument("--out", type=Path, default=None, help="default /work/repro-runs/<paper>-<scale>")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto: a GPU when one is available")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-inception", action="store_true", help="no FID")
    p.add_argument("--tables-only", action="store_true",
                   help="rebuild table.md and result.json from OUT/report/report.json (no computation)")
    return p


def page(*, paper: str, title: str, scale: str, note: str, command: str, timing, intro: list[str],
         sections: list[tuple[str, str]], claims: list[Claim], tables: dict, **extra) -> tuple[str, dict]:
    """One paper's Markdown page (title, command, intro lines, one section per table, the claims) and its result
    dict (verdict counts, claims, tables, ``extra``)."""
    claims = finalize(claims)
    counts = {v: sum(c.verdict == v for c in claims) for v in (HOLDS, FAILS, UNSURE)}
    md = [f"# {title} reproduction — scale `{scale}`: {note}", "", f"`{command}`  ({timing})", ""]
    for line in intro:
        md += [line, ""]
    for head, table in [*sections, ("Claims", claims_table(claims))]:
        md += [f"## {head}", "", table, ""]
    return "\n".join(md), {"paper": paper, "scale": scale, "scale_note": note, "verdicts": counts, **extra,
                           "claims": [c.to_dict() for c in claims], "tables": tables}


def finalize(claims: list[Claim]) -> list[Claim]:
    """A claim whose numbers were not measured (a release or an attack missing) says so instead of a reason."""
    for c in claims:
        if "not run" in c.ours:
            c.verdict, c.reason = UNSURE, "not measured: a release or an attack of this row is missing"
    return claims


def claim_out(out: Path, *, paper: str, scale: Scale, seed: int) -> None:
    """Record what ``out`` holds; refuse to resume a folder made for another paper, scale or seed (its splits and
    training subset would be stale)."""
    from medanon.errors import ConfigError

    want = {"paper": paper, "scale": scale.name, "patients": scale.patients, "per_patient": scale.per_patient,
            "seed": seed}
    path = out / "scale.json"
    if path.exists():
        have = json.loads(path.read_text())
        if have != want:
            raise ConfigError(f"{out} holds a run of {have}, not {want}",
                              fix="pass another --out (each paper, scale and seed has its own folder)")
        return
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(want) + "\n")
