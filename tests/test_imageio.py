from pathlib import Path

import numpy as np
import pytest
import tifffile
from PIL import Image
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

from medanon.data import imageio
from medanon.errors import DataError


def write_dicom(path: Path, arr: np.ndarray, photometric="MONOCHROME2", slope=1.0, intercept=0.0):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.Rows, ds.Columns = arr.shape
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = photometric
    ds.BitsAllocated = ds.BitsStored = 16
    ds.HighBit = 15
    ds.PixelRepresentation = 0
    ds.RescaleSlope, ds.RescaleIntercept = slope, intercept
    ds.PixelData = arr.astype(np.uint16).tobytes()
    ds.save_as(path, enforce_file_format=True)


def test_png_jpeg_tiff_round_trip(tmp_path: Path):
    rgb = (np.random.default_rng(0).random((12, 10, 3)) * 255).astype(np.uint8)
    Image.fromarray(rgb).save(tmp_path / "a.png")
    smooth = np.stack([*np.meshgrid(np.linspace(0, 255, 10), np.linspace(0, 255, 12)), np.full((12, 10), 90.0)],
                      -1).astype(np.uint8)
    Image.fromarray(smooth).save(tmp_path / "a.jpg", quality=95)
    tifffile.imwrite(tmp_path / "a.tif", rgb)
    g16 = (np.arange(120).reshape(12, 10) * 500).astype(np.uint16)
    tifffile.imwrite(tmp_path / "g16.tif", g16)
    assert np.allclose(imageio.read(tmp_path / "a.png"), rgb / 255, atol=1e-6)
    assert np.abs(imageio.read(tmp_path / "a.jpg") - smooth / 255).mean() < 0.03
    assert np.allclose(imageio.read(tmp_path / "a.tif"), rgb / 255, atol=1e-6)
    assert np.allclose(imageio.read(tmp_path / "g16.tif"), g16 / 65535, atol=1e-6)
    info = imageio.probe(tmp_path / "a.png")
    assert (info.width, info.height, info.channels) == (10, 12, 3)
    assert imageio.probe(tmp_path / "g16.tif").channels == 1


def test_dicom_monochrome1_is_inverted(tmp_path: Path):
    arr = np.tile(np.arange(16, dtype=np.uint16) * 100, (8, 1))
    write_dicom(tmp_path / "m2.dcm", arr)
    write_dicom(tmp_path / "m1.dcm", arr, photometric="MONOCHROME1")
    a2, a1 = imageio.read(tmp_path / "m2.dcm"), imageio.read(tmp_path / "m1.dcm")
    assert a2.shape == (8, 16) and a2[0, 0] == 0 and a2[0, -1] == 1
    assert np.allclose(a1, 1 - a2)
    assert imageio.probe(tmp_path / "m2.dcm").kind == "dicom"
    # a DICOM without the .dcm extension is recognised by its magic bytes
    (tmp_path / "noext").write_bytes((tmp_path / "m2.dcm").read_bytes())
    assert np.allclose(imageio.read(tmp_path / "noext"), a2)


def test_corrupt_and_missing_files_name_the_file(tmp_path: Path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image at all")
    with pytest.raises(DataError, match=r"bad\.png") as e:
        imageio.probe(bad)
    assert "skip_bad=True" in str(e.value)
    with pytest.raises(DataError, match=r"bad\.png"):
        imageio.read(bad)
    # a truncated PNG passes the header probe but fails to decode
    rgb = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    good = tmp_path / "t.png"
    Image.fromarray(rgb).save(good)
    data = good.read_bytes()
    good.write_bytes(data[: len(data) // 2])
    imageio.probe(good)
    with pytest.raises(DataError, match=r"t\.png"):
        imageio.read(good)
    with pytest.raises(DataError, match="does not exist"):
        imageio.read(tmp_path / "nope.png")
    dcm = tmp_path / "bad.dcm"
    dcm.write_bytes(b"\0" * 128 + b"DICM" + b"garbage")
    with pytest.raises(DataError, match=r"bad\.dcm"):
        imageio.read(dcm)
