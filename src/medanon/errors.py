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


class ArgumentTypeError(ConfigError, TypeError):
    """An argument of the wrong type (a number where a path goes): a :class:`ConfigError` with its fix, and a
    ``TypeError`` for code that catches those."""


def short_path(text, keep: int = 60) -> str:
    """``text`` quoted for a message, its middle cut when it is longer than ``keep`` characters."""
    text = str(text)
    return repr(text if len(text) <= keep else f"{text[:keep // 2]}...{text[-keep // 2:]}")


def path_problem(path) -> str | None:
    """What makes ``path`` a name no file system takes (a NUL character, a name or path longer than the file
    system allows), or None. Python would raise its own ValueError or OSError for these, naming no argument."""
    import os
    from pathlib import Path

    text = os.fspath(path)
    if "\x00" in (text if isinstance(text, str) else text.decode(errors="replace")):
        return "holds a NUL character, which no file name can"
    parent = Path(text).absolute().parent
    while parent != parent.parent:
        try:
            if parent.is_dir():
                break
        except OSError:                                      # a name too long to look up: go up
            pass
        parent = parent.parent
    limits = {"PC_NAME_MAX": 255, "PC_PATH_MAX": 4096}     # Linux's, where the file system gives no answer
    for key in limits:
        try:
            limits[key] = os.pathconf(parent, key)
        except (OSError, ValueError, AttributeError):       # no pathconf (Windows) or no answer
            pass
    long = next((part for part in Path(text).parts if len(os.fsencode(part)) > limits["PC_NAME_MAX"]), None)
    if long is not None:
        return (f"has a name of {len(os.fsencode(long))} bytes; the file system takes names of at most "
                f"{limits['PC_NAME_MAX']}")
    whole = len(os.fsencode(str(Path(text).absolute())))
    if whole >= limits["PC_PATH_MAX"]:
        return f"is {whole} bytes long; the system takes paths shorter than {limits['PC_PATH_MAX']}"
    return None


def check_path_arg(name: str, value, *, optional: bool = True, what: str = "a file path") -> None:
    """``value`` is a path (``str`` or ``os.PathLike``), or None where ``optional``; else :class:`ArgumentTypeError`
    naming the argument (pathlib's own message names none). A path starting with ``~`` is refused
    (:class:`ConfigError`): Python leaves it as it is, so it would name a folder called ``~``."""
    import os

    if value is None and optional:
        return
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        problem = path_problem(text)
        if problem:
            raise ConfigError(f"{name}={short_path(text)} {problem}",
                              fix=f"pass {name}= a path without it" if "NUL" in problem else
                              f"pass {name}= a shorter path")
        if isinstance(text, str) and text.startswith("~") and os.path.expanduser(text) != text:
            raise ConfigError(f"{name}={text!r} starts with '~', which Python does not expand: it would name a "
                              "folder called '~' in the working directory, not your home folder",
                              fix=f"pass {name}=os.path.expanduser({text!r}) (or Path({text!r}).expanduser())")
        return
    raise ArgumentTypeError(f"{name}={value!r} is {a_type(value)}; {name} takes {what} (str or os.PathLike)",
                            fix=f"pass {name}= as a path, e.g. {name}='private/release.json'"
                            if what == "a file path" else f"pass {name}= as a path")


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


def user_stacklevel() -> int:
    """The ``stacklevel`` for :func:`warnings.warn` that names the first caller outside medanon (the user's line in a
    script or notebook; for the command line, the library call it made), wherever in the library the warning is
    raised. Call it as the argument: ``warnings.warn(message, Category, stacklevel=user_stacklevel())``."""
    import inspect
    import os

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    cli = package + "cli" + os.sep
    frame = inspect.currentframe()
    level = 0
    try:
        while frame is not None:
            name = os.path.abspath(frame.f_code.co_filename)
            if not name.startswith(package) or name.startswith(cli):
                break
            frame, level = frame.f_back, level + 1
    finally:
        del frame
    return max(level, 1)
