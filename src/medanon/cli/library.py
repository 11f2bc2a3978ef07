"""What every ``medanon anonymize`` command shares around its one library call.

A command parses its options, builds the method's config (``--config FILE`` and ``--set key=value``
over the config dataclass's defaults, explicit options last), calls one library function and
prints. :func:`library_call` prints the library's warnings loudly (``WARNING: ...``) after the call,
then hands them on to Python's warning machinery (so ``-W error::medanon.anonymize.privacy.PrivacyWarning``
turns them into errors, and tests can catch them), and translates the parameter names in the
library's warnings and errors (any :class:`~medanon.errors.MedanonError`) into the command's flag
names (:func:`translate`): the library says ``k=``, the command ``--k``. :func:`install_warning_display`
(the ``medanon`` entry point) shows any other warning in the same form, and each one once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import click

from medanon.errors import MedanonError

RELEASE_FLAGS = {"release_labels=": "--release-labels ", "overwrite=True": "--overwrite", "mapping=": "--mapping ",
                 "out=": "--out "}                 # what every anonymize command takes alike (after its own map)


def default(cls, dotted: str) -> str:
    """``"  [default: X]"`` for the field ``dotted`` (``a.b``) of config dataclass ``cls`` (help texts)."""
    obj = cls()
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return f"  [default: {obj:g}]" if isinstance(obj, float) else f"  [default: {obj}]"


def config_options(what: str, example: str = "k=10"):
    """``--config FILE`` and ``--set KEY=VALUE`` for a command whose settings are the dataclass ``what``."""
    def deco(f):
        f = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                         help=f"Override a {what} field, e.g. --set {example} (repeatable; nested: a.b=value).")(f)
        return click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                            default=None, help=f"YAML file with {what} fields (options given explicitly win).")(f)
    return deco


def config_fields(cls) -> list[str]:
    """The dotted field names of a (nested) config dataclass, e.g. ``salsa.style.grid``."""
    out = []
    for f in dataclasses.fields(cls):
        sub = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out += [f"{f.name}.{n}" for n in config_fields(type(sub))] if dataclasses.is_dataclass(sub) else [f.name]
    return out


def translate(message: str, flags: Mapping[str, str]) -> str:
    """``message`` with the library's wording (``"stratify="``, ``"clip=False"``) replaced by the command's
    (``"--stratify "``, ``"--no-clip"``); a key matches only at the start of a word, and never right after
    ``--set `` (a config assignment: translated once already, a command's words nest). A parameter named
    without a value (``"lower k= or"``, ``"(utility=)"``) becomes the bare flag (``"lower --k or"``).

        >>> translate("k=3 is too large: lower k= or add data (drop_remainder=True)",
        ...           {"k=": "--k ", "drop_remainder=True": "--drop-remainder"})
        '--k 3 is too large: lower --k or add data (--drop-remainder)'
        >>> translate("pass --set channels=1", {"channels=": "--channels "})
        'pass --set channels=1'
    """
    for said, flag in flags.items():
        key = rf"(?<![\w.-])(?<!--set ){re.escape(said)}"
        if said.endswith("="):                  # no value after it: the flag alone
            message = re.sub(key + r"(?=[\s,;:)\]]|$)", flag.rstrip().replace("\\", "\\\\"), message)
        message = re.sub(key, flag.replace("\\", "\\\\"), message)
    return message


_SHOWN: set[str] = set()                        # warnings already printed by library_call


def show_warning(message, category, *, red: bool = False, flags: Mapping[str, str] | None = None) -> None:
    """Print one warning to stderr as ``WARNING: ...`` (red for privacy warnings), in ``flags``' words."""
    from medanon.anonymize.privacy import PrivacyWarning

    loud = red or (isinstance(category, type) and issubclass(category, PrivacyWarning))
    text = translate(str(message), flags) if flags else str(message)
    click.secho(f"WARNING: {text}", fg="red" if loud else "yellow", err=True)
    _SHOWN.add(str(message))


def install_warning_display() -> None:
    """Show warnings as ``WARNING: ...`` lines, skipping those :func:`library_call` already printed."""
    def display(message, category, filename, lineno, file=None, line=None):
        if str(message) not in _SHOWN:
            show_warning(message, category)

    warnings.showwarning = display


@contextlib.contextmanager
def library_call(flags: Mapping[str, str] | None = None, *, red: bool = False) -> Iterator[list]:
    """Run a library call: its warnings are printed after it and passed on; its errors speak in ``flags``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield caught
        except MedanonError as e:               # ConfigError, DataError, ...: reworded in place, same class
            if flags:
                e.message = translate(e.message, flags)
                e.fix = translate(e.fix, flags) if e.fix else None
                e.args = (str(e),)
            raise
    once = list({(w.category, str(w.message)): w for w in caught}.values())   # a check run twice warns once
    for w in once:
        show_warning(w.message, w.category, red=red, flags=flags)
    for w in once:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
