"""The evaluation report: ``report.json`` (every number) and a self-contained ``report.html``.

The HTML page needs nothing but a browser: styles are inline, images are embedded as base64 PNG,
plots are inline SVG. Tables are laid out like the papers' tables: fidelity and downstream
classification as k-SALSA Tables 1-2 (methods as rows, settings such as k as columns, the
train-on-real baseline at the same N under each setting), membership inference as k-SALSA Table 3,
attribute inference as VS-Snow Table 1, linkability and singling out as GMIA Tables 3-4, then the
residual risks against their controls. Every attack states its assumptions next to its numbers and
every number states its sample size.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from medanon.evaluate import privacy_text
from medanon.evaluate.inputs import RealData, ReleaseData
from medanon.evaluate.utility import HEADLINE, KNOWN_TASKS, METRIC_NAMES
from medanon.fsutil import atomic_write_text
from medanon.release.writer import image_to_uint8

MAX_SOURCES_SHOWN = 5
UTILITY_METRICS = {"grade": ["accuracy", "kappa", "binary_accuracy", "binary_auroc", "f1_3class"],
                   "binary": ["auroc", "ap", "binary_acc"], "multiclass": ["acc", "f1_macro"]}


# ------------------------------------------------------------------------------------------------ grids


def _png_b64(img) -> str:
    buf = io.BytesIO()
    Image.fromarray(image_to_uint8(img)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def build_grids(real: RealData, releases: Sequence[ReleaseData], *, n: int, seed: int) -> dict[str, list[dict]]:
    """Per release, up to ``n`` random records: their source images (from the mapping) and the released image."""
    grids: dict[str, list[dict]] = {}
    for rel in releases:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 4]))
        pick = rng.choice(len(rel.images), min(n, len(rel.images)), replace=False)
        rows = []
        for r in sorted(int(i) for i in pick):
            srcs = rel.sources[r] if rel.sources is not None else []
            rows.append({"sources": [_png_b64(real.images[i]) for i in srcs[:MAX_SOURCES_SHOWN]],
                         "n_sources": len(srcs), "released": _png_b64(rel.images[r])})
        grids[rel.name] = rows
    return grids


# ------------------------------------------------------------------------------------------------ formatting


def _num(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{v:.{digits}f}"


def _ci(d: dict | None, digits: int = 2) -> str:
    if not d:
        return "–"
    return f"{_num(d['value'], digits)} <span class=ci>[{_num(d['ci'][0], digits)}, {_num(d['ci'][1], digits)}]</span>"


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
    """The column label of a release in the papers' tables: ``k=5``, ``p=0.3``, ``ε=100/px``, ``losses=id+ut``."""
    for key in KEY_PARAMS:
        if key in params:
            v = params[key]
            if key == "epsilon":
                v = v if isinstance(v, str) else f"{v:g}"
                return f"ε={v}" + ("/px" if params.get("per_pixel") else "/image")
            return f"{key}={v}"
    return None


def assign_columns(releases: list[dict]) -> None:
    """Give every release its pivot-table column (``column``): the short setting, or the full one where two
    releases of one method would share a short label."""
    short = [short_setting(r.get("params") or {}) for r in releases]
    seen: dict[tuple[str, str | None], int] = {}
    for r, s in zip(releases, short, strict=True):
        seen[(r["method"], s)] = seen.get((r["method"], s), 0) + 1
    for r, s in zip(releases, short, strict=True):
        r["column"] = s if s is not None and seen[(r["method"], s)] == 1 else (r["setting"] or "–")


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
    return KNOWN_TASKS[task].kind if task in KNOWN_TASKS else "multiclass"


def _skipped(rels: list[dict], ok: list[dict], key: str) -> list[str]:
    """A note for every release the attack ``key`` did not run on, with the reason."""
    return [f"<p class=note>{_e(r['name'])}: {_e(r['attacks'][key].get('skipped', 'not run'))}</p>"
            for r in rels if r not in ok and r["attacks"].get(key) is not None]


def _assume(text: str) -> str:
    return f"<p class=assume><b>Assumptions.</b> {_e(text)}.</p>"


# ------------------------------------------------------------------------------------------------ sections


def _fidelity(rep: dict) -> str:
    rels = rep["releases"]
    methods, settings = _columns(rels)
    n = rep["sample_sizes"]["fid_per_release"]
    has_fid = any("fid" in r["fidelity"] for r in rels)
    out = ["<h2>Fidelity</h2>"]
    if has_fid:
        net = rep["networks"]["inception"] or {}
        rows = [[_e(m), "FID"] + [_num(c["fidelity"]["fid"]["value"], 2) if (c := _cell(rels, m, s)) else "–"
                                  for s in settings] for m in methods]
        out.append(_table(["Method", "Metric", *map(_e, settings)], rows,
                          caption=f"Table 1 layout (k-SALSA): FID on {_e(net.get('display_name', 'Inception-v3'))}, "
                                  f"{n} released images per method against {rep['sample_sizes']['fid_reference']} real "
                                  f"source images; images at {rep['config']['size']} px, resized to 299 px"))
    head = ["Release", "N"]
    head += ["FID [95% CI]", "KID ×10³ (± sd)"] if has_fid else []
    head += ["FD identity network [95% CI]"] if rep["config"]["fidelity"]["in_domain"] else []
    rows = []
    ctrl = rep["controls"]["fidelity"]
    entries = [("<i>real, held-out patients (control)</i>", ctrl)] + [(_e(r["name"]), r["fidelity"]) for r in rels]
    for name, f in entries:
        row = [name, str(f["n"])]
        if has_fid:
            kid = f.get("kid")
            kid_s = f"{_num(1e3 * kid['mean'], 2)} <span class=ci>± {_num(1e3 * kid['sd'], 2)}</span>" if kid else "–"
            row += [_ci(f.get("fid")), kid_s]
        if rep["config"]["fidelity"]["in_domain"]:
            row.append(_ci(f.get("fd_identity"), 3))
        rows.append(row)
    out.append(_table(head, rows, caption="Every release measured with the same N. The control row measures "
                                          "held-out real images the same way: the floor a perfect release could "
                                          "reach at that N. The identity network is trained on the real source "
                                          "split (in-domain)."))
    if not has_fid:
        out.append("<p class=note>FID and KID were not computed (Inception disabled or unavailable; see notes).</p>")
    return "\n".join(out)


def _utility(rep: dict) -> str:
    rels = rep["releases"]
    out = ["<h2>Utility: train on the release, test on held-out real images</h2>"]
    methods, settings = _columns(rels)
    for task in rep["tasks"]:
        kind = _kind(task)
        metrics = UTILITY_METRICS[kind]
        rows = []
        for m in methods:
            for i, met in enumerate(metrics):
                row = [_e(m) if i == 0 else "", METRIC_NAMES.get(met, met)]
                for s in settings:
                    c = _cell(rels, m, s)
                    u = c["utility"].get(task) if c else None
                    row.append(_pm(u["release"].get(met)) if u and "release" in u else "–")
                rows.append(row)
        for i, met in enumerate(metrics):                     # the same-N real baseline under each setting
            row = ["<i>Original (real, same N)</i>" if i == 0 else "", METRIC_NAMES.get(met, met)]
            for s in settings:
                c = next((r for r in rels if _col(r) == s
                          and "real_same_n" in r["utility"].get(task, {})), None)
                row.append(_pm(c["utility"][task]["real_same_n"].get(met)) if c else "–")
            rows.append(row)
        first = next((r["utility"][task] for r in rels if "n_train" in r["utility"].get(task, {})), None)
        seeds = len(first["seeds"]) if first else 0
        ntest = rep["sample_sizes"]["utility_test"].get(task, 0)
        out.append(_table(["Method", "Metric", *map(_e, settings)], rows,
                          caption=f"Table 2 layout (k-SALSA), task <b>{_e(task)}</b>: mean ± sd over {seeds} seeds; "
                                  f"tested on {ntest} held-out real images. The Original rows train on real source "
                                  f"images subsampled to the release's size (per setting)."))
        rows = []
        for r in rels:
            u = r["utility"].get(task, {})
            if "skipped" in u:
                rows.append([_e(r["name"]), "–", "–", _e(u["skipped"])])
                continue
            trts = u.get("real_model_on_release")
            h = HEADLINE[kind]
            rows.append([_e(r["name"]), str(u.get("n_train", "–")), _pm(u["release"].get(h)),
                         _num(trts.get(h)) if trts else "–"])
        full = rep["controls"].get("utility_full_real", {}).get(task)
        if full:
            rows.append(["<i>real, all source images (control)</i>", str(full["n_train"]),
                         _num(full["scores"].get(HEADLINE[kind])), "–"])
        out.append(_table(["Release", "N train", f"{METRIC_NAMES[HEADLINE[kind]]} (train on release)",
                           f"{METRIC_NAMES[HEADLINE[kind]]} of the real model on the release"], rows,
                          caption="Right column: a classifier trained on all real source images, tested on the "
                                  "released images with their released labels (DP-GLOW's direction)."))
    if rep["tasks"] and "grade" in rep["tasks"]:
        out.append("<p class=note>Binary (normal vs DR) and 3-class (healthy/NPDR/PDR) numbers are derived from the "
                   "5-class model by summing its probabilities; the papers trained separate models.</p>")
    return "\n".join(out)


def _membership(rep: dict) -> str:
    rels = rep["releases"]
    ok = [r for r in rels if "top_k_accuracy" in r["attacks"].get("membership", {})]
    out = ["<h2>Membership inference (k-SALSA §4.5)</h2>"]
    if ok:
        methods, settings = _columns(ok)
        rows = [[_e(m)] + [(_pct(c["attacks"]["membership"]["top_k_accuracy"], 1)
                            + f" <span class=ci>[{_pct(c['attacks']['membership']['ci'][0])}, "
                              f"{_pct(c['attacks']['membership']['ci'][1])}]; chance "
                              f"{_pct(c['attacks']['membership']['chance'])}</span>") if (c := _cell(ok, m, s)) else "–"
                           for s in settings] for m in methods]
        a = ok[0]["attacks"]["membership"]
        out.append(_table(["Method", *map(_e, settings)], rows,
                          caption=f"Table 3 layout: top-K accuracy (%) with K = k, 95% bootstrap interval over "
                                  f"records, and the random-ranking control. Pool: members and held-out images in "
                                  f"equal numbers (e.g. {a['pool']} images for {a['records_evaluated']} records)."))
        out.append(_assume(a['assumptions']))
    out += _skipped(rels, ok, "membership")
    return "\n".join(out)


def _attribute(rep: dict) -> str:
    rels = rep["releases"]
    ok = [r for r in rels if "accuracy" in r["attacks"].get("attribute", {})]
    out = ["<h2>Attribute inference (VS-Snow §2.4)</h2>"]
    if ok:
        a0 = ok[0]["attacks"]["attribute"]
        head = ["Classification", "Original (held-out real)", *[_e(r["name"]) for r in ok]]
        row = [f"{_e(a0['attribute'].capitalize())} (Acc, %) — attacker", _pct(a0["heldout_real_accuracy"])]
        for r in ok:
            at = r["attacks"]["attribute"]
            row.append(f"{_pct(at['accuracy'])} <span class=ci>[{_pct(at['accuracy_ci'][0])}, "
                       f"{_pct(at['accuracy_ci'][1])}]; chance {_pct(at['chance'])}</span>")
        rows = [row]
        if "grade" in rep["tasks"]:
            full = rep["controls"].get("utility_full_real", {}).get("grade")
            r2 = ["DR (F1, %) — downstream", _pct(full["scores"]["f1_3class"]) if full else "–"]
            r2 += [_pct(r["utility"].get("grade", {}).get("release", {}).get("f1_3class", {}).get("mean")) for r in ok]
            rows.append(r2)
        out.append(_table(head, rows, caption="VS-Snow Table 1 layout: the attacker is trained on real images and "
                                              "tested on the released ones; DR F1 is the 3-class macro F1 of a "
                                              "classifier trained on each set (the Original column: on all real "
                                              "source images), tested on held-out real images."))
        out.append(_assume(a0['assumptions']))
    out += _skipped(rels, ok, "attribute")
    return "\n".join(out)


def _link_row(label: str, v: dict | None) -> list[str]:
    if not v:
        return [label, "–", "–", "–", "–", "–", "–"]
    return [label, _num(v["F1"]), _num(v["accuracy"]),
            f"{_num(v['TAR'])} <span class=ci>[{_num(v['TAR_ci'][0])}, {_num(v['TAR_ci'][1])}]</span>",
            f"{_num(v['FAR'])} <span class=ci>[{_num(v['FAR_ci'][0])}, {_num(v['FAR_ci'][1])}]</span>",
            _num(v["AUC"]), f"{v['genuine_pairs']} / {v['impostor_pairs']}"]


def _linkability(rep: dict) -> str:
    rels = rep["releases"]
    ok = [r for r in rels if "control" in r["attacks"].get("linkability", {})]
    out = ["<h2>Linkability (GMIA §3)</h2>"]
    if ok:
        l0 = ok[0]["attacks"]["linkability"]
        rows = [_link_row("<i>real held-out pairs (control)</i>", l0["control"])]
        rows += [_link_row(f"Inner risk — {_e(r['name'])}", r["attacks"]["linkability"].get("inner")) for r in ok]
        rows += [_link_row(f"Outer risk — {_e(r['name'])}", r["attacks"]["linkability"].get("outer")) for r in ok]
        out.append(_table(["Testing data", "F1 ↑", "Acc ↑", "TAR ↑ [95% CI]", "FAR ↓ [95% CI]", "AUC",
                           "genuine / impostor pairs"], rows,
                          caption=f"GMIA Table 3 layout, standard definitions: FAR = impostor pairs accepted / "
                                  f"impostor pairs, TAR = genuine pairs accepted / genuine pairs. Threshold "
                                  f"{_num(l0['threshold'])} fixed at FAR = {l0['target_far']} on the control pairs. "
                                  f"Inner: two released records; outer: a real source image and a released record."))
        out.append(_assume(l0['assumptions']))
        notes = [f"{_e(r['name'])}: {_e(r['attacks']['linkability']['inner_note'])}" for r in ok
                 if r["attacks"]["linkability"].get("inner_note")]
        out += [f"<p class=note>{n}</p>" for n in notes]
    out += _skipped(rels, ok, "linkability")
    return "\n".join(out)


def _singling(rep: dict) -> str:
    rels = rep["releases"]
    ok = [r for r in rels if "hidden_rate" in r["attacks"].get("singling_out", {})]
    out = ["<h2>Singling out (GMIA §3)</h2>"]
    if ok:
        rows = [[_e(r["name"]), _num(s["hidden_rate"]), _num(s["chance_hidden_rate"]), _num(s["LC_N_R"], 1),
                 _num(s["LC_N_A"], 1), _num(s["chance_LC_N_A"], 1), f"{s['n_sources']} / {s['n_records']}"]
                for r in ok for s in [r["attacks"]["singling_out"]]]
        out.append(_table(["Testing data", "HR ↑", "HR of a random guess", "LC: N<sub>R</sub> ↑", "LC: N<sub>A</sub> ↑",
                           "N<sub>A</sub> of a random guess", "source images / records"], rows,
                          caption="GMIA Table 4 layout: hidden rate (own record not the most similar) and local "
                                  "cloaking (median number of real images N_R and released records N_A closer than "
                                  "the true counterpart), cosine similarity of identity embeddings."))
        out.append(_assume(ok[0]['attacks']['singling_out']['assumptions']))
    out += _skipped(rels, ok, "singling_out")
    return "\n".join(out)


def _rate(d: dict) -> str:
    return f"{_pct(d['rate'])} <span class=ci>[{_pct(d['ci'][0])}, {_pct(d['ci'][1])}] n={d['trials']}</span>"


def _risks(rep: dict) -> str:
    names = {"membership": "Membership (top-K)", "attribute": "Attribute (classifier)", "inference":
             "Inference (nearest record)", "singling_out": "Singling out (top-1)"}
    rows = []
    for r in rep["releases"]:
        for key, label in names.items():
            a = r["attacks"].get(key) or {}
            risk = a.get("risk") if "risk" in a else a if "residual_risk" in a else None
            if not risk:
                continue
            rr = risk["residual_risk"]
            rows.append([_e(r["name"]), label, _rate(risk["attack"]), _rate(risk["control"]),
                         f"{_num(rr['risk'])} <span class=ci>[{_num(rr['ci'][0])}, {_num(rr['ci'][1])}]</span>",
                         _e(risk["control_is"])])
    if not rows:
        return ""
    return "<h2>Residual risk over the control</h2>" + _table(
        ["Release", "Attack", "Attack success (%)", "Control success (%)", "Residual risk [95% CI]", "Control"], rows,
        caption="Anonymeter's estimator: (attack − control) / (1 − control), Wilson intervals on both rates and the "
                "error propagated; clipped to [0, 1]. 0 = the release teaches the attacker nothing beyond the control.")


def _statements(rep: dict) -> str:
    """Each method's privacy statement in words, once per method (the first release's; the table above
    gives every release's own numbers)."""
    by_method: dict[str, dict] = {}
    for r in rep["releases"]:
        by_method.setdefault(r["method"], r)
    if not by_method:
        return ""
    out = ["<h2>Privacy statements</h2><p class=note>What each method guarantees, under which assumptions, and "
           "what it leaves unprotected, as written into its releases' manifests. Shown once per method, for its "
           "first release; the numbers of every release are in the table above and in its manifest.</p>"]
    for method, r in by_method.items():
        out.append(f"<details class=stmt><summary><b>{_e(method)}</b> ({_e(r['name'])}): "
                   f"{_e(privacy_text.headline(r['privacy']))}</summary>{privacy_text.prose_html(r['privacy'])}"
                   "</details>")
    return "\n".join(out)


def _dpglow_table3(rep: dict) -> str:
    """DP-GLOW Table 3 (flow likelihood-ratio AUROC against ε) and its Figs. 4–7 picture, when the caller
    ran :func:`medanon.evaluate.flow_lr.evaluate_dpglow` and passed it as ``studies['dpglow_table3']``."""
    t = (rep.get("studies") or {}).get("dpglow_table3")
    if not t:
        return ""
    paper = t.get("paper_table3_rsna_512px", {})
    mechs = [m for m in ("ldp_image", "dpglow") if any(f"auroc_{m}" in row for row in t["rows"])]
    names = {"ldp_image": "image-domain LDP", "dpglow": "DP-GLOW"}
    rows = []
    for row in t["rows"]:
        eps = row["epsilon"]
        label = ("∞ (no clipping)" if eps.startswith("inf")
                 else f"{eps} per pixel (× {t['D']} = {row['epsilon_image']:.3g} per image)")
        cells = [_e(label)]
        for m in mechs:
            ci = row.get(f"auroc_{m}_ci95") or [float("nan"), float("nan")]
            cells.append(f"{_num(row.get(f'auroc_{m}'))} <span class=ci>[{_num(ci[0], 2)}, {_num(ci[1], 2)}]</span>")
        cells += [_num(paper.get(eps, {}).get(m)) for m in mechs]
        rows.append(cells)
    d = t.get("data", {})
    out = ["<h2>DP-GLOW: pathology detection after privatisation (DP-GLOW Table 3)</h2>",
           _table(["ε", *[f"AUROC, {names[m]} [95% CI]" for m in mechs],
                   *[f"paper, {names[m]} (RSNA, 512 px)" for m in mechs]], rows,
                  caption=f"AUROC of the flow likelihood-ratio classifier (DP-GLOW Appendix A: a flow trained on "
                          f"normal images against the mixture flow, which is also DP-GLOW's codec) on {t['images']} "
                          f"test images ({t['abnormal']} with {_e(d.get('label', 'the label'))}) of "
                          f"{d.get('test_patients', '?')} patients neither flow was trained on, privatised by each "
                          f"mechanism and rounded to 8 bits. α = {t['alpha']} (latent), {t['pixel_alpha']} (pixels); "
                          f"noise seeded for this experiment. The paper's numbers are for reference only: other "
                          f"data, size and flows.")]
    if t.get("data_note"):
        out.append(f"<p class=note>{_e(t['data_note'])}</p>")
    fig = t.get("figure")
    if fig and Path(fig).is_file():
        b64 = base64.b64encode(Path(fig).read_bytes()).decode()
        out.append(f'<figure><img class=fig src="data:image/png;base64,{b64}" alt="marker cases before and after">'
                   "<figcaption>As DP-GLOW Figs. 4–7: phantoms with a burned-in block marker and a flipped "
                   "(situs inversus) chest, original | image-domain LDP | DP-GLOW at ε = 10² per pixel.</figcaption>"
                   "</figure>")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ plots


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


def _plots(rep: dict) -> str:
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
             ("linkability", None, "outer-risk TAR at the fixed FAR"),
             ("attribute", "accuracy", "attribute attacker accuracy"),
             ("singling_out", None, "singled out (1 − hidden rate)")]
    for key, field, xlabel in specs:
        pts = []
        for r in rep["releases"]:
            a = r["attacks"].get(key) or {}
            if key == "linkability":
                x = (a.get("outer") or {}).get("TAR", float("nan")) if "control" in a else float("nan")
            elif key == "singling_out":
                x = 1 - a["hidden_rate"] if "hidden_rate" in a else float("nan")
            else:
                x = a.get(field, float("nan"))
            pts.append((r["name"], float(x), float(util_of(r))))
        svgs.append(_scatter(pts, xlabel=f"{xlabel} (privacy risk →)", ylabel=ylabel,
                             title=f"Privacy–utility: {xlabel}", yref=yref, yref_label="real data"))
    svgs = [s for s in svgs if s]
    note = ("<p class=note>One point per release; the dashed line is the classifier trained on all real source "
            "images. Chance levels differ per release (see the tables).</p>")
    return ("<h2>Privacy–utility</h2>" + note + "<div class=plots>" + "".join(svgs) + "</div>") if svgs else ""


def _grids(rep: dict, grids: dict[str, list[dict]]) -> str:
    out = ["<h2>Source images next to their released versions</h2>"]
    for r in rep["releases"]:
        rows = grids.get(r["name"], [])
        if not rows:
            continue
        out.append(f"<h3>{_e(r['name'])} <small>{_e(r['method'])} {_e(r['setting'])}</small></h3><div class=grid>")
        for row in rows:
            src = "".join(f'<img src="data:image/png;base64,{s}" alt="source">' for s in row["sources"])
            more = f"<span class=more>+{row['n_sources'] - len(row['sources'])}</span>" if \
                row["n_sources"] > len(row["sources"]) else ""
            if not row["sources"]:
                src = "<span class=more>sources: no mapping</span>"
            out.append(f'<div class=pair><div class=srcs>{src}{more}</div><span class=arrow>→</span>'
                       f'<img class=rel src="data:image/png;base64,{row["released"]}" alt="released"></div>')
        out.append("</div>")
    return "\n".join(out)


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222;
padding:0 1em}
h1{margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.banner{background:#fff3cd;border:1px solid #e0c060;padding:.6em 1em;border-radius:4px;font-weight:600}
table{border-collapse:collapse;margin:.8em 0;font-size:14px}caption{caption-side:bottom;text-align:left;
font-size:12px;color:#555;padding-top:.4em;max-width:1100px}th,td{border:1px solid #ccc;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f4f4f4}.ci{color:#777;font-size:11px}
.note{color:#8a4b00;font-size:13px}.assume{font-size:13px;background:#eef5ff;padding:.4em .8em;border-radius:4px}
.grid{display:flex;flex-wrap:wrap;gap:12px}.pair{display:flex;align-items:center;gap:4px;border:1px solid #eee;
padding:4px}.pair img{width:64px;height:64px;image-rendering:pixelated}.pair img.rel{width:96px;height:96px;
outline:2px solid #4a7}.arrow{font-size:20px;color:#4a7}.more{font-size:11px;color:#777}
.plots{display:flex;flex-wrap:wrap;gap:16px}.plot{border:1px solid #eee;background:#fff}.ax{stroke:#333}
.ref{stroke:#c55;stroke-dasharray:4 3}.dot{fill:#2a6fb0}.lb{font-size:11px;fill:#222}.tk{font-size:10px;fill:#555}
.al{font-size:12px;fill:#222}.pt{font-size:13px;font-weight:600}pre{background:#f7f7f7;padding:1em;overflow:auto;
font-size:12px}.stmt{margin:.4em 0;font-size:14px}.stmt h4{margin:.6em 0 .2em}
.stmt p,.stmt ul{margin:.2em 0}img.fig{image-rendering:pixelated;max-width:100%}figcaption{font-size:12px;color:#555}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;font-size:14px}dt{font-weight:600}
"""


def render_html(rep: dict, grids: dict[str, list[dict]]) -> str:
    rep = {**rep, "releases": [dict(r) for r in rep["releases"]]}
    assign_columns(rep["releases"])
    real = rep["real"]
    banner = ("<p class=banner>PHANTOM DATA: every number on this page is a phantom result (synthetic patients "
              "generated by medanon), not a result on real patients.</p>") if rep["phantom"] else ""
    ident = rep["networks"].get("identity") or {}
    summary = (
        f"<dl><dt>Real data</dt><dd>{_e(real['path'])}: {real['images']} images of {real['patients']} patients "
        f"({_e(real['modality'] or 'unknown modality')})</dd>"
        f"<dt>Split</dt><dd>{_e(real['split'])}; releases built from the <b>{_e(real['source_split'])}</b> split "
        f"({real['source_images']} images); held-out <b>{_e(real['heldout_split'])}</b> split "
        f"({real['heldout_images']} images) for testing and attack controls</dd>"
        f"<dt>Sample sizes</dt><dd>FID/KID/FD: {rep['sample_sizes']['fid_per_release']} images per release vs "
        f"{rep['sample_sizes']['fid_reference']} reference; utility test: "
        f"{_e(json.dumps(rep['sample_sizes']['utility_test']))}</dd>"
        f"<dt>Identity network</dt><dd>{_e(ident.get('trained_on') or ident.get('checkpoint') or 'not used')}</dd>"
        f"<dt>Device, time</dt><dd>{_e(rep['device'])}, {rep['seconds']} s</dd></dl>")
    rels = "".join(f"<tr><td>{_e(r['name'])}</td><td>{_e(r['method'])}</td><td>{_e(r['setting'])}</td>"
                   f"<td>{r['records']}</td><td>{_e(r['counts'].get('min_people_per_record', '–'))}</td>"
                   f"<td>{_e(privacy_text.headline(r['privacy']))}</td><td>{'yes' if r['mapping'] else 'no'}</td></tr>"
                   for r in rep["releases"])
    rel_table = ("<table><thead><tr><th>Release</th><th>Method</th><th>Setting</th><th>Records</th>"
                 "<th>Min people / record</th><th>Formal guarantee (from its manifest; see Privacy statements)</th>"
                 f"<th>Mapping</th></tr></thead><tbody>{rels}</tbody></table>")
    notes = "".join(f"<p class=note>{_e(n)}</p>" for n in rep.get("notes", []))
    body = "\n".join([
        "<h1>medanon evaluation report</h1>", banner, summary, "<h2>Releases</h2>", rel_table, notes,
        _statements(rep), _fidelity(rep), _utility(rep), _membership(rep), _attribute(rep), _linkability(rep),
        _singling(rep), _risks(rep), _dpglow_table3(rep), _plots(rep), _grids(rep, grids),
        f"<h2>Configuration</h2><details><summary>settings of this evaluation</summary><pre>"
        f"{_e(json.dumps(rep['config'], indent=1))}</pre></details>",
    ])
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>medanon evaluation report</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>\n")


def write_report(out: str | Path, report: dict, grids: dict[str, list[dict]]) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.html`` atomically into ``out``."""
    out = Path(out)
    from medanon.evaluate.cache import _default

    jp, hp = out / "report.json", out / "report.html"
    atomic_write_text(jp, json.dumps(report, indent=1, default=_default, allow_nan=True) + "\n")
    atomic_write_text(hp, render_html(report, grids))
    return jp, hp
