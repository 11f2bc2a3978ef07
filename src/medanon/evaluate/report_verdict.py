"""The report's verdict per release (top of the page) and the known-answer calibration table (head of the privacy
section); both read what :mod:`medanon.evaluate.calibration` put into report.json."""

from __future__ import annotations

from medanon.evaluate.calibration import KNOWN, defined_risk, row_label, row_unit
from medanon.evaluate.report_format import _e, _num, _table, undefined_cell
from medanon.evaluate.report_format import differencing_space as space
from medanon.evaluate.verdict_text import heldout_in_release

INVALID = "<span class=invalid>{}</span>"
# Each method's paper, and the section of medanon's docs/reproduction.md that reproduces its claims on phantoms.
PAPERS = {**dict.fromkeys(("ksalsa", "kcentroid", "kpixel", "kpca", "inverted"), ("k-SALSA", "k-salsa")),
          **dict.fromkeys(("dpglow", "ldp-image"), ("DP-GLOW", "dp-glow")), "gmia": ("GMIA", "gmia"),
          **dict.fromkeys(("snow", "vs-snow"), ("VS-Snow", "vs-snow"))}


def paper_claims(method: str | None) -> str:
    """Where the claims of ``method``'s paper are reproduced (medanon's docs), or ``–``.

    >>> paper_claims("kcentroid")
    "k-SALSA's claims: docs/reproduction.md#k-salsa"
    """
    if method not in PAPERS:
        return "–"
    paper, anchor = PAPERS[method]
    return f"{paper}'s claims: docs/reproduction.md#{anchor}"


def _iv(d: dict | None) -> str:
    if not d:
        return "–"
    if not defined_risk(d):
        return undefined_cell(d)
    return f"{_num(d['risk'], 2)} <span class=ci>[{_num(d['ci'][0], 2)}, {_num(d['ci'][1], 2)}]</span>"


def _counts(v: dict) -> str:
    """Valid rows with a risk, valid rows without one, of all rows."""
    undefined = len(v.get("undefined_attacks") or {})
    total = v["valid_attacks"] + undefined + v["invalid_attacks"]
    return f"{v['valid_attacks']}" + (f" (+{undefined} undefined)" if undefined else "") + f" / {total}"


def _n(d: dict | None, row: str) -> str:
    """A calibration cell's N: the row's unit, and the patients its interval resampled."""
    if not d or d.get("n") is None:
        return ""
    who = f", {d['patients']} patients" if d.get("patients") else ""
    ref = ""
    if d.get("control_n") is not None:
        ref = (f"; control n={d['control_n']}" + (f", {d['control_patients']} patients" if d.get("control_patients")
                                                   else ""))
    elif d.get("against") == "baseline":
        ref = f"; against a baseline: {d.get('baseline_is') or 'random guessing'}"
    return f" <span class=ci>n={d['n']} {_e(row_unit(row))}{who}{ref}</span>"


def verdict_section(rep: dict) -> str:
    rows = []
    for r in rep["releases"]:
        v = r.get("verdict")
        if not v:
            continue
        risk = (f"{_iv(v)} <span class=ci>{_e(v['attack_name'])}"
                + (" (a lower bound: no valid attack caught the known copies)" if v.get("no_copy_detector") else "")
                + "</span>" if "risk" in v else
                INVALID.format("no valid attack caught the known copies" if v.get("no_copy_detector")
                               else "no valid attack has a defined risk" if v.get("undefined_attacks")
                               else "no valid attack"))
        kept = "; ".join(f"{_num(u['kept'], 2)}" + (f" <span class=ci>[{_num(u['ci'][0], 2)}, {_num(u['ci'][1], 2)}]"
                                                    f"</span>" if u.get("ci") else "")
                         + f" <span class=ci>{_e(u['metric_name'])}, {_e(u['task'])}"
                         + (f"; n={u['n']} {_e(u.get('unit') or 'test images')}" if u.get("n") else "")
                         + (f", {u['patients']} patients" if u.get("patients") else "") + "</span>"
                         for u in v["utility_kept"]) or "–"
        rows.append([_e(r["name"]), _exposure(v.get("exposure") or {}), risk, kept,
                     _counts(v),
                     _e(v["sentence"]), _e(paper_claims(r.get("method")))])
    if not rows:
        return ""
    together = "".join(
        f"<p class=note><b>Together</b>: differencing {_e(' and '.join(d['releases']))} ({_e(space(d))}) "
        f"recovers the {'image' if space(d) == 'pixels' else 'latent'} of "
        f"{d['members']['recovered_beyond']} of {d['members']['patients']} patients (residual risk "
        f"{_iv(d['risk']['residual_risk'])}): publish at most one of them (section \"Releases of the same people, "
        f"differenced\").</p>"
        for d in rep.get("differencing") or [] if d["risk"]["residual_risk"]["ci"][0] > 0)
    return "<h2>Verdict</h2>" + together + _table(
        ["Release", "Copies of real images (no mapping needed)", "Largest valid residual risk [95% CI] (attack)",
         "Utility kept: share of real's gain over chance, same N [95% CI]", "Valid attacks", "In words",
         "The method's paper: where medanon's docs reproduce its claims (on phantoms, not in this run)"], rows,
        caption="Residual risk: (attack − reference) / (1 − reference). The reference is a control where the attack "
                "has one (the same attack on people not in the release: 0 = the attacker learns nothing of members "
                "beyond what it learns of them) and otherwise a baseline, guessing as the row says (0 = no better than "
                "guessing); the sentence says which, and the row's N. The largest valid row is shown, its interval "
                "not adjusted for being the largest of several. Only attacks that passed the known-answer calibration "
                "(below), whose attacker is not at chance on held-out real images and was not trained on people of "
                "this evaluation (members, or controls its checkpoint's recorded phantom shares), "
                "whose targets, control and threshold each rest on at least 10 patients, whose interval respects "
                "patients, and whose release holds no copy of a held-out patient's image count (the residual-risk "
                "table gives each row's reason). Utility kept: (release − chance) ÷ (real − chance) of the headline "
                "metric, for a classifier trained on the release and one trained on as many real images (chance: "
                "0.5 for an AUROC, 0 for κ and F1; a constant release keeps 0; paired bootstrap over the test set's "
                "patients). Copies: "
                "released images within one 8-bit grey level (RMS) of a real image of the source split or of the "
                "held-out patients, from the near-copy screen, which needs no mapping; otherwise near-copies (closer "
                "to a real image than a second photo of the same patient; with the mapping, of one of their own "
                "sources), shown where they are above new people's rate.")


def _exposure(e: dict) -> str:
    if not e:
        return "–"
    parts = []
    if e.get("copies"):
        who = (f" ({e['copy_patients']} patient{'s' if e['copy_patients'] != 1 else ''})"
               if e.get("copy_patients") is not None else "")
        parts.append(INVALID.format(f"{e['copies']} copies{who}"))
    elif e.get("near_copies_beyond_control"):
        what = "near-copies of their sources" if e.get("mapped") else "near-copies"
        parts.append(INVALID.format(f"{e['near_copies']} {what}"))
    if e.get("heldout_copies"):
        n = e['heldout_copies']
        parts.append(INVALID.format(f"{n} cop{'y' if n == 1 else 'ies'} of held-out patients"))
    elif heldout_in_release(e):
        parts.append(INVALID.format("near-copies of held-out patients"))
    if e.get("copies_not_of_own_source"):
        parts.append(INVALID.format(f"{e['copies_not_of_own_source']} copies not of their mapped sources"))
    if parts:
        return "; ".join(parts)
    against = (f" against {e['n_source_images']} source and {e['n_heldout_images']} held-out images"
               if e.get("n_source_images") is not None else "")
    return f"none found <span class=ci>n={e['n']} released images{against}</span>"


def calibration_section(rep: dict) -> str:
    cal = rep.get("calibration") or {}
    table = cal.get("table") or {}
    if not table:
        return ""
    rows = []
    for row, c in table.items():
        cells = [_iv(c.get(k)) + _n(c.get(k), row) for k in KNOWN]
        if c["copy_check"] is None:                      # a reverse attack: the copy is one of its nulls
            cells[0] = f"{cells[0]} <span class=ci>(a null for a reverse attack)</span>"
        verdict = "passes" if c["passes"] else INVALID.format("fails: " + _e(c["reason"]))
        rows.append([_e(row_label(row)), *cells, verdict])
    what = "; ".join(f"<b>{k}</b>: {_e(v)}" for k, v in (cal.get("releases") or {}).items())
    members = [k for k, v in (cal.get("trained_on_members") or {}).items() if v]
    extra = (f" Trained on people of this evaluation (members or controls; every row of theirs is invalid): "
             f"{_e(', '.join(members))}." if members else "")
    return "<h2>Calibration: the attacks on releases whose answer is known</h2>" + _table(
        ["Attack", *(f"Residual risk: {k}" if i == 0 else k for i, k in enumerate(KNOWN)), "Calibration"], rows,
        caption=f"Known-answer releases of the source split, one record per source image: {what}. An attack passes "
                f"when it detects every copy (residual risk ≥ 0.5, interval above 0; the attribute attack: half its "
                f"residual on held-out real images, the most a copy of real images can give it) and no null (interval "
                f"includes 0). A failed attack's rows are greyed in every table below and left out of the verdict and "
                f"the plots.{extra}")
