"""Two k-Centroid releases of the same patients, differenced in the latent space of the public codec: one JSON line.

``medanon evaluate`` differences releases in pixel space, where a k-Same-Pixel average is linear in its members.
A k-Centroid record is G(z̄), the generator's image of its members' mean latent, and the generator is not linear:
an attacker differences latents instead. With the shipped (public) codec the attacker inverts every released image
(``encoder``: the codec's ReStyle encoder; ``optimised``: that start refined by ``--steps`` of Adam on the pixel
error, which can do better because a released image lies exactly in the generator's range), forms
(n_a·ẑ_a − n_b·ẑ_b) / (n_a − n_b) for every two records whose ``n_people`` differ by one, and compares it with the
latents of the targets' real images (which the attacker holds, as every attacker of the evaluation does).
``oracle`` uses the true centroid latents (no inversion error: the difference is the patient's latent exactly) to
show what the protection rests on; ``pixels`` is the pixel-space attack on the same two folders, for contrast.

Scored with the private mappings: ``isolated`` counts the pairs that leave one patient; for those, ``error_ratio``
is the median RMS distance from the difference to that patient's latent over the median distance between two
patients' latents, and ``top1`` how often that patient is the nearest of all patients. ``attack`` is the
evaluation's criterion (:mod:`medanon.evaluate.attacks.differencing`) applied to the latents: patients recovered
(a difference within 0.25 × the median inter-patient distance and at most half as far as any released record)
out of the released ones, and among control patients of another phantom (in neither release).

``--method ksalsa`` releases k-SALSA instead (its records start from the mean latent and are then optimised, so
``oracle`` is the mean latents the optimisation started from).

    python benchmarks/latent_differencing.py [--patients 30] [--per-patient 3] [--ks 3,2] [--steps 200]
                                             [--method kcentroid|ksalsa]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import medanon
from medanon.evaluate.attacks.differencing import Space, attack_pair, differencing, threshold_entry
from medanon.release import read_release

CODEC = "restyle-map-fundus64"


def _phantom(work: Path, name: str, seed: int, patients: int, per_patient: int):
    data = medanon.make_phantom(modality="fundus", patients=patients, per_patient=per_patient, size=64,
                                out=work / name, seed=seed)
    return medanon.open_dataset(data, size=64)


def _released(folder: Path) -> tuple[torch.Tensor, list[int], list[str]]:
    from PIL import Image

    _, rows = read_release(folder)
    x = np.stack([np.asarray(Image.open(folder / r["image"]), dtype=np.float32).transpose(2, 0, 1) / 127.5 - 1
                  for r in rows])
    return torch.from_numpy(x), [int(r["n_people"]) for r in rows], [r["image"] for r in rows]


def _optimised(codec, images: torch.Tensor, start: torch.Tensor, steps: int) -> torch.Tensor:
    """``start`` refined by Adam on the mean squared pixel error of the rendered images."""
    ws = start.clone().requires_grad_(True)
    opt = torch.optim.Adam([ws], lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        loss = (codec.render(ws) - images).pow(2).mean()
        loss.backward()
        opt.step()
    return ws.detach()


def _rows(z: torch.Tensor) -> torch.Tensor:
    return z.reshape(len(z), 1, 1, -1)          # (N, 1, 1, D): the attack's "images", never pooled (side = D)


def _score(rel, truth, members, controls, scale) -> dict:
    """Ground-truth and attack numbers for one way of getting the released latents."""
    (za, na), (zb, nb) = rel
    patients, latent = members
    names = sorted(set(patients))
    means = torch.stack([latent[[p == n for p in patients]].mean(0) for n in names]).flatten(1)
    typical = threshold_entry(_rows(scale[1]), scale[0], 0.25, side=means.shape[1])
    errors, top1 = [], 0
    for (i, j), who in truth.items():
        d = ((na[i] * za[i] - nb[j] * zb[j]) / (na[i] - nb[j])).flatten()
        dist = (means - d).pow(2).mean(1).sqrt()
        errors.append(float(dist[names.index(who)]))
        top1 += int(int(dist.argmin()) == names.index(who))
    side = means.shape[1]
    space = Space(_rows(torch.cat([latent, controls[1]])), [*patients, *controls[0]], side=side)
    got = attack_pair(space, space.released(_rows(za), na.long().tolist()),
                      space.released(_rows(zb), nb.long().tolist()), members=set(patients),
                      controls=set(controls[0]), threshold=typical)
    return {"error_ratio": round(float(np.median(errors)) / typical["median_patient_distance"], 3) if errors else None,
            "top1": top1, "recovered": got["members"]["recovered_beyond"], "of": got["members"]["patients"],
            "controls_recovered": got["controls"]["recovered_beyond"], "control_patients": got["controls"]["patients"]}


def main() -> None:
    from medanon.codecs.stylegan import load_codec
    from medanon.models_registry import find_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patients", type=int, default=30)
    ap.add_argument("--per-patient", type=int, default=3)
    ap.add_argument("--ks", default="3,2", help="the two releases' k, larger first")
    ap.add_argument("--steps", type=int, default=200, help="Adam steps of the optimised inversion")
    ap.add_argument("--method", choices=("kcentroid", "ksalsa"), default="kcentroid")
    args = ap.parse_args()
    k_a, k_b = (int(k) for k in args.ks.split(","))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    codec = load_codec(find_model(CODEC))
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        work = Path(tmp)
        ds = _phantom(work, "data", 0, args.patients, args.per_patient)
        rel, maps = {}, {}
        for k in (k_a, k_b):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(medanon.anonymize, args.method)(ds, k=k, codec=codec).save(
                    work / f"k{k}", mapping=work / f"k{k}.json", progress=False)
            rel[k] = _released(work / f"k{k}")
            maps[k] = json.loads((work / f"k{k}.json").read_text())["records"]
        images = ds.tensors(progress=False)[0]
        patients = [r.patient_id for r in ds.records]
        latent = codec.encode(images)                               # what the release averaged
        index = {r.record_id: i for i, r in enumerate(ds.records)}
        truth = {}
        for i, name_a in enumerate(rel[k_a][2]):
            for j, name_b in enumerate(rel[k_b][2]):
                left = set(maps[k_a][name_a]["patients"]) - set(maps[k_b][name_b]["patients"])
                if set(maps[k_b][name_b]["patients"]) <= set(maps[k_a][name_a]["patients"]) and len(left) == 1:
                    truth[(i, j)] = left.pop()
        oracle = [torch.stack([latent[[index[r] for r in maps[k][name]["sources"]]].mean(0) for name in rel[k][2]])
                  for k in (k_a, k_b)]
        encoded = [codec.encode(rel[k][0]) for k in (k_a, k_b)]
        other = _phantom(work, "controls", 1, args.patients, args.per_patient)
        controls = ([f"c{r.patient_id}" for r in other.records], codec.encode(other.tensors(progress=False)[0]))
        sc = _phantom(work, "scale", 2, args.patients, 1)
        scale = ([r.patient_id for r in sc.records], codec.encode(sc.tensors(progress=False)[0]))
        pixels = differencing(release_a=rel[k_a][0], people_a=rel[k_a][1], release_b=rel[k_b][0],
                              people_b=rel[k_b][1], member_images=images, member_patients=patients,
                              control_images=other.tensors(progress=False)[0], control_patients=controls[0],
                              scale_images=sc.tensors(progress=False)[0], scale_patients=scale[0])
    with torch.enable_grad():
        optimised = [_optimised(codec, rel[k][0], e, args.steps) for k, e in zip((k_a, k_b), encoded, strict=True)]
    people = [torch.tensor(rel[k][1], dtype=torch.float32) for k in (k_a, k_b)]
    out = {"method": args.method, "patients": args.patients, "per_patient": args.per_patient, "k": [k_a, k_b],
           "codec": CODEC,
           "records": [len(rel[k][1]) for k in (k_a, k_b)], "isolated": len(truth)}
    with torch.no_grad():
        for how, z in (("oracle", oracle), ("encoder", encoded), ("optimised", optimised)):
            out[how] = _score([(z[0], people[0]), (z[1], people[1])], truth, (patients, latent), controls, scale)
    out["pixels"] = {"recovered": pixels["members"]["recovered_beyond"], "of": pixels["members"]["patients"],
                     "controls_recovered": pixels["controls"]["recovered_beyond"]}
    out["steps"] = args.steps
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
