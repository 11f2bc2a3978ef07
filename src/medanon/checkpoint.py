"""Checkpoints: ``state_dict``s + plain config + version, loadable with ``torch.load(weights_only=True)``.

No pickled code or classes ever go into a checkpoint (docs/design.md §3): only tensors, numbers,
strings, lists and dicts. A checkpoint names its ``kind`` (which model family wrote it), so
loading the wrong file gives a clear error instead of a shape mismatch deep inside a model.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, NoReturn

import torch

from medanon import __version__
from medanon.errors import ConfigError
from medanon.fsutil import atomic_write_bytes, sha256_of

FORMAT = "medanon-checkpoint"
VERSION = 1


def weights_sha256(network: Any) -> str | None:
    """One sha256 over the parameters and buffers (names, dtypes, shapes and bytes) of ``network``: an ``nn.Module``,
    or a codec holding its networks as ``generator``, ``encoder`` or ``flow``. What a release records of a network
    given in memory, which has no checkpoint file to checksum; None when nothing holds weights."""
    import hashlib

    modules = [network] if isinstance(network, torch.nn.Module) else \
        [m for a in ("generator", "encoder", "flow") if isinstance(m := getattr(network, a, None), torch.nn.Module)]
    if not modules:
        return None
    h = hashlib.sha256()
    for i, module in enumerate(modules):
        for name, t in module.state_dict().items():
            t = t.detach().cpu().contiguous().reshape(-1)
            h.update(f"{i}:{name}:{t.dtype}:{t.numel()}\n".encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_checkpoint(path: str | Path, *, kind: str, config: dict[str, Any], state: dict[str, Any],
                    step: int = 0, extra: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint atomically.

    ``state`` maps names to ``state_dict``s (models, optimizers, EMA copies) or tensors such as
    RNG states; ``config`` is the plain-dict model/training config needed to rebuild the models;
    ``extra`` holds small plain values (losses, ADA p, timings).
    """
    from medanon.runtime import source_sha256

    blob = {"format": FORMAT, "version": VERSION, "kind": kind, "medanon_version": __version__,
            "medanon_source_sha256": source_sha256(), "config": config, "state": state, "step": int(step),
            "extra": dict(extra or {})}
    buf = io.BytesIO()
    torch.save(blob, buf)
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _check_readable(path: Path) -> None:
    """An empty, unreadable or truncated file, or one that is not a torch archive at all, said as such (torch's own
    errors for these read as a corrupt pickle)."""
    import zipfile

    try:
        size = path.stat().st_size
        with open(path, "rb"):
            pass
    except PermissionError:
        raise ConfigError(f"checkpoint {path} cannot be read: permission denied",
                          fix="make it readable for this user") from None
    if size == 0:
        raise ConfigError(f"checkpoint {path} is empty (0 bytes)", fix="copy or export the checkpoint again")
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"{path} is not a checkpoint file: a .pt written by torch.save is a zip archive and this "
                          "file is not one (truncated by a copy, or another kind of file)",
                          fix="copy or export the checkpoint again; pass a file written by `medanon train`")


def load_checkpoint(path: str | Path, *, kind: str | tuple[str, ...] | None = None,
                    map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` (safely: ``weights_only=True``). ``path``: a file, or
    the name of a model on medanon's search path without ``.pt`` (``medanon models``: ``"restyle-map-fundus64"``;
    a missing ``x.pt`` is a missing file, never another folder's model of that name)."""
    given, path = str(path), Path(path)
    if not path.exists() and path.parent == Path(".") and not path.suffix and not given.startswith(("./", ".\\")):
        from medanon.models_registry import find_model

        path = find_model(path)                 # a model's name; not found, the error names the folders searched
    if not path.is_file():
        raise ConfigError(f"checkpoint {path} does not exist",
                          fix="pass the path of a .pt file written by `medanon train` (see checkpoints/README.md)")
    _check_readable(path)
    with open(path, "rb") as f:                 # one file, hashed and loaded: a replacement renamed over the path
        digest = sha256_of(f)                   # meanwhile (a training run's export) cannot give the weights of one
        f.seek(0)                               # file and the digest of another
        try:
            blob = torch.load(f, map_location=map_location, weights_only=True)
        except Exception as e:  # torch raises several types for corrupt or unsafe files
            _refuse_unloadable(path, e)
    _check_blob(path, blob, kind)
    blob["sha256"] = digest
    blob["path"] = str(path)
    from medanon.outputs import note_checkpoint_read

    note_checkpoint_read(path, blob["sha256"])          # no output of this process may replace it (rule 1)
    return blob


def _refuse_unloadable(path: Path, e: Exception) -> NoReturn:
    """The :class:`ConfigError` for a checkpoint ``torch.load`` refused (``e``): unsafe, not torch's, or damaged."""
    import pickle

    if isinstance(e, pickle.UnpicklingError) or "weights_only" in str(e):
        # torch's own message advises weights_only=False: medanon never does that, and says why.
        raise ConfigError(f"checkpoint {path} cannot be loaded safely: it holds pickled Python objects, not only "
                          "tensors and numbers: "
                          "loading it would run whatever code the file contains (arbitrary code execution), "
                          "so medanon refuses it",
                          fix="use a checkpoint written by `medanon train` (state_dicts and plain config "
                              "only); a model from elsewhere must be converted to a state_dict by someone "
                              "who trusts its source") from None
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, RuntimeError) and ("inline_container" in first or "archive" in first):
        raise ConfigError(f"{path} is a zip archive but not one written by torch.save ({first.split('. ')[-1]})",
                          fix="copy or export the checkpoint again; pass a file written by `medanon train`") \
            from None
    raise ConfigError(f"checkpoint {path} cannot be read: {type(e).__name__}: {first}",
                      fix="copy or export the checkpoint again; pass a file written by `medanon train`") from None


def _check_blob(path: Path, blob: Any, kind: str | tuple[str, ...] | None) -> None:
    """A loaded ``blob`` is a medanon checkpoint of a version this medanon reads, and of ``kind`` where given."""
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a medanon checkpoint", fix="pass a file written by `medanon train`")
    version = blob.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
        raise ConfigError(f"checkpoint {path} has format version {version!r}; this medanon "
                          f"({__version__}) reads version {VERSION}",
                          fix="use the medanon version that wrote it, or a checkpoint written by this one")
    kinds = (kind,) if isinstance(kind, str) else kind
    if kinds and blob.get("kind") not in kinds:
        raise ConfigError(f"checkpoint {path} holds a model of kind {blob.get('kind')!r}, expected "
                          f"{' or '.join(kinds)}",
                          fix=f"pass a checkpoint of kind {' or '.join(kinds)} where {path} was given "
                              "(`medanon models` lists the checkpoints with their kinds)")


# The networks an exported model of each kind holds (what the loaders read): a file without them is damaged.
EXPORTED_STATE = {"stylegan2": ("G_ema",), "restyle-encoder": ("G", "E"), "cotrained-autoencoder": ("G", "E"),
                  "glow": ("model",), "identity": ("net",), "classifier": ("model",), "siamese": ("net",),
                  "vessel-segmenter": ("model",)}


def missing_state(blob: dict[str, Any]) -> list[str]:
    """The networks of :data:`EXPORTED_STATE` that a loaded checkpoint of a known kind lacks."""
    state = blob.get("state")
    return [k for k in EXPORTED_STATE.get(str(blob.get("kind")), ()) if not isinstance(state, dict) or k not in state]


def state_entry(blob: dict[str, Any], key: str) -> Any:
    """``blob["state"][key]`` of a loaded checkpoint, or a ConfigError naming the file and what it lacks (a
    damaged, partial or hand-edited export) instead of a KeyError."""
    state = blob.get("state")
    if not isinstance(state, dict) or key not in state:
        raise ConfigError(f"checkpoint {blob.get('path', '')} holds no {key!r} weights (a {blob.get('kind')!r} "
                          "checkpoint has them): it is damaged or incomplete",
                          fix="copy or export the checkpoint again, or retrain it with `medanon train`")
    return state[key]


def load_weights(module: torch.nn.Module, state: dict[str, Any], path: str | Path | None) -> torch.nn.Module:
    """``module.load_state_dict(state)`` for the checkpoint at ``path``, with the damage a copy, a disk or a hand edit
    can do said as such: weights that are NaN or infinite, or tensors that do not fit the architecture the
    checkpoint's own config describes (torch's message lists every mismatch). Returns ``module``."""
    name = f"checkpoint {path}" if path else "the checkpoint"
    fix = "copy or export the checkpoint again, or retrain it with `medanon train`"
    bad = [k for k, v in state.items() if torch.is_tensor(v) and v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise ConfigError(f"{name} is damaged: {len(bad)} weight tensor(s) hold NaN or infinity (e.g. {bad[0]})",
                          fix=fix)
    try:
        module.load_state_dict(state)
    except RuntimeError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        mismatches = [ln for ln in lines[1:] if ln.startswith(("size mismatch", "Missing key", "Unexpected key"))]
        first = mismatches[0] if mismatches else (lines[0] if lines else type(e).__name__)
        raise ConfigError(f"{name} does not fit the {type(module).__name__} its config describes "
                          f"({len(mismatches) or 1} problem(s), e.g. {first[:300]})", fix=fix) from None
    return module
