"""The evaluation report: ``report.json`` (every number) and a self-contained ``report.html``.

The HTML page needs nothing but a browser: styles are inline, images are embedded as base64 PNG,
plots are inline SVG. Tables are laid out like the papers' tables: fidelity and downstream
classification as k-SALSA Tables 1-2 (methods as rows, settings such as k as columns, the
train-on-real classifier at the same N under each setting), membership inference as k-SALSA Table 3,
attribute inference as VS-Snow Table 1, linkability and singling out as GMIA Tables 3-4, then the
residual risks against their controls. Every attack states its assumptions next to its numbers and
every number states its sample size.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from medanon.data.imageio import image_to_uint8
from medanon.errors import OutputExistsError
from medanon.evaluate import privacy_text
from medanon.evaluate.inputs import RealData, ReleaseData
from medanon.evaluate.report_attacks import attack_sections
from medanon.evaluate.report_differencing import differencing_section
from medanon.evaluate.report_format import (
    _cell,
    _ci,
    _columns,
    _e,
    _num,
    _table,
    _unit_mark,
    assign_columns,
    short_setting,  # noqa: F401  (re-exported: the papers' column labels)
)
from medanon.evaluate.report_plots import plots as _plots
from medanon.evaluate.report_utility import utility_section as _utility
from medanon.evaluate.report_verdict import verdict_section
from medanon.fsutil import atomic_write_text, strict_json

MAX_SOURCES_SHOWN = 5
REPORT_HEAD = "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>medanon evaluation report"


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


def build_closest(real: RealData, releases: Sequence[ReleaseData], results: Sequence[dict]) -> dict[str, list[dict]]:
    """Per release, the near-copy screen's closest (real, released) pairs as PNGs, keyed ``closest:<name>``."""
    out: dict[str, list[dict]] = {}
    for rel, res in zip(releases, results, strict=True):
        for p in (res.get("screening") or {}).get("closest", []):
            out.setdefault(f"closest:{rel.name}", []).append(
                {**p, "real": _png_b64(real.images[p["real_row"]]), "released": _png_b64(rel.images[p["record"]])})
    return out


# ------------------------------------------------------------------------------------------------ sections


def fid_sizes_text(rep: dict) -> str:
    """The FID sample sizes in words: one common N, or the range of the releases' own N."""
    per = rep["sample_sizes"]["fid_per_release"]
    sizes = sorted(set(per.values())) if isinstance(per, dict) else [per]     # an int in reports before 2026-11
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]} (each release's own)"


def _control_label(n: str, f: dict, has_fid: bool = True) -> str:
    """A fidelity control row's label: the N it measured, and where the held-out images were fewer than the N of the
    releases it stands beside, that it could not match them (FID too where it was computed).

    >>> _control_label("50", {"n": 32})
    '<i>real, held-out patients (control, N = 32: every held-out image, fewer than the 50 of the releases ...'
    >>> "FD is biased by N, so it is not" in _control_label("50", {"n": 32}, has_fid=False)
    True
    """
    got = int(f.get("n", n))
    biased = "FID and FD are biased by N, so they are not" if has_fid else "FD is biased by N, so it is not"
    short = (f": every held-out image, fewer than the {n} of the releases beside it; {biased} "
             "comparable" if got < int(n) else "")
    return f"<i>real, held-out patients (control, N = {got}{short})</i>"


def _fidelity(rep: dict) -> str:
    rels = rep["releases"]
    methods, settings = _columns(rels)
    has_fid = any("fid" in r["fidelity"] for r in rels)
    out = ["<h2>Fidelity</h2>"]
    if has_fid:
        net = rep["networks"]["inception"] or {}
        rows = [[_e(m), "FID [95% CI]"] + [_ci(c["fidelity"].get("fid")) + _mark(c["fidelity"].get("fid"))
                                           if (c := _cell(rels, m, s)) else "–" for s in settings] for m in methods]
        out.append(_table(["Method", "Metric", *map(_e, settings)], rows,
                          caption=f"Table 1 layout (k-SALSA): FID on {_e(net.get('display_name', 'Inception-v3'))}, "
                                  f"{fid_sizes_text(rep)} released images per method (N of each below) against "
                                  f"{rep['sample_sizes']['fid_reference']} real source images; images at "
                                  f"{rep['config']['size']} px, resized to 299 px; intervals as in the table below"))
    head = ["Release", "N"]
    head += ["FID [95% CI]", "KID ×10³ [95% CI]"] if has_fid else []
    head += ["FD identity network [95% CI]"] if rep["config"]["fidelity"]["in_domain"] else []
    rows = []
    by_n = rep["controls"].get("fidelity_by_n") or {str(rep["controls"]["fidelity"]["n"]): rep["controls"]["fidelity"]}
    entries = [(_control_label(n, f, has_fid), f) for n, f in sorted(by_n.items(), key=lambda kv: int(kv[0]))]
    entries += [(_e(r["name"]), r["fidelity"]) for r in rels]
    errors = {f["kid"].get("error", "sd over subsets") for _, f in entries if f.get("kid") and not f["kid"].get("ci")}
    for name, f in entries:
        row = [name, str(f["n"])]
        if has_fid:
            kid = f.get("kid")
            if kid and kid.get("ci"):                     # the patient bootstrap's interval
                kid_s = _ci({"value": 1e3 * kid["mean"], "ci": [1e3 * v for v in kid["ci"]]})
            elif kid:                                     # sets too large for the kernel bootstrap: the sd, said so
                why = "" if len(errors) == 1 else f" ({_e(kid.get('error', 'sd over subsets'))})"
                kid_s = f"{_num(1e3 * kid['mean'], 2)} <span class=ci>± {_num(1e3 * kid['sd'], 2)}{why}</span>"
            else:
                kid_s = "–"
            row += [_ci(f.get("fid")) + _mark(f.get("fid")), kid_s + _mark(kid)]
        if rep["config"]["fidelity"]["in_domain"]:
            row.append(_ci(f.get("fd_identity"), 3) + _mark(f.get("fd_identity")))
        rows.append(row)
    same = len(by_n) == 1
    in_domain = rep["config"]["fidelity"]["in_domain"]
    fd = " and ".join(x for x, on in (("FID", has_fid), ("FD", in_domain)) if on) or "FID and FD"
    are = "are" if " and " in fd else "is"
    by_patient = all(not _mark(f.get(k)) for _, f in entries for k in ("fid", "kid", "fd_identity"))
    unit = ("resample patients" if by_patient else
            "resample patients where a release has its mapping, and otherwise what the row's mark says (without a "
            "mapping, the release's records one by one: too narrow where one patient has several)")
    out.append(_table(head, rows, caption=(
        "Every release measured with the same N. " if same else
        f"Each release measured on its own N (its records, up to the cap). {fd} {are} biased "
        "by N: compare a release with the control of its N"
        + (", and releases of different N by KID (unbiased), not by FID. " if has_fid else
           ", not with a release of another N. "))
        + "A control row measures as many held-out real images (new patients) the same way, against the same "
          "reference of real source images: where a release is closer than the control of its N, it is closer to "
          "its sources than new people are (a memorisation signal: see the near-copy screen). "
        + ("FD on the attacks' identity network (in-domain). " if in_domain else "")
        + f"The intervals of {fd} (bias-shifted bootstrap) {unit}; they "
          "are for the distance measured with this N of images, not for the distance between the populations, "
          "which is smaller."
        + (" KID's interval resamples the same units (the unbiased MMD² of the resampled sets)." if has_fid else "")
        + (f" KID's ± (sets too large for its interval) is the {_e(next(iter(errors)))}."
           if has_fid and len(errors) == 1 else "") + _resamples_said(entries)))
    if not has_fid:
        why = ("Inception was turned off for this evaluation (fidelity.inception)" if not
               rep["config"]["fidelity"].get("inception", True) else "the Inception weights were not available: see "
                                                                      "the notes")
        out.append(f"<p class=note>FID and KID were not computed: {why}.</p>")
    return "\n".join(out)


def _mark(d: dict | None) -> str:
    """A fidelity interval's unit, said beside it where it is not patients (a release without its mapping)."""
    return _unit_mark(d.get("resampled")) if isinstance(d, dict) and d.get("ci") else ""


def _resamples_said(entries: list) -> str:
    """How many bootstrap resamples each fidelity interval rests on: few (the fast preset's 20) move an interval's
    ends from one run to the next, so the page says so."""
    names = {"fid": "FID", "fd_identity": "FD", "kid": "KID"}
    counts: dict[int, list[str]] = {}
    for key, label in names.items():
        got = {int(f[key]["resamples"]) for _, f in entries if isinstance(f.get(key), dict) and f[key].get("resamples")}
        for c in got:
            counts.setdefault(c, []).append(label)
    if not counts:
        return ""
    said = "; ".join(f"{' and '.join(labels)}: {c}" for c, labels in sorted(counts.items()))
    few = (" (few: an interval's ends move between runs by more than its digits suggest)" if min(counts) < 100
           else "")
    return f" Bootstrap resamples behind the intervals: {said}{few}."


def _records(r: dict) -> str:
    """A release's records, and how many of them DP-GLOW's decoder fallback made (its manifest's quality)."""
    n = int((r.get("quality") or {}).get("diverged") or 0)
    return f"{r['records']}" + (f"<br><span class=note>{n} decoded by the fallback: the inverse flow diverged "
                                "(see notes)</span>" if n else "")


def _utility_sizes(rep: dict) -> str:
    """The utility test's images (and patients) per task, or why there is none."""
    sizes = rep["sample_sizes"]["utility_test"]
    if not sizes:
        return "none (no release publishes a label that the held-out images have)"
    patients = {task: u.get("n_test_patients") for r in rep["releases"] for task, u in (r.get("utility") or {}).items()
                if isinstance(u, dict)}
    return "; ".join(f"{task}: {n} images" + (f" of {patients[task]} patients" if patients.get(task) else "")
                     for task, n in sizes.items())


def _statements(rep: dict) -> str:
    """Each release's privacy statement in words, once per distinct statement (releases whose manifests say the
    same words share one entry; a release at another ε, k or p, or with other models, has its own)."""
    by_text: dict[str, list[dict]] = {}
    for r in rep["releases"]:
        by_text.setdefault(privacy_text.prose_html(r["privacy"]), []).append(r)
    if not by_text:
        return ""
    out = ["<h2>Privacy statements</h2><p class=note>What each release guarantees, under which assumptions, and "
           "what it leaves unprotected, as written into its manifest; releases with the same statement share one "
           "entry.</p>"]
    for prose, rs in by_text.items():
        names = ", ".join(_e(r["name"]) for r in rs)
        out.append(f"<details class=stmt><summary><b>{_e(rs[0]['method'])}</b> ({names}): "
                   f"{_e(privacy_text.headline(rs[0]['privacy']))}</summary>{prose}</details>")
    return "\n".join(out)


def _unseen_words(unseen: str | None) -> str:
    """How the Table 3 caption says the test patients relate to the flows: only what was checked is claimed."""
    if unseen and unseen.startswith("checked"):
        return "that neither flow was trained on (checked against both flows' recorded training splits)"
    if unseen and unseen.startswith("the caller's assurance"):
        return "of another dataset (that neither flow saw them is the caller's assurance)"
    return "held out by the split the mixture flow records (not checked against the flows' training data)"


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
                 else f"{eps} per element (× D = {t['D']} = {row['epsilon_image']:.3g} per image)")
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
                          f"{d.get('test_patients', '?')} patients "
                          f"{_unseen_words(d.get('test_unseen'))}, privatised by each "
                          f"mechanism and rounded to 8 bits; intervals: "
                          f"{_e(t.get('interval', 'bootstrap over images'))}. α = {t['alpha']} (latent), "
                          f"{t['pixel_alpha']} (pixels); "
                          f"noise seeded for this experiment. The paper's numbers are for reference only: other "
                          f"data, size and flows.")]
    if t.get("data_note"):
        out.append(f"<p class=note>{_e(t['data_note'])}</p>")
    fell = [(r["epsilon"], r["dpglow_diverged"]) for r in t["rows"] if r.get("dpglow_diverged")]
    if fell:
        out.append("<p class=note>DP-GLOW images the inverse flow diverged on, decoded from their latent shrunk "
                   "towards the prior's mode (they measure that fallback, not the flow): "
                   + "; ".join(f"{n} of {t['images']} at ε = {_e(str(eps))}" for eps, n in fell) + ".</p>")
    fig = t.get("figure")
    if fig and Path(fig).is_file():
        b64 = base64.b64encode(Path(fig).read_bytes()).decode()
        out.append(f'<figure><img class=fig src="data:image/png;base64,{b64}" alt="marker cases before and after">'
                   "<figcaption>As DP-GLOW Figs. 4–7: phantoms with a burned-in block marker and a flipped "
                   "(situs inversus) chest, original | image-domain LDP | DP-GLOW at ε = 10² per element (× D per "
                   "image).</figcaption>"
                   "</figure>")
    return "\n".join(out)


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
.invalid{color:#999}.err{stroke:#2a6fb0;stroke-width:1}tr.invalid td{color:#aaa}"""


def render_html(rep: dict, grids: dict[str, list[dict]]) -> str:
    rep = {**rep, "releases": [dict(r) for r in rep["releases"]]}
    assign_columns(rep["releases"])
    real = rep["real"]
    banner = ("<p class=banner>PHANTOM DATA: every number on this page is a phantom result (synthetic patients "
              "generated by medanon), not a result on real patients.</p>") if rep["phantom"] else ""
    if any(row.get("sources") or row.get("real") for rows in grids.values() for row in rows):
        banner += ("<p class=banner>SOURCE IMAGES: this page shows source images next to their released versions; it "
                   "is as sensitive as the source data. Keep it where the source data is kept; do not publish it "
                   "with the release.</p>")
    ident = rep["networks"].get("identity") or {}
    summary = (
        f"<dl><dt>Real data</dt><dd>{_e(real['path'])}: {real['images']} images of {real['patients']} patients "
        f"({_e(real['modality'] or 'unknown modality')})</dd>"
        f"<dt>Split</dt><dd>{_e(real['split'])}; releases built from the <b>{_e(real['source_split'])}</b> split "
        f"({real['source_images']} images); held-out <b>{_e(real['heldout_split'])}</b> split "
        f"({real['heldout_images']} images) for testing and attack controls</dd>"
        f"<dt>Sample sizes</dt><dd>{'FID/KID/FD' if rep['config']['fidelity'].get('inception', True) else 'FD'}: "
        f"{_e(fid_sizes_text(rep))} images per release vs "
        f"{rep['sample_sizes']['fid_reference']} reference; utility test: "
        f"{_e(_utility_sizes(rep))}</dd>"
        f"<dt>Identity network</dt><dd>{_e(ident.get('trained_on') or ident.get('checkpoint') or 'not used')}</dd>"
        f"<dt>Device, time</dt><dd>{_e(rep['device'])}, {rep['seconds']} s</dd></dl>")
    rels = "".join(f"<tr><td>{_e(r['name'])}</td><td>{_e(r['method'])}</td><td>{_e(r['setting'])}</td>"
                   f"<td>{_records(r)}</td><td>{_e(r['counts'].get('min_people_per_record', '–'))}</td>"
                   f"<td>{_e(privacy_text.headline(r['privacy']))}</td><td>{'yes' if r['mapping'] else 'no'}</td></tr>"
                   for r in rep["releases"])
    rel_table = ("<table><thead><tr><th>Release</th><th>Method</th><th>Setting</th><th>Records</th>"
                 "<th>Min people / record</th><th>Formal guarantee (from its manifest; see Privacy statements)</th>"
                 f"<th>Mapping</th></tr></thead><tbody>{rels}</tbody></table>")
    notes = ("<h2 id=notes>Notes</h2>" + "".join(f"<p class=note>{_e(n)}</p>" for n in rep["notes"])
             if rep.get("notes") else "")
    body = "\n".join([
        "<h1>medanon evaluation report</h1>", banner, verdict_section(rep), summary, "<h2>Releases</h2>", rel_table,
        notes,
        _statements(rep), _fidelity(rep), _utility(rep), attack_sections(rep, grids), differencing_section(rep),
        _dpglow_table3(rep), _plots(rep),
        _grids(rep, grids),
        f"<h2>Configuration</h2><details><summary>settings of this evaluation</summary><pre>"
        f"{_e(json.dumps(rep['config'], indent=1))}</pre></details>",
    ])
    return (f"{REPORT_HEAD}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>\n")


def real_data_digest(real) -> str:
    """What a report records of its real data: the images' content, every record's patient and labels, the split."""
    from medanon.evaluate.cache import digest

    return digest(real.digest, real.split.tolist())


def check_report_replaceable(out: str | Path, real_dir: str | Path, release_paths, *, overwrite: bool,
                             real=None) -> None:
    """An existing report in ``out`` is rewritten only by the same evaluation, or one that extends it (the same real
    data, every release it holds among the new ones); another evaluation's report needs ``overwrite``. Called
    before anything is read (``real`` None: paths compared), and again once the real data is loaded (``real``: its
    content compared, so that an edited image, label or split is not taken for the same data)."""
    path = Path(out) / "report.json"
    if overwrite or not path.is_file():
        return
    try:
        held = json.loads(path.read_text(encoding="utf-8"))
        real_path, rels = str(held["real"]["path"]), [str(r["path"]) for r in held["releases"]]
        held_digest = held["real"].get("digest")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return                                   # not a readable report: check_output has judged the folder
    same = lambda a, b: Path(a).resolve() == Path(b).resolve()                    # noqa: E731
    dropped = [r for r in rels if not any(same(r, p) for p in release_paths)]
    fix = "choose another out, evaluate those releases too (a report is extended), or pass overwrite=True to replace it"
    if not same(real_path, real_dir) or dropped:
        why = f"of {real_path}" if not same(real_path, real_dir) else \
            f"with release(s) {[Path(r).name for r in dropped]}"
        raise OutputExistsError(f"out {out} holds the report of another evaluation ({why}): it would be replaced",
                                fix=fix)
    if real is not None and isinstance(held_digest, str) and held_digest != real_data_digest(real):
        raise OutputExistsError(f"out {out} holds the report of an evaluation of other data at {real_path}: its "
                                "images, labels or split changed since that report was written, and it would be "
                                "replaced", fix="choose another out to keep both reports, or pass overwrite=True to "
                                                "replace it")


WRITTEN = ("report.html", "report.json", "config.yaml")     # a report folder's files a rerun writes again


def written_digests(out: str | Path) -> dict[str, str]:
    """The sha256 of the files of ``out`` a rerun of the evaluation writes again (recorded in its manifest)."""
    from medanon.fsutil import sha256_file

    return {name: sha256_file(Path(out) / name) for name in WRITTEN if (Path(out) / name).is_file()}


def check_unedited(out: str | Path) -> None:
    """Refuse to run an evaluation again into ``out`` where a file it would write again was changed since the last
    finished run wrote it (a user's edit of ``report.html``, say): not even ``overwrite`` replaces a user's work."""
    from medanon.fsutil import sha256_file

    try:
        written = json.loads((Path(out) / "manifest.json").read_text(encoding="utf-8")).get("written")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(written, dict):
        return                                   # a run that did not finish, or of an earlier version
    edited = [n for n, sha in written.items() if n in WRITTEN and (Path(out) / n).is_file()
              and sha256_file(Path(out) / n) != sha]
    if edited:
        raise OutputExistsError(f"out {out} holds {', '.join(edited)} changed since medanon wrote "
                                f"{'it' if len(edited) == 1 else 'them'}: evaluating into it again would replace "
                                "the changes",
                                fix="move the changed files out of the folder (or restore them), or choose another out")


def write_report(out: str | Path, report: dict, grids: dict[str, list[dict]]) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.html`` atomically into ``out``."""
    out = Path(out)
    from medanon.evaluate.cache import _default

    jp, hp = out / "report.json", out / "report.html"
    atomic_write_text(jp, strict_json(report, indent=1, default=_default) + "\n")
    atomic_write_text(hp, render_html(report, grids))
    return jp, hp
