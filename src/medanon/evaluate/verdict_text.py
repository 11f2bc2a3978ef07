"""The verdict in words: one sentence per release, from :func:`medanon.evaluate.calibration.verdict`'s numbers.

:func:`exposure` reads what the near-copy screen found without the mapping (copies of real images, near-copies,
copies the mapping does not explain, copies of held-out patients); :func:`sentence` states it first, then the
largest valid residual risk with its N and reference (a control, or a baseline named as such), or why no attack is
valid, then the utility kept.
"""

from __future__ import annotations

import math

import numpy as np


def exposure(screen: dict | None) -> dict:
    """What the near-copy screen found that needs no attack: copies of real images (within one grey level) and the
    patients they copy; near-copies above new people's rate (with the mapping, copies of one of their own sources
    only, since an average of several people can be pixel-near to a real image too); copies the mapping does not
    explain; copies of held-out patients' images."""
    if not screen or "copies" not in screen:
        return {}
    n = screen["n"]
    control = screen.get("control") or {}
    control_hi = (control.get("pixel_rate_ci") or [math.nan, math.nan])[1]
    identity_hi = (control.get("identity_rate_ci") or [math.nan, math.nan])[1]
    heldout = screen.get("heldout") or {}
    mapped = screen.get("copies_not_of_own_source") is not None
    near = screen["copies_of_one_source"] if mapped else screen["near_copies_pixel"]
    return {"copies": screen["copies"], "copy_patients": screen.get("copy_patients"), "n": n, "mapped": mapped,
            "n_source_images": screen.get("n_source_images"), "n_heldout_images": screen.get("n_heldout_images"),
            "near_copies": near, "near_copies_are": ("copies of one of their own sources (the mapping says which)"
                                                     if mapped else "near-copies of any real image (no mapping)"),
            "control_rate": (screen.get("control") or {}).get("pixel_rate"),
            "control_ci": control.get("pixel_rate_ci"), "control_n": control.get("n"),
            "identity_control_ci": control.get("identity_rate_ci"), "identity_control_n": control.get("identity_n"),
            "near_copies_beyond_control": bool(near > control_hi * n),
            "in_multi_person_records": screen.get("copies_of_one_source_in_multi_person_records") if mapped else None,
            "copies_not_of_own_source": screen.get("copies_not_of_own_source"),
            "identity_near_copies": screen.get("near_copies_identity", 0),
            "identity_control_rate": control.get("identity_rate"),
            "identity_beyond_control": _beyond(screen.get("near_copies_identity", 0), n, identity_hi,
                                               screen.get("near_copies_identity_ci")),
            "heldout_copies": heldout.get("copies", 0),
            "other_copies": (screen.get("other") or {}).get("copies", 0),
            "heldout_near_copies": heldout.get("near_copies_not_of_sources", 0),
            "heldout_near_beyond_control": bool(heldout.get("near_copies_not_of_sources", 0) > control_hi * n),
            "heldout_identity_near_copies": heldout.get("near_copies_identity_not_of_sources", 0),
            "heldout_identity_beyond_control": _beyond(heldout.get("near_copies_identity_not_of_sources", 0), n,
                                                       identity_hi)}


def _beyond(count: int, n: int, control_hi: float, ci=None) -> bool:
    """Whether ``count`` of ``n`` images crossing the identity threshold is more than new people's images do: its own
    interval (``ci``, the screen's, over patients where they are known; else Wilson's over the images) lies above
    the control's upper bound (the threshold rests on a quantile of few held-out patients, so a count just over the
    control's bound, 5 of 9 against [0, 0.50], is no finding)."""
    from medanon.evaluate.attacks.stats import wilson

    if not (n and count and np.isfinite(control_hi)):
        return False
    low = float(ci[0]) if ci is not None and len(ci) == 2 and np.isfinite(ci[0]) else wilson(count, n)[0]
    return bool(low > control_hi)


def heldout_in_release(e: dict) -> bool:
    """Whether the screen says the release holds held-out patients' images: copies, or near-copies (by pixels or by
    identity) above new people's rate."""
    return bool(e.get("heldout_copies") or e.get("heldout_near_beyond_control")
                or e.get("heldout_identity_beyond_control"))


def _patients(n: int) -> str:
    return f"{n} patient" + ("" if n == 1 else "s")


def _control_rate(rate, ci, n) -> str:
    """New people's rate with its interval and N: ``3% [0%, 15%] of 63 images``."""
    if rate is None:
        return "n/a"
    iv = f" [{ci[0]:.0%}, {ci[1]:.0%}]" if ci and all(np.isfinite(ci)) else ""
    return f"{rate:.0%}{iv}" + (f" of {n} images" if n else "")


def _exposure_sentences(name: str, e: dict) -> list[str]:
    out = []
    if e.get("copies"):
        who = f" of {_patients(e['copy_patients'])}" if e.get("copy_patients") is not None else ""
        out.append(f"{name} holds {e['copies']} images within one grey level (RMS) of a real image{who} of the source "
                   "split (found without the mapping): those images are released as they are, whatever the attacks "
                   "measure")
    elif e.get("near_copies_beyond_control"):
        rate = _control_rate(e.get("control_rate"), e.get("control_ci"), e.get("control_n"))
        if e.get("mapped"):
            multi = e.get("in_multi_person_records") or 0
            out.append(f"{e['near_copies']} of {e['n']} released images of {name} are near-copies of one of their "
                       f"own sources: closer to it than a second photo of the same patient is (new people's images: "
                       f"{rate})" + (f"; {multi} of them stand for several people, and are still a copy of one "
                                     "(much closer to it than to the record's other sources)" if multi else ""))
        else:
            out.append(f"{e['near_copies']} of {e['n']} released images of {name} are closer to a real image than a "
                       f"second photo of the same patient is (new people's images: {rate}); without the mapping the "
                       "screen cannot tell copies from averages of several people")
    if not e.get("copies") and e.get("identity_beyond_control"):
        rate = _control_rate(e.get("identity_control_rate"), e.get("identity_control_ci"), e.get("identity_control_n"))
        out.append(f"{e['identity_near_copies']} of {e['n']} released images of {name} are near-copies by identity: "
                   "to the identity network they are more like a real image of the source split than the threshold "
                   "set on new people's images (a high quantile of theirs, on half the held-out patients), whatever "
                   f"their pixels (new people's images over it, on the other half: {rate})")
    if e.get("copies_not_of_own_source"):
        out.append(f"{e['copies_not_of_own_source']} of its copies are of a real image the mapping does not name as "
                   "their source: the mapping does not describe this release (check that it is this release's), so "
                   "no attack row, all of which read it, is valid")
    if e.get("other_copies"):
        n = e["other_copies"]
        out.append(f"{name} holds {n} cop{'y' if n == 1 else 'ies'} of real images outside its source split and the "
                   "held-out one (such as the attacker's split): it is not a release of the source split's people "
                   "alone, and the attacks' members are not who its mapping says, so no attack row is valid")
    if e.get("heldout_copies"):
        n = e["heldout_copies"]
        out.append(f"it holds {n} cop{'y' if n == 1 else 'ies'} of held-out patients' images, the controls and the "
                   "utility test set: no attack row is valid")
    elif heldout_in_release(e):
        found = ([f"{e['heldout_near_copies']} by pixels (closer than a second photo of the same patient is, and much "
                  "closer than to any source image)"] if e.get("heldout_near_beyond_control") else []) + \
            ([f"{e['heldout_identity_near_copies']} by identity (as like a held-out patient as a copy, and more "
              "than like any source patient)"] if e.get("heldout_identity_beyond_control") else [])
        out.append(f"it holds near-copies of held-out patients' images, {' and '.join(found)}, more than new "
                   "people's images give: if they are those patients' images, the controls and the utility test set "
                   "are in the release, and no attack row is valid")
    return out


def why_invalid(rel: dict) -> list[str]:
    """The distinct reasons its rows are invalid, and the attacks skipped, for the "no valid attack" sentence."""
    reasons = {part for v in (rel.get("validity") or {}).values() if v.get("reason")
               for part in v.get("reasons", [v["reason"]])}     # one row's several reasons, each said once
    skipped = sorted({f"{name}: {a['skipped']}" for name, a in (rel.get("attacks") or {}).items()
                      if isinstance(a, dict) and a.get("skipped")})
    return sorted(reasons) + skipped


def _k_sentence(name: str, kc: dict | None) -> list[str]:
    if not kc or not kc.get("below_k"):
        return []
    return [f"{name}'s mapping shows {kc['below_k']} of its {kc['records']} records standing for fewer than the "
            f"k = {kc['k']} people its privacy statement claims (the fewest: {kc['smallest']}): the k-anonymity "
            "claim does not hold for them"]


def _undefined(v: dict) -> str:
    """The valid rows without a residual risk (their reference succeeds on every target), named with the reason."""
    rows = v["undefined_attacks"]
    by_reason: dict[str, list[str]] = {}
    for r in rows.values():
        by_reason.setdefault(r["why"].removeprefix("undefined: "), []).append(r["name"])
    return (f"{len(rows)} valid attack row{'s' if len(rows) > 1 else ''} "
            f"{'have' if len(rows) > 1 else 'has'} no defined residual risk: "
            + "; ".join(f"{', '.join(names)} ({reason})" for reason, names in by_reason.items()))


def sentence(name: str, v: dict, why: list[str] | None = None) -> str:
    lead = _k_sentence(name, v.get("k_claim")) + _exposure_sentences(name, v.get("exposure") or {})
    if "risk" not in v and v.get("no_copy_detector"):
        reasons = "; ".join(why[:3]) + ("; ..." if len(why) > 3 else "") if why else ""
        risk = (f"no attack on {name} that caught the known copies is valid, so the attacks cannot tell whether it "
                f"exposes its members: {v['no_copy_detector']}; its largest residual risk has an interval that "
                f"includes 0, which a release of copies could read too"
                + (f" (why the others are invalid: {reasons})" if reasons else ""))
    elif "risk" not in v and v.get("undefined_attacks"):
        risk = (f"no valid attack on {name} has a defined residual risk, so the attacks say nothing of its privacy: "
                f"{_undefined(v)}")
    elif "risk" not in v:
        reasons = "; ".join(why[:4]) + ("; ..." if len(why) > 4 else "") if why else "none was run"
        risk = (f"no attack on {name} is valid, so the attacks say nothing of its privacy (why: {reasons})")
    else:
        lo, hi = v["ci"]
        size = f"N {v['n']}" + (f" {v['unit']}" if v.get("unit") else "") \
            + (f", {v['patients']} patient clusters" if v.get("patients") else "") \
            + (f"; {v['members_left_out']} member images left out, no control patient sharing their label"
               if v.get("members_left_out") else "") \
            if v.get("n") is not None else ""
        of = (f"; it is the largest of {v['valid_attacks']} valid attack rows with a defined risk, and its interval "
              "is not adjusted for that choice" if v["valid_attacks"] > 1 else "")
        against = ("measured against a control, the same attack on people not in the release: 0 = it learns nothing "
                   "beyond what it learns of them" if v.get("against", "control") == "control" else
                   f"measured against a baseline, {v.get('baseline_is') or 'random guessing'}, as this attack has no "
                   "control population: 0 = it does no better than that guess")
        risk = (f"the strongest valid attack on {name}, {v['attack_name']}, has a residual risk of {v['risk']:.2f} "
                f"[{lo:.2f}, {hi:.2f}]{' (' + size + ')' if size else ''}, {against}{of}")
        if v.get("no_copy_detector"):
            risk += (f"; this is a lower bound: {v['no_copy_detector']}, so a stronger exposure would go unmeasured")
        if v.get("undefined_attacks"):
            risk += f"; besides, {_undefined(v)}"
    # held-out images in the release: the utility test set is in it (said above), so no utility figure
    shown = [] if heldout_in_release(v.get("exposure") or {}) else v["utility_kept"]
    kept = [u for u in shown if np.isfinite(u["kept"])]
    if kept:
        u = kept[0]
        ci = f" [{u['ci'][0]:.2f}, {u['ci'][1]:.2f}]" if u.get("ci") else ""
        n = (f" (N {u['n']} {u.get('unit') or 'test images'}" + (f", {u['patients']} patients" if u.get("patients")
                                                                  else "") + ")") if u.get("n") else ""
        risk += (f"; it keeps {u['kept']:.2f}{ci}{n} of the gain over chance in the {u['metric_name']} of "
                 f"{u['task']} that real images of the same number give")
    elif shown and shown[0].get("undefined"):
        risk += f"; its utility share is not stated: {shown[0]['undefined']}"
    # a sentence opens with a capital, unless it opens with the release's name, which is written as it is
    return " ".join((x if name and x.startswith((name + " ", name + "'")) else x[0].upper() + x[1:]) + "."
                    for x in [*lead, risk])
