"""Anonymise images held in memory with models chosen by name, then measure the releases.

Run it as a script (``python docs/examples/in_memory.py [OUT]``) or cell by cell in a notebook; the
test suite runs it (tests/test_inputs_example.py). It works on a phantom, so every number it prints is
a phantom result, and ``preset="tiny"`` checks that the pipeline runs: its numbers are no measurement.
"""

# %% Images as a PyTorch user holds them: one (N, C, H, W) tensor, a patient id and a label per image
import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch

import medanon
from medanon import WeakSetting

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="medanon-example-"))
phantom = medanon.open_dataset(medanon.make_phantom(out / "phantom", patients=16, per_patient=2, size=64), size=64)
images = torch.stack([phantom.load(i)["image"] for i in range(len(phantom))])        # in [-1, 1]
images = (images + 1) / 2                                                           # as most pipelines hold them
patients = [r.patient_id for r in phantom.records]
grades = [r.labels["grade"] for r in phantom.records]
print(images.shape, images.dtype, len(set(patients)), "patients")

# %% Release the training patients only; the held-out ones measure the release
data = medanon.as_dataset(images, patient_ids=patients, labels={"grade": grades}, value_range=(0, 1))
train = medanon.split_dataset(data)["train"]              # the evaluation recomputes the same split
rows = [i for i, p in enumerate(patients) if p in set(train.patients)]
x, ids, y = images[rows], [patients[i] for i in rows], {"grade": [grades[i] for i in rows]}

# %% Two methods; the codec by its name on `medanon models` (no path), the rest of the settings by keyword
with warnings.catch_warnings():
    warnings.simplefilter("ignore", WeakSetting)          # k = 2 warns: the paper found it weak
    kc = medanon.anonymize.kcentroid(x, k=2, codec="restyle-map-fundus64", patient_ids=ids, labels=y,
                                     value_range=(0, 1))            # floats: say what black and white are
snow = medanon.anonymize.snow(x, p=0.3, patient_ids=ids, labels=y, value_range=(0, 1))
print(len(kc), "k-Centroid records,", len(snow), "Snow records; codec:", kc.params["model_files"]["codec"])

# %% Results as tensors, records as objects
released = kc.images(limit=None)                        # (N, C, H, W) in [-1, 1]
print(released.shape, kc[0])

# %% Save with the private mapping; it names each record's sources by id, and the release's dataset gives their rows
kc.save(out / "kcentroid-k2", mapping=out / "kcentroid-k2.mapping.json", progress=False)
mapping = json.loads((out / "kcentroid-k2.mapping.json").read_text())
first, entry = next(iter(mapping["records"].items()))
print(first, "averages rows", kc.dataset.rows_of(entry["sources"]), "of x")    # x[row]: the images it stands for

# %% Measure both against all the images (tiny preset: a smoke run)
res = medanon.evaluate(real=images, patient_ids=patients, labels={"grade": grades}, releases=[kc, snow],
                       preset="tiny", size=32, progress=False, value_range=(0, 1))
rows = res.summary()                                      # one flat record per number (res.to_frame(): pandas)
for rec in rows:
    if rec["metric"] == "residual_risk":
        print(f"{rec['release']:12} {rec['attack']:34} risk {rec['value']}  valid {rec['valid']}")
