"""What :func:`medanon.evaluate` returns: :class:`EvaluationResult`, the report as Python objects, with its page
(:meth:`EvaluationResult.to_html`) and every headline number as one flat record (:meth:`EvaluationResult.summary`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medanon.errors import ConfigError, check_path_arg


@dataclass
class EvaluationResult:
    """What :func:`evaluate` measured: one entry per release, the controls, notes; the report's files.

    ``releases`` holds, per release, its name, method, privacy statement, fidelity, utility and
    attacks (as in ``report.json``; docs/evaluation.md explains every number). ``comparisons``: one entry per
    pair of releases named in ``utility.compare`` and task (``report.json`` ``comparisons``): both releases'
    utility on the same held-out images and the difference a - b with a paired patient bootstrap interval.
    ``differencing``: one entry per two releases of the same people (``report.json`` ``differencing``): the patients
    a difference of their records recovers, against held-out controls.
    """

    releases: list[dict[str, Any]]
    controls: dict[str, Any]
    real: dict[str, Any]
    phantom: bool
    notes: list[str]
    seconds: float
    report: dict[str, Any] = field(repr=False)           # the whole report.json
    html: str = field(repr=False)                        # the self-contained HTML report
    out: Path | None = None                              # where the harness wrote it (None: a temporary folder)
    comparisons: list[dict[str, Any]] = field(default_factory=list)   # release vs release utility (utility.compare)
    differencing: list[dict[str, Any]] = field(default_factory=list)  # two releases of the same people, differenced
    # everything the evaluation read (data folder and image folders, splits, releases, mappings): never written over
    reads: list[Path] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (what ``report.json`` holds)."""
        return self.report

    def to_html(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the self-contained HTML report to ``path``: never into the data or releases it read, and over an
        existing file only with ``overwrite`` when that file is a medanon report."""
        from medanon.evaluate.report import REPORT_HEAD
        from medanon.fsutil import atomic_write_text
        from medanon.outputs import OutputExistsError, UnsafeOutputError, check_not_an_input, check_output

        check_path_arg("path", path, optional=False, what="a file path for the page")
        from medanon.config import check_type

        check_type("overwrite", overwrite, "bool")
        path = Path(path)
        reads = [self.real.get("path"), *(r.get("path") for r in self.releases), *self.reads]
        if path.is_file() and path.read_bytes().startswith(REPORT_HEAD.encode()):
            if not overwrite:
                raise OutputExistsError(f"path {path} already exists", fix="choose another path, or pass "
                                                                          "overwrite=True to replace that report")
            check_not_an_input(path, inputs=reads, name="path")          # rule 1; replacing it is allowed
        elif path.exists():
            raise UnsafeOutputError(f"path {path} exists and is not a medanon report: it is never replaced",
                                    fix="choose another path")
        else:
            check_output(path, inputs=reads, kind="file", name="path")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, self.html)
        return path

    def summary(self) -> list[dict[str, Any]]:
        """Every headline number as one flat record: ``release, attack, metric, value, lo, hi, n, valid, reason``.

        ``attack`` is the residual-risk row (``nearest``, ``linkability (reverse)``, ``independent singling_out``,
        ...), ``verdict``, ``fidelity`` or ``utility: <task>``; ``lo`` / ``hi`` the 95 % interval (None where there
        is none); ``valid`` / ``reason`` the row's validity (attacks and the verdict; True for fidelity and utility).
        A comparison of two releases (``utility.compare``) gives rows with ``release`` ``"<a> - <b>"`` and ``attack``
        ``utility difference: <task>``: the difference a - b of each metric, ``n`` the held-out images. Two releases
        of the same people differenced give a row with ``release`` ``"<a> + <b>"`` and ``attack`` ``differencing`` (in
        pixels) or ``differencing (latent: <codec>)`` (in the latent space of the public codec both were made with).

        Example:
            >>> r = EvaluationResult(releases=[{"name": "k2", "attacks": {}, "fidelity": {"fid": {"value": 9.0,
            ...     "ci": [8.0, 11.0], "n": 50}}}], controls={}, real={}, phantom=True, notes=[], seconds=0.0,
            ...     report={}, html="")
            >>> r.summary()[0]["metric"], r.summary()[0]["value"]
            ('fid', 9.0)
        """
        from medanon.evaluate.report_format import differencing_space

        return [rec for r in self.releases for rec in _summary(r)] + \
            [rec for c in self.comparisons for rec in _comparison_summary(c)] + \
            [_record(" + ".join(d["releases"]), "differencing" + ("" if (s := differencing_space(d)) == "pixels"
                                                                  else f" ({s})"),
                     "residual_risk", d["risk"]["residual_risk"]["risk"], d["risk"]["residual_risk"]["ci"],
                     d["risk"]["n"]) for d in self.differencing]

    def to_frame(self):
        """:meth:`summary` as a pandas DataFrame (one row per number); needs pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ConfigError("EvaluationResult.to_frame needs pandas, which is not installed",
                              fix="pip install pandas, or use EvaluationResult.summary() (a list of dicts)") from None
        return pd.DataFrame(self.summary(), columns=list(SUMMARY_FIELDS))

    def release(self, name: str) -> dict[str, Any]:
        """The results of the release named ``name`` (its folder name)."""
        if not isinstance(name, str):
            raise TypeError(f"release() takes a release's name (its folder name), not {type(name).__name__}: "
                            f"{[r.get('name') for r in self.releases]}; by position, use .releases[i]")
        for r in self.releases:
            if r.get("name") == name:
                return r
        raise KeyError(f"no release named {name!r}; evaluated: {[r.get('name') for r in self.releases]}")


SUMMARY_FIELDS = ("release", "attack", "metric", "value", "lo", "hi", "n", "valid", "reason")


def _record(release: str, attack: str, metric: str, value, ci=None, n=None, valid: bool = True,
            reason: str | None = None) -> dict[str, Any]:
    lo, hi = (ci or (None, None))[:2]
    return dict(zip(SUMMARY_FIELDS, (release, attack, metric, None if value is None else float(value),
                                     None if lo is None else float(lo), None if hi is None else float(hi), n,
                                     bool(valid), reason), strict=True))


def _summary(rel: dict[str, Any]) -> list[dict[str, Any]]:
    """One release's records for :meth:`EvaluationResult.summary`."""
    from medanon.evaluate.calibration import risk_rows

    name, out = rel.get("name"), []
    v = rel.get("verdict") or {}
    if "risk" in v:
        out.append(_record(name, "verdict", "residual_risk", v["risk"], v.get("ci"), v.get("n"),
                           reason=v.get("attack")))
    elif v.get("no_copy_detector"):
        out.append(_record(name, "verdict", "residual_risk", None, valid=False, reason=v["no_copy_detector"]))
    for u in v.get("utility_kept", []):
        out.append(_record(name, "verdict", f"utility_kept {u['task']} {u['metric']}", u["kept"], u.get("ci"),
                           u.get("n")))
    validity = rel.get("validity") or {}
    for row, risk in risk_rows(rel.get("attacks") or {}).items():
        rr, ok = risk["residual_risk"], validity.get(row) or {"valid": True, "reason": None}
        out.append(_record(name, row, "residual_risk", rr["risk"], rr["ci"], risk.get("n"), ok["valid"],
                           ok.get("reason")))
    for metric, f in (rel.get("fidelity") or {}).items():
        if isinstance(f, dict) and ("value" in f or "mean" in f):
            ci = f.get("ci") or ([f["low"], f["high"]] if "low" in f else None)   # (KID's sd is no interval)
            out.append(_record(name, "fidelity", metric, f.get("value", f.get("mean")), ci,
                               f.get("n", (rel.get("fidelity") or {}).get("n"))))
    for task, u in (rel.get("utility") or {}).items():
        if not isinstance(u, dict) or "skipped" in u:
            continue
        for metric, b in (u.get("paired_bootstrap") or {}).items():
            got = b.get("release") or {}
            out.append(_record(name, f"utility: {task}", metric, got.get("value"), got.get("ci"), u.get("n_test")))
    return out


def _comparison_summary(c: dict[str, Any]) -> list[dict[str, Any]]:
    """One comparison's records for :meth:`EvaluationResult.summary`: the difference a - b of every metric."""
    return [_record(f"{c['a']} - {c['b']}", f"utility difference: {c['task']}", metric, m["difference"]["value"],
                    m["difference"]["ci"], c.get("n")) for metric, m in (c.get("metrics") or {}).items()]
