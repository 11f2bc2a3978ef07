"""Which chest X-ray views a dataset is read with (``xray_views=``), and the warning where laterals are mixed in.

CheXpert holds a lateral image for many frontal ones, MIMIC-CXR and PadChest too. medanon's X-ray models, phantoms
and attacks are made for frontal images (the phantoms are PA), and a release made of both mixes them without a
word in its labels (``view`` is not released unless asked). ``xray_views`` selects by the canonical ``view``
label:

- ``""`` (the default): every image; an X-ray dataset holding lateral views is named in a warning, once per folder;
- ``"frontal"``: every image but the lateral ones (``LATERAL``, ``LL``); an image whose view is not recorded is
  kept (a CheXpert frontal image without its AP/PA cell, say);
- a comma list of views (``"PA"``, ``"PA,AP"``): those only; an image whose view is not recorded is left out.

Example:
    >>> sorted(parse_views("pa, AP"))
    ['AP', 'PA']
    >>> parse_views("frontal") == FRONTAL
    True
    >>> canonical_views(" pa,AP "), canonical_views("Frontal"), canonical_views("")
    ('AP,PA', 'frontal', '')
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from medanon.data.imageio import first_in_folder
from medanon.data.labels import LABELS
from medanon.data.layouts.common import LayoutWarning
from medanon.data.records import Record
from medanon.errors import ConfigError, DataError

log = logging.getLogger(__name__)

VIEWS = LABELS["view"].classes                      # PA, AP, LATERAL, LL, OTHER
LATERAL = frozenset({"LATERAL", "LL"})
FRONTAL = frozenset(v for v in VIEWS if v not in LATERAL) | {"unknown"}   # unrecorded views are kept


class LateralViews(LayoutWarning):
    """An X-ray dataset read with every view holds lateral images, for which medanon's X-ray models are not made."""


def parse_views(views: str) -> frozenset[str] | None:
    """The views ``views`` keeps (``"unknown"`` among them: images without a recorded view), None for every image;
    a ConfigError naming the argument for a view medanon does not know."""
    if not isinstance(views, str):
        raise ConfigError(f"xray_views={views!r} must be a string",
                          fix="xray_views='frontal', xray_views='PA,AP', or xray_views=''")
    text = views.strip()
    if not text:
        return None
    if text.lower() == "frontal":
        return FRONTAL
    asked = [v.strip().upper() for v in text.split(",") if v.strip()]
    unknown = [v for v in asked if v not in VIEWS]
    if unknown or not asked:
        raise ConfigError(f"xray_views={views!r} names {', '.join(map(repr, unknown)) or 'no view'}: the views "
                          f"are {', '.join(VIEWS)}",
                          fix="xray_views='frontal' (every view but the laterals), a comma list such as "
                              "xray_views='PA,AP', or xray_views='' for every image")
    return frozenset(asked)


def canonical_views(views: str) -> str:
    """One spelling of ``views``: ``"frontal"``, the views in sorted order (``"AP,PA"``), or ``""`` (every image);
    recorded in a release and compared, so "PA,AP" and "AP,PA" are one setting."""
    keep = parse_views(views)
    if keep is None:
        return ""
    return "frontal" if keep == FRONTAL else ",".join(sorted(keep))


def view_name(record: Record) -> str:
    """The record's canonical view, or ``"unknown"``."""
    v = record.labels.get("view", math.nan)
    return LABELS["view"].decode(v) if isinstance(v, (int, float)) and math.isfinite(v) else "unknown"


def select_views(records: Sequence[Record], views: str, *, root: Path, modality: str | None) -> list[Record]:
    """The records of the views ``views`` keeps (logged: how many of each view were left out); with every view,
    all of them, and a :class:`LateralViews` warning where an X-ray dataset holds laterals."""
    keep = parse_views(views)
    if keep is None and modality != "xray":            # nothing to select, nothing to warn of
        return list(records)
    if keep is not None and modality == "fundus":
        if first_in_folder("views-on-fundus", root, root):
            warnings.warn(f"xray_views={views!r} is given for {root}, a folder of fundus photographs: views are "
                          "chest X-rays' (PA, AP, lateral), and it leaves no image out here; leave it out for "
                          "fundus data", LayoutWarning, stacklevel=3)
        return list(records)
    names = [view_name(r) for r in records]
    if keep is None:
        laterals = sum(n in LATERAL for n in names)
        if laterals and first_in_folder("lateral", root, root):
            warnings.warn(f"{laterals} of the {len(records)} images of {root} are lateral views: medanon's X-ray "
                          "models, phantoms and attacks are made for frontal images, and a release would mix the "
                          "two (its labels say which only if view is released); pass xray_views='frontal' to leave "
                          "them out", LateralViews, stacklevel=3)
        return list(records)
    kept = [r for r, n in zip(records, names, strict=True) if n in keep]
    dropped = Counter(n for n in names if n not in keep)
    if not kept:
        counts = ", ".join(f"{n} {c}" for n, c in sorted(dropped.items()))
        raise DataError(f"xray_views={views!r} leaves no image of {root} ({counts} left out)",
                        fix="pass xray_views='' to read every image, or the views the dataset holds (medanon data "
                            "summary counts them under 'view')")
    if dropped:
        log.info("X-ray views %s: %d of %d images of %s kept; left out: %s", views, len(kept), len(records), root,
                 ", ".join(f"{n} {c}" for n, c in sorted(dropped.items())))
    return kept
