"""Typed configuration: dataclasses that load from YAML and take ``key.sub=value`` overrides.

Each command builds its config as: dataclass defaults <- YAML file (``--config``) <- overrides
(``--set data.size=128``) <- explicit command-line options. Values are converted to the field's
declared type and validated, and the final config is written to the run directory.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from medanon.errors import ConfigError, a_type

T = TypeVar("T")

MIN_SIZE, MAX_SIZE = 16, 1024


@dataclass
class DataConfig:
    layout: str = "auto"                        # auto or a name of medanon.data.layouts.LAYOUTS
    size: int = 64                              # output side in pixels (power of two, 16..1024)
    channels: int = 0                           # 0 = by modality (fundus 3, X-ray 1), else 1 or 3
    crop: str = "auto"                          # auto | fov | center | pad | none (auto: fov fundus, center X-ray)
    modality: str = "auto"                      # auto | fundus | xray
    skip_bad: bool = False                      # skip unreadable/missing/unlabelled files instead of failing
    xray_views: str = ""                        # chest X-ray views: "" every image, "frontal", or e.g. "PA,AP"

    def validate(self) -> None:
        if self.size < MIN_SIZE or self.size > MAX_SIZE or self.size & (self.size - 1):
            raise ConfigError(
                f"size={self.size} is not possible: the generative models need a power of two "
                f"between {MIN_SIZE} and {MAX_SIZE}",
                fix=f"use a power of two from {MIN_SIZE} to {MAX_SIZE}, e.g. size=64 on a CPU, 256 or 512 "
                    "on a GPU")
        if self.channels not in (0, 1, 3):
            raise ConfigError(f"channels={self.channels} must be 0 (by modality), 1 or 3",
                              fix="channels=1 (grey), 3 (colour), or leave it out for the modality's own")
        if self.crop not in ("auto", "fov", "center", "pad", "none"):
            raise ConfigError(f"crop={self.crop!r} must be one of auto, fov, center, pad, none",
                              fix="e.g. crop='auto' (the field of view for fundus, centred for X-rays)")
        if self.modality not in ("auto", "fundus", "xray"):
            raise ConfigError(f"modality={self.modality!r} must be auto, fundus or xray",
                              fix="modality='fundus', 'xray', or leave it out to read it from the data")
        from medanon.data.views import parse_views

        parse_views(self.xray_views)


@dataclass
class SplitConfig:
    val: float = 0.15                           # fraction of patients in validation
    test: float = 0.15                          # fraction of patients in test
    stratify: str = "grade"                     # label to stratify by ("" for none)
    seed: int = 0

    def validate(self) -> None:
        if not (0 <= self.val < 1 and 0 <= self.test < 1 and self.val + self.test < 1):
            raise ConfigError(f"split fractions val={self.val}, test={self.test} must be >= 0 and sum below 1",
                              fix="e.g. val=0.15, test=0.15")


@dataclass
class PhantomConfig:
    modality: str = "fundus"                    # fundus | xray
    patients: int = 200                         # number of patients
    per_patient: int = 4                        # acquisitions per patient
    size: int = 64                              # image side in pixels
    seed: int = 0
    workers: int = 0                            # processes; 0 = number of CPU cores
    grade_weights: tuple[float, ...] = (0.49, 0.10, 0.27, 0.06, 0.08)
    pneumonia_rate: float = 0.3
    marker_rate: float = 0.05
    situs_inversus_rate: float = 0.03
    both_eyes: float = 0.0                      # fundus: share of patients photographed in both eyes (EyePACS: 1)

    def validate(self) -> None:
        if self.modality not in ("fundus", "xray"):
            raise ConfigError(f"phantom modality {self.modality!r} must be fundus or xray",
                              fix="modality='fundus' or modality='xray'")
        if self.patients < 1 or self.per_patient < 1:
            raise ConfigError(f"patients and per_patient must be at least 1 (they are {self.patients} and "
                              f"{self.per_patient})", fix="give each a whole number of 1 or more")
        if self.size < 16 or self.size > 1024:
            raise ConfigError(f"size={self.size} is not possible for phantoms", fix="use 16..1024, e.g. size=64")
        if len(self.grade_weights) != 5 or min(self.grade_weights) < 0 or sum(self.grade_weights) <= 0:
            raise ConfigError("grade_weights must be five non-negative numbers with a positive sum",
                              fix="e.g. grade_weights=(0.5, 0.15, 0.2, 0.1, 0.05), one per ICDR grade 0-4")
        for name in ("pneumonia_rate", "marker_rate", "situs_inversus_rate", "both_eyes"):
            v = getattr(self, name)
            if not 0 <= v <= 1:
                raise ConfigError(f"{name}={v} must be a probability in [0, 1]", fix=f"e.g. {name}=0.5")
        if self.both_eyes and self.modality != "fundus":
            raise ConfigError(f"both_eyes={self.both_eyes} is for fundus phantoms; an X-ray patient has one chest",
                              fix="leave both_eyes at 0 for modality='xray'")


@dataclass
class RunConfig:
    device: str = "auto"                        # auto | cpu | cuda | cuda:N
    seed: int = 0
    log_level: str = "info"
    data: DataConfig = field(default_factory=DataConfig)
    split: SplitConfig = field(default_factory=SplitConfig)


# ---------------------------------------------------------------------------------------------
# generic machinery


def _convert(value: Any, tp: Any, where: str) -> Any:
    """Convert ``value`` (from YAML or a ``--set`` string) to the annotated type ``tp``."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return from_dict(tp, value, where=where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        last: Exception | None = None
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(value, a, where)
            except ConfigError as e:
                last = e
        raise last or ConfigError(f"{where}: cannot convert {value!r}")
    if origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, str):
            value = [v for v in value.replace("(", "").replace(")", "").split(",") if v.strip()]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]                              # one value of a list field (``--set p=0.3``)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}",
                              fix=f"give {where} one value or a list of them in brackets")
        inner = args[0] if args else str
        return tuple(_convert(v, inner, where) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: {value!r} is not a boolean", fix=f"give {where} true or false")
    if tp in (int, float):
        fix = f"give {where} {'a whole number, e.g. 5' if tp is int else 'a number, e.g. 0.5'}"
        if isinstance(value, bool):
            raise ConfigError(f"{where}: {value!r} is not a number", fix=fix)
        try:
            out = tp(value) if tp is float else int(str(value).strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{where}: {value!r} is not {'an integer' if tp is int else 'a number'}",
                              fix=fix) from None
        if tp is int and isinstance(value, float) and value != out:
            raise ConfigError(f"{where}: {value!r} is not an integer", fix=fix)
        return out
    if tp is str:
        return str(value)
    if tp is Path:
        return Path(value)
    return value


def from_dict(cls: type[T], data: dict[str, Any], *, where: str = "config") -> T:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys with a helpful message."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        import difflib

        close = {k: m[0] for k in sorted(unknown) if (m := difflib.get_close_matches(str(k), names, n=1))}
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; known keys are {sorted(names)}",
                          fix="remove or correct the key(s)" + (": " + ", ".join(f"{k} -> {v}?" for k, v in
                                                                                 close.items()) if close else ""))
    kwargs = {k: _convert(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    return cls(**kwargs)


def to_dict(obj: Any) -> Any:
    """Dataclass -> plain YAML-safe structures (tuples become lists, paths strings)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (``k: 3`` then ``k: 4`` silently meant 4)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_UniqueKeyLoader) or {}      # a SafeLoader: no code is built
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist", fix="check the path given as the config") from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as e:
        raise ConfigError(f"config file {path} is not a readable text file ({type(e).__name__})",
                          fix="give a YAML file, e.g. one of configs/ in the source checkout") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}", fix="correct the line it names") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level", fix="e.g. `steps: 100`")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply ``a.b=value`` strings to a nested dict (values parsed as YAML scalars)."""
    out = dict(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.sub=value",
                              fix="write the setting's name, '=' and its value (a dotted name for a nested setting)")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        for p in parts[:-1]:
            child = node.get(p)
            child = dict(child) if isinstance(child, dict) else {}
            node[p] = child
            node = child
        node[parts[-1]] = value
    return out


def build(cls: type[T], *, path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
          **explicit: Any) -> T:
    """defaults <- YAML file <- ``key=value`` overrides <- explicit keyword values (None = not given)."""
    data: dict[str, Any] = load_yaml(path) if path else {}
    data = apply_overrides(data, overrides)
    overridden = {item.split("=", 1)[0].strip() for item in overrides}
    twice = sorted(k.replace("__", ".") for k, v in explicit.items()
                   if v is not None and k.replace("__", ".") in overridden)
    if twice:                                    # the explicit value would win and the override go unchecked
        raise ConfigError(f"{', '.join(twice)} set twice: by an override (key=value) and by its own argument",
                          fix="give each setting once")
    for k, v in explicit.items():
        if v is not None:
            _set_path(data, k.split("__"), v)
    cfg = from_dict(cls, data)
    validate(cfg)
    return cfg


def _set_path(data: dict[str, Any], parts: list[str], value: Any) -> None:
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def validate(cfg: Any) -> None:
    """Call ``validate()`` on a dataclass and every nested dataclass that has one, after checking that every field
    declared ``bool`` holds True or False and every ``int`` field an integer: ``overwrite="no"`` or
    ``per_element="False"`` must not read as true, nor ``seed="x"`` reach a manifest."""
    if not dataclasses.is_dataclass(cfg):
        return
    for f in dataclasses.fields(cfg):
        check_type(f.name, getattr(cfg, f.name), str(f.type))
        validate(getattr(cfg, f.name))
    if hasattr(cfg, "validate"):
        cfg.validate()


def check_type(name: str, value: Any, declared: str) -> None:
    """Refuse ``value`` for a setting declared ``bool`` unless it is one, for one declared ``int`` unless it is
    an integer (not a bool), for one declared ``float`` unless it is a real number: the types a string or a float
    would otherwise pass as silently (or fail on with a message naming no setting); and NaN anywhere."""
    import math
    import numbers

    import numpy as np

    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) and math.isnan(value):
        raise ConfigError(f"{name}=nan is not a number: no setting takes it (it would pass every range check and "
                          "make the result NaN)", fix=f"pass {name}= a number")
    if declared == "bool" and not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name}={value!r} is {a_type(value)}; {name} takes True or False",
                          fix=f"pass {name}=True or {name}=False")
    if declared == "int" and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
        raise ConfigError(f"{name}={value!r} is {a_type(value)}; {name} takes an integer",
                          fix=f"pass {name}= as an integer"
                              + (f", e.g. {name}={int(value)}" if isinstance(value, str) and value.strip().isdigit()
                                 else ""))
    if declared in ("float", "float | None") and value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Real)):
        hint = "" if not isinstance(value, str) or not _is_float(value) else \
            f", e.g. {name}={int(value) if value.strip().isdigit() else float(value)}"
        raise ConfigError(f"{name}={value!r} is {a_type(value)}; {name} takes a number",
                          fix=f"pass {name}= as a number{hint}")
    if declared in ("int", "int | None") and value is not None:
        check_seed(name, value)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_seed(name: str, value: Any) -> None:
    """A setting named ``seed`` or ``*_seed`` is a non-negative integer: numpy's generators refuse a negative one
    with a message that names no setting, and only some code paths reach them."""
    import numbers

    if (name == "seed" or name.endswith("_seed")) and isinstance(value, numbers.Integral) and value < 0:
        raise ConfigError(f"{name}={value} is negative; seeds are integers >= 0", fix=f"pass e.g. {name}=0")


def dump_yaml(cfg: Any) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def differences(was: dict[str, Any], now: dict[str, Any], prefix: str = "") -> str:
    """What differs between two settings dicts, for messages.

    >>> differences({"params": {"k": 5}, "labels": ["grade"]}, {"params": {"k": 10}, "labels": ["grade"]})
    'params.k 5 -> 10'
    """
    out = []
    for key in sorted({*was, *now}):
        a, b = was.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            inner = differences(a, b, f"{prefix}{key}.")
            out += [inner] if inner else []
        elif a != b:
            out.append(f"{prefix}{key} {a!r} -> {b!r}")
    return "; ".join(out)
