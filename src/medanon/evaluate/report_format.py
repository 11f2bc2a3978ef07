"""Formatting of the report's HTML: numbers with intervals, tables, the papers' pivot layout (methods as rows,
settings such as k as columns)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from medanon.evaluate.utility import kind_of


def _missing(v: Any) -> bool:
    """No value: None or NaN (what an interval that was not computed holds)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _num(v: Any, digits: int = 3) -> str:
    if _missing(v):
        return "–"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{v:.{digits}f}"


def _ci(d: dict | None, digits: int = 2) -> str:
    if not d:
        return "–"
    lo, hi = d.get("ci") or (None, None)
    if _missing(lo) or _missing(hi):               # no interval was computed (e.g. no bootstrap resamples)
        return f"{_num(d['value'], digits)} <span class=ci>(no interval)</span>"
    return f"{_num(d['value'], digits)} <span class=ci>[{_num(lo, digits)}, {_num(hi, digits)}]</span>"


def _pm(s: dict | None, digits: int = 3) -> str:
    if not s:
        return "–"
    return f"{_num(s['mean'], digits)} <span class=ci>± {_num(s['sd'], digits)}</span>"


def _pct(v: float | None, digits: int = 1) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.{digits}f}"


def _e(s: Any) -> str:
    return html.escape(str(s))


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], *, caption: str = "") -> str:
    cap = f"<caption>{caption}</caption>" if caption else ""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{cap}<thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


KEY_PARAMS = ("k", "p", "epsilon", "losses")        # the parameter a paper's table has as its columns


def short_setting(params: dict) -> str | None:
    """The column label of a release in the papers' tables: ``k=5``, ``p=0.3``, ``ε=100/element``, ``losses=id+ut``.

    An ε given per element (the manifest's ``per_element`` flag; ``per_pixel`` in releases made before it was
    renamed) is the image budget divided by D: the label says "per element", never "per pixel", since DP-GLOW gives
    no per-pixel guarantee."""
    for key in KEY_PARAMS:
        if key in params:
            v = params[key]
            if key == "epsilon":
                v = v if isinstance(v, str) else f"{v:g}"
                return f"ε={v}" + ("/element" if params.get("per_element", params.get("per_pixel")) else "/image")
            return f"{key}={v}"
    return None


def assign_columns(releases: list[dict]) -> None:
    """Give every release its pivot-table column (``column``): the short setting, the full one where two
    releases of one method would share a short label, and the release's name beside it where they would share that
    too."""
    short = [short_setting(r.get("params") or {}) for r in releases]
    seen: dict[tuple[str, str | None], int] = {}
    for r, s in zip(releases, short, strict=True):
        seen[(r["method"], s)] = seen.get((r["method"], s), 0) + 1
    for r, s in zip(releases, short, strict=True):
        r["column"] = s if s is not None and seen[(r["method"], s)] == 1 else (r["setting"] or "–")
    # releases of one method whose full settings are alike too (the same k, other released labels; the known-answer
    # releases): each takes its name, so no release is left out of a pivot table, whose cells hold one release each
    full: dict[tuple[str, str], int] = {}
    for r in releases:
        full[(r["method"], r["column"])] = full.get((r["method"], r["column"]), 0) + 1
    for r in releases:
        if full[(r["method"], r["column"])] > 1:
            r["column"] = f"{r['column']} ({r['name']})" if r["column"] != "–" else r["name"]


def _col(r: dict) -> str:
    return r.get("column") or r["setting"] or "–"


def _columns(releases: list[dict]) -> tuple[list[str], list[str]]:
    """Methods (rows) and settings (columns) in first-seen order, for the paper-style pivot tables."""
    methods = list(dict.fromkeys(r["method"] for r in releases))
    settings = list(dict.fromkeys(_col(r) for r in releases))
    return methods, settings


def _cell(releases: list[dict], method: str, setting: str) -> dict | None:
    for r in releases:
        if r["method"] == method and _col(r) == setting:
            return r
    return None


def _kind(task: str) -> str:
    return kind_of(task)


def _skipped(rels: list[dict], ok: list[dict], key: str) -> list[str]:
    """A note for every release the attack ``key`` did not run on, with the reason."""
    return [f"<p class=note>{_e(r['name'])}: {_e(r['attacks'][key].get('skipped', 'not run'))}</p>"
            for r in rels if r not in ok and r["attacks"].get(key) is not None]


def _unit_mark(text: str | None, *, field: str = "resampled") -> str:
    """What an interval resampled, said beside it where it is not patients (``text``: an entry's ``resampled`` field,
    or with ``field="interval"`` its ``interval`` description); "" where it is patients or not recorded. Images or
    records drawn one by one make an interval too narrow where one patient has several.

    >>> _unit_mark("patients"), _unit_mark(None), _unit_mark("patient cluster bootstrap over the records' patients",
    ...                                                      field="interval")
    ('', '', '')
    >>> _unit_mark("images")
    ' <span class=ci>(interval resamples images one by one, not patients: too narrow where one patient has ...)</span>'
    >>> _unit_mark("patients (reference), images (evaluated set)")
    ' <span class=ci>(interval resamples the reference by patient but these images one by one: too narrow ...)</span>'
    """
    if not text or text == "patients" or text.startswith("patient cluster bootstrap"):
        return ""
    said = {"patients (reference), images (evaluated set)":
            "interval resamples the reference by patient but these images one by one",
            "images (reference), patients (evaluated set)":
            "interval resamples these images by patient but the reference's one by one"}.get(text)
    if said is None:
        said = (f"interval resamples {text} one by one, not patients" if text in ("images", "records") else
                f"{'interval resamples ' if field == 'resampled' else ''}{text}, not by patient")
    return f" <span class=ci>({_e(said)}: too narrow where one patient has several)</span>"


def undefined_cell(d: dict) -> str:
    """A residual risk without a value (its reference succeeds on every target), with the reason instead."""
    return f"– <span class=ci>{_e(d.get('interval') or 'undefined')}</span>"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1: ``1 seed``, ``3 seeds``."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _assume(text: str) -> str:
    return f"<p class=assume><b>Assumptions.</b> {_e(text)}.</p>"




def differencing_space(d: dict) -> str:
    """Where a pair of releases was differenced (a ``differencing`` entry): ``pixels``, or ``latent: <codec>``."""
    return "pixels" if d.get("space", "pixels") == "pixels" else f"latent: {d['codec']}"
