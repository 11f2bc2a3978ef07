"""Exceptions that carry what went wrong, which files, and what the user can do about it."""

from __future__ import annotations

from collections.abc import Sequence


def with_article(word: str) -> str:
    """``word`` after its indefinite article, for messages: ``an identity``, ``a release``."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def a_type(value: object) -> str:
    """``value``'s type with its article, for messages: ``a str``, ``an int``, ``a numpy.ndarray``."""
    t = type(value)
    return with_article(t.__name__ if t.__module__ == "builtins" else f"{t.__module__.split('.')[0]}.{t.__name__}")


class MedanonError(Exception):
    """Base class for errors that are the user's to fix; the CLI prints them without a traceback."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


class ConfigError(MedanonError):
    """A configuration value or command-line argument is invalid."""


class DataError(MedanonError):
    """Input data is missing, unreadable or inconsistent.

    ``files`` lists the offending paths (at most ``shown`` are printed; all are kept).
    """

    def __init__(self, message: str, *, files: Sequence[str] = (), fix: str | None = None,
                 shown: int = 10) -> None:
        self.files = [str(f) for f in files]
        self.shown = shown
        super().__init__(message, fix=fix)

    def __str__(self) -> str:
        lines = [self.message]
        for f in self.files[: self.shown]:
            lines.append(f"  - {f}")
        if len(self.files) > self.shown:
            lines.append(f"  ... and {len(self.files) - self.shown} more")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


class OutputExistsError(MedanonError):
    """The output path exists and the user did not ask to overwrite it."""
