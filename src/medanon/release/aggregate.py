"""How the labels of the sources behind one released record become that record's labels.

Rule (documented in the release manifest):

- ordinal labels (DR ``grade``): the most frequent class; a tie goes to the **higher** class, so
  an average of mild and moderate eyes is not released as healthier than its members;
- binary labels (``pneumonia``, ``sex``, findings): the most frequent class; a tie goes to 1;
- other categorical labels: the most frequent class; a tie goes to the lowest class index;
- continuous labels (``age``): the mean, rounded to 0.1.

Missing values (``nan``) are left out; a label missing in every source stays ``nan``. The class
counts are released next to the value (``grade_counts`` = ``"0:3;2:2"``), so a user can train on
soft labels instead of the majority.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from medanon.data.labels import spec

RULE = ("ordinal: majority, ties to the higher class; binary: majority, ties to 1; categorical: majority, "
        "ties to the lowest index; continuous: mean (0.1); missing values ignored; class counts released as "
        "<label>_counts")


def aggregate_labels(values: Sequence[dict[str, float]], names: Sequence[str]) -> dict[str, object]:
    """Aggregate ``names`` over the label dicts of the sources. Returns value and ``<name>_counts``."""
    out: dict[str, object] = {}
    for name in names:
        sp = spec(name)
        present = [float(v[name]) for v in values if name in v and not math.isnan(float(v[name]))]
        if sp.kind == "continuous":
            out[name] = round(sum(present) / len(present), 1) if present else math.nan
            continue
        counts = Counter(present)
        if not counts:
            out[name], out[f"{name}_counts"] = math.nan, ""
            continue
        top = max(counts.values())
        tied = sorted(c for c, n in counts.items() if n == top)
        out[name] = tied[-1] if sp.kind in ("ordinal", "binary") else tied[0]
        out[f"{name}_counts"] = ";".join(f"{c:g}:{n}" for c, n in sorted(counts.items()))
    return out
