"""A summary of a dataset: counts by patient and label, image sizes, problems found."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from medanon.data.dataset import ImageDataset
from medanon.data.inputs import patients_known
from medanon.data.labels import spec

# Labels summarised as class counts when present; others (continuous) as min/mean/max.
_SHOWN_FIRST = ("grade", "pneumonia", "sex", "age", "laterality", "view", "marker_block", "situs_inversus")


def summarize(ds: ImageDataset) -> dict[str, Any]:
    per_patient = Counter(r.patient_id for r in ds.records)
    counts = np.array(list(per_patient.values()))
    sizes = Counter(f"{i.width}x{i.height}" for i in ds.infos)
    channels = Counter(i.channels for i in ds.infos)
    kinds = Counter(i.kind for i in ds.infos)
    labels: dict[str, Any] = {}
    names = [n for n in _SHOWN_FIRST if n in ds.label_names] + [n for n in ds.label_names if n not in _SHOWN_FIRST]
    for name in names:
        sp = spec(name)
        values = ds.label_array(name)
        missing = int(np.isnan(values).sum())
        present = values[~np.isnan(values)]
        if sp.kind == "continuous" or len(np.unique(present)) > 12:
            entry: dict[str, Any] = {"kind": "continuous", "missing": missing}
            if present.size:
                entry.update(min=float(present.min()), mean=round(float(present.mean()), 3),
                             max=float(present.max()), sd=round(float(present.std()), 3))
        else:
            c = Counter(sp.decode(float(v)) for v in present)
            entry = {"kind": sp.kind, "missing": missing, "counts": dict(sorted(c.items()))}
        labels[name] = entry
    eyes = {}
    if "laterality" in ds.label_names and patients_known(ds):
        sides: dict[str, set[float]] = {}
        for r, v in zip(ds.records, ds.label_array("laterality"), strict=True):
            if not np.isnan(v):
                sides.setdefault(str(r.patient_id), set()).add(float(v))
        eyes = {"patients_both_eyes": sum(len(s) == 2 for s in sides.values()),
                "patients_one_eye": sum(len(s) == 1 for s in sides.values()),
                "patients_side_unknown": len({str(r.patient_id) for r in ds.records}) - len(sides)}
    return {
        "root": str(ds.root),
        "layout": ds.layout,
        "tables": [_relative(f, ds.root) for f in getattr(ds, "source_files", None) or []],   # the labels read
        "modality": ds.modality or "unknown",
        "images": len(ds),
        "patients": len(per_patient),
        "patient_ids_known": patients_known(ds),         # False: each image counted as its own patient
        **eyes,                                          # by the laterality label, where there is one
        "images_per_patient": {"min": int(counts.min()), "mean": round(float(counts.mean()), 3),
                               "max": int(counts.max())} if counts.size else {},
        "source_sizes": dict(sizes.most_common(10)),
        "distinct_source_sizes": len(sizes),
        "source_channels": {str(k): v for k, v in sorted(channels.items())},
        "file_types": dict(kinds),
        "alpha_channel": sum(i.alpha for i in ds.infos),
        "output": {"size": ds.size, "channels": ds.channels, "crop": ds.crop,
                   **({"xray_views": ds.read_options.xray_views}
                      if getattr(ds, "read_options", None) and ds.read_options.xray_views else {})},
        "labels": labels,
        "skipped": [str(p) for p in ds.skipped],
    }


def _relative(path, root) -> str:
    """``path`` as a path under ``root`` where it is one, else as it is."""
    from pathlib import Path

    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def format_summary(s: dict[str, Any]) -> str:
    lines = [
        f"dataset   {s['root']}",
        f"layout    {s['layout']}   modality {s['modality']}"
        + (f"   read from {', '.join(s['tables'])}" if s.get("tables") else ""),
        f"images    {s['images']}   patients "
        + (f"{s['patients']}" if s.get("patient_ids_known", True) else
           f"unknown (no patient ids: each of the {s['images']} images counted as its own)")
        + "   images/patient "
        f"min {s['images_per_patient'].get('min')} mean {s['images_per_patient'].get('mean')} "
        f"max {s['images_per_patient'].get('max')}"
        + (f"   eyes: {s['patients_both_eyes']} patient(s) with both, {s['patients_one_eye']} with one"
           + (f", {s['patients_side_unknown']} unknown" if s.get("patients_side_unknown") else "") + " (laterality)"
           if "patients_both_eyes" in s else ""),
        "sizes     " + ", ".join(f"{k} ({v})" for k, v in s["source_sizes"].items())
        + (f"  ... {s['distinct_source_sizes']} distinct" if s["distinct_source_sizes"] > 10 else ""),
        "channels  " + ", ".join(f"{k}: {v}" for k, v in s["source_channels"].items())
        + "   files " + ", ".join(f"{k}: {v}" for k, v in s["file_types"].items()),
        f"output    {s['output']['size']}x{s['output']['size']} px, {s['output']['channels']} channel(s), "
        f"crop {s['output']['crop']}"
        + (f", X-ray views {s['output']['xray_views']}" if s["output"].get("xray_views") else ""),
    ]
    if s.get("alpha_channel"):
        lines.append(f"alpha     {s['alpha_channel']} image(s) declare transparency; it is ignored (each pixel's "
                     "stored colour is read; decoding every image warns if any pixel is transparent)")
    lines.append("labels")
    width = max([20, *(len(n) + 2 for n in s["labels"])])     # MIMIC: enlarged_cardiomediastinum
    for name, e in s["labels"].items():
        miss = f"   missing {e['missing']}" if e["missing"] else ""
        head = f"  {name:<{width}}"
        if "counts" in e:
            lines.append(head + "  ".join(f"{k}: {v}" for k, v in e["counts"].items()) + miss)
        elif "mean" in e:
            lines.append(head + f"min {e['min']:g}  mean {e['mean']:g}  max {e['max']:g}  sd {e['sd']:g}" + miss)
        else:
            lines.append(head + "all missing")
    for p in s.get("problems", []):                 # found, not skipped: the other commands refuse the dataset
        lines.append(f"PROBLEM   {p['problem']}")
        lines += [f"  - {f}" for f in p["files"][:20]]
        if len(p["files"]) > 20:
            lines.append(f"  ... and {len(p['files']) - 20} more")
        lines.append(f"  fix: {p['fix']}")
    if s["skipped"]:
        lines.append(f"skipped   {len(s['skipped'])} file(s):")
        lines += [f"  - {p}" for p in s["skipped"][:20]]
        if len(s["skipped"]) > 20:
            lines.append(f"  ... and {len(s['skipped']) - 20} more")
    return "\n".join(lines)
