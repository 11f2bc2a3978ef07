"""The report's attack sections: one line per number on what it is compared with, the papers' tables (k-SALSA
Table 3, VS-Snow Table 1, GMIA Tables 3-4) with the two-sided attacks beside the one-sided ones, the
nearest-record attack with its held-out control, the independent attacker, near-copy screening with the
closest pairs side by side, and the residual risks, each against its control or, named so, its baseline.
Every number shows its N and its interval."""

from __future__ import annotations

from medanon.evaluate.calibration import row_label, row_unit
from medanon.evaluate.report_format import _assume, _cell, _columns, _e, _num, _pct, _plural, _table, _unit_mark
from medanon.evaluate.report_risks import _iv, _rate_iv, _residual, _risks, _threshold
from medanon.evaluate.report_verdict import calibration_section

CONTROLS = [
    ("Membership top-K (k-SALSA)", "baseline: the exact expected hits of a random ranking of the same pool "
                                   "(hypergeometric); p-value and interval: bootstrap over the "
                                   "records' patient clusters and the held-out patients of the pools "
                                   "(Clopper-Pearson over the slots without patient ids)"),
    ("Nearest-record membership", "control: the same attack on real images of held-out patients (never "
                                  "released); residual risk against it; AUC members vs controls (patient "
                                  "bootstrap interval)"),
    ("Attribute inference", "baseline: the most frequent class; reference: Original = the same attacker on the "
                            "same records' real source images; the attacker never saw members or controls"),
    ("Linkability", "threshold from all impostor pairs of held-out patients at the target FAR (realised FAR "
                    "shown with its patient bootstrap interval); these held-out pairs set the threshold and are not "
                    "a control (they never meet the release); the residual's control: the same attack on real "
                    "images of held-out patients against the release"),
    ("Siamese verification (Packhäuser)", "reference: real held-out pairs (threshold at the target FAR); its "
                                          "membership attack's control: the same attack on held-out patients"),
    ("Singling out", "baseline: a record picked at random (1/R); no control (a held-out patient has no record of "
                     "its own); nearest-record membership asks a like question against a control"),
    ("Inference (anonymeter)", "control: the same attack on held-out patients; baseline: a random released "
                               "label"),
    ("Near-copy screening", "control: held-out real images (new people) through the same screen; the thresholds "
                            "are its 1 % tail"),
    ("FID / KID / FD", "control: held-out real images at the releases' N against the same reference"),
    ("Utility", "reference: a classifier trained on as many real source images, paired bootstrap over the "
                "test set's patients for both and for their difference"),
]


def _skipped(rels: list[dict], ok: list[dict], key: str) -> list[str]:
    return [f"<p class=note>{_e(r['name'])}: {_e(r['attacks'][key].get('skipped', 'not run'))}</p>"
            for r in rels if r not in ok and r["attacks"].get(key) is not None]


def _why_invalid(r: dict, *rows: str) -> str | None:
    """The reason given for the first of ``rows`` (residual-risk rows) that is not valid for release ``r``."""
    checks = r.get("validity") or {}
    return next((c["reason"] for row in rows if (c := checks.get(row)) and not c["valid"]), None)


def _greyed(cells: list[str], why: str | None) -> list[str]:
    """A table row, greyed with its first cell marked "not valid" where its attack's row is not (``why``)."""
    if why is None:
        return cells
    mark = f' <span class=invalid title="{_e(why)}">(not valid: see Residual risks)</span>'
    return [cells[0] + mark] + [f"<span class=invalid>{c}</span>" for c in cells[1:]]


def _protocol(rep: dict) -> str:
    """The Protocol section: which protocol the numbers follow, and where it departs from the papers'."""
    real = rep["real"]
    att = (rep["networks"].get("attacker_split") or {})
    ident = rep["networks"].get("identity") or {}
    return ("<h2>Protocol</h2><ul>"
            f"<li>Releases are made from the <b>{_e(real['source_split'])}</b> split ({real['source_images']} images: "
            f"the members). GMIA and VS-Snow anonymise their <i>test</i> split and k-SALSA builds averages of test "
            f"halves; here every method anonymises the same source split, so every method is judged on the same "
            f"people.</li><li>Controls: the <b>{_e(real['heldout_split'])}</b> split ({real['heldout_images']} "
            f"images), never released; half of its patients set the nearest-record threshold, the other half are "
            f"that attack's control.</li><li>Attackers (attribute classifier, independent identity network) are "
            f"trained on the <b>{_e(att.get('split', '?'))}</b> split ({att.get('images', '?')} images of "
            f"{att.get('patients', '?')} patients), neither members nor controls. The main identity network: "
            f"{_e(ident.get('trained_on', '?'))}"
            + (" (it learned each eye of a patient as an identity: a person's two retinas differ; the attacks link a "
               "record to the patient through any of their images)" if ident.get("identity_unit") == "eye" else "")
            + ".</li><li>Hidden rate is given per image and per individual (GMIA "
              "counts individuals); local cloaking with both centres, named.</li></ul>")


def _explain(rep: dict | None = None) -> str:
    """What each number is compared with; the fidelity row names only the distances computed (no FID or KID when
    Inception was off or unavailable)."""
    fid = rep is None or any("fid" in (r.get("fidelity") or {}) for r in rep["releases"])
    rows = [[_e(a if fid or not a.startswith("FID") else "FD"), _e(b)] for a, b in CONTROLS]
    return ("<h2>What each number is compared with</h2>" + _table(
        ["Number", "Compared with"], rows,
        caption="A control is the same attack run on people who are not in the release (held-out patients); a "
                "baseline is guessing (at random, or the most frequent class; each row names its own), a sanity "
                "check. Residual risk = (attack − control) / (1 − control), "
                "or against the baseline where no control population exists, and then named so."))


def _p(p: float | None) -> str:
    """A bootstrap p-value: at the least that its 400 resamples can show (1 or 2 of them beyond the null,
    with the +1 correction), an upper bound, written ``p ≤``; else ``p =``.

    >>> _p(1 / 401), _p(0.03)
    ('p ≤ 0.0025', 'p = 0.03')
    """
    from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES

    if p is None or p != p:
        return "p –"
    return f"p ≤ {p:.2g}" if p <= 2.2 / (BOOT_RESAMPLES + 1) else f"p = {p:.2g}"


FEW_CLUSTERS = 10          # a bootstrap p-value over fewer patient clusters than this is shown beside the exact one


def _membership_cell(a: dict) -> str:
    """A Table 3 cell: top-K accuracy with its interval, the exact chance, the p-value (the exact test's beside the
    bootstrap's where the patient clusters are few), and what the number rests on: the slots, the patient clusters
    behind the interval, the records and pools evaluated, the records left out and the views scored once."""
    clusters = ((a.get("risk") or {}).get("attack") or {}).get("patients")
    p = _p(a["p_value"])
    exact = a.get("p_value_exact")
    if clusters is not None and clusters < FEW_CLUSTERS and exact is not None and exact == exact:
        p += (f" (patient bootstrap, fewer than {FEW_CLUSTERS} clusters: rough; exact test of a random ranking, "
              f"images taken as independent: p = {exact:.2g})")
    rests = f"n = {a['slots']} slots" + (f", {_plural(clusters, 'patient cluster')}" if clusters is not None else "")
    rests += _unit_mark(a.get("interval"), field="interval") if clusters is None else ""
    if a.get("records_evaluated") is not None and a.get("pool") is not None:
        rests += (f"; {_plural(a['records_evaluated'], 'record')} in {_plural(a.get('pools', 1), 'pool')} of up to "
                  f"{a['pool']} images")
    if a.get("records_not_evaluated"):
        n = a["records_not_evaluated"]
        rests += f"; {_plural(n, 'record')} left out (larger than the held-out set)"
    if a.get("views_scored_once"):
        n = a["views_scored_once"]
        rests += (f"; {_plural(n, 'record')} {'is a view' if n == 1 else 'are views'} of another record's source "
                  f"set, scored once with it")
    return (f"{_iv(a['top_k_accuracy'], a['ci'], pct=True)} <span class=ci>chance {_pct(a['chance'])}, {p}, "
            f"{rests}</span>")


def _membership(rels: list[dict]) -> str:
    ok = [r for r in rels if "top_k_accuracy" in r["attacks"].get("membership", {})]
    out = ["<h2>Membership inference, modelled on k-SALSA §4.5</h2>"]
    if ok:
        methods, settings = _columns(ok)
        rows = []
        for m in methods:
            row = [_e(m)]
            for s in settings:
                c = _cell(ok, m, s)
                a = c["attacks"]["membership"] if c else None
                text = _membership_cell(a) if a else "–"
                why = _why_invalid(c, "membership") if c else None
                row.append(text if why is None else f"<span class=invalid title=\"{_e(why)}\">{text} (not "
                                                    "valid)</span>")
            rows.append(row)
        a = ok[0]["attacks"]["membership"]
        held = any("held-out patients" in str(r["attacks"]["membership"].get("interval", "")) for r in ok)
        out.append(_table(["Method", *map(_e, settings)], rows,
                          caption="Table 3 layout: top-K accuracy (%) with K = the record's number of source images "
                                  "(k when each record stands for k images; ties share the slots), interval by "
                                  "bootstrap over the records' patient clusters"
                                  + (" and the held-out patients (each resample draws the pools' held-out images "
                                     "again)" if held else "")
                                  + " (Clopper-Pearson over the slots where no patient ids reach it, as its cell says)"
                                  + f", exact chance of a random ranking and "
                                  f"the p-value of the patient bootstrap (the exact test of a random ranking "
                                  f"where no patient ids reach it, and beside the bootstrap's where the patient "
                                  f"clusters are fewer than {FEW_CLUSTERS}). Pool: members and held-out images in "
                                  f"equal numbers, in pools of at most twice the held-out images (each cell gives "
                                  f"its records and pools; a record larger than the held-out set is left out, and "
                                  f"records that are views of one source set are scored once)."))
        out.append(_assume(a["assumptions"]))
    return "\n".join(out + _skipped(rels, ok, "membership"))


def _nearest(rels: list[dict]) -> str:
    ok = [r for r in rels if "auc" in r["attacks"].get("nearest", {})]
    if not ok:
        return ""
    rows = []
    for r in ok:
        a = r["attacks"]["nearest"]
        ind = (r["attacks"].get("independent") or {}).get("nearest") or {}
        f, v = a["risk"], a["risk_reverse"]
        rows.append(_greyed([_e(r["name"]), _iv(a["auc"], a["auc_ci"]), _iv(a["reverse_auc"], a["reverse_auc_ci"]),
                     _iv(a["two_sided_auc"], a.get("two_sided_auc_ci")), _p(a["p_value"]),
                     f"{_rate_iv(f['attack'])} / {_rate_iv(f['control'])}",
                     f"{_rate_iv(v['attack'])} / {_rate_iv(v['control'])}",
                     _threshold(f.get("threshold")), _residual(f["residual_risk"]),
                     _iv(ind.get("two_sided_auc"), ind.get("two_sided_auc_ci")), f"{a['n_members']} / {a['n_controls']}"
                     + (f" <span class=ci>({a['member_patients']} / {a['control_patients']} patients)</span>"
                        if "member_patients" in a else "")], _why_invalid(r, "nearest")))
    return "<h2>Membership by nearest released record (with a held-out control)</h2>" + _table(
        ["Release", "AUC [95% CI]", "reverse AUC [95% CI]", "two-sided AUC [95% CI]", "p (patient bootstrap)",
         "claimed: members / controls (%) [95% CI]", "reverse: members / controls (%) [95% CI]",
         "FPR: nominal → realised on controls (%) [95% CI]", "residual vs control [95% CI]",
         "two-sided AUC, independent net [95% CI]", "members / controls: images (patients)"], rows,
        caption=f"The attacker claims a target is in the release when its most similar released record passes a "
                f"threshold set on {ok[0]['attacks']['nearest']['calibrated_on']} (FPR "
                f"{ok[0]['attacks']['nearest']['fpr']}); the reverse attacker when its least similar one falls "
                f"below. The same attack on held-out patients is the control.") + _assume(
        ok[0]["attacks"]["nearest"]["assumptions"])


def _attribute(rep: dict) -> str:
    rels = rep["releases"]
    ok = [r for r in rels if "accuracy" in r["attacks"].get("attribute", {})]
    out = ["<h2>Attribute inference, modelled on VS-Snow §2.4</h2>"]
    if ok:
        a0 = ok[0]["attacks"]["attribute"]
        rows = []
        for r in ok:
            at = r["attacks"]["attribute"]
            f1 = ((r["utility"].get("grade") or {}).get("paired_bootstrap") or {}).get("f1_3class")
            rows.append(_greyed([_e(r["name"]), _iv(at["accuracy"], at["accuracy_ci"], pct=True),
                         _iv(at.get("original_accuracy"), at.get("original_accuracy_ci"), pct=True),
                         _pct(at["baseline"]), _iv(at.get("leak_kept"), at.get("leak_kept_ci")),
                         _iv(at["auroc"], at.get("auroc_ci")),
                         _iv(at.get("original_auroc"), at.get("original_auroc_ci")), _attribute_n(r, at),
                         _iv(f1["release"]["value"], f1["release"]["ci"], pct=True) if f1 else "–"],
                                _why_invalid(r, "attribute")))
        out.append(_table(["Release", f"{_e(a0['attribute'])} accuracy (%) on the release [95% CI]",
                           "Original: same records' real images (%) [95% CI]", "baseline: majority (%)",
                           "share of the Original's leak kept [95% CI]", "AUROC release [95% CI]",
                           "AUROC Original [95% CI]", "N records",
                           "DR F1 healthy/NPDR/PDR (%), train on release"],
                          rows, caption=f"VS-Snow Table 1, per release: the attacker is trained on "
                                        f"{_e(a0.get('attacker_trained_on') or 'real images')}, patients neither "
                                        f"released nor controls. On held-out real images it reaches "
                                        f"{_iv(a0['heldout_real_accuracy'], a0['heldout_real_accuracy_ci'], pct=True)}"
                                        f" % (n = {a0['n_heldout']} images"
                                        + (f", {a0['heldout_patients']} patients" if a0.get("heldout_patients")
                                           else "")
                                        + f"; majority class {_pct(a0.get('heldout_chance'))} %)"
                                        + (": no better than naming the majority class, so no row of this attack "
                                           "is valid" if a0.get("heldout_chance") is not None and not
                                           (a0["heldout_real_accuracy_ci"][0] > a0["heldout_chance"]) else "")
                                        + "."))
        out.append(_assume(a0["assumptions"]))
    return "\n".join(out + _skipped(rels, ok, "attribute"))


def _attribute_n(r: dict, at: dict) -> str:
    """The attribute attack's N: its records out of the release's, why the others are left out (patients split
    evenly on the attribute: no true value), and the patient clusters behind its intervals."""
    n, tied = at["n"], int(at.get("tied_records_left_out") or 0)
    total = r.get("records")
    total = total if isinstance(total, int) and total >= n + tied else n + tied
    text = f"{n} of {total} records" if total != n else f"{n}"
    why = []
    if tied:
        why.append(f"{tied} left out: their patients split evenly on {_e(at.get('attribute', 'the attribute'))}, no "
                   "true value")
    if total - n - tied > 0:
        why.append(f"{total - n - tied} without a known {_e(at.get('attribute', 'value'))}")
    if why:
        text += f" ({'; '.join(why)})"
    clusters = ((at.get("risk") or {}).get("attack") or {}).get("patients")
    return text + (f"<span class=ci>; {_plural(clusters, 'patient cluster')}</span>" if clusters is not None else "")


def _link_row(label: str, v: dict | None, target_far: float | None = None) -> list[str]:
    if not v:
        return [label] + ["–"] * 7
    far_lo = (v.get("FAR_ci") or [0.0])[0]
    if target_far is not None and far_lo is not None and far_lo > 5 * target_far:
        # the control's threshold accepts most of this release's impostor pairs (e.g. a constant release, whose
        # pairs all tie): TAR and F1 say nothing of linkage here
        label += (f' <span class=invalid>(its FAR is far above the target {target_far:g}: the threshold does not '
                  "separate its records, and TAR / F1 are no risk)</span>")
    elif target_far is not None and far_lo is not None and far_lo > target_far:
        label += (f" <span class=ci>(its FAR {_pct(v['FAR'])} % is above the target {target_far:g} beyond its "
                  "interval: the threshold, set on real pairs, accepts more of this release's impostor pairs, so its "
                  "TAR is read at a looser point than the target)</span>")
    rev = _iv(v.get("reverse_TAR"), v.get("reverse_TAR_ci")) if "reverse_TAR" in v else "–"
    return [label, _iv(v["F1"], v.get("F1_ci")), _iv(v["accuracy"], v.get("accuracy_ci")), _iv(v["TAR"], v["TAR_ci"]),
            _iv(v["FAR"], v["FAR_ci"]),
            f"{_iv(v['AUC'], v.get('AUC_ci'))} <span class=ci>two-sided "
            f"{_iv(v.get('AUC_two_sided'), v.get('AUC_two_sided_ci'))}</span>", rev,
            f"{v['genuine_pairs']} / {v['impostor_pairs']}"]


def _linkability(rels: list[dict]) -> str:
    ok = [r for r in rels if "control" in r["attacks"].get("linkability", {})]
    out = ["<h2>Linkability (GMIA §3)</h2>"]
    if ok:
        l0 = ok[0]["attacks"]["linkability"]
        cal = l0["calibration"]
        rows = [_link_row("<i>real held-out pairs (set the threshold; not a control)</i>", l0["control"])]
        far = l0["target_far"]
        rows += [_greyed(_link_row(f"Inner risk — {_e(r['name'])}", r["attacks"]["linkability"].get("inner"), far),
                         _why_invalid(r, "linkability")) for r in ok]
        rows += [_greyed(_link_row(f"Outer risk — {_e(r['name'])}", r["attacks"]["linkability"].get("outer"), far),
                         _why_invalid(r, "linkability")) for r in ok]
        out.append(_table(["Testing data", "F1 ↑ (equal prevalence) [95% CI]", "balanced Acc ↑ [95% CI]",
                           "TAR ↑ [95% CI]",
                           "FAR ↓ [95% CI]", "AUC [95% CI]", "reverse TAR [95% CI]",
                           "genuine / impostor pairs"], rows,
                          caption=f"GMIA Table 3 layout, standard definitions: FAR = impostor pairs accepted / "
                                  f"impostor pairs, TAR = genuine pairs accepted / genuine pairs; all pairs. "
                                  f"Threshold {_num(l0['threshold'])} set on all {cal['impostor_pairs']} impostor "
                                  f"pairs of {cal.get('patients', '?')} held-out patients at FAR {l0['target_far']}: "
                                  f"realised FAR "
                                  f"{_iv(cal['realised_far'], cal['realised_far_ci'])}. The reverse attacker "
                                  f"accepts scores ≤ {_num(l0['low_threshold'])} (FAR {l0['target_far']} in the "
                                  f"lower tail). ↑: higher means more linkage (more risk); ↓: lower means "
                                  f"more risk. Inner and outer rows have no control of their own: the residual-risk "
                                  f"table holds linkability against its control."))
        if l0.get("warning"):
            out.append(f"<p class=note>{_e(l0['warning'])}</p>")
        out.append(_assume(l0["assumptions"]))
        out += [f"<p class=note>{_e(r['name'])}: {_e(r['attacks']['linkability']['inner_note'])}</p>" for r in ok
                if r["attacks"]["linkability"].get("inner_note")]
    return "\n".join(out + _skipped(rels, ok, "linkability"))


def _singling(rels: list[dict]) -> str:
    ok = [r for r in rels if "hidden_rate" in r["attacks"].get("singling_out", {})]
    out = ["<h2>Singling out (GMIA §3)</h2>"]
    if ok:
        rows = [_greyed([_e(r["name"]), _iv(s["hidden_rate"], s.get("hidden_rate_ci")),
                 _iv(s.get("hidden_rate_individual"), s.get("hidden_rate_individual_ci")),
                 _num(s["chance_hidden_rate"]), _iv(s.get("reverse_top1"), s.get("reverse_top1_ci")),
                 _iv(s["LC_N_R"], s.get("LC_N_R_ci"), 1), _iv(s.get("LC_N_R_x"), s.get("LC_N_R_x_ci"), 1),
                 _iv(s["LC_N_A"], s.get("LC_N_A_ci"), 1), _num(s["chance_LC_N_A"], 1),
                 f"{s['n_sources']} / {s.get('n_individuals', '–')} / {s['n_records']}"],
                        _why_invalid(r, "singling_out"))
                for r in ok for s in [r["attacks"]["singling_out"]]]
        out.append(_table(["Testing data", "HR per image ↑", "HR per individual ↑", "HR of a random guess",
                           "reverse: own record least similar", "LC N<sub>R</sub> centred on r(x) ↑",
                           "LC N<sub>R</sub> centred on x ↑", "LC N<sub>A</sub> ↑", "N<sub>A</sub> random guess",
                           "source images / individuals / records"], rows,
                          caption="GMIA Table 4 layout (↑: higher means more privacy, the paper's arrows, unlike "
                                  "the linkability table's): hidden rate (own record not the most similar; an "
                                  "individual is hidden when none of their images finds its own record first) and "
                                  "local cloaking "
                                  "(medians). Centred on r(x): real images closer to the released record than x (the "
                                  "paper); centred on x: real images of other patients closer to x than r(x) (the "
                                  "official code). Ties count 1/(t+1) for the attacker. Intervals: bootstrap over "
                                  "patients (rates and medians)."))
        out.append(_assume(ok[0]["attacks"]["singling_out"]["assumptions"]))
    return "\n".join(out + _skipped(rels, ok, "singling_out"))


def _siamese(rels: list[dict]) -> str:
    ok = [r for r in rels if "reference" in r["attacks"].get("siamese", {})]
    out = ["<h2>A Siamese verification attacker, modelled on Packhäuser et al. 2022</h2>"]
    if ok:
        rows = []
        for r in ok:
            a = r["attacks"]["siamese"]
            o, m = a.get("outer") or {}, a["membership"]
            rows.append(_greyed([_e(r["name"]), _iv(o.get("AUC"), o.get("AUC_ci")),
                         _iv(o.get("AUC_two_sided"), o.get("AUC_two_sided_ci")),
                         _iv(o.get("TAR"), o.get("TAR_ci")), _iv(o.get("reverse_TAR"), o.get("reverse_TAR_ci")),
                         f"{o.get('genuine_pairs', '–')} / {o.get('impostor_pairs', '–')}",
                         _iv(m["auc"], m["auc_ci"]), _iv(m["two_sided_auc"], m.get("two_sided_auc_ci")),
                         _threshold(m["risk"].get("threshold")), _residual(m["risk"]["residual_risk"]),
                         f"{m['n_members']} / {m['n_controls']}"], _why_invalid(r, "siamese")))
        a0 = ok[0]["attacks"]["siamese"]
        ref = a0["reference"]
        out.append(_table(["Release", "outer AUC [95% CI]", "two-sided AUC [95% CI]", "TAR ↑ [95% CI]",
                           "reverse TAR [95% CI]", "genuine / impostor pairs", "membership AUC [95% CI]",
                           "membership two-sided AUC [95% CI]", "membership FPR: nominal → realised on controls (%)",
                           "residual vs control [95% CI]", "members / controls"], rows,
                          caption=f"A Siamese network (shared convolutional branch, a head on |a − b| and a · b) "
                                  f"trained to decide “same patient?” on pairs of {_e(a0.get('trained_on'))}. On real "
                                  f"held-out pairs it reaches AUC {_iv(ref['AUC'], ref['AUC_ci'])} "
                                  f"({ref['genuine_pairs']} genuine / {ref['impostor_pairs']} impostor pairs; "
                                  f"a small stand-in for Packhäuser et al.'s network, which reaches 0.994 on "
                                  f"ChestX-ray14 at full size, not comparable); TAR at the threshold of FAR "
                                  f"{a0['target_far']} on those impostor pairs. Outer pairs: (real source image, "
                                  f"released record). Membership: a target's best-scoring record against a threshold "
                                  f"set on half of the held-out patients; control: the other half."))
        out.append(_assume(a0["assumptions"]))
    return "\n".join(out + _skipped(rels, ok, "siamese"))


def _independent(rep: dict) -> str:
    rels = [r for r in rep["releases"] if r["attacks"].get("independent")]
    if not rels:
        return ""
    net = rep["networks"].get("independent") or {}
    cfg = net.get("config", {})
    corr = (rep["networks"].get("checks") or {}).get("cosine_correlation") or {}

    def both(r: dict, key: str, sub: str | None, value: str) -> str:
        """The main network's value and the independent one's, each with its interval."""
        parts, ns = [], []
        for x in (r["attacks"], r["attacks"]["independent"]):
            v = x.get(key) or {}
            ns.append((v.get("risk") or {}).get("n"))
            v = (v.get(sub) or {}) if sub else v
            parts.append(_iv(v.get(value), v.get(f"{value}_ci")))
        n = ("" if ns[0] is None and ns[1] is None else
             f" <span class=ci>n={ns[0] if ns[0] == ns[1] else ' / '.join(str(m) for m in ns)} {_e(row_unit(key))}"
             "</span>")
        return " / ".join(parts) + n

    rows = [_greyed([_e(r["name"]), both(r, "linkability", "outer", "AUC_two_sided"),
                     both(r, "singling_out", None, "two_sided_top1"), both(r, "nearest", None, "two_sided_auc")],
                    _why_invalid(r, "independent linkability", "independent singling_out", "independent nearest"))
            for r in rels]
    return "<h2>A second, independent attacker</h2>" + _table(
        ["Release", "outer two-sided AUC: main / independent [95% CI]",
         "singled out two-sided top-1: main / independent [95% CI]",
         "nearest-record two-sided AUC: main / independent [95% CI]"], rows,
        caption=f"The independent identity network: {_e(cfg.get('arch'))} at {_e(cfg.get('image_size'))} px, seed "
                f"{_e(cfg.get('seed'))}, trained on {_e(net.get('trained_on'))}. Cosines of the two networks on "
                f"held-out pairs correlate r = {_num(corr.get('pearson_r'))}{_corr_n(corr)}: the "
                f"closer to 1, the less independent. A release protected against one network only is exposed by "
                f"the other.")


def _corr_n(corr: dict) -> str:
    """The correlation's interval (a patient bootstrap over the pairs' patients) and N."""
    ci = corr.get("ci")
    iv = f" [{_num(ci[0])}, {_num(ci[1])}]" if ci else ""
    who = f", {corr['patients']} patients" if corr.get("patients") else ""
    return f"{iv} (n = {corr.get('pairs', '–')} pairs{who})"


def _screening(rep: dict, grids: dict) -> str:
    rels = [r for r in rep["releases"] if r.get("screening")]
    if not rels:
        return ""
    rows = []
    for r in rels:
        s = r["screening"]
        unit = _unit_mark(s.get("interval"), field="interval")          # records one by one without a mapping
        rows.append([_e(r["name"]), _iv(s["near_copies_pixel_rate"], s["near_copies_pixel_ci"], pct=True) + unit,
                     _iv(s["near_copies_identity_rate"], s["near_copies_identity_ci"], pct=True) + unit,
                     str(s["copies_of_one_source"]), str(s["copies_of_one_source_in_multi_person_records"]),
                     f"{_num(s['median_pixel_distance'])} / {_num(s['median_heldout_pixel_distance'])}",
                     f"{_iv(s['control']['pixel_rate'], s['control'].get('pixel_rate_ci'), pct=True)} / "
                     f"{_iv(s['control']['identity_rate'], s['control'].get('identity_rate_ci'), pct=True)}"
                     + _control_n(s["control"]),
                     str(s["n"])])
    s0 = rels[0]["screening"]
    out = ["<h2>Memorisation and near-copy screening</h2>", _table(
        ["Release", "near-copies, pixels (%)", "near-copies, identity (%)", "copies of one source",
         "… in records claiming ≥ 2 people", "median RMSE to nearest real: release / held-out",
         "control: held-out flagged, pixels / identity (%) [95% CI]", "N (released records)"], rows,
        caption=f"Each released image's nearest real source image by pixel RMSE and by identity cosine. Near-copy by "
                f"pixels: closer to a real image than all but {_pct(s0['quantile'])} % of second photographs of one "
                f"held-out patient come to the first (RMSE ≤ {_num(s0['pixel_threshold'])}); by identity: as like a "
                f"source patient as only {_pct(s0['quantile'])} % of new people (held-out patients) are to their "
                f"likeliest source patient (cosine ≥ {_num(s0['identity_threshold'])}). The control runs the same "
                f"screen on held-out images against the source split: its pixel rate may exceed "
                f"{_pct(s0['quantile'])} %, since new people are not second photographs. A copy of one source is a "
                f"near-copy whose nearest real image is its own record's source.")]
    warned = sorted({r["screening"]["warning"] for r in rels if r["screening"].get("warning")})
    out += [f"<p class=note><b>Few patients</b>: {_e(w)}.</p>" for w in warned]
    for r in rels:
        pairs = grids.get(f"closest:{r['name']}") or []
        if not pairs:
            continue
        out.append(f"<h3>{_e(r['name'])}: closest pairs (real | released)</h3><div class=grid>")
        for p in pairs:
            out.append(f'<div class=pair><img src="data:image/png;base64,{p["real"]}" alt="real">'
                       f'<img class=rel src="data:image/png;base64,{p["released"]}" alt="released">'
                       f'<span class=more>RMSE {p["pixel_rmse"]:.3f}, cos {p["cosine"]:.2f}{_pair_label(p)}'
                       f'</span></div>')
        out.append("</div>")
        if any(p.get("near_copy") and (p.get("n_sources") or 1) >= 2 and not p.get("copy_of_one_source")
               for p in pairs):
            out.append("<p class=note>A record made from several sources (an average) lies between them, so the pixel "
                       "screen flags it near one of them by design: it is a copy only where it is much nearer one "
                       "source than the others (the copies-of-one-source column).</p>")
    return "\n".join(out)


def _control_n(c: dict) -> str:
    """The screen's control N: held-out images (patients) for the pixel rate / for the identity rate."""
    def n(images, patients) -> str:
        return f"{images}" + (f" ({patients})" if patients else "")
    if c.get("n") is None:
        return ""
    ident = n(c.get("identity_n", "–"), c.get("identity_patients"))
    return f" <span class=ci>n={n(c['n'], c.get('patients'))} / {ident} held-out images (patients)</span>"


def _pair_label(p: dict) -> str:
    """What a closest pair is: a near-copy (pixels), and whether its real image is the record's only source, one of
    its several sources, or a copy of one source (much nearer that one than the record's others)."""
    n = p.get("n_sources")
    text = ", near-copy (pixels)" if p["near_copy"] else ""
    if p.get("copy_of_one_source"):
        return text + (", copy of one of its sources" if (n or 1) >= 2 else ", copy of its source")
    if p["own_source"]:
        return text + (f", one of its {n} sources" if n and n >= 2 else ", its own source")
    return text


def _not_run(rels: list[dict]) -> str:
    """Every attack a release was not measured by, with the reason: what the verdict cannot speak to."""
    items = [f"<li><b>{_e(r['name'])}</b>: {_e(row_label(key))}: {_e(a['skipped'])}</li>"
             for r in rels for key, a in r["attacks"].items() if isinstance(a, dict) and "skipped" in a]
    if not items:
        return ""
    return ("<h3>Attacks not run</h3><p class=note>No number of these attacks exists for these releases: the verdict "
            "says nothing of what they measure.</p><ul>" + "".join(items) + "</ul>")


def attack_sections(rep: dict, grids: dict | None = None) -> str:
    rels = rep["releases"]
    parts = [calibration_section(rep), _protocol(rep), _explain(rep), _membership(rels), _nearest(rels),
             _attribute(rep), _linkability(rels),
             _singling(rels), _siamese(rels), _independent(rep), _risks(rep), _not_run(rels),
             _screening(rep, grids or {})]
    return "\n".join(p for p in parts if p)
