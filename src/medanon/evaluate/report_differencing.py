"""The report's section on releases of the same people differenced record by record
(:mod:`medanon.evaluate.attacks.differencing`)."""

from __future__ import annotations

import math

from medanon.evaluate.report_format import _assume, _e, _num, _table
from medanon.evaluate.report_format import differencing_space as space
from medanon.evaluate.report_risks import _rate, _residual

CAPTION = ("For every two records whose n_people differ by one, (n_a·a − n_b·b) / (n_a − n_b): where the smaller "
           "record's people are all in the larger, the image of the one person left over (pixels: images compared "
           "average-pooled to at most 32 px; latent: for two releases made with the same public codec, the records "
           "inverted by its encoder and their latents differenced, against the latents of the patients' images). "
           "Success: such a difference within the "
           "threshold of one of a patient's images (or their mean), and at most half as far from it as the nearest "
           "released record. Patients are the unit (Wilson intervals); the control is the same search for held-out "
           "patients, who are in neither release. Not measured: differences of more than two records, latents of a "
           "codec that is not public, and noise averaged over releases.")


def differencing_section(rep: dict) -> str:
    rows = []
    entries = rep.get("differencing") or []
    nobody = [d for d in entries if not d["members"]["recovered"] and not d["controls"]["recovered"]]
    for d in (d for d in entries if d not in nobody):
        m, t = d["members"], d["threshold"]
        rr = d["risk"]["residual_risk"]
        rows.append([_e(" × ".join(d["releases"])), _e(space(d)), str(d["shared_patients"]), str(d["pairs"]),
                     f"{_num(t['value'])} <span class=ci>{_num(t['fraction'], 2)} × "
                     f"{_num(t['median_patient_distance'])} ({t['patients']} patients)</span>",
                     f"{m['recovered']} / {m['shown_alone']} / {m['recovered_beyond']} of {m['patients']}",
                     _rate(d["risk"]["attack"]), _rate(d["risk"]["control"]),
                     _residual(rr), _num(m.get("median_error"))])
    if not entries:
        return ""
    def none_of(d: dict) -> str:                 # "0 of 35 members [0, 0.099], 0 of 21 controls; residual [0, 0.07]"
        a, rr = d["risk"]["attack"], d["risk"]["residual_risk"]
        ci = a.get("ci") or [math.nan, math.nan]
        cci = (d["risk"].get("control") or {}).get("ci") or [math.nan, math.nan]
        return (f"{' × '.join(d['releases'])} ({space(d)}): 0 of {d['members']['patients']} member patients "
                f"[{_num(ci[0], 2)}, {_num(ci[1], 2)}], 0 of {d['controls']['patients']} control patients "
                f"[{_num(cci[0], 2)}, {_num(cci[1], 2)}]; "
                f"residual risk {_num(rr['risk'], 2)} [{_num(rr['ci'][0], 2)}, {_num(rr['ci'][1], 2)}]")

    quiet = (f"<p>{len(nobody)} pair(s) of releases recover nobody, member or control: "
             f"{_e('; '.join(none_of(d) for d in nobody))}.</p>" if nobody else "")
    if not rows:
        return "<h2>Releases of the same people, differenced</h2>" + _assume(entries[0]["assumptions"]) + quiet
    return ("<h2>Releases of the same people, differenced</h2>" + _assume(entries[0]["assumptions"]) + quiet + _table(
        ["Releases", "Space", "Shared patients", "Record pairs", "Threshold (RMS: pixels in [−1, 1], or latents)",
         "Members: recovered / shown by a record alone / recovered beyond", "Attack success (%)",
         "Control: same attack, held-out patients (%)", "Residual risk [95% CI]", "Median error of the recovered"],
        rows, caption=CAPTION))
