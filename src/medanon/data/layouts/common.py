"""What every layout reader shares: the image extensions, :class:`LayoutWarning` and the fix hints
of the readers' :class:`~medanon.errors.DataError` messages.

Package-internal (see :mod:`medanon.data.layouts`): names without a leading underscore are shared by
the package's modules; only ``IMAGE_EXTENSIONS`` and ``LayoutWarning`` are re-exported as public API.
"""

from __future__ import annotations

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".dcm")


class LayoutWarning(UserWarning):
    """Something the user should know about a scan that is not an error (e.g. no patient ids)."""


GENERIC_OPTIONS = ("layout='generic', labels_csv=FILE.csv, image_col=COLUMN [, label_cols='grade=COLUMN,...'] "
                   "[, patient_col=COLUMN]")
GENERIC_FIX = "describe the folder with " + GENERIC_OPTIONS

LAYOUT_FIX = "check that this is the {layout} labels file, or " + GENERIC_FIX
