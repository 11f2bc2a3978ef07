"""Reading image files (PNG, JPEG, TIFF, DICOM) into float arrays in [0, 1].

``probe`` reads only the header (size and channel count) so a whole dataset can be checked
quickly; ``read`` decodes pixels. Both raise :class:`DataError` naming the file and the fix.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from medanon.errors import DataError

DICOM_EXTENSIONS = (".dcm", ".dicom")
TIFF_EXTENSIONS = (".tif", ".tiff")

# PIL modes by number of channels medanon will produce from them (alpha is dropped).
_GRAY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}


@dataclass(frozen=True)
class ImageInfo:
    width: int
    height: int
    channels: int                                # 1 or 3 after medanon's conversion rules
    kind: str                                    # png | jpeg | tiff | dicom | ...


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
                     fix="replace or remove the file (or its CSV row), or pass --skip-bad to leave it out")


def probe(path: str | Path) -> ImageInfo:
    """Size and channel count from the header, without decoding pixels."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"image {path} does not exist", files=[str(path)],
                        fix="check the path in the labels CSV, or pass --skip-bad")
    if _is_dicom(path):
        import pydicom

        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True)
            rows, cols = int(ds.Rows), int(ds.Columns)
            spp = int(getattr(ds, "SamplesPerPixel", 1))
        except Exception as e:  # pydicom raises many types for corrupt files
            raise _unreadable(path, f"not a readable DICOM file ({type(e).__name__}: {e})") from None
        return ImageInfo(cols, rows, 1 if spp == 1 else 3, "dicom")
    try:
        with Image.open(path) as im:
            w, h = im.size
            mode = im.mode
            fmt = (im.format or path.suffix.lstrip(".")).lower()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise _unreadable(path, f"not a recognised image ({e})") from None
    return ImageInfo(w, h, 1 if mode in _GRAY_MODES else 3, fmt)


def read(path: str | Path) -> np.ndarray:
    """Decode an image to float32 in [0, 1]: (H, W) for one channel, (H, W, 3) for colour."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"image {path} does not exist", files=[str(path)],
                        fix="check the path in the labels CSV, or pass --skip-bad")
    if _is_dicom(path):
        return _read_dicom(path)
    if path.suffix.lower() in TIFF_EXTENSIONS:
        try:
            return _read_tiff(path)
        except DataError:
            pass  # fall back to Pillow, which reads some TIFFs tifffile does not
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                im.load()
                return _pil_to_float(im)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombWarning) as e:
        raise _unreadable(path, f"decoding failed ({type(e).__name__}: {e})") from None


def _pil_to_float(im: Image.Image) -> np.ndarray:
    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N"):
        a = np.asarray(im, dtype=np.float32) / 65535.0
    elif mode == "I":
        a = np.asarray(im, dtype=np.float64)
        hi = 65535.0 if a.max() <= 65535 else float(a.max())
        a = (a / hi).astype(np.float32)
    elif mode == "F":
        a = np.asarray(im, dtype=np.float32)
        lo, hi = float(a.min()), float(a.max())
        a = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
    elif mode in ("1", "L", "LA"):
        a = np.asarray(im.convert("L"), dtype=np.float32) / 255.0
    else:
        a = np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0
    return np.clip(a, 0.0, 1.0)


def _read_tiff(path: Path) -> np.ndarray:
    import tifffile

    try:
        a = tifffile.imread(path, key=0)
    except Exception as e:
        raise _unreadable(path, f"TIFF decoding failed ({type(e).__name__}: {e})") from None
    return _scale_array(np.asarray(a), path)


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
    lo, hi = float(np.nanmin(a)), float(np.nanmax(a))
    return ((a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)).astype(np.float32)


def _read_dicom(path: Path) -> np.ndarray:
    import pydicom
    from pydicom.pixels import apply_modality_lut, apply_voi_lut

    try:
        ds = pydicom.dcmread(path)
        arr = ds.pixel_array
    except Exception as e:
        msg = str(e)
        fix = "replace or remove the file, or pass --skip-bad"
        if "handler" in msg.lower() or "decode" in msg.lower() or "plugin" in msg.lower():
            fix = ("this DICOM uses a compressed transfer syntax: pip install pylibjpeg pylibjpeg-libjpeg "
                   "pylibjpeg-openjpeg (or gdcm), or pass --skip-bad")
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
