"""Known-answer calibration of the attacks, the validity of every residual risk, and one verdict per release.

An attack is trusted only after it gets releases whose answer is known right. From the real data an evaluation
already holds, seven **known-answer releases** of the source split are built in memory (one record per source
image, the private mapping known exactly; :func:`medanon.evaluate.known_answers.known_images`) and scored
through every attack:

- ``copy``, ``jpeg`` (re-encoded at quality 75), ``shift`` (moved by one pixel) and ``mirror`` (mirrored
  left-right): the source images, as such or barely changed. A working attack detects each: residual risk ≥ 0.5
  with its interval above 0. The attribute attack is held to what real images allow it: a copy of real images
  tells it no more than real images of people it never saw, whose residual (its accuracy on held-out real images
  against their majority class) is its ceiling, so it must reach half of that ceiling, with its interval above 0
  (a sex classifier right on 60 % of held-out images, majority 51 %, has a ceiling of 0.19, and could never reach
  0.5 on any copy);
- ``constant``: one mid-grey image per record; ``noise``: uniform noise per record (seeded); ``others``: real
  images of the attacker split's patients, who are neither members nor controls (when there is such a split).
  None carries anything of the members, so a working attack's residual risk interval includes 0.

A reverse attacker (least similar record: releases pushed *away* from their sources) has no copy test (a copy
is not pushed away from anything); it must pass the nulls. A residual risk row of a release is **valid**
when its attack passed, its attacker is not at chance on held-out real data, and it was not trained on people of
the evaluation (members, or controls a checkpoint's recorded phantom shares); otherwise ``valid: false`` with
the reason, and it is kept out of the verdict, the plots and any ranking.
The **verdict** of a release is the largest valid residual risk (with its interval and the attack that gave it)
and the utility kept. Where no valid row is one that caught the known copies (only reverse attacks passed), their
largest risk is given only when its interval is above 0, as a lower bound; otherwise the verdict states no risk,
since an attack never shown to catch a copy reading 0 says nothing. The utility kept is the release's gain over
chance in its headline metric as a share of real images' of the same N, (release - chance) / (real - chance),
with a paired bootstrap interval.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from medanon.evaluate.attack_suite import run_attacks
from medanon.evaluate.attacks.risk import MIN_PATIENTS
from medanon.evaluate.cache import digest
from medanon.evaluate.config import result_key
from medanon.evaluate.context import RealContext
from medanon.evaluate.inputs import ReleaseData
from medanon.evaluate.known_answers import (
    DETECTED,
    KINDS,
    copy_ceiling,
    copy_threshold,
    known_images,
    matched_others,
    unmatched,
)
from medanon.evaluate.setting_notes import other_size
from medanon.evaluate.utility import HEADLINE, HEADLINE_CHANCE, METRIC_NAMES, kind_of
from medanon.evaluate.verdict_text import exposure, heldout_in_release, sentence, why_invalid

KNOWN = KINDS                                   # the known-answer releases, in their table order
COPIES = DETECTED                               # those a working attack must detect
KNOWN_WHAT = {"copy": "every source image released as its own record (must be detected)",
              "jpeg": "every source image re-encoded as JPEG, quality 75 (must be detected)",
              "shift": "every source image moved by one pixel (must be detected)",
              "mirror": "every source image mirrored left-right (must be detected)",
              "constant": "one mid-grey image per source image (must not be detected)",
              "noise": "uniform noise, one image per source image (must not be detected)",
              "others": "real images of the attacker split's patients, who are neither members nor controls, each "
                        "of its source's grade (or pneumonia) where the data has it (must not be detected; left out "
                        "when the attackers had to train on the members)"}
MIN_CONTROL_PATIENTS = MIN_PATIENTS             # fewer control (or calibration) patients: the rate is not resolved
VERSION = 11                                    # 11: AUC intervals at 0 or 1 widened (score interval);
#                                                 10: inference's control reweighted on its secret; attackers
#                                                 learn eyes (identity_unit); the screen reads the attacker split;
#                                                 top-K is of people where a patient has several records;
#                                                 9: top-K's interval resamples the held-out patients;
#                                                 8: the others release matched on the label

NAMES = {"membership": "Membership (top-K)", "nearest": "Nearest-record membership",
         "attribute": "Attribute (classifier)", "inference": "Inference (nearest record)",
         "singling_out": "Singling out (top-1)", "siamese": "Siamese membership (best record)",
         "linkability": "Linkability"}
IDENTITY_ATTACKS = ("membership", "nearest", "inference", "singling_out", "linkability")


def known_answer_release(ctx: RealContext, kind: str) -> ReleaseData:
    """The ``kind`` known-answer release of the source split: one record per source image, sources known."""
    real, rows = ctx.real, ctx.src
    if kind == "others":                    # people neither released nor controls, each record one of their images
        if ctx.balance_label:               # ... of the source's grade (or pneumonia): a shared label is no identity
            values = real.label(ctx.balance_label)
            pick = ctx.attacker_rows[matched_others(values[rows], values[ctx.attacker_rows], seed=int(ctx.cfg.seed))]
        else:
            order = np.random.default_rng(int(ctx.cfg.seed)).permutation(ctx.attacker_rows)
            pick = order[np.arange(len(rows)) % len(order)]
        images = real.images[pick]
    else:
        images = known_images(kind, real.images[rows], seed=int(ctx.cfg.seed))
    labels = {name: real.label(name)[rows] for name in real.label_names}
    table = [{"image": f"{j:06d}.png", **{k: "" if math.isnan(v[j]) else repr(float(v[j]))
                                          for k, v in labels.items()}} for j in range(len(rows))]
    return ReleaseData(path=Path(f"<known answer: {kind}>"), name=f"known answer: {kind}",
                       manifest={"method": f"known-answer-{kind}", "params": {}}, rows=table, images=images,
                       digest=f"known-answer-{kind}", sources=[[int(i)] for i in rows])


def calibrate(ctx: RealContext, checkpoints: dict[str, str]) -> dict[str, dict]:
    """Every attack on each known-answer release (cached with the real data's key): ``{kind: attacks}``."""
    out = {}
    for kind in KNOWN:
        if kind == "others" and (ctx.attacker_from == ctx.cfg.source_split or not len(ctx.attacker_rows)):
            continue                        # no people outside the members and the controls to release
        key = digest("calibration", VERSION, kind, ctx.key, result_key(ctx.cfg), checkpoints)
        got = ctx.cache.load_json(f"calibration-{key}")
        if got is None:
            got = ctx.cache.save_json(f"calibration-{key}",          # its table reads risks only
                                      run_attacks(ctx, known_answer_release(ctx, kind), tables=False))
        out[kind] = got
    return out


def risk_rows(attacks: dict, prefix: str = "") -> dict[str, dict]:
    """Every residual-risk entry of a release's attacks, by row id (``nearest``, ``nearest (reverse)``,
    ``independent singling_out``, ...): the ``risk`` entry of each attack, or the attack itself where it is one."""
    out: dict[str, dict] = {}
    for key, a in attacks.items():
        if key == "independent":
            out.update(risk_rows(a, "independent "))
            continue
        if not isinstance(a, dict) or "skipped" in a:
            continue
        risk = a.get("risk") if "risk" in a else (a if "residual_risk" in a else None)
        if risk:
            out[prefix + key] = risk
        if a.get("risk_reverse"):
            out[prefix + key + " (reverse)"] = a["risk_reverse"]
    return out


# what an attack row's N counts (its bootstrap resamples the patients behind them)
ROW_UNITS = {"membership": "ranked slots", "attribute": "released records", "linkability": "source images",
             "singling_out": "source images", "nearest": "member images", "siamese": "member images",
             "inference": "member images"}


def row_unit(row: str) -> str:
    """What the N of residual-risk row ``row`` counts (``source images``, ``ranked slots``, ...), or ``""``."""
    return ROW_UNITS.get(row.removeprefix("independent ").removesuffix(" (reverse)"), "")


def row_label(row: str) -> str:
    base = row.removeprefix("independent ").removesuffix(" (reverse)")
    label = NAMES.get(base, base)
    if row.endswith(" (reverse)"):
        label += ", reverse"
    return label + (" [independent network]" if row.startswith("independent ") else "")


def _rr(risk: dict | None) -> dict | None:
    """A row's residual risk on one known answer, with the N it rests on (``n``, in the row's unit, and the
    ``patients`` its bootstrap resampled, where it did)."""
    if risk is None or risk.get("residual_risk") is None:
        return None
    control = risk.get("control") or {}
    return {**risk["residual_risk"], "n": risk.get("n"), "patients": (risk.get("attack") or {}).get("patients"),
            "against": risk.get("against", "control"), "control_n": control.get("trials"),
            "control_patients": control.get("patients"), "baseline_is": risk.get("baseline_is")}


def _cell_n(c: dict) -> str:
    """A known-answer cell's N, as a reason quotes it."""
    if c.get("n") is None:
        return ""
    return f", n={c['n']}" + (f", {c['patients']} patients" if c.get("patients") else "")


def defined_risk(c: dict) -> bool:
    """Whether a residual-risk entry (a row's, or a known-answer cell's) has a value: NaN where its reference
    succeeds on every target."""
    return isinstance(c.get("risk"), (int, float)) and math.isfinite(c["risk"])


def _not_measurable(kind: str, c: dict | None) -> str:
    """The reason of a row that has no residual risk on the known-answer release ``kind``."""
    why = ((c or {}).get("interval") or "").removeprefix("undefined: ")
    return f"not measurable on the {kind} release" + (f" ({why}{_cell_n(c)})" if c and why else "")


def calibration_table(calib: dict[str, dict]) -> dict[str, dict]:
    """Per risk row: its residual risk on each known-answer release and whether the attack passed."""
    rows = {kind: risk_rows(attacks) for kind, attacks in calib.items()}
    out = {}
    for row in sorted(set().union(*rows.values())):
        got = {kind: _rr(rows[kind].get(row)) for kind in rows}
        reasons = []
        copy_ok = None if row.endswith(" (reverse)") else True   # reverse: no copy test (a copy is not pushed away)
        for kind in COPIES if copy_ok else ():
            c = got.get(kind)                               # a known answer not run: not passed either
            ceiling = copy_ceiling(row, calib.get(kind) or {})
            need = copy_threshold(ceiling)
            if c is None or not (c["risk"] >= need and c["ci"][0] > 0):
                copy_ok = False
                what = "an exact copy" if kind == "copy" else f"the {kind} copy"
                if c is None:
                    reasons.append(f"misses {what}")
                    continue
                if not defined_risk(c):                         # nothing measured: not a miss
                    reasons.append(_not_measurable(kind, c))
                    continue
                needs = ("" if ceiling is None else
                         ", and its attacker is at chance on held-out real images: no copy can show" if ceiling == 0
                         else f", needs {need:.2f}: half its {ceiling:.2f} on held-out real images")
                reasons.append(f"misses {what} (on that known-answer release: residual {c['risk']:.2f} "
                               f"[{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]{_cell_n(c)}{needs})")
        # nulls: releases that carry nothing of the members' identities; for a reverse attacker (members whose
        # records are all far from them) the copies are nulls too: a copy pushes nobody away
        nulls = [k for k in KNOWN if k in rows and (k not in COPIES or copy_ok is None)]
        for kind in nulls:
            n = got[kind]
            if n is None or not defined_risk(n):                # unmeasured: no evidence that it spares the null
                reasons.append(_not_measurable(kind, n))
            elif n["ci"][0] > 0:
                what = f"the {kind} copy, which pushes nobody away" if kind in COPIES and kind != "copy" else \
                    "an exact copy, which pushes nobody away" if kind == "copy" else f"the {kind} release"
                reasons.append(f"flags {what} (on that known-answer release: residual {n['risk']:.2f} "
                               f"[{n['ci'][0]:.2f}, {n['ci'][1]:.2f}]{_cell_n(n)})")
        out[row] = {**{kind: got.get(kind) for kind in KNOWN}, "copy_check": copy_ok, "passes": not reasons,
                    "reason": "; ".join(reasons)}
    return out


def _at_chance(row: str, rel: dict, checks: dict) -> str | None:
    """Why the attacker of ``row`` is at chance on held-out real data, or None."""
    base = row.removeprefix("independent ").removesuffix(" (reverse)")
    if base == "attribute":
        a = rel["attacks"].get("attribute") or {}
        lo, chance = (a.get("heldout_real_accuracy_ci") or [math.nan])[0], a.get("heldout_chance")
        if chance is not None and not lo > chance:
            return (f"the attribute attacker is at chance on held-out real images (accuracy "
                    f"{a['heldout_real_accuracy']:.2f}, interval from {lo:.2f}; majority class {chance:.2f})")
        return None
    if base == "siamese":                            # its own network: its verification of held-out real pairs
        ref = (rel["attacks"].get("siamese") or {}).get("reference") or {}
        lo = (ref.get("AUC_ci") or [math.nan])[0]
        if ref and not lo > 0.5:
            return (f"the Siamese network does not tell held-out patients apart (verification AUC "
                    f"{ref['AUC']:.2f}, interval from {lo:.2f})")
        return None
    if base in IDENTITY_ATTACKS:
        net = "independent" if row.startswith("independent ") else "identity"
        c = (checks.get(net) or {}).get("controls")
        if c is not None and not c["ci"][0] > 0.5:
            return (f"the {net} network does not tell held-out patients apart (verification AUC {c['auc']:.2f} "
                    f"[{c['ci'][0]:.2f}, {c['ci'][1]:.2f}])")
    return None


def trained_on_members(ctx: RealContext) -> dict[str, bool]:
    """Which attackers were trained on the evaluation's people: trained here on the release's members (no attacker
    split to train them on, no checkpoint), or a checkpoint trained on a phantom whose people the real phantom
    shares (:func:`medanon.phantoms.provenance.shared_people`: members or controls)."""
    a = ctx.cfg.attacks
    fallback = ctx.attacker_from == ctx.cfg.source_split
    given = {"identity": a.identity_checkpoint, "independent": a.independent_checkpoint,
             "siamese": a.siamese_checkpoint, "attribute": a.attribute_checkpoint}
    trained_here = {"identity": fallback, "independent": fallback, "siamese": fallback,
                    "attribute": fallback or "attribute" in ctx.member_fallbacks}
    return {net: bool(_checkpoint_people(path, ctx)) if path else trained_here[net] for net, path in given.items()}


def _checkpoint_people(path: str, ctx: RealContext) -> list[str]:
    """The evaluation's patients (members and controls) whom the checkpoint was trained on, as far as it records
    them: those its training phantom (``extra.phantom``) also holds, or, where its recorded training patients
    (:func:`medanon.evaluate.context.recorded_patients`) are exactly the members, the controls or both, those;
    empty for a checkpoint trained on other people or one that records none."""
    from medanon.checkpoint import load_checkpoint
    from medanon.evaluate.context import recorded_patients
    from medanon.phantoms.provenance import shared_people, training_phantom

    extra = load_checkpoint(path).get("extra")
    trained = training_phantom(extra, None)
    rows = np.concatenate([ctx.src, ctx.held])
    shared = shared_people(trained, ctx.real.root, ctx.real.patients[rows].tolist())
    if shared:
        return shared
    which = recorded_patients(extra, ctx)
    return sorted(set(ctx.real.patients[which[1]].tolist())) if which is not None else []


def _member_trained(row: str, trained_on_members: dict[str, bool]) -> str | None:
    base = row.removeprefix("independent ").removesuffix(" (reverse)")
    net = ("attribute" if base == "attribute" else "siamese" if base == "siamese" else
           "independent" if row.startswith("independent ") else "identity")
    if trained_on_members.get(net):
        return (f"the {net} attacker was trained on people of this evaluation (the release's members, its controls, "
                "or phantom people they share): it measures memorisation of the members, or takes controls for "
                "members, instead of the release's risk alone")
    return None


def _few_controls(risk: dict) -> str | None:
    """Why the control of a risk row is too small to compare with, or None."""
    c = risk.get("control")
    if not c or c.get("exact"):
        return None
    n = c.get("patients") if c.get("patients") is not None else c.get("trials")
    if n is not None and n < MIN_CONTROL_PATIENTS:
        unit = "patients" if c.get("patients") is not None else "targets"
        return (f"its control has {n} {unit} (fewer than {MIN_CONTROL_PATIENTS}: each one moves the control rate by "
                f"over 10 %, so a threshold set at a 10 % rate and the residual against it are not resolved)")
    return None


def _few_pool_patients(risk: dict) -> str | None:
    """Why a row whose non-members are drawn from few held-out patients (top-K membership's pools) is not resolved:
    its baseline is exact, so no control floor applies, but its rate rests on those patients too."""
    n = risk.get("pool_patients")
    if n is not None and n < MIN_CONTROL_PATIENTS:
        return (f"its pools' non-members are images of {n} held-out patients (fewer than {MIN_CONTROL_PATIENTS}: "
                "each one moves the rate by over 10 %, so it is not resolved: hold out more patients)")
    return None


def _few_targets(risk: dict) -> str | None:
    """Why the attack's own rate rests on too few patients (clusters) to tell anything, or None: the same floor as
    for controls, which rows measured against a baseline would otherwise escape."""
    a = risk.get("attack") or {}
    n = a.get("patients")
    if n is not None and n < MIN_CONTROL_PATIENTS:
        return (f"its targets are {n} patient clusters (fewer than {MIN_CONTROL_PATIENTS}: each one moves the rate "
                "by over 10 %, so the residual is not resolved)")
    return None


def _images_as_independent(risk: dict) -> str | None:
    """Why an attack rate's interval does not respect patients (no mapping, so records were counted as independent
    trials; one patient's several records are not), or None."""
    a = risk.get("attack") or {}
    if a and a.get("patients") is None and not a.get("exact") and str(a.get("interval", "")).startswith("Wilson"):
        return ("its interval counts released records as independent (without the mapping no patient reaches the "
                "attack, and one patient's records are not independent)")
    return None


def _few_calibration(risk: dict) -> str | None:
    """Why the threshold of a risk row is set on too few patients, or None."""
    t = risk.get("threshold") or {}
    if t.get("enough") is False:
        return f"its threshold is set on {t['calibration_patients']} patients (fewer than {t['minimum_patients']})"
    return None


def _controls_copied(rel: dict) -> str | None:
    """Why every row of a release is invalid because it holds held-out patients' images (copies, or near-copies
    above new people's rate: :func:`~medanon.evaluate.verdict_text.heldout_in_release`), or None."""
    e = exposure(rel.get("screening"))
    n = e.get("heldout_copies") or 0
    what = (f"{n} cop{'y' if n == 1 else 'ies'}" if n else
            "near-copies" if heldout_in_release(e) else None)
    if what:
        return (f"the release holds {what} of held-out patients' images: they are the attacks' controls, the "
                "pools and thresholds the attacks calibrate on, and the utility test set, so no comparison with them "
                "holds")
    return None


def _mapping_contradicted(rel: dict) -> str | None:
    """Why every row is invalid because released copies are of real images their records' mapped sources are not
    (the mapping is not this release's, or wrong: every attack reads it), or of real images outside the source and
    held-out splits (people the release cannot be of), or None."""
    n = (rel.get("screening") or {}).get("copies_not_of_own_source") or 0
    if n:
        return (f"{n} released images are copies of a real image their record's mapped sources do not include: the "
                "mapping does not describe this release, and every attack reads it")
    n = ((rel.get("screening") or {}).get("other") or {}).get("copies") or 0
    if n:
        return (f"{n} released images are copies of real images outside the source and held-out splits (such as the "
                "attacker's split), which no record's sources can include: the release is not of the source split's "
                "people alone, so the attacks' members are not who they are said to be")
    return None


NO_PATIENT_IDS = ("the real data has no patient ids, so its held-out \"patients\" are images: a control may be a "
                  "member's other image (the other eye, a repeat visit), not a person outside the release")


def validity(rel: dict, table: dict[str, dict], checks: dict, trained_on_members: dict[str, bool], *,
             ids_known: bool = True) -> dict[str, dict]:
    """Per residual-risk row of one release's results: ``{valid, reason, reasons}`` (``reason``: the ``reasons``
    joined by "; "; a reason may itself hold "; ", so split nothing: read ``reasons``; the attack results are not
    touched).
    ``ids_known``: whether the real data has patient ids; without them no row is valid (:data:`NO_PATIENT_IDS`)."""
    out = {}
    contaminated = _controls_copied(rel)
    contradicted = _mapping_contradicted(rel)
    sizes = rel.get("sizes") or {}
    resized = other_size(sizes.get("release"), sizes.get("evaluated")) if sizes.get("evaluated") else None
    for row, risk in risk_rows(rel["attacks"]).items():
        cal = table.get(row)
        reasons = [f"failed the known-answer calibration: {cal['reason']}" if cal and not cal["passes"] else
                   ("no known-answer calibration" if cal is None else None),
                   _at_chance(row, rel, checks), _member_trained(row, trained_on_members),
                   _few_targets(risk), _few_controls(risk), _few_pool_patients(risk), _few_calibration(risk),
                   _images_as_independent(risk),
                   contaminated, contradicted, resized, None if ids_known else NO_PATIENT_IDS]
        reasons = [r for r in reasons if r]
        out[row] = {"valid": not reasons, "reason": "; ".join(reasons) or None, "reasons": reasons,
                    "catches_copies": bool(cal and cal.get("copy_check") is True)}
    return out


def _utility_kept(rel: dict) -> list[dict]:
    """The release's gain over chance in its headline metric as a share of real images' of the same N, per task.
    The share is defined only where the real images' value lies above chance (its paired bootstrap interval, where
    there is one): a ratio to
    a learner that learned nothing (κ near 0) is noise, "3.86 [-6.31, nan]"; there ``kept`` is NaN and
    ``undefined`` says why."""
    out = []
    for label, u in (rel.get("utility") or {}).items():
        if "skipped" in u:
            continue
        metric = HEADLINE[kind_of(label)]
        boot = (u.get("paired_bootstrap") or {}).get(metric) or {}
        real, chance = u["real_same_n"][metric]["mean"], boot.get("chance", HEADLINE_CHANCE.get(metric, 0.0))
        base_ci = (boot.get("real_same_n") or {}).get("ci")
        ratio_ci = (boot.get("ratio") or {}).get("ci")
        floor = base_ci[0] if base_ci and np.isfinite(base_ci[0]) else real
        entry = {"task": label, "metric": metric, "metric_name": METRIC_NAMES.get(metric, metric),
                 "kept": math.nan, "ci": None, "release": u["release"][metric]["mean"], "real_same_n": real,
                 "n": u.get("n_test"), "unit": "test images", "patients": u.get("n_test_patients")}
        if not (real is not None and np.isfinite(real) and floor is not None and floor > chance):
            iv = f" [{base_ci[0]:.2f}, {base_ci[1]:.2f}]" if base_ci and np.all(np.isfinite(base_ci)) else ""
            got = f"{real:.2f}" if real is not None else "no value"
            article = "an" if entry["metric_name"][:1] in "AEIOU" else "a"
            entry["undefined"] = (f"real images of the same number reach {article} {entry['metric_name']} of "
                                  f"{got}{iv}, not above chance ({chance:g}), so no share of it can be stated")
        else:
            entry.update(kept=(entry["release"] - chance) / (real - chance),
                         ci=ratio_ci if ratio_ci and np.all(np.isfinite(ratio_ci)) else None)
        out.append(entry)
    return out


def verdict(rel: dict) -> dict:
    """The largest valid residual risk of one release (``rel["validity"]``: :func:`validity`) and the utility it
    keeps."""
    rows = risk_rows(rel["attacks"])
    valid = {row: r for row, r in rows.items() if rel["validity"][row]["valid"]}
    out: dict = {"invalid_attacks": len(rows) - len(valid), "utility_kept": _utility_kept(rel)}
    # a row whose reference succeeds on every target has no residual risk (NaN): it cannot be the largest, and a
    # NaN compared with anything is never larger, so left among the others it would hide their risk
    undefined = sorted(row for row, r in valid.items() if not defined_risk(r["residual_risk"]))
    if undefined:
        out["undefined_attacks"] = {row: {"name": row_label(row),
                                          "why": valid.pop(row)["residual_risk"].get("interval") or "undefined"}
                                    for row in undefined}
    out["valid_attacks"] = len(valid)                  # with a defined risk; the undefined ones counted apart
    detectors = [row for row in valid if rel["validity"][row].get("catches_copies")]
    if valid:
        # ties (several rows at 1.00, or at 0) go to the surer row (its lower bound, then its upper one: the larger
        # plausible risk), then to a row shown to catch copies (a reverse attacker never is), then by the row's
        # name, so the verdict never depends on the order the attacks were stored in
        row, r = max(valid.items(), key=lambda kv: (kv[1]["residual_risk"]["risk"], kv[1]["residual_risk"]["ci"][0],
                                                    kv[1]["residual_risk"]["ci"][1], kv[0] in detectors, kv[0]))
        found = r["residual_risk"]["ci"][0] > 0
        if detectors or found:
            out.update(risk=r["residual_risk"]["risk"], ci=r["residual_risk"]["ci"], attack=row, unit=row_unit(row),
                       attack_name=row_label(row), against=r.get("against", "control"), n=r.get("n"),
                       baseline_is=r.get("baseline_is") or "random guessing",
                       patients=(r.get("attack") or {}).get("patients"), members_left_out=r.get("members_left_out"))
        if not detectors:
            # only attacks never shown to catch a copy are valid (reverse attacks pass on the null releases alone):
            # a risk they find is a lower bound, and none found says nothing, not "0"
            out["no_copy_detector"] = ("the one valid attack row is a reverse attack" if len(valid) == 1 else
                                       f"the {len(valid)} valid attack rows are reverse attacks") + \
                (", checked only to flag no release that carries nothing, never to catch a copy")
    out["exposure"] = exposure(rel.get("screening"))
    out["k_claim"] = rel.get("k_claim")
    out["sentence"] = sentence(rel["name"], out, why_invalid(rel))
    return out


def calibrate_and_judge(ctx: RealContext, checkpoints: dict[str, str], results: list[dict], checks: dict) -> dict:
    """Score the known-answer releases through every attack, set each release's ``validity`` (per risk row) and
    ``verdict``; returns the report's ``calibration`` section."""
    t0 = time.perf_counter()
    table = calibration_table(calibrate(ctx, checkpoints))
    seconds = round(time.perf_counter() - t0, 1)
    from medanon.data.inputs import patients_known

    members = trained_on_members(ctx)
    ids_known = patients_known(ctx.real.dataset)
    for r in results:
        r["validity"] = validity(r, table, checks, members, ids_known=ids_known)
        r["verdict"] = verdict(r)
    releases = {k: KNOWN_WHAT[k] for k in KNOWN}
    if ctx.balance_label and len(ctx.attacker_rows) and ctx.attacker_from != ctx.cfg.source_split:   # others ran
        values = ctx.real.label(ctx.balance_label)
        n = unmatched(values[ctx.src], values[ctx.attacker_rows])
        if n:
            releases["others"] += (f"; {n} of its {len(ctx.src)} source images have a {ctx.balance_label} no "
                                   "attacker-split image has (or none recorded) and got any other person's")
    return {"releases": releases, "table": table, "trained_on_members": members, "seconds": seconds}
