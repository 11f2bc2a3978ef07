"""The library's words for what a user sets (parameter names: ``skip_bad=True``, ``max_pixels``, ``resume=True``)
and the flags that set the same things on the command line, for the commands of the data, phantom, generate and
train families.

Library messages name parameters (docs/design.md §3); a command that shows one to its user names its own flags
instead. :func:`speaks_flags` does it for every :class:`~medanon.errors.MedanonError` a command raises (the
dataset-reading commands get :data:`DATA_FLAGS` through ``layout_options``), and
:func:`medanon.cli.library.translate` (whose wording rules these are) for a warning or a line a command prints.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Mapping

from medanon.cli.library import translate
from medanon.data.layouts.common import GENERIC_OPTIONS
from medanon.errors import MedanonError

# medanon.open_dataset's parameters, and the words every command shares (the root group's --device, --overwrite).
DATA_FLAGS = {GENERIC_OPTIONS: "--layout generic --labels FILE.csv --image-col COLUMN [--label-cols grade=COLUMN,...] "
                               "[--patient-col COLUMN]",
              "skip_bad=True": "--skip-bad", "allow_outside=True": "--allow-outside",
              "raise max_pixels": "pass a larger --max-pixels", "max_pixels=": "--max-pixels ",
              "layout='generic'": "--layout generic", "layout='auto'": "--layout auto", "layout=": "--layout ",
              "labels_csv and image_col describe": "--labels and --image-col describe",
              "drop labels_csv, image_col and label_cols": "drop --labels, --image-col and --label-cols",
              "labels_csv=": "--labels ", "image_col=": "--image-col ", "label_cols=": "--label-cols ",
              "patient_col=": "--patient-col ", "images_dir=": "--images ",
              "modality='fundus'": "--modality fundus", "channels=": "--channels ", "size=": "--size ",
              "xray_views='frontal'": "--xray-views frontal", "xray_views='PA,AP'": "--xray-views PA,AP",
              "xray_views=''": "--xray-views ''", "xray_views=": "--xray-views ",
              "device='cpu' (or 'auto')": "--device cpu (or auto)", "device=": "--device ",
              "overwrite=True": "--overwrite"}
# medanon.data.splits.split_patients's parameters (``medanon data split``).
SPLIT_FLAGS = {"val=": "--val ", "test=": "--test ", "stratify=": "--stratify "}
# The training loops' (medanon.train): a run folder is resumed or another one chosen.
TRAIN_FLAGS = {"resume=True": "--resume", "retune=True": "--retune", "another out folder": "another --out",
               "another out file": "another --out",
               "only steps may change": "only --steps may change", "accumulation=": "--accum "}


def reworded(e: MedanonError, flags: Mapping[str, str]) -> MedanonError:
    """``e`` (same class, same files) with the library's parameter words in ``flags``' words."""
    out = copy.copy(e)
    out.message = translate(e.message, flags)
    out.fix = translate(e.fix, flags) if e.fix else e.fix
    out.args = (str(out),)
    return out


class _SpeaksFlags(logging.Filter):
    """A log handler's filter: medanon's log records in a command's flags (the library logs ``size=64``, the
    command's user types ``--size 64``)."""

    def __init__(self, flags: Mapping[str, str]):
        super().__init__()
        self.flags = flags

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("medanon"):
            try:
                record.msg, record.args = translate(record.getMessage(), self.flags), None
            except Exception:                    # a malformed log call: logging reports it, as without the filter
                pass
        return True


def speaks_flags(flags: Mapping[str, str]):
    """A command decorator: the MedanonErrors it raises, and medanon's log lines while it runs, name its flags
    where the library named parameters."""
    def decorate(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            handlers = list(logging.getLogger().handlers)
            speak = _SpeaksFlags(flags)
            for h in handlers:
                h.addFilter(speak)
            try:
                return f(*args, **kwargs)
            except MedanonError as e:
                raise reworded(e, flags) from e
            finally:
                for h in handlers:
                    h.removeFilter(speak)
        return wrapper
    return decorate
