"""Train the demo evaluation's Siamese and attribute (sex) attackers on a phantom of other patients, and export them.

The fast preset would train both on the demo's attacker split (about 120 images of 30 patients) in every run, for
150 steps each. Trained once here with the fast preset's settings (``EvalConfig.fast().attacks.siamese_net`` and
``.attribute_classifier``) but longer (``--siamese-steps 1200``, ``--attribute-steps 600``: a one-off cost) and on
all 800 images of a phantom of seed 1 (200 patients × 4; the demo's phantoms are seed 0, so no member, control or
attacker-split patient of the demo is among them), they are stronger attackers at no cost per evaluation, shipped
as ``checkpoints/attacker-siamese-<modality>64.pt`` and ``checkpoints/attacker-sex-<modality>64.pt``.

    python benchmarks/train_demo_attackers.py --work DIR --out ../checkpoints [--modalities fundus,xray]

Prints one JSON line per network: CPU seconds of the training (one torch thread) and the file's sha256.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from medanon.config import PhantomConfig
from medanon.demo import _phantoms
from medanon.evaluate.attacks.siamese import save_siamese, train_siamese
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.inputs import load_real
from medanon.fsutil import sha256_file
from medanon.models.classifier import save_classifier
from medanon.train.classifier import train_classifier

PHANTOM = {"patients": 200, "per_patient": 4, "size": 64, "seed": 1}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the phantoms (reused when present)")
    ap.add_argument("--out", type=Path, required=True, help="folder the checkpoints are written to")
    ap.add_argument("--modalities", default="fundus,xray")
    ap.add_argument("--siamese-steps", type=int, default=1200)
    ap.add_argument("--attribute-steps", type=int, default=600)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    fast = EvalConfig.fast().resolved(torch.device("cpu")).attacks
    rows = []
    for m in args.modalities.split(","):
        # reused only where it holds these very settings, unedited (as the demo reuses its phantoms): the
        # checkpoints' cards below say whom they were trained on
        data = _phantoms(PhantomConfig(modality=m, workers=1, **PHANTOM), args.work / f"ph1-{m}64")
        real = load_real(data, size=64)
        said = (f"all {len(real.images)} images of `medanon phantom --modality {m} --patients 200 --per-patient 4 "
                f"--size 64 --seed 1`: PHANTOM patients disjoint from the demo's (seed 0) members, controls and "
                f"attacker split")
        extra = {"phantom": {"modality": m, **PHANTOM}, "trained_on": said}
        t = time.process_time()
        net = train_siamese(real.images, real.patients, cfg=replace(fast.siamese_net, steps=args.siamese_steps))
        dst = save_siamese(args.out / f"attacker-siamese-{m}64.pt", net, extra=extra)
        rows.append({"network": dst.name, "cpu_s": round(time.process_time() - t, 1)})
        sex = real.label("sex")
        ok = ~np.isnan(sex)
        tcfg = replace(fast.attribute_classifier, steps=args.attribute_steps, seed=0)
        t = time.process_time()
        model = train_classifier(real.images[torch.from_numpy(ok)], sex[ok].astype(int), num_classes=2, cfg=tcfg)
        dst = save_classifier(args.out / f"attacker-sex-{m}64.pt", model,
                              extra={**extra, "label": "sex", "train_config": tcfg.to_dict()})
        rows.append({"network": dst.name, "cpu_s": round(time.process_time() - t, 1)})
    for r in rows:
        r["sha256"] = sha256_file(args.out / r["network"])
        print(json.dumps({"benchmark": "train_demo_attackers", **r}))
    return rows


if __name__ == "__main__":
    main()
