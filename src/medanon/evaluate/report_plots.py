"""The report's privacy-utility plots: inline SVG scatter plots, one point per release."""

from __future__ import annotations

import math

import numpy as np

from medanon.evaluate.report_format import _e, _kind
from medanon.evaluate.utility import HEADLINE, METRIC_NAMES


def _scatter(points: list[tuple[str, float, float]], *, xlabel: str, ylabel: str, title: str,
             xref: float | None = None, yref: float | None = None, xref_label: str = "", yref_label: str = "") -> str:
    pts = [(n, x, y) for n, x, y in points if not (math.isnan(x) or math.isnan(y))]
    if not pts:
        return ""
    w, h, ml, mr, mt, mb = 460, 320, 56, 20, 28, 46
    xs = [x for _, x, _ in pts] + ([xref] if xref is not None else [])
    ys = [y for _, _, y in pts] + ([yref] if yref is not None else [])
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    px, py = max(0.05, 0.1 * (x1 - x0)), max(0.05, 0.1 * (y1 - y0))
    x0, x1, y0, y1 = x0 - px, x1 + px, y0 - py, y1 + py
    sx = lambda v: ml + (v - x0) / (x1 - x0) * (w - ml - mr)          # noqa: E731
    sy = lambda v: h - mb - (v - y0) / (y1 - y0) * (h - mt - mb)      # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" class=plot>',
             f'<text x="{w / 2}" y="16" text-anchor="middle" class=pt>{_e(title)}</text>',
             f'<line x1="{ml}" y1="{h - mb}" x2="{w - mr}" y2="{h - mb}" class=ax />',
             f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{h - mb}" class=ax />',
             f'<text x="{(ml + w - mr) / 2}" y="{h - 10}" text-anchor="middle" class=al>{_e(xlabel)}</text>',
             f'<text x="14" y="{(mt + h - mb) / 2}" text-anchor="middle" class=al '
             f'transform="rotate(-90 14 {(mt + h - mb) / 2})">{_e(ylabel)}</text>']
    for t in np.linspace(x0, x1, 5):
        parts.append(f'<text x="{sx(t):.1f}" y="{h - mb + 14}" text-anchor="middle" class=tk>{t:.2f}</text>')
    for t in np.linspace(y0, y1, 5):
        parts.append(f'<text x="{ml - 4}" y="{sy(t) + 4:.1f}" text-anchor="end" class=tk>{t:.2f}</text>')
    if xref is not None:
        parts.append(f'<line x1="{sx(xref):.1f}" y1="{mt}" x2="{sx(xref):.1f}" y2="{h - mb}" class=ref />'
                     f'<text x="{sx(xref) + 3:.1f}" y="{mt + 10}" class=tk>{_e(xref_label)}</text>')
    if yref is not None:
        parts.append(f'<line x1="{ml}" y1="{sy(yref):.1f}" x2="{w - mr}" y2="{sy(yref):.1f}" class=ref />'
                     f'<text x="{w - mr - 3}" y="{sy(yref) - 4:.1f}" text-anchor="end" class=tk>'
                     f'{_e(yref_label)}</text>')
    for n, x, y in pts:
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" class=dot><title>{_e(n)}: '
                     f'({x:.3f}, {y:.3f})</title></circle>'
                     f'<text x="{sx(x) + 6:.1f}" y="{sy(y) - 5:.1f}" class=lb>{_e(n)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def plots(rep: dict) -> str:
    if not rep["tasks"]:
        return ""
    task = rep["tasks"][0]
    h = HEADLINE[_kind(task)]
    ylabel = f"{METRIC_NAMES[h]} ({task}), train on release"
    full = rep["controls"].get("utility_full_real", {}).get(task)
    yref = full["scores"].get(h) if full else None

    def util_of(r):
        u = r["utility"].get(task, {})
        return u.get("release", {}).get(h, {}).get("mean", float("nan"))

    svgs = []
    specs = [("membership", "top_k_accuracy", "membership top-K accuracy"),
             ("linkability", None, "outer-risk two-sided AUC"),
             ("attribute", "accuracy", "attribute attacker accuracy"),
             ("singling_out", None, "singled out, two-sided top-1")]
    for key, field, xlabel in specs:
        pts = []
        for r in rep["releases"]:
            a = r["attacks"].get(key) or {}
            if key == "linkability":
                x = (a.get("outer") or {}).get("AUC_two_sided", float("nan")) if "control" in a else float("nan")
            elif key == "singling_out":
                x = a.get("two_sided_top1", float("nan"))
            else:
                x = a.get(field, float("nan"))
            pts.append((r["name"], float(x), float(util_of(r))))
        svgs.append(_scatter(pts, xlabel=f"{xlabel} (privacy risk →)", ylabel=ylabel,
                             title=f"Privacy–utility: {xlabel}", yref=yref, yref_label="real data"))
    svgs = [s for s in svgs if s]
    note = ("<p class=note>One point per release; the dashed line is the classifier trained on all real source "
            "images. Chance levels differ per release (see the tables).</p>")
    return ("<h2>Privacy–utility</h2>" + note + "<div class=plots>" + "".join(svgs) + "</div>") if svgs else ""
