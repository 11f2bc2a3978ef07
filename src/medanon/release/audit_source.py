"""Checks of a release against the source dataset given to the audit: that it could be the release's source
(its size, by the public manifest's counts, when there is no mapping to confirm it), that no released image is one
of its files, and, with the mapping, that none is a copy of its own sources as the methods preprocess them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from medanon.release.audit import AuditReport


def _pixels(path: Path, mode: str | None = None) -> tuple[tuple[int, int], str, str] | None:
    """(size, mode, sha256 of the decoded 8-bit pixels) of an image, converted to ``mode`` if given; None if it
    cannot be decoded."""
    import hashlib

    import numpy as np
    from PIL import Image

    from medanon.data.imageio import HIGH_BIT_MODES, _pil_to_float

    try:
        with Image.open(path) as im:
            if im.mode in HIGH_BIT_MODES:       # 16-bit (or 32-bit, float) grey: read as the methods read it, then
                #                                 8-bit (Pillow's convert("L") clips every value above 255 to white)
                im = Image.fromarray(np.rint(_pil_to_float(im, path) * 255).astype(np.uint8), "L")
            im = im.convert(mode or ("L" if im.mode in ("L", "1") else "RGB"))
            return im.size, im.mode, hashlib.sha256(im.tobytes()).hexdigest()
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


def _image_size(path: Path) -> tuple[int, int] | None:
    from PIL import Image

    try:
        with Image.open(path) as im:                # the header only
            return im.size
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


def check_source_counts(rep: AuditReport, manifest: dict, source_records) -> None:
    """Without the mapping, the source cannot be confirmed to be the release's: at least it must hold as many
    images and people as the public manifest says the release stands for."""
    counts = manifest.get("counts") or {}
    have = {"sources": len(source_records), "people": len({r.patient_id for r in source_records})}
    short = [f"the release stands for {counts[key]} {what}, the source holds {have[key]}"
             for key, what in (("sources", "source images"), ("people", "people"))
             if isinstance(counts.get(key), int) and counts[key] > have[key]]
    rep.add("the source given holds as many images and people as the release stands for (manifest)", not short,
            "; ".join(short) + (": it is not (all of) the release's source" if short else ""))
    rep.notes.append("no mapping given: the source was not confirmed to be the one the release was made from (the "
                     "mapping names its sources); identifiers and copies were searched for in the source given")


def check_copied_files(rep: AuditReport, release: Path, images: list[Path], source_records) -> None:
    """No released image is a source image or mask: byte for byte (a copy put into the release by hand or by a
    tool), or pixel for pixel (the same image re-encoded: other compression, other chunks). Only source files of a
    released file's byte size are hashed, and only sources of a released image's width and height decoded, so a
    dataset of large originals costs little. A resized or altered copy is a near copy: the evaluation's near-copy
    screening measures those."""
    from medanon.fsutil import sha256_file

    by_size: dict[int, list[Path]] = {}
    for p in images:
        by_size.setdefault(p.stat().st_size, []).append(p)
    sources = {Path(f) for r in source_records for f in (r.path, getattr(r, "mask_path", None)) if f}
    sized = {s: s.stat().st_size for s in sources if s.is_file()}
    same_size = [s for s, size in sized.items() if size in by_size]
    source_digests = {sha256_file(s): s for s in same_size}
    candidates = [p for size in {sized[s] for s in same_size} for p in by_size[size]]
    copied = {str(p.relative_to(release)): source_digests[d].name for p in candidates
              if (d := sha256_file(p)) in source_digests}
    released = {p: got for p in images if str(p.relative_to(release)) not in copied and (got := _pixels(p))}
    dims = {size for size, _, _ in released.values()}
    same_dims = [s for s in sized if _image_size(s) in dims]
    modes = {mode for _, mode, _ in released.values()}
    by_pixels = {(mode, got[2]): s for s in same_dims for mode in modes if (got := _pixels(s, mode))}
    copied.update({str(p.relative_to(release)): by_pixels[(mode, h)].name for p, (_, mode, h) in released.items()
                   if (mode, h) in by_pixels})
    first = next(iter(sorted(copied.items())), None)
    rep.add("no released image is a source file, byte for byte or pixel for pixel", not copied,
            f"{len(copied)} are, e.g. {first[0]} = source {first[1]}" if first else
            f"{len(same_size)} source files of a released file's byte size compared by content, "
            f"{len(same_dims)} of a released image's width and height by decoded pixels")


COPY_RMSE = 1 / 127.5           # as the evaluation's copy screen: within one 8-bit grey level (RMS), in [-1, 1] units
# A record that contradicts its statement need not be exact: a source with a little noise added (+-2 levels: 1.35
# RMS) is still that person's image. An honest k = 2 average is 5.7 levels or more from its nearest source at 32 and
# 64 px (`python benchmarks/audit_copy_threshold.py`), so within 3 levels a record is a (noisy) copy.
NEAR_COPY_RMSE = 3 / 127.5
CANDIDATE_GREY_LEVELS = 3.5     # thumbnails this close (RMS, 8-bit levels) are compared pixel by pixel: a near copy's
#                                 are within about its RMS (noise averages out in them, an offset does not)
MAX_COMPARED = 5000             # records compared with their preprocessed sources (about 30 ms a large JPEG source)


def check_preprocessed_copies(rep: AuditReport, release: Path, records: dict, source_records,
                              modality: str | None, *, people: dict[str, int], image_dp: bool,
                              says_vacuous: bool = False, crop: str | None = None,
                              each_record: Callable[[str, Any, list | None, list | None], None] | None = None) -> None:
    """With the mapping (``records``: released image -> its sources): no released image is within 3 8-bit grey
    levels (RMS, :data:`NEAR_COPY_RMSE`) of one of its own sources preprocessed as the methods read them (the field
    of view or the centre cropped as the manifest's ``crop`` records, resized to the released image's side): a copy
    that went through
    medanon's preprocessing, which the comparison with the source files cannot see. Sources are decoded at the
    reduced scale the side allows; above :data:`MAX_COMPARED` records, a fixed random sample of them is compared,
    and the check says so.

    A copy fails the audit where it contradicts what the release states: a record that stands for two or more
    people (``people``: labels.csv's n_people), or a release that claims differential privacy for images
    (``image_dp``), and a release whose every compared image is its source's 8-bit pixels exactly (nothing was
    anonymised) unless its statement says so itself (``says_vacuous``: a bound it calls vacuous). Otherwise a method
    that claims neither (VS-Snow at a small p changes too few pixels of some images to tell at a small size) gets a
    note for those within one level (:data:`COPY_RMSE`): its statement is not contradicted, and the evaluation counts
    them as copies.

    ``each_record(image, released pixels, source records, decoded sources)``: called for every compared record with
    what was read, so that a further check (:class:`.audit_content.KpixelAverages`) decodes nothing again (each
    source as ``(image, field of view)``); the sources are None where one of them is not a readable file, or the loop
    stopped at a copy."""
    import numpy as np
    from PIL import Image

    from medanon.data.decode import decode
    from medanon.errors import DataError
    from medanon.release.files import png_to_float

    by_id = {r.record_id: r for r in source_records if Path(r.path).is_file()}    # images in memory have no file
    if not by_id:
        rep.notes.append("the sources are not files (images held in memory): released images were not compared "
                         "with their preprocessed sources")
        return
    crop = method_crop(crop, modality)
    names = compared_records(records)
    copies: list[tuple[str, str, float]] = []          # (image, source, RMS) within NEAR_COPY_RMSE
    compared = images = exact = 0
    thumbs: dict[int, dict[str, np.ndarray]] = {}      # channels -> source id -> its 8x8 grey thumbnail
    released: list[tuple[str, np.ndarray, int]] = []    # (image, thumbnail, channels): compared, no own copy
    sides: dict[int, int] = {}                         # channels -> the released images' side
    for img in names:
        try:
            got = png_to_float(release / img)
        except (OSError, ValueError, Image.DecompressionBombError):
            continue                                    # "every image is a readable PNG" names it
        channels, side = got.shape[0], got.shape[-1]
        sides.setdefault(channels, side)
        before, own_copy = compared, False
        decoded: list | None = []                       # every source of the record, as the method read it
        for sid in records[img]["sources"]:
            src = by_id.get(sid)
            if src is None or got.shape[-2] != side:
                decoded = None
                continue
            try:
                pre = decode(src.path, size=side, channels=channels, crop=crop)
            except (OSError, ValueError, DataError):
                decoded = None
                continue                                # an unreadable source: not this check's to report
            source = pre.image
            if decoded is not None:
                decoded.append((source, pre.fov))
            compared += 1
            thumbs.setdefault(channels, {})[sid] = _thumb(source)      # much the same at any side
            rms = float(np.sqrt(np.mean((source - got) ** 2)))
            if rms <= NEAR_COPY_RMSE:
                copies.append((img, Path(src.path).name, rms))
                exact += bool(np.array_equal(np.rint((source + 1) * 127.5), np.rint((got + 1) * 127.5)))
                own_copy = True
                decoded = None
                break
        if each_record is not None:
            each_record(img, got, [by_id.get(sid) for sid in records[img]["sources"]], decoded)
        images += compared > before
        if compared > before and not own_copy:          # kept small: the image is read again for a candidate
            released.append((img, _thumb(got), channels))
    # a copy of an image its mapping does not name (another record's patient, or a patient the release does not
    # hold: a held-out one): compared with every source decoded above and every other image of the source data,
    # through thumbnails first (a copy within NEAR_COPY_RMSE has thumbnails within about as much)
    unmapped = _add_unmapped(thumbs, sides, by_id, records, crop) if released else "0"
    foreign = _copies_of_other_sources(release, released, records, thumbs, by_id, crop)
    # every image its source's 8-bit pixels exactly: nothing was anonymised (a method that changed a few pixels
    # of each, as VS-Snow at a small p and size, is within the RMS but not this), unless the statement says so
    every = bool(copies) and exact == images and not says_vacuous
    contradicting = [c for c in copies if every or image_dp or people.get(c[0], 1) >= 2]
    plain = [c for c in copies if c not in contradicting and c[2] <= COPY_RMSE]   # the evaluation's copies
    if released:
        img, src, sid = foreign[0] if foreign else (None, None, None)
        whose = ("of another record" if any(sid in rec["sources"] for rec in records.values()) else
                 "of no record: an image of the source data the release does not hold, e.g. a held-out patient's")
        pool = len({sid for by_side in thumbs.values() for sid in by_side})
        rep.add("no released image is a copy of a source its record's mapping does not name", not foreign,
                f"{len(foreign)} are, e.g. {img} = source {src} ({whose}): the record "
                "does not stand for the people its mapping and labels.csv say" + (f" ({people[img]} people)"
                                                                                  if people.get(img, 1) >= 2 else "")
                if foreign else f"{len(released)} released images compared with the {pool} images of the source "
                                f"data decoded ({unmapped} of them no record's source)")
    name = ("no released image is a copy of one of its own sources as the methods preprocess them (within 3 8-bit "
            "grey levels, RMS: a copy with a little noise is a copy)")
    if contradicting or not copies:
        first = contradicting[0] if contradicting else None
        sample = (f" ({len(names)} of {len(records)} records, a fixed pseudo-random sample (seed 0): a release that "
                  "copies its sources "
                  "throughout is found, a single copy may not be)" if len(names) < len(records) else "")
        rep.add(name, not contradicting, f"{len(contradicting)} are, e.g. {first[0]} = source {first[1]} "
                f"({first[2] * 127.5:.2f} levels RMS)"
                + (" (every image compared: the release is its sources)" if every else "") + sample
                if first else f"{compared} released image / source pairs of the mapping compared at the released "
                              f"side{sample}")
    if plain:
        img, src, _ = plain[0]
        rep.notes.append(f"{len(plain)} released images of one person each are copies of their "
                         f"source as the methods preprocess it (within one 8-bit grey level, RMS; e.g. {img} = source "
                         f"{src}): the method changed too little of them to tell them from it. The release claims "
                         "no guarantee for images that this contradicts; the evaluation counts them as copies")


def method_crop(crop: str | None, modality: str | None) -> str:
    """How the methods cropped the sources: the manifest's ``crop``, else the modality's default."""
    if crop in ("fov", "center", "pad", "none"):
        return crop
    return "fov" if modality == "fundus" else "center"


def compared_records(records: dict) -> list[str]:
    """The released images the audit compares with their sources: all of them, or above :data:`MAX_COMPARED` a fixed
    random sample (seed 0; the whole release would cost minutes)."""
    import numpy as np

    names = sorted(records)
    if len(names) > MAX_COMPARED:
        pick = np.random.default_rng(0).choice(len(names), MAX_COMPARED, replace=False)
        names = [names[i] for i in sorted(pick)]
    return names


def _thumb(image):
    """(C, H, W) in [-1, 1] -> its 8x8 grey thumbnail (64 values, 8-bit grey levels; as
    :func:`medanon.data.overlap.thumbnail`)."""
    import torch

    from medanon.data.overlap import thumbnail

    return thumbnail(torch.as_tensor(image)[None])[0].double().numpy()


def _add_unmapped(thumbs: dict, sides: dict, by_id: dict, records: dict, crop: str) -> str:
    """Thumbnails of the source data's images that no record's mapping names (held-out patients, images left out),
    decoded at the released images' side, added to ``thumbs``; above :data:`MAX_COMPARED` a fixed random sample
    (seed 1). Says how many, for the check's detail."""
    import numpy as np

    from medanon.data.decode import decode
    from medanon.errors import DataError

    named = {sid for rec in records.values() for sid in rec["sources"]}
    ids = sorted(i for i in by_id if i not in named)
    if len(ids) > MAX_COMPARED:
        pick = np.random.default_rng(1).choice(len(ids), MAX_COMPARED, replace=False)
        shown, ids = f"a fixed sample of {MAX_COMPARED} of the {len(ids)}", [ids[i] for i in sorted(pick)]
    else:
        shown = str(len(ids))
    for channels, side in sides.items():
        for sid in ids:
            try:
                thumbs.setdefault(channels, {})[sid] = _thumb(decode(by_id[sid].path, size=side, channels=channels,
                                                                     crop=crop).image)
            except (OSError, ValueError, DataError):
                continue                                # an unreadable image: not this check's to report
    return shown


def _copies_of_other_sources(release: Path, released, records: dict, thumbs: dict, by_id: dict,
                             crop: str) -> list[tuple[str, str, str]]:
    """``(released image, source file, source record id)`` for each released image (``released``: name, thumbnail,
    channels) within one 8-bit grey level (RMS) of a decoded source that is not one of its own. Candidates are the
    sources whose thumbnail lies within :data:`CANDIDATE_GREY_LEVELS` of the image's; for each, the image is read
    again and the source decoded at its side, and the two are compared pixel by pixel."""
    import numpy as np
    import torch

    from medanon.data.decode import decode
    from medanon.data.overlap import THUMBNAIL
    from medanon.errors import DataError
    from medanon.release.files import png_to_float

    out = []
    for channels, pool in thumbs.items():
        mine = [(img, t) for img, t, c in released if c == channels]
        if not mine or not pool:
            continue
        ids = list(pool)
        keys = torch.from_numpy(np.stack([pool[i] for i in ids]))
        mt = torch.from_numpy(np.stack([t for _, t in mine]))
        for start in range(0, len(mine), 1024):                 # (1024, sources) distances at a time
            near = torch.cdist(mt[start:start + 1024], keys) / THUMBNAIL <= CANDIDATE_GREY_LEVELS   # RMS, 64 cells
            for r, (img, _) in enumerate(mine[start:start + 1024]):
                own = set(records[img]["sources"])
                candidates = [ids[j] for j in torch.nonzero(near[r]).flatten().tolist() if ids[j] not in own]
                got = png_to_float(release / img) if candidates else None
                for sid in candidates:
                    try:
                        source = decode(by_id[sid].path, size=got.shape[-1], channels=channels, crop=crop).image
                    except (OSError, ValueError, DataError):
                        continue
                    if float(np.sqrt(np.mean((source - got) ** 2))) <= NEAR_COPY_RMSE:
                        out.append((img, Path(by_id[sid].path).name, sid))
                        break
    return out
