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


def test_transparency_is_reported_not_applied(tmp_path: Path):
    """An alpha channel is dropped (stored colour read) and reported: declared by the header (probe) and, when a
    pixel is below full opacity, by the decoded image; an opaque alpha channel is declared but not transparent."""
    rgb = np.random.default_rng(0).integers(0, 256, (20, 24, 3), dtype=np.uint8)
    alpha = np.full((20, 24), 255, np.uint8)
    cases = {}
    Image.fromarray(np.dstack([rgb, alpha])).save(tmp_path / "opaque.png")
    cases["opaque.png"] = (True, False)
    alpha[:3] = 0
    Image.fromarray(np.dstack([rgb, alpha])).save(tmp_path / "rgba.png")
    cases["rgba.png"] = (True, True)
    Image.fromarray(np.dstack([rgb[..., 0], alpha]), mode="LA").save(tmp_path / "la.png")
    cases["la.png"] = (True, True)
    Image.fromarray(rgb[..., 0]).save(tmp_path / "trns.png", transparency=int(rgb[0, 0, 0]))   # a tRNS colour
    cases["trns.png"] = (True, True)
    tifffile.imwrite(tmp_path / "rgba.tif", np.dstack([rgb, alpha]), photometric="rgb", extrasamples=["unassalpha"])
    cases["rgba.tif"] = (True, True)
    Image.fromarray(rgb).save(tmp_path / "plain.png")
    cases["plain.png"] = (False, False)
    for name, (declared, transparent) in cases.items():
        assert imageio.probe(tmp_path / name).alpha is declared, name
        for scale in (1, 2):
            red = imageio.read_reduced(tmp_path / name, scale)
            assert red.transparent is transparent, (name, scale)
    colour = imageio.read(tmp_path / "rgba.png")
    np.testing.assert_allclose(colour, rgb / 255.0, atol=1e-6)   # the stored colour, transparent rows included
    np.testing.assert_allclose(imageio.read(tmp_path / "rgba.tif"), rgb / 255.0, atol=1e-6)


def _colour(tmp_path: Path) -> np.ndarray:
    rgb = np.zeros((48, 64, 3), np.uint8)
    rgb[...] = (200, 80, 30)
    rgb[:8, :8] = (10, 200, 90)                          # a marked corner, to see a rotation
    return rgb


def test_tiffs_whose_values_are_not_colours_are_read_as_colours(tmp_path: Path):
    """Palette, CMYK and rotated TIFFs: their stored values are indices, ink or unrotated pixels; they are read as
    a viewer shows them (as the same image saved as PNG or JPEG is), not as raw values."""
    rgb = _colour(tmp_path)
    ref = np.asarray(Image.fromarray(rgb).convert("P").convert("RGB"), np.float32) / 255
    Image.fromarray(rgb).convert("P").save(tmp_path / "pal.tif")
    assert np.array_equal(imageio.read(tmp_path / "pal.tif"), ref)
    Image.fromarray(rgb).convert("P").save(tmp_path / "pal.png")
    assert np.array_equal(imageio.read(tmp_path / "pal.png"), ref)
    Image.fromarray(rgb).convert("CMYK").save(tmp_path / "cmyk.tif")
    got = imageio.read(tmp_path / "cmyk.tif")
    assert got.shape == rgb.shape and np.abs(got * 255 - rgb).max() <= 1, got[0, 0] * 255
    exif = Image.Exif()
    exif[0x0112] = 6                                     # rotate 90° clockwise to display
    for name in ("rot.tif", "rot.png", "rot.jpg"):
        Image.fromarray(rgb).save(tmp_path / name, exif=exif, **({"quality": 95} if name.endswith("jpg") else {}))
    shapes = {name: imageio.read(tmp_path / name).shape for name in ("rot.tif", "rot.png", "rot.jpg")}
    assert set(shapes.values()) == {(64, 48, 3)}, shapes
    assert imageio.probe(tmp_path / "rot.tif").width == 48
    top_right = imageio.read(tmp_path / "rot.tif")[:8, -8:].mean(axis=(0, 1)) * 255
    assert np.abs(top_right - (10, 200, 90)).max() < 2, top_right     # the marked corner, turned


def test_non_finite_pixels_are_refused_naming_the_file(tmp_path: Path):
    a = np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    a[5:15, 5:15] = np.nan
    tifffile.imwrite(tmp_path / "nan.tif", a)
    b = a.copy()
    b[5:15, 5:15] = 0.5
    b[0, 0] = np.inf
    tifffile.imwrite(tmp_path / "inf.tif", b)
    for name, bad in (("nan.tif", 100), ("inf.tif", 1)):
        with pytest.raises(DataError, match=rf"{name}.*{bad} of its 4096 pixel values are not finite"):
            imageio.read(tmp_path / name)


def test_12_bit_data_in_a_16_bit_file_is_said_not_read_silently_dark(tmp_path: Path):
    """A detector's 12-bit values stored in a 16-bit PNG or TIFF read as value / 65535: at most 1/16 bright. The
    dataset warns once per folder with the fix; full-range 16-bit images read exactly and say nothing."""
    import warnings

    import medanon

    g = np.tile(np.linspace(0, 4095, 64), (64, 1)).astype(np.uint16)
    folder = tmp_path / "x"
    folder.mkdir()
    Image.fromarray(g).save(folder / "a.png")
    tifffile.imwrite(folder / "b.tif", g)
    assert imageio.read_reduced(folder / "a.png", 1).low_range == 12
    assert imageio.read_reduced(folder / "b.tif", 2).low_range == 12
    assert float(imageio.read(folder / "a.png").max()) == pytest.approx(4095 / 65535)
    full = (g.astype(np.uint32) * 16).astype(np.uint16)
    Image.fromarray(full).save(tmp_path / "full.png")
    assert imageio.read_reduced(tmp_path / "full.png", 1).low_range == 0
    (folder / "labels.csv").write_text("file,pid\na.png,1\nb.tif,2\n")
    kw = {"size": 32, "modality": "xray", "layout": "generic", "labels_csv": folder / "labels.csv",
          "image_col": "file", "patient_col": "pid"}
    ds = medanon.open_dataset(folder, **kw)
    # the images load in threads: whichever is first names the folder's warning
    with pytest.warns(imageio.LowBitDepth, match=r"(a\.png|b\.tif) is a 16-bit image whose values all fit in 12 "
                                                 r"bits.*multiply by 16"):
        ds.tensors()
    with warnings.catch_warnings():
        warnings.simplefilter("error", imageio.LowBitDepth)     # once per folder
        medanon.open_dataset(folder, **kw).tensors()


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_tiffs_orientation_tag_turns_grey_16_bit_and_colour_pages_as_pillow_turns_a_photograph(tmp_path, orientation):
    """Every Orientation value, on 8-bit grey, 16-bit grey and RGB pages: read as Pillow's exif_transpose shows the
    same RGB pixels (Pillow itself scrambles rotated grey TIFFs), and probe gives the turned size."""
    from PIL import ImageOps

    rgb = np.random.default_rng(orientation).integers(0, 256, (6, 10, 3), dtype=np.uint8)
    shown = Image.fromarray(rgb)
    shown.getexif()[0x0112] = orientation
    ref = np.asarray(ImageOps.exif_transpose(shown), np.float32) / 255
    for name, arr in (("rgb", rgb), ("grey", rgb[..., 0].copy()), ("g16", rgb[..., 0].astype(np.uint16) * 257)):
        path = tmp_path / f"{name}.tif"
        tifffile.imwrite(path, arr, photometric="rgb" if arr.ndim == 3 else "minisblack",
                         extratags=[(274, 3, 1, orientation, True)])
        want = ref if arr.ndim == 3 else ref[..., 0]
        got = imageio.read(path)
        assert got.shape == want.shape and np.allclose(got, want, atol=1 / 255), (name, got.shape)
        info = imageio.probe(path)
        assert (info.height, info.width) == want.shape[:2], (name, info)


def test_a_signed_16_bit_page_is_not_called_low_range(tmp_path):
    """int16 pages (CT-like values) are scaled to their own range: the 12-bit warning is for unsigned data only."""
    ct = np.linspace(-1000, 3000, 64 * 64).reshape(64, 64).astype(np.int16)
    tifffile.imwrite(tmp_path / "ct.tif", ct)
    red = imageio.read_reduced(tmp_path / "ct.tif", 1)
    assert red.low_range == 0 and float(red.image.max()) == 1.0


def test_low_range_is_found_in_big_endian_16_bit_data_too():
    g = np.tile(np.linspace(0, 4095, 16), (16, 1)).astype(">u2")
    assert imageio._low_range(g) == 12 and imageio._low_range(g.astype("<u2")) == 12
    assert imageio._low_range(g.astype(np.int16)) == 0
