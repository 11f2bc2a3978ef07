"""The report's privacy-utility plots: inline SVG scatter plots, one point per release, with error bars.

x is a residual risk (0 = the attacker learns nothing of members beyond what it learns of people not in the
release, marked by a dashed line) with its 95 % interval; y the utility of a classifier trained on the release (with
its patient bootstrap interval) or, in the verdict plot, the utility kept (the release's share of real images' gain
over chance, same N) with its interval. Only valid risk rows are drawn (:mod:`medanon.evaluate.calibration`). Points
carry numbers; the legend under each plot names them, so labels never overlap.
"""

from __future__ import annotations

import math

import numpy as np

from medanon.evaluate.report_format import _e, _kind
from medanon.evaluate.utility import HEADLINE, METRIC_NAMES

Point = tuple[str, float, float, tuple[float, float] | None, tuple[float, float] | None]   # name, x, y, x-, y-interval


def nice_ticks(lo: float, hi: float, n: int = 6) -> np.ndarray:
    """Round ticks (steps of 1, 2 or 5 × 10^k) covering [lo, hi]."""
    span = max(hi - lo, 1e-9)
    raw = span / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return np.arange(first, last + 1) * step


def _scatter(points: list[Point], *, xlabel: str, ylabel: str, title: str, xref: float | None = None,
             yref: float | None = None, xref_label: str = "", yref_label: str = "") -> str:
    finite = lambda iv: iv if iv is not None and all(math.isfinite(v) for v in iv) else None   # noqa: E731
    pts = [(n, x, y, finite(xe), finite(ye)) for n, x, y, xe, ye in points if math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return ""
    w, h, ml, mr, mt, mb = 460, 320, 56, 20, 28, 46
    xs = [v for n, x, y, xe, ye in pts for v in (x, *(xe or ()))] + ([xref] if xref is not None else [])
    ys = [v for n, x, y, xe, ye in pts for v in (y, *(ye or ()))] + ([yref] if yref is not None else [])
    xt, yt = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
    x0, x1, y0, y1 = float(xt[0]), float(xt[-1]), float(yt[0]), float(yt[-1])
    sx = lambda v: ml + (v - x0) / (x1 - x0 or 1) * (w - ml - mr)          # noqa: E731
    sy = lambda v: h - mb - (v - y0) / (y1 - y0 or 1) * (h - mt - mb)      # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" class=plot>',
             f'<text x="{w / 2}" y="16" text-anchor="middle" class=pt>{_e(title)}</text>',
             f'<line x1="{ml}" y1="{h - mb}" x2="{w - mr}" y2="{h - mb}" class=ax />',
             f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{h - mb}" class=ax />',
             f'<text x="{(ml + w - mr) / 2}" y="{h - 10}" text-anchor="middle" class=al>{_e(xlabel)}</text>',
             f'<text x="14" y="{(mt + h - mb) / 2}" text-anchor="middle" class=al '
             f'transform="rotate(-90 14 {(mt + h - mb) / 2})">{_e(ylabel)}</text>']
    parts += [f'<text x="{sx(t):.1f}" y="{h - mb + 14}" text-anchor="middle" class=tk>{t:g}</text>' for t in xt]
    parts += [f'<text x="{ml - 4}" y="{sy(t) + 4:.1f}" text-anchor="end" class=tk>{t:g}</text>' for t in yt]
    if xref is not None:
        parts.append(f'<line x1="{sx(xref):.1f}" y1="{mt}" x2="{sx(xref):.1f}" y2="{h - mb}" class=ref />'
                     f'<text x="{sx(xref) + 3:.1f}" y="{mt + 10}" class=tk>{_e(xref_label)}</text>')
    if yref is not None:
        parts.append(f'<line x1="{ml}" y1="{sy(yref):.1f}" x2="{w - mr}" y2="{sy(yref):.1f}" class=ref />'
                     f'<text x="{w - mr - 3}" y="{sy(yref) - 4:.1f}" text-anchor="end" class=tk>'
                     f'{_e(yref_label)}</text>')
    legend = []
    for i, (n, x, y, xe, ye) in enumerate(pts, 1):
        if xe:
            parts.append(f'<line x1="{sx(xe[0]):.1f}" y1="{sy(y):.1f}" x2="{sx(xe[1]):.1f}" y2="{sy(y):.1f}" '
                         f'class=err />')
        if ye:
            parts.append(f'<line x1="{sx(x):.1f}" y1="{sy(ye[0]):.1f}" x2="{sx(x):.1f}" y2="{sy(ye[1]):.1f}" '
                         f'class=err />')
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" class=dot><title>{_e(n)}: '
                     f'({x:.3f}, {y:.3f})</title></circle>'
                     f'<text x="{sx(x) + 5:.1f}" y="{sy(y) - 5:.1f}" class=lb>{i}</text>')
        legend.append(f"{i} {_e(n)}")
    parts.append("</svg>")
    return f"<figure>{''.join(parts)}<figcaption class=ci>{'; '.join(legend)}</figcaption></figure>"


def _valid_risk(r: dict, row: str) -> tuple[float, tuple[float, float] | None]:
    from medanon.evaluate.calibration import risk_rows

    risk = risk_rows(r["attacks"]).get(row)
    if risk is None or not ((r.get("validity") or {}).get(row) or {}).get("valid"):
        return float("nan"), None
    rr = risk["residual_risk"]
    return float(rr["risk"]), (float(rr["ci"][0]), float(rr["ci"][1]))


def utility_point(r: dict, task: str, metric: str) -> tuple[float, tuple[float, float] | None]:
    """Release ``r``'s utility on ``task`` (``metric``) with its 95 % interval over the test set's patients (the
    paired bootstrap, averaged over seeds); where the evaluation ran without the bootstrap, the mean ± sd over seeds.

    >>> r = {"utility": {"grade": {"release": {"kappa": {"mean": 0.4, "sd": 0.0}},
    ...                            "paired_bootstrap": {"kappa": {"release": {"value": 0.41, "ci": [0.2, 0.6]}}}}}}
    >>> utility_point(r, "grade", "kappa")
    (0.41, (0.2, 0.6))
    """
    u = r["utility"].get(task, {})
    b = ((u.get("paired_bootstrap") or {}).get(metric) or {}).get("release")
    if b and b.get("ci"):
        return float(b["value"]), (float(b["ci"][0]), float(b["ci"][1]))
    s = (u.get("release") or {}).get(metric) or {}
    m, sd = float(s.get("mean", float("nan"))), float(s.get("sd", 0.0))
    return m, (m - sd, m + sd)


def plots(rep: dict) -> str:
    if not rep["tasks"]:
        return ""
    task = rep["tasks"][0]
    h = HEADLINE[_kind(task)]
    ylabel = f"{METRIC_NAMES[h]} ({task}), train on release"
    full = rep["controls"].get("utility_full_real", {}).get(task)
    yref = full["scores"].get(h) if full else None


    svgs = []
    kept = []
    for r in rep["releases"]:
        v = r.get("verdict") or {}
        u = next((u for u in v.get("utility_kept", []) if u["task"] == task), None)
        if "risk" in v and u is not None:
            kept.append((r["name"], float(v["risk"]), float(u["kept"]), tuple(v["ci"]),
                         tuple(u["ci"]) if u.get("ci") else None))
    svgs.append(_scatter(kept, xlabel="largest valid residual risk (privacy risk →)",
                         ylabel=f"{METRIC_NAMES[h]} kept (share of real's gain over chance)",
                         title="Verdict: risk vs utility kept",
                         xref=0.0, xref_label="no leak", yref=1.0, yref_label="as real"))
    for row, label in (("membership", "membership top-K"), ("nearest", "nearest-record membership"),
                       ("singling_out", "singling out"), ("linkability", "linkability"),
                       ("siamese", "Siamese membership"), ("attribute", "attribute inference")):
        pts = []
        for r in rep["releases"]:
            x, xe = _valid_risk(r, row)
            y, ye = utility_point(r, task, h)
            pts.append((r["name"], x, y, xe, ye))
        svgs.append(_scatter(pts, xlabel=f"{label}: residual risk (→)", ylabel=ylabel,
                             title=f"Privacy–utility: {label}", xref=0.0, xref_label="no leak", yref=yref,
                             yref_label="real data"))
    svgs = [s for s in svgs if s]
    note = ("<p class=note>One point per release; horizontal bars: 95 % interval of the residual risk; vertical "
            "bars: the 95 % interval of the utility kept (verdict plot) and of the release's utility (the other "
            "plots), both over the test set's patients (paired bootstrap; where the evaluation ran without it, "
            "± sd over the utility's seeds, 0 for a deterministic learner). Only valid attacks are drawn (see "
            "Calibration). "
            "Dashed lines: x = 0, no leak beyond the attack's reference (its control, or for top-K membership, "
            "singling out and the attribute attack its random-guessing baseline); y = 1 in the verdict plot, as "
            "much as real images of the same number; y in the other plots, the classifier trained on all real "
            "source images.</p>")
    if not svgs:                                 # said, not left out: the reader looks for the plots
        return ("<h2>Privacy–utility</h2><p class=note>No release has a valid attack row with a utility to draw "
                "(each release's validity in the Verdict and Calibration sections says why).</p>")
    return "<h2>Privacy–utility</h2>" + note + "<div class=plots>" + "".join(svgs) + "</div>"
