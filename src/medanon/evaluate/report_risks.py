"""The report's residual-risk table, and the cells the attack tables share: a number with its interval, an attack's
rate with its N and patient clusters, a threshold with the rate it realises on the controls, a residual risk."""

from __future__ import annotations

from medanon.evaluate.calibration import defined_risk, risk_rows, row_label, row_unit
from medanon.evaluate.report_format import _e, _num, _pct, _table, undefined_cell


def _iv(v, ci, digits: int = 3, pct: bool = False) -> str:
    """A number and its interval; "–" alone where the number is not defined (its interval is then not either)."""
    f = (lambda x: _pct(x)) if pct else (lambda x: _num(x, digits))
    if not ci or _num(v) == "–":
        return f(v)
    return f"{f(v)} <span class=ci>[{f(ci[0])}, {f(ci[1])}]</span>"


def _rate_iv(d: dict) -> str:
    """An attack's or a control's rate (%) with its interval, without the N (the table gives it)."""
    return _iv(d["rate"], d.get("ci"), pct=True)


def _residual(rr: dict) -> str:
    """A residual risk with its interval. Where clipping to [0, 1] collapsed the interval to a point (an attack
    below its reference in every resample), the unclipped estimate and interval follow: a point is no certainty."""
    if not defined_risk(rr):
        return undefined_cell(rr)
    text = _iv(rr["risk"], rr["ci"])
    u = rr.get("unclipped_ci")
    if u and rr["ci"][0] == rr["ci"][1] and u[0] != u[1]:
        text += (f" <span class=ci>(before clipping to [0, 1]: {_num(rr['unclipped'])} [{_num(u[0])}, "
                 f"{_num(u[1])}])</span>")
    return text


def _risks(rep: dict) -> str:
    rows = []
    for r in rep["releases"]:
        for row, risk in risk_rows(r["attacks"]).items():
            rr = risk["residual_risk"]
            ctrl = risk.get("control")
            base = risk.get("baseline")
            check = (r.get("validity") or {}).get(row) or {"valid": True}
            valid = check["valid"]
            left = risk.get("members_left_out")
            tied = (r["attacks"].get("attribute") or {}).get("tied_records_left_out") if row == "attribute" else 0
            attack = _rate(risk["attack"], row_unit(row)) + (
                f" <span class=ci>({left} member images left out: no control patient shares their "
                f"{_e(((ctrl or {}).get('balanced') or {}).get('label', 'label'))})</span>" if left else "") + (
                f" <span class=ci>({tied} records left out: their patients split evenly on the attribute, no "
                "true value)</span>" if tied else "")
            cells = [_e(r["name"]), _e(row_label(row)), attack, _rate(ctrl) if ctrl else
                     f"<span class=ci>{_e(risk['control_is'])}</span>", _rate(base) if base else "–",
                     _threshold(risk.get("threshold")),
                     f"{_residual(rr)} <span class=ci>vs {_e(risk.get('against', 'control'))}</span>",
                     "yes" if valid else f"<span class=invalid>no: {_e(check['reason'])}</span>"]
            rows.append(cells if valid else [f"<span class=invalid>{c}</span>" for c in cells[:-1]] + cells[-1:])
    if not rows:
        return ""
    return "<h2>Residual risk</h2>" + _table(
        ["Release", "Attack", "Attack success (%)", "Control: same attack, held-out patients (%)",
         "Baseline: guessing without the release (%)", "Threshold: nominal → realised on controls (%) [95% CI]",
         "Residual risk [95% CI]", "Valid"], rows,
        caption="Anonymeter's estimator: (attack − reference) / (1 − reference); interval: percentile over bootstrap"
                " resamples of the patients on both sides (where no patient ids reach the attack: MOVER, combining "
                "the two rates' Wilson intervals); clipped to [0, 1]. The reference is the control where one exists;"
                " otherwise the baseline, as the last column says. 0 = the release teaches the attacker nothing "
                "beyond it. Controls are reweighted to the members' mix of the label that drives similarity (named "
                "in the cell, with the unweighted rate); the reweighting is redone in every bootstrap resample. A "
                "threshold set at a nominal rate on calibration patients shows the rate it gives on the controls "
                "(unweighted, patient bootstrap); one set on too few patients makes its row invalid. Greyed rows are"
                " not valid (last column: why) and count nowhere else.")


def _rate(d: dict, unit: str = "") -> str:
    extra = " exact" if d.get("exact") else ""
    b = d.get("balanced")
    if b:
        extra += f"; reweighted to the members' {_e(b['label'])} mix, unweighted {_pct(b['unweighted_rate'])}"
        if b.get("uncovered_member_share"):
            extra += (f"; {_pct(b['uncovered_member_share'])} % of members have a {_e(b['label'])} no control "
                      "patient has, and the reweighted control stands for the rest only")
    # the bootstrap's units: patients linked by a shared record are one cluster (a k-Same record links k people)
    trials = f"{d['trials']}" + (f" {unit}" if unit else "") + \
        (f", {d['patients']} patient clusters" if d.get("patients") is not None else "")
    return (f"{_pct(d['rate'])} <span class=ci>[{_pct(d['ci'][0])}, {_pct(d['ci'][1])}] n={trials}{extra}"
            f"</span>")


def _threshold(t: dict | None) -> str:
    if not t:
        return "–"
    got = (f"{_pct(t['realised_fpr'])} <span class=ci>[{_pct(t['realised_fpr_ci'][0])}, "
           f"{_pct(t['realised_fpr_ci'][1])}]</span>" if t.get("realised_fpr") is not None else "–")
    cal = f"<span class=ci>set on {t['calibration_patients']} patients</span>"
    warn = f" <span class=invalid>{_e(t['warning'])}</span>" if t.get("warning") else ""
    return f"{_pct(t['nominal_fpr'])} → {got} {cal}{warn}"


