"""Vessel masks from files the user provides, paired with images and aligned with their preprocessing.

Pairing rule (one rule for ``medanon anonymize vs-snow --vessels files --masks DIR`` and for
``medanon train segmenter --images DIR --masks DIR``): a mask belongs to the image with the same
file stem (``img01.png`` <- ``img01.gif``), else, for DRIVE-style names, to the image with the same
leading id before the first ``_`` (``21_training.tif`` <- ``21_manual1.gif``) when that id names
exactly one mask and exactly one image (``P3_01.png`` never takes ``P3_02.png``'s mask). Images without a
mask, or with two candidates, are one :class:`DataError` that lists them. A mask is read as vessel where it
is at least half of full brightness, or, for a mask whose values are 0 and 1, where it is 1; a mask without
a vessel pixel is an error.

Alignment: a mask is drawn on the *source* image, which medanon crops (the fundus field of view, a
centre square, ...) and resizes. :func:`load_aligned_mask` applies the same crop to the mask, found
on the image exactly as :func:`medanon.data.transforms.preprocess` finds it, then resizes it by area
and keeps pixels at least half covered.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from medanon.data import imageio
from medanon.data.layouts import IMAGE_EXTENSIONS
from medanon.data.transforms import circle_mask, crop_square, detect_fov, resize_mask
from medanon.errors import DataError

MASK_EXTENSIONS = (*IMAGE_EXTENSIONS, ".gif", ".bmp")


def _files(folder: Path, extensions: Sequence[str]) -> list[Path]:
    if not folder.is_dir():
        raise DataError(f"folder {folder} does not exist", files=[str(folder)],
                        fix="pass an existing folder of images / vessel masks")
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in extensions)


class MaskIndex:
    """Mask files of one folder, looked up by image file name (see the module docstring)."""

    def __init__(self, masks_dir: str | Path):
        self.folder = Path(masks_dir)
        files = _files(self.folder, MASK_EXTENSIONS)
        if not files:
            raise DataError(f"no mask files in {self.folder}", files=[str(self.folder)],
                            fix=f"put one mask per image there ({', '.join(MASK_EXTENSIONS)})")
        self.by_stem: dict[str, list[Path]] = defaultdict(list)
        self.by_id: dict[str, list[Path]] = defaultdict(list)
        for f in files:
            self.by_stem[f.stem.lower()].append(f)
            self.by_id[f.stem.split("_")[0].lower()].append(f)
        self.bound: dict[Path, Path] = {}

    def bind(self, images: Sequence[Path]) -> None:
        """Pair every image of the dataset at once (one error listing all without a mask), so that a batch's
        lookups see which ids other images share."""
        self.bound = dict(zip(map(Path, images), self.pair(images), strict=True))

    def find(self, image: Path, *, id_shared: bool = False) -> Path | None:
        """The mask of ``image``, or None when there is none or it is ambiguous. ``id_shared``: another image
        has the same leading id, so the id names no single image and only the stem may match."""
        same = self.by_stem.get(image.stem.lower(), [])
        if len(same) == 1:
            return same[0]
        if same or id_shared:
            return None
        cand = self.by_id.get(image.stem.split("_")[0].lower(), [])
        return cand[0] if len(cand) == 1 else None

    def pair(self, images: Sequence[Path]) -> list[Path]:
        """The mask of every image, in order; one DataError listing every image without one."""
        if self.bound and all(Path(p) in self.bound for p in images):
            return [self.bound[Path(p)] for p in images]
        ids = Counter(Path(p).stem.split("_")[0].lower() for p in images)
        found = [self.find(Path(p), id_shared=ids[Path(p).stem.split("_")[0].lower()] > 1) for p in images]
        missing = [str(p) for p, m in zip(images, found, strict=True) if m is None]
        if missing:
            raise DataError(f"{len(missing)} image(s) have no vessel mask (or several) in {self.folder}:",
                            files=missing, fix="name each mask like its image (same stem, any image "
                                               "extension) or with the same leading id before '_' (DRIVE)")
        return [m for m in found if m is not None]


def pair_folder(images_dir: str | Path, masks_dir: str | Path) -> list[tuple[Path, Path]]:
    """(image, mask) pairs of a DRIVE-style pair of folders."""
    images = _files(Path(images_dir), IMAGE_EXTENSIONS)
    if not images:
        raise DataError(f"no images in {images_dir}", files=[str(images_dir)],
                        fix=f"pass the folder of images ({', '.join(IMAGE_EXTENSIONS)})")
    return list(zip(images, MaskIndex(masks_dir).pair(images), strict=True))


MAX_MID_SHARE = 0.5     # a mask with more of its pixels between dark and bright is an image, not a mask


def read_mask(path: str | Path) -> np.ndarray:
    """A mask file as (H, W) bool: pixels at least half of full brightness, or the 1s of a 0/1 mask. A colour image,
    or one whose pixels are mostly neither dark nor bright (a photograph, noise), is refused: thresholded at half
    brightness it would mark an arbitrary half of the image as vessel."""
    path = Path(path)
    try:
        with Image.open(path) as im:
            rgb = np.asarray(im.convert("RGB")).astype(np.int16)
            a = np.asarray(im.convert("L"))
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read mask {path}: {e}", files=[str(path)],
                        fix="replace the file with a readable 8-bit mask (PNG or GIF)") from None
    fix = "give a binary mask: vessels white (255) or 1 on black (0), one channel or equal channels"
    if int(np.abs(rgb - rgb.mean(-1, keepdims=True)).max()) > 8:
        raise DataError(f"mask {path} is a colour image, not a binary vessel mask (read as grey, coloured vessels such "
                        "as red arteries and blue veins would fall below half brightness and be lost)",
                        files=[str(path)], fix=fix + " (e.g. every non-black pixel of an artery/vein map as 255)")
    if a.max() > 1 and (mid := float(((a > 25) & (a < 230)).mean())) > MAX_MID_SHARE:
        raise DataError(f"mask {path} is not a binary mask: {mid:.0%} of its pixels are neither dark nor bright "
                        "(a photograph or noise, not a drawing of the vessels)", files=[str(path)], fix=fix)
    vessel = a > 0 if a.max() == 1 else a >= 128
    if not vessel.any():
        raise DataError(f"mask {path} has no vessel pixel (all its values are below half brightness)",
                        files=[str(path)], fix="give a mask with vessels drawn as white (255) or 1 on black (0)")
    return vessel


def load_aligned_mask(mask_path: str | Path, image_path: str | Path, *, size: int, crop: str) -> np.ndarray:
    """``mask_path`` cropped and resized as ``preprocess`` crops and resizes ``image_path``: (size, size) bool."""
    return align_mask(read_mask(mask_path), mask_path, image_path, size=size, crop=crop)


def align_mask(m: np.ndarray, mask_path: str | Path, image_path: str | Path, *, size: int, crop: str) -> np.ndarray:
    """The mask ``m`` (read from ``mask_path``) cropped and resized as ``preprocess`` crops and resizes
    ``image_path``: (size, size) bool. A DataError if their sizes differ."""
    img = imageio.read(image_path)
    h, w = img.shape[:2]
    if m.shape != (h, w):
        raise DataError(f"mask {mask_path} is {m.shape[1]}x{m.shape[0]} but its image {image_path} is {w}x{h}",
                        files=[str(mask_path)], fix="give each mask the size of its image")
    found = False
    if crop == "fov":
        fov = detect_fov(img)
        found = fov.found
        sq = (crop_square(m, fov.cx, fov.cy, fov.radius) if found else crop_square(m, w / 2, h / 2, min(h, w) / 2))
    elif crop == "center":
        sq = crop_square(m, w / 2, h / 2, min(h, w) / 2)
    elif crop == "pad":
        sq = crop_square(m, w / 2, h / 2, max(h, w) / 2)
    elif crop == "none":
        sq = m
    else:
        raise ValueError(f"unknown crop {crop!r}")
    out = resize_mask(sq, size)
    return out & circle_mask(size) if found else out
