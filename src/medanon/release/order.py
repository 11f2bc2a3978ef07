"""Nothing but the random names orders a release: its images are copied in a secret random order (new inodes, new
directory order), and every file and folder gets one timestamp (the release date, midnight UTC) and one mode
(``0644`` files, ``0755`` folders: a release is meant to be shared)."""

from __future__ import annotations

import datetime as _dt
import os
import secrets
import shutil
from pathlib import Path


def _shuffle(folder: Path) -> None:
    """Copy the images in a secret random order (new inodes, new directory order)."""
    images = folder / "images"
    shuffled = folder / ".images.shuffled"
    if shuffled.exists():                                # a close that was interrupted: finish or redo it
        if images.exists():
            shutil.rmtree(shuffled)
        else:
            shuffled.rename(images)
    shuffled.mkdir()
    names = sorted(p.name for p in images.iterdir())
    secrets.SystemRandom().shuffle(names)
    for name in names:
        shutil.copyfile(images / name, shuffled / name)
    shutil.rmtree(images)
    shuffled.rename(images)


def _stamp(folder: Path) -> None:
    """Make every file world-readable and give every file and folder one timestamp, so that nothing but the
    random names orders the release."""
    day = _dt.datetime.now(_dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    for root, dirs, files in os.walk(folder):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
            os.utime(os.path.join(root, f), (day, day))
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
            os.utime(os.path.join(root, d), (day, day))
    os.chmod(folder, 0o755)
    os.utime(folder, (day, day))
