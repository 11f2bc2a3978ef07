"""Reading image files (PNG, JPEG, TIFF, DICOM) into float arrays in [0, 1].

``probe`` reads only the header (size and channel count) so a whole dataset can be checked
quickly; ``read`` decodes pixels; ``read_reduced`` decodes at a reduced scale (JPEG DCT scaling,
"draft mode", or a box average for other formats) for callers that only need a small image. All
raise :class:`DataError` naming the file and the fix.

Every reader refuses an image whose header claims more than ``max_pixels`` pixels
(:class:`TooLarge`, before any pixel is decoded): a 48 KB PNG can claim 20000 x 20000 pixels and
would need gigabytes to decode (a "decompression bomb"). A larger ``max_pixels`` raises the limit for
genuinely large scans. EXIF orientation is applied, so a photograph stored sideways with
``Orientation = 6`` loads upright (a TIFF's Orientation tag too).

Pixel values: 8-bit images are value / 255 and 16-bit ones value / 65535 (a 16-bit image whose values all fit in
12 bits, a detector's 12-bit data, then loads nearly black, and the dataset warns: :class:`LowBitDepth`); other
integer and float images are scaled to their own minimum and maximum, as DICOM pixels after their LUTs are. A
palette, CMYK or YCbCr TIFF is read by Pillow, which converts it to colours; an image with NaN or infinite values
is refused (:class:`DataError`, so ``skip_bad`` can leave it out).

Transparency is ignored: an alpha channel (or a PNG's transparent colour) is dropped and every pixel's stored colour
is read, which under transparent pixels may differ from what a viewer shows. ``ImageInfo.alpha`` says a header
declares one; ``Reduced.transparent`` says a decoded image has a pixel below full opacity, and the dataset warns
(:class:`TransparencyIgnored`) the first time it decodes one.
"""

from __future__ import annotations

import re
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from medanon.errors import DataError

DICOM_EXTENSIONS = (".dcm", ".dicom")
TIFF_EXTENSIONS = (".tif", ".tiff")

# Default limit on pixels per image: 64 megapixels, four times an EyePACS photograph (4752 x 3168) and
# more than any chest X-ray detector; decoding one takes about 0.8 GB as float32 RGB.
DEFAULT_MAX_PIXELS = 64_000_000
_EXIF_ORIENTATION = 0x0112

# PIL modes by number of channels medanon will produce from them (alpha is dropped).
_GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}
_ALPHA_MODES = {"RGBA", "RGBa", "LA", "La", "PA"}


class TransparencyIgnored(UserWarning):
    """An image has transparent pixels; medanon reads their stored colour and ignores the transparency."""


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def first_in_folder(kind: str, path: Path, root: Path | None) -> bool:
    """True the first time ``kind`` is reported for the dataset folder ``root`` (or ``path``) in this process."""
    key = f"{kind}\0{Path(root).resolve() if root is not None else path}"
    with _WARNED_LOCK:
        if key in _WARNED:
            return False
        _WARNED.add(key)
    return True


def warn_transparent(path: Path, root: Path | None) -> None:
    """Warn (:class:`TransparencyIgnored`, once per dataset folder in a process) that ``path`` has transparent
    pixels whose stored colour is read."""
    if not first_in_folder("transparent", path, root):
        return
    where = f" (other images of {root} may too; said once per folder)" if root is not None else ""
    warnings.warn(f"{path} has transparent pixels{where}: medanon ignores transparency and reads each pixel's "
                  "stored colour, which under transparent pixels may differ from what a viewer shows (e.g. white "
                  "instead of a black background). If transparency marks a background, flatten the images first: "
                  "composite them over the background's colour (black for fundus photographs)",
                  TransparencyIgnored, stacklevel=2)


class LowBitDepth(UserWarning):
    """A 16-bit image uses only the bottom of its range (10- or 12-bit data stored in 16 bits): read as 16-bit it
    is nearly black."""


LOW_RANGE_BITS = 12              # a 16-bit image whose largest value fits in 12 bits uses 1/16 of its range or less


def warn_low_range(path: Path, root: Path | None, bits: int) -> None:
    """Warn (:class:`LowBitDepth`, once per dataset folder in a process) that ``path`` is a 16-bit image whose
    values all fit in ``bits`` bits, so that it reads nearly black."""
    if not first_in_folder("low-range", path, root):
        return
    where = f" (other images of {root} may too; said once per folder)" if root is not None else ""
    warnings.warn(f"{path} is a 16-bit image whose values all fit in {bits} bits{where}: medanon reads 16-bit "
                  f"pixels as value / 65535, so it loads at most {2 ** bits / 65536:.1%} bright, nearly black; "
                  f"{bits}-bit data stored in 16 bits (common for X-ray detectors) must be rescaled to the full "
                  f"16-bit range (multiply by {2 ** (16 - bits)}) or converted to 8-bit before medanon reads it",
                  LowBitDepth, stacklevel=2)


def _low_range(a: np.ndarray) -> int:
    """The bits a 16-bit array's largest value needs, where that is at most :data:`LOW_RANGE_BITS` (else 0)."""
    if a.dtype.kind != "u" or a.dtype.itemsize != 2 or not a.size:   # signed and float: scaled to their own range
        return 0
    top = int(a.max())
    return max(1, top.bit_length()) if 0 < top < 2 ** LOW_RANGE_BITS else 0


@dataclass(frozen=True)
class ImageInfo:
    width: int
    height: int
    channels: int                                # 1 or 3 after medanon's conversion rules
    kind: str                                    # png | jpeg | tiff | dicom | ...
    alpha: bool = False                          # the header declares transparency (ignored when read)


def _is_dicom(path: Path) -> bool:
    if path.suffix.lower() in DICOM_EXTENSIONS:
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(132)
        return len(head) == 132 and head[128:132] == b"DICM"
    except OSError:
        return False


def _unreadable(path: Path, why: str) -> DataError:
    return DataError(f"cannot read image {path}: {why}", files=[str(path)],
                     fix="replace or remove the file (or its CSV row), or pass skip_bad=True to leave it out")


class TooLarge(DataError):
    """The image claims more pixels than ``max_pixels`` allows (a decompression bomb, or a huge scan).
    ``detail``: what it claims against the limit, in words that name no option."""

    detail: str = ""


def _too_large(path: Path, claimed: str, max_pixels: int) -> TooLarge:
    err = TooLarge(f"image {path} claims {claimed}, more than max_pixels={max_pixels} allows; decoding it "
                   "could exhaust memory (a small file claiming a huge size is a 'decompression bomb')",
                   files=[str(path)],
                   fix="if it is a genuine large scan, raise max_pixels (about 12 bytes per pixel "
                       "of memory are needed); otherwise remove the file, or pass skip_bad=True to leave it out")
    err.detail = f"{claimed}, over the limit of {max_pixels:,}"
    return err


def _check_pixels(path: Path, width: int, height: int, max_pixels: int | None) -> None:
    if max_pixels is not None and width * height > max_pixels:
        raise _too_large(path, f"{width} x {height} = {width * height:,} pixels", max_pixels)


def _bomb_error(path: Path, e: Exception, max_pixels: int | None) -> TooLarge:
    """Pillow's own DecompressionBombError (raised by Image.open above twice its limit) as a TooLarge."""
    m = re.search(r"\((\d+) pixels\)", str(e))
    claimed = f"{int(m[1]):,} pixels" if m else "a huge number of pixels"
    return _too_large(path, claimed, max_pixels if max_pixels is not None else Image.MAX_IMAGE_PIXELS or 0)


def _allow_pixels(max_pixels: int | None) -> None:
    """Pillow refuses to open images above twice ``Image.MAX_IMAGE_PIXELS``; medanon checks its own limit
    on every header, so an explicit larger ``max_pixels`` raises Pillow's (process-wide) limit to match."""
    if max_pixels is not None and Image.MAX_IMAGE_PIXELS is not None and max_pixels > Image.MAX_IMAGE_PIXELS:
        Image.MAX_IMAGE_PIXELS = max_pixels


def _missing(path: Path) -> DataError:
    if path.is_dir():
        return DataError(f"{path} is a folder, not an image file", files=[str(path)],
                         fix="point the labels CSV at the image file inside it, or pass skip_bad=True")
    return DataError(f"image {path} does not exist", files=[str(path)],
                     fix="check the path in the labels CSV, or pass skip_bad=True")


def _orientation(im: Image.Image) -> int:
    if im.format == "PNG" and "exif" not in im.info:
        return 1        # Pillow would decode the whole PNG looking for an eXIf chunk after the pixels
    try:
        return int(im.getexif().get(_EXIF_ORIENTATION, 1) or 1)
    except Exception:  # a malformed EXIF block is not worth refusing the image for
        return 1


def probe(path: str | Path, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> ImageInfo:
    """Size (as displayed, after EXIF orientation) and channel count from the header, without decoding pixels.
    Raises :class:`TooLarge` above ``max_pixels`` (None: no limit)."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    if _is_dicom(path):
        import pydicom

        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True)
            rows, cols = int(ds.Rows), int(ds.Columns)
            spp = int(getattr(ds, "SamplesPerPixel", 1))
        except Exception as e:  # pydicom raises many types for corrupt files
            raise _unreadable(path, f"not a readable DICOM file ({type(e).__name__}: {e})") from None
        _check_pixels(path, cols, rows, max_pixels)
        return ImageInfo(cols, rows, 1 if spp == 1 else 3, "dicom")
    _allow_pixels(max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)   # medanon's own limit applies
            with Image.open(path) as im:
                w, h = im.size
                mode = im.mode
                alpha = _declares_alpha(im)
                fmt = (im.format or path.suffix.lstrip(".")).lower()
                if _orientation(im) in (5, 6, 7, 8) and not _turned_on_open(im):
                    w, h = h, w
    except Image.DecompressionBombError as e:
        raise _bomb_error(path, e, max_pixels) from None
    except PermissionError:                                 # a file this user may not read is not a corrupt one
        raise DataError(f"cannot read image {path}: permission denied", files=[str(path)],
                        fix="make the file readable by the user running medanon (e.g. chmod a+r), or pass "
                            "skip_bad=True to leave it out") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise _unreadable(path, f"not a recognised image ({e})") from None
    _check_pixels(path, w, h, max_pixels)
    return ImageInfo(w, h, 1 if mode in _GRAY_MODES else 3, fmt, alpha)


def _turned_on_open(im: Image.Image) -> bool:
    """Pillow's TIFF reader gives a rotated TIFF's displayed size (and rotates its pixels when loading them): its
    size is then not the stored width x height."""
    if im.format != "TIFF":
        return False
    tags = getattr(im, "tag_v2", {})
    return tuple(im.size) != (tags.get(256), tags.get(257))


def _declares_alpha(im: Image.Image) -> bool:
    """An alpha channel, or a transparent colour (PNG tRNS, GIF), is declared by the header."""
    return im.mode in _ALPHA_MODES or "transparency" in im.info


def _transparent(im: Image.Image) -> bool:
    """Some pixel of the loaded image is below full opacity."""
    if not _declares_alpha(im):
        return False
    try:
        rgba = im if im.mode in _ALPHA_MODES else im.convert("RGBA")
        return rgba.getchannel("A").getextrema()[0] < 255
    except (ValueError, OSError):               # a mode Pillow cannot convert (e.g. 16-bit with a tRNS colour)
        return True                             # declared, so said: the warning errs on the side of telling


def _array_transparent(a: np.ndarray) -> bool:
    """The last channel of a 2- or 4-channel array (alpha) is below full opacity somewhere."""
    if a.ndim != 3 or a.shape[-1] not in (2, 4):
        return False
    full = np.iinfo(a.dtype).max if a.dtype.kind in "ui" else 1.0
    return bool(a[..., -1].min() < full)


def read(path: str | Path, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode an image to float32 in [0, 1]: (H, W) for one channel, (H, W, 3) for colour."""
    return read_reduced(path, 1, max_pixels=max_pixels).image


@dataclass(frozen=True)
class Reduced:
    image: np.ndarray                            # float32 in [0, 1], (h, w) or (h, w, 3)
    scale: int                                   # source pixels per reduced pixel along each axis
    width: int                                   # source size (after EXIF orientation)
    height: int
    transparent: bool = False                    # some pixel was below full opacity (its colour is read as is)
    low_range: int = 0                           # a 16-bit image whose values all fit in this many bits (<= 12)


def read_reduced(path: str | Path, scale: int, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Reduced:
    """Decode an image reduced ``scale`` times (1, 2, 4 or 8) along each axis: pixel (i, j) of the result
    is the mean of source pixels [scale*i, scale*(i+1)) x [scale*j, scale*(j+1)) (partial at the far edges).

    JPEGs are decoded reduced by libjpeg's DCT scaling (Pillow's draft mode), 10-100x faster than a
    full decode; other formats are decoded fully and box-averaged.
    """
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    if _is_dicom(path):
        a = _read_dicom(path, max_pixels)
        return _box_reduced(a, scale, a.shape[1], a.shape[0])
    if path.suffix.lower() in TIFF_EXTENSIONS:
        try:
            a, transparent, low = _read_tiff(path, max_pixels)
            return _box_reduced(a, scale, a.shape[1], a.shape[0], transparent=transparent, low_range=low)
        except TooLarge:
            raise
        except DataError:
            pass  # fall back to Pillow, which reads some TIFFs tifffile does not
    _allow_pixels(max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)   # medanon's own limit applies
            with Image.open(path) as im:
                width, height = im.size
                _check_pixels(path, width, height, max_pixels)
                got = 1
                if scale > 1 and im.format == "JPEG":
                    im.draft(im.mode, (max(1, width // scale), max(1, height // scale)))
                    got = _draft_scale(width, height, im.size)
                im.load()
                transparent = _transparent(im)
                orientation = _orientation(im)
                if orientation in range(2, 9):
                    im = ImageOps.exif_transpose(im)
                    if orientation in (5, 6, 7, 8):
                        width, height = height, width
                further = scale // got
                small = pil_uint8(im) if further > 1 else None
                if small is not None:   # box-average the 8-bit pixels before they become floats (4-5x faster)
                    return Reduced((_box_mean(small, further) / 255.0).astype(np.float32), scale, width, height,
                                   transparent)
                low = _low_range(np.asarray(im)) if im.mode.startswith("I;16") else 0
                a = _pil_to_float(im, path)
    except Image.DecompressionBombError as e:
        raise _bomb_error(path, e, max_pixels) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise _unreadable(path, f"decoding failed ({type(e).__name__}: {e})") from None
    if got != scale:
        return _box_reduced(a, scale // got, width, height, done=got, transparent=transparent, low_range=low)
    return Reduced(a, scale, width, height, transparent, low)


def _draft_scale(width: int, height: int, size: tuple[int, int]) -> int:
    for s in (8, 4, 2):
        if size == (-(-width // s), -(-height // s)):
            return s
    return 1


def _box_reduced(a: np.ndarray, factor: int, width: int, height: int, *, done: int = 1,
                 transparent: bool = False, low_range: int = 0) -> Reduced:
    """``a`` (already reduced ``done`` times) box-averaged by a further integer ``factor``."""
    if factor <= 1:
        return Reduced(a, done, width, height, transparent, low_range)
    return Reduced(_box_mean(a, factor).astype(np.float32), done * factor, width, height, transparent, low_range)


def _box_mean(a: np.ndarray, f: int) -> np.ndarray:
    """Means of the f x f blocks of ``a`` (H, W[, C]) as float64; blocks cut by the far edges average the
    pixels they have. Rows of a block are summed first, then columns (two contiguous passes: fast)."""
    h, w = a.shape[:2]
    rest = a.shape[2:]
    acc = np.float64 if a.dtype.kind == "f" else np.uint32
    hp, wp = -(-h // f), -(-w // f)
    rows = np.empty((hp, w, *rest), dtype=acc)                 # sums over each block's rows
    hf = h // f * f
    rows[:h // f] = a[:hf].reshape(h // f, f, w, *rest).sum(axis=1, dtype=acc)
    if hf < h:
        rows[-1] = a[hf:].sum(axis=0, dtype=acc)
    wf = w // f * f
    out = np.empty((hp, wp, *rest), dtype=np.float64)
    out[:, :w // f] = rows[:, :wf].reshape(hp, w // f, f, *rest).sum(axis=2, dtype=acc)
    if wf < w:
        out[:, -1] = rows[:, wf:].sum(axis=1, dtype=acc)
    n_rows = np.full(hp, f, dtype=np.float64)
    n_rows[-1] = h - (hp - 1) * f
    n_cols = np.full(wp, f, dtype=np.float64)
    n_cols[-1] = w - (wp - 1) * f
    count = n_rows[:, None] * n_cols[None, :]
    return out / (count[..., None] if rest else count)


HIGH_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")     # grey modes of more than 8 bits


def pil_uint8(im: Image.Image) -> np.ndarray | None:
    """The 8-bit pixels of ``im`` as _pil_to_float converts them (L or RGB), or None for 16-bit/float modes."""
    if im.mode in ("1", "L", "LA", "La"):
        return np.asarray(im if im.mode == "L" else im.convert("L"))
    if im.mode in HIGH_BIT_MODES:
        return None
    return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))


def _pil_to_float(im: Image.Image, path: Path) -> np.ndarray:
    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N"):
        a = np.asarray(im, dtype=np.float32) / 65535.0
    elif mode == "I":
        a = np.asarray(im, dtype=np.float64)
        hi = 65535.0 if a.max() <= 65535 else float(a.max())
        a = (a / hi).astype(np.float32)
    elif mode == "F":
        a = np.asarray(im, dtype=np.float32)
        _check_finite(a, path)
        lo, hi = float(a.min()), float(a.max())
        a = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
    elif mode in ("1", "L", "LA", "La"):
        return np.asarray(im.convert("L"), dtype=np.float32) / 255.0      # 8-bit: already in [0, 1]
    else:
        return np.asarray(im if mode == "RGB" else im.convert("RGB"), dtype=np.float32) / 255.0
    return np.clip(a, 0.0, 1.0)


# TIFF photometric interpretations tifffile returns as stored values, not colours: palette (3, its indices),
# separated (5, CMYK ink) and YCbCr (6); Pillow converts them as viewers do
_PILLOW_PHOTOMETRICS = (3, 5, 6)


def _read_tiff(path: Path, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> tuple[np.ndarray, bool, int]:
    """The first page in [0, 1], whether its alpha channel (dropped) had a pixel below full opacity, and the bits a
    16-bit page's values fit in where they use the bottom of its range only (:func:`_low_range`, else 0), turned as
    its Orientation tag says (:func:`_oriented`). A page whose stored values are not colours (palette, CMYK, YCbCr)
    raises :class:`DataError` for Pillow to read it."""
    import tifffile

    try:
        with tifffile.TiffFile(path) as tf:
            page = tf.pages[0]
            photometric = getattr(page, "photometric", None)
            pillow = int(photometric if photometric is not None else -1) in _PILLOW_PHOTOMETRICS
            tag = page.tags.get(274)                        # TIFF Orientation: 1 is as stored
            orientation = int(tag.value or 1) if tag is not None else 1
            shape = page.shape
            if len(shape) >= 2:
                rgb_last = len(shape) == 3 and shape[-1] in (1, 2, 3, 4)
                h, w = (shape[0], shape[1]) if rgb_last or len(shape) == 2 else (shape[-2], shape[-1])
                _check_pixels(path, int(w), int(h), max_pixels)
            if pillow:
                raise _unreadable(path, "read by Pillow")
            a = tf.asarray(key=0)
    except TooLarge:
        raise
    except DataError:
        raise
    except Exception as e:
        raise _unreadable(path, f"TIFF decoding failed ({type(e).__name__}: {e})") from None
    a = _oriented(np.asarray(a), orientation)
    return _scale_array(a, path), _array_transparent(a), _low_range(a)


def _oriented(a: np.ndarray, orientation: int) -> np.ndarray:
    """A TIFF page (H, W[, C]) as displayed under its Orientation tag (as Pillow's ``exif_transpose`` turns an
    image: 2 mirrored, 3 turned half a turn, 4 flipped, 5 transposed, 6 turned a quarter clockwise, 7 transversed,
    8 a quarter anticlockwise); 1 or an unknown value: as stored.

    >>> a = np.arange(6).reshape(2, 3)
    >>> _oriented(a, 6).tolist()
    [[3, 0], [4, 1], [5, 2]]
    """
    if orientation == 2:
        a = a[:, ::-1]
    elif orientation == 3:
        a = a[::-1, ::-1]
    elif orientation == 4:
        a = a[::-1]
    elif orientation == 5:
        a = np.swapaxes(a, 0, 1)
    elif orientation == 6:
        a = np.rot90(a, -1)
    elif orientation == 7:
        a = np.swapaxes(a[::-1, ::-1], 0, 1)
    elif orientation == 8:
        a = np.rot90(a, 1)
    return np.ascontiguousarray(a)


def _scale_array(a: np.ndarray, path: Path) -> np.ndarray:
    if a.ndim == 3 and a.shape[-1] in (2, 4):  # gray+alpha or RGBA
        a = a[..., :1] if a.shape[-1] == 2 else a[..., :3]
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[-1] != 3):
        raise _unreadable(path, f"unsupported array shape {a.shape}")
    if a.dtype == np.uint8:
        return a.astype(np.float32) / 255.0
    if a.dtype == np.uint16:
        return a.astype(np.float32) / 65535.0
    if a.dtype == bool:
        return a.astype(np.float32)
    a = a.astype(np.float64)
    _check_finite(a, path)
    lo, hi = float(a.min()), float(a.max())
    return ((a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)).astype(np.float32)


def _check_finite(a: np.ndarray, path: Path) -> None:
    """Refuse an image with NaN or infinite pixel values (a float TIFF's missing data): they would spread through
    every average and basis they enter."""
    bad = int(a.size - np.isfinite(a).sum())
    if bad:
        raise _unreadable(path, f"{bad} of its {a.size} pixel values are not finite numbers (NaN or infinity)")


def _read_dicom(path: Path, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> np.ndarray:
    import pydicom
    from pydicom.pixels import apply_modality_lut, apply_voi_lut

    try:
        ds = pydicom.dcmread(path)
        _check_pixels(path, int(getattr(ds, "Columns", 0) or 0), int(getattr(ds, "Rows", 0) or 0), max_pixels)
        arr = ds.pixel_array
    except TooLarge:
        raise
    except Exception as e:
        msg = str(e)
        fix = "replace or remove the file, or pass skip_bad=True"
        if "handler" in msg.lower() or "decode" in msg.lower() or "plugin" in msg.lower():
            fix = ("this DICOM uses a compressed transfer syntax: pip install pylibjpeg pylibjpeg-libjpeg "
                   "pylibjpeg-openjpeg (or gdcm), or pass skip_bad=True")
        raise DataError(f"cannot read DICOM pixels of {path}: {type(e).__name__}: {msg}", files=[str(path)],
                        fix=fix) from None
    if int(getattr(ds, "SamplesPerPixel", 1)) != 1:
        return _scale_array(np.asarray(arr), path)
    a = apply_modality_lut(arr, ds)
    if "WindowCenter" in ds or "VOILUTSequence" in ds:
        a = apply_voi_lut(a, ds)
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 3:  # multi-frame: first frame
        a = a[0]
    lo, hi = float(a.min()), float(a.max())
    a = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
    if str(getattr(ds, "PhotometricInterpretation", "MONOCHROME2")).upper() == "MONOCHROME1":
        a = 1.0 - a
    return a.astype(np.float32)


def image_to_uint8(image) -> np.ndarray:
    """(C, H, W) float in [-1, 1] (a torch tensor or an array) -> (H, W) or (H, W, 3) uint8, as written to PNG."""
    a = image.detach().cpu().float().numpy() if hasattr(image, "detach") else np.asarray(image, np.float32)
    if a.ndim != 3 or a.shape[0] not in (1, 3):
        raise ValueError(f"images must be (C, H, W) with C = 1 or 3, got shape {a.shape}")
    a = np.clip(np.rint((a + 1.0) * 127.5), 0, 255).astype(np.uint8)
    return a[0] if a.shape[0] == 1 else np.transpose(a, (1, 2, 0))
