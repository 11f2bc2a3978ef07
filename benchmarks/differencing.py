"""Two k-Same releases of the same patients, differenced: prints one JSON line.

k-Same-Pixel releases at k = 3 and k = 2 of one phantom (the demo publishes such families at k = 2, 5, 10). An
attacker with only the two public folders forms, for every record A of the first and B of the second with fewer
people, d = (n_A·A − n_B·B) / (n_A − n_B). Where B's patients all belong to A, d is the mean image of the patients
A has and B has not, down to one patient. The attacker ranks the pairs by how far d leaves the 8-bit range (a true
subset stays inside it, up to rounding); the private mappings and the source are used only to score the result:
``isolated`` counts the pairs that isolate one patient, ``recovered`` those whose d is nearest that patient's
mean image among all patients, ``mean_error`` is d's mean absolute difference from it in grey levels, and
``true_in_top`` how many of the attacker's ``isolated`` best-ranked pairs are such pairs (expected over a random
order among pairs tied at the cut). ``attack`` is :mod:`medanon.evaluate.attacks.differencing`, the attack
``medanon evaluate`` runs on every two releases of the same people, on the same two folders: patients it recovers
beyond what one record shows, out of the released ones, and among control patients of two other phantoms (one for
the controls, one for the threshold's scale), who are in neither release.

    python benchmarks/differencing.py [--patients 30] [--per-patient 3] [--ks 3,2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import medanon
from medanon.release import read_release


def _records(folder: Path) -> dict[str, tuple[np.ndarray, int]]:
    from PIL import Image

    _, rows = read_release(folder)
    return {r["image"]: (np.asarray(Image.open(folder / r["image"]), dtype=np.float64), int(r["n_people"]))
            for r in rows}


def _people(work: Path, name: str, seed: int, patients: int, per_patient: int):
    data = medanon.make_phantom(modality="fundus", patients=patients, per_patient=per_patient, size=64,
                                out=work / name, seed=seed)
    ds = medanon.open_dataset(data, size=64)
    return ds.tensors(progress=False)[0], [r.patient_id for r in ds.records]


def _library_attack(args, got: dict, k_a: int, k_b: int, work: Path) -> dict:
    from medanon.evaluate.attacks.differencing import differencing

    def records(recs: dict) -> tuple[np.ndarray, list[int]]:
        return (np.stack([a.transpose(2, 0, 1) / 127.5 - 1 for a, _ in recs.values()]),
                [n for _, n in recs.values()])

    (a, na), (b, nb) = records(got["A"]), records(got["B"])
    ds = got["ds"]
    members = ds.tensors(progress=False)[0], [r.patient_id for r in ds.records]
    controls = _people(work, "controls", 1, args.patients, args.per_patient)
    scale = _people(work, "scale", 2, args.patients, 1)
    res = differencing(release_a=a, people_a=na, release_b=b, people_b=nb, member_images=members[0],
                       member_patients=members[1], control_images=controls[0],
                       control_patients=[f"c{p}" for p in controls[1]], scale_images=scale[0],
                       scale_patients=scale[1])
    return {"recovered": res["members"]["recovered_beyond"], "of": res["members"]["patients"],
            "controls_recovered": res["controls"]["recovered"], "control_patients": res["controls"]["patients"],
            "median_error": round(res["members"]["median_error"] * 127.5, 2)
            if res["members"]["median_error"] is not None else None,
            "threshold": round(res["threshold"]["value"] * 127.5, 2),
            "residual_risk": [round(res["risk"]["residual_risk"][k], 3) if k == "risk" else
                              [round(v, 3) for v in res["risk"]["residual_risk"]["ci"]] for k in ("risk", "ci")]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patients", type=int, default=30)
    ap.add_argument("--per-patient", type=int, default=3)
    ap.add_argument("--ks", default="3,2", help="the two releases' k, larger first")
    args = ap.parse_args()
    k_a, k_b = (int(k) for k in args.ks.split(","))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = medanon.make_phantom(modality="fundus", patients=args.patients, per_patient=args.per_patient,
                                    size=64, out=work / "data")
        ds = medanon.open_dataset(data, size=64)
        maps = {}
        for k in (k_a, k_b):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                medanon.anonymize.kpixel(ds, k=k).save(work / f"k{k}", mapping=work / f"k{k}.json", progress=False)
            maps[k] = json.loads((work / f"k{k}.json").read_text())["records"]
        A, B = _records(work / f"k{k_a}"), _records(work / f"k{k_b}")
        work_images = {"A": A, "B": B, "ds": ds}
        attack = _library_attack(args, work_images, k_a, k_b, work)
        per: dict[str, list[np.ndarray]] = {}
        for i, r in enumerate(ds.records):
            per.setdefault(r.patient_id, []).append((ds.load(i)["image"].numpy().transpose(1, 2, 0) + 1) * 127.5)
        means = {p: np.mean(v, 0) for p, v in per.items()}
        pairs = []
        for na, (a, pa) in A.items():
            for nb, (b, pb) in B.items():
                if pb >= pa:
                    continue
                d = (pa * a - pb * b) / (pa - pb)
                out_of_range = float(np.clip(-d, 0, None).sum() + np.clip(d - 255, 0, None).sum())
                left = set(maps[k_a][na]["patients"]) - set(maps[k_b][nb]["patients"])
                one = set(maps[k_b][nb]["patients"]) <= set(maps[k_a][na]["patients"]) and len(left) == 1
                err = {p: float(np.abs(m - d.reshape(m.shape)).mean()) for p, m in means.items()}
                nearest = min(err, key=err.get)
                pairs.append((out_of_range, one, one and nearest in left, err[next(iter(left))] if one else None))
    pairs.sort(key=lambda x: x[0])
    isolated = sum(p[1] for p in pairs)
    # the attacker's best `isolated` pairs; pairs tied on the score at the cut share the remaining places, so the
    # count is the expectation over a random order among them (the release's file names set no order)
    top = 0.0
    if isolated:
        cut = pairs[isolated - 1][0]
        above = [p for p in pairs if p[0] < cut]
        tied = [p for p in pairs if p[0] == cut]
        top = sum(p[1] for p in above) + (isolated - len(above)) * sum(p[1] for p in tied) / len(tied)
    errors = [p[3] for p in pairs if p[1]]
    print(json.dumps({
        "patients": args.patients, "per_patient": args.per_patient, "k": [k_a, k_b],
        "records": [len(A), len(B)], "pairs": len(pairs), "isolated": isolated,
        "recovered": sum(p[2] for p in pairs),
        "mean_error": round(float(np.mean(errors)), 2) if errors else None,
        "true_in_top": round(top, 2), "attack": attack,
        "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
