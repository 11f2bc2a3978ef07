"""``medanon.audit`` and ``medanon.evaluate``: check a saved release, and measure releases against the real data.

Both read release folders only (the seam between anonymising and evaluating, docs/design.md), and
call the public entry points :func:`medanon.release.audit.audit_release` and
:func:`medanon.evaluate.harness.evaluate`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from medanon.api._inputs import number
from medanon.api.result import EvaluationResult
from medanon.errors import ConfigError, DataError, MedanonError, a_type, check_path_arg

PATIENTS_WHY = ("its splits, controls and intervals are by patient, and several images may show one "
                "person (if each image really is a different person, patient_ids=range(len(images)) says so)")


def _records(source):
    """Source records from a dataset, a folder (scanned with its detected layout) or a list of records."""
    if source is None:
        return None
    if isinstance(source, (str, Path)):
        from medanon.data.layouts import scan

        return scan(source).records
    import dataclasses

    from medanon.data.records import Record

    records = getattr(source, "records", source)
    if not isinstance(records, (list, tuple)) or not all(isinstance(r, Record) for r in records):
        raise ConfigError(f"source= is {a_type(source)}; the audit takes the source dataset, its folder, or its "
                          "records", fix="pass the dataset the release was made from: a folder, "
                                         "medanon.open_dataset(folder), or for images held in memory "
                                         "medanon.data.as_dataset(images, patient_ids=...)")
    # records of images held in memory have no file: their record id stands in for the file name
    return [r if r.path is not None else dataclasses.replace(r, path=Path(r.record_id)) for r in records]


def audit(release, *, source=None, mapping: str | Path | None = None, k: int | None = None):
    """Check a saved release against its guarantees; returns an :class:`~medanon.release.audit.AuditReport`.

    ``release``: the release folder (or a saved :class:`~medanon.release.release.Release`).
    ``source``: the source dataset (or its folder): its file names, record ids and patient ids are
    searched for in the release. ``mapping``: the private mapping written by ``save(mapping=...)``:
    people per record are recounted from it. ``k``: people per record to require (default: the
    method's own k). ``report.passed`` is True when every check passed; ``report.format()`` lists them.

    Example:
        >>> import medanon
        >>> root = medanon.make_phantom(patients=4)
        >>> ds = medanon.open_dataset(root, size=16)
        >>> out = medanon.anonymize.kpixel(ds, k=2).save(root.parent / "k2", mapping=root.parent / "k2.json",
        ...                                                progress=False)
        >>> report = medanon.audit(out, source=ds, mapping=root.parent / "k2.json")
        >>> report.passed, len(report.checks) >= 5
        (True, True)
    """
    from medanon.errors import check_path_arg

    check_path_arg("mapping", mapping)
    from medanon.release.audit import audit_release

    path = getattr(release, "path", release)
    if path is None:
        raise ConfigError("the release has not been saved", fix="call release.save(path) first, then audit(path)")
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"release= is {a_type(release)}; audit() takes a release folder "
                          "or a saved Release", fix="pass the folder the release was saved to")
    if not Path(path).is_dir():
        raise DataError(f"release {path} is not a folder", files=[str(path)],
                        fix="pass the folder a release was saved to (release.save(path) or `medanon anonymize`)")
    number("k", k, integer=True, allow_none=True)
    if k is not None and k < 1:
        raise ConfigError(f"k={k}: an audit requires at least k people per record, k >= 1",
                          fix="leave k= out for the method's own k, or pass k >= 1")
    if mapping is None and getattr(release, "mapping", None) is not None:
        mapping = release.mapping
    if isinstance(source, (str, Path)):                 # a folder, scanned with its detected layout
        from medanon.data.layouts import scan

        source = scan(source)
    return audit_release(path, k=k, mapping=mapping, source_records=_records(source),
                         source_root=getattr(source, "root", None), source_modality=getattr(source, "modality", None))


def _eval_config(config):
    """``config=`` as an EvalConfig: one as is, a mapping of its fields checked as a config file is."""
    from medanon.config import from_dict, validate
    from medanon.evaluate.config import EvalConfig

    if config is None or isinstance(config, EvalConfig):
        return config
    if not isinstance(config, Mapping):
        raise ConfigError(f"config= is {a_type(config)}; it takes an EvalConfig or a mapping of its fields",
                          fix="pass preset='tiny'|'fast'|'full', or config=medanon.evaluate.config.preset('fast')")
    cfg = from_dict(EvalConfig, dict(config), where="config=")
    validate(cfg)
    return cfg


def _warn_no_mapping(path: Path) -> None:
    import warnings

    from medanon.errors import user_stacklevel
    from medanon.evaluate.inputs import NoMapping

    warnings.warn(f"release {path.name}: no private mapping given (mappings={{{path.name!r}: FILE}}) and none at "
                  f"{path}.mapping.json: membership, linkability, singling out and differencing are not measured for "
                  "it", NoMapping, stacklevel=user_stacklevel())


def _check_paths(splits, mappings) -> None:
    """``splits=`` an existing file; ``mappings=`` a mapping of release name -> file."""
    check_path_arg("splits", splits)
    if splits is not None and not Path(splits).is_file():
        raise ConfigError(f"splits={os.fspath(splits)!r}: no such file", fix="pass the splits CSV the releases were "
                                                                            "made with, or leave splits= out")
    if mappings is None:
        return
    if not isinstance(mappings, Mapping):
        raise ConfigError(f"mappings= is {a_type(mappings)}; it takes release name -> mapping file",
                          fix="pass mappings={'release-name': 'private/release.mapping.json'}")
    for name, path in mappings.items():
        check_path_arg(f"mappings[{name!r}]", path, optional=False)


def evaluate(*, real, releases: Sequence, out: str | Path | None = None, preset: str | None = None, config=None,
             size: int | None = None, splits: str | Path | None = None,
             mappings: Mapping[str, str | Path] | None = None, cache_dir: str | Path | None = None, device=None,
             patient_ids=None, labels=None, modality: str | None = None, value_range=None,
             compare: Sequence[tuple[str, str]] | None = None, progress: bool | None = None,
             overwrite: bool = False) -> EvaluationResult:
    """Evaluate releases against the real data they were made from: fidelity, utility and privacy attacks.

    ``real``: the real dataset, opened (:func:`medanon.open_dataset`, any layout: its folder is read again
    at the evaluation size with the options it was opened with), as a folder (read with its detected layout),
    or as images in memory with ``patient_ids=`` (required: splits, controls and intervals are by patient) and
    optional ``labels=``, ``modality=``, ``value_range=`` (:func:`medanon.data.as_dataset`; give the range a release
    of some of the same images was made with; written as 8-bit PNGs to a private temporary folder that is removed
    afterwards, since the evaluation reads the real data from a folder).
    ``releases``: release folders or :class:`~medanon.release.release.Release` objects (one not yet saved is
    saved, with its private mapping, into the temporary folder first).
    ``out``: report folder (``report.html``, ``report.json``, ``cache/``; re-running resumes from the
    cache); by default a temporary folder. ``preset``: ``full`` (the default), ``fast`` (CPU-sized) or ``tiny``
    (tests and notebooks on a tiny phantom: it runs in seconds, its numbers are not a measurement), or instead a
    whole :class:`~medanon.evaluate.config.EvalConfig` (or a mapping of its fields) as ``config``; ``size``:
    evaluation image side
    (default: the config's, else the dataset's size, else 64; tiny 32).
    ``splits``: the splits CSV the releases were made with (else the split is recomputed).
    ``mappings``: release name -> private mapping file (default: the mapping a Release was saved
    with, or ``<release>.mapping.json`` next to the folder); membership, linkability and singling-out
    need it. ``compare``: pairs of release names ``(a, b)`` (folder names; a Release saved here is named
    ``<method>-<position>``) whose utility difference a - b gets a paired patient bootstrap interval
    (``config.utility.compare``; the result's ``comparisons``). ``overwrite``: replace the report of another
    evaluation in ``out`` (a report of the same real data whose releases are all evaluated again is extended
    without it). Returns an :class:`EvaluationResult`
    (``.to_dict()``, ``.to_html(path)``, ``.summary()``: flat records, ``.to_frame()``: the same as a pandas
    DataFrame).

    Example (signature only: a run trains classifiers, see docs/evaluation.md):
        >>> import inspect, medanon
        >>> list(inspect.signature(medanon.evaluate).parameters)[:3]
        ['real', 'releases', 'out']
    """
    import contextlib
    import json

    from medanon.api._inputs import device_arg
    from medanon.data.dataset import reading
    from medanon.data.inputs import as_dataset
    from medanon.data.memory import is_in_memory, write_dataset_folder
    from medanon.evaluate.config import PRESETS
    from medanon.evaluate.config import preset as make_preset
    from medanon.evaluate.harness import ReleaseSpec
    from medanon.evaluate.harness import evaluate as run_evaluation
    from medanon.evaluate.inputs import UnknownSources
    from medanon.release.release import Release, show_progress

    device = device_arg(device)
    from medanon.config import check_type

    check_type("overwrite", overwrite, "bool")
    progress = show_progress(progress)
    if not isinstance(real, (str, os.PathLike)):
        real = as_dataset(real, patient_ids=patient_ids, labels=labels, modality=modality, value_range=value_range,
                          argument="real", method="evaluate", require_patients=True, why=PATIENTS_WHY)
    elif (patient_ids, labels, modality, value_range) != (None, None, None, None):
        raise ConfigError("patient_ids=, labels=, modality= and value_range= describe images held in memory; real= "
                          "is a folder",
                          fix="leave them out (open the folder with medanon.open_dataset to choose how it is read)")
    if getattr(real, "transform", None) is not None:
        raise ConfigError("real= has a transform=, which the evaluation would not apply: it reads the images "
                          "themselves, so the releases (made from transformed images) would be measured against "
                          "images they were not made from",
                          fix="hold the transformed images in memory (x, _ = ds.tensors(); "
                              "medanon.data.as_dataset(x, patient_ids=..., value_range=(-1, 1))) and make and "
                              "evaluate the releases from them")
    if getattr(real, "part_of", None) and not is_in_memory(real):
        raise ConfigError(f"real= holds {len(real)} of the {real.part_of} images of the folder {real.root} (a part, "
                          "e.g. one split); the evaluation reads whole folders, and would evaluate all of them",
                          fix="pass the whole dataset: real=ds (the patient split the releases were made from "
                              "comes from splits=, and without it from the same split_dataset defaults)")
    if isinstance(releases, (str, os.PathLike, Release)) or not isinstance(releases, Sequence):
        raise ConfigError(f"releases= is {a_type(releases)}; it takes a list of release folders or Release "
                          "objects", fix="pass releases=[rel] for one release")
    for i, r in enumerate(releases):
        if not isinstance(r, (str, os.PathLike, Release)):
            raise ConfigError(f"releases[{i}] is {a_type(r)}; a release is a folder (str or os.PathLike) "
                              "or a medanon Release", fix="anonymise the images first: rel = "
                                                          "medanon.anonymize.<method>(...), then releases=[rel]")
    if preset is not None and config is not None:
        raise ConfigError("preset= and config= are both given: config= is the whole evaluation, so the preset would "
                          "be ignored", fix="pass one of them (medanon.evaluate.config.preset(name) gives a preset's "
                                            "config to change)")
    preset = "full" if preset is None else preset
    if preset not in PRESETS:
        raise ConfigError(f"preset={preset!r} must be one of {list(PRESETS)}",
                          fix="preset='fast' on a CPU, 'full' for the papers' protocol, 'tiny' to try the pipeline")
    config = _eval_config(config)
    _check_paths(splits, mappings)
    check_path_arg("out", out, what="a folder path")
    check_path_arg("cache_dir", cache_dir, what="a folder path")
    number("size", size, integer=True, allow_none=True)
    if size is not None and not 16 <= size <= 1024:
        raise ConfigError(f"size={size}: images are evaluated at a side between 16 and 1024 pixels",
                          fix="leave size= out (the dataset's size) or pass e.g. size=64")
    if config is None:
        config = make_preset(preset, size=size if size is not None else getattr(real, "size", None))
    elif size is not None:
        config = replace(config, size=size)
    if compare is not None:
        if isinstance(compare, (str, bytes)) or any(isinstance(p, (str, bytes)) or len(p) != 2 for p in compare):
            raise ConfigError(f"compare={compare!r} must be a list of (release_a, release_b) pairs",
                              fix="pass compare=[('name_a', 'name_b')]")
        config = replace(config, utility=replace(config.utility, compare=tuple((str(a), str(b)) for a, b in compare)))
    maps = dict(mappings or {})
    tmp_dir = tempfile.TemporaryDirectory(prefix="medanon-eval-")
    tmp = Path(tmp_dir.name)
    real_dir = Path(real) if isinstance(real, (str, os.PathLike)) else real.root    # (a Path's .root is "/")
    if is_in_memory(real):
        real_dir = write_dataset_folder(real, tmp / "real")
    if real_dir is None:
        tmp_dir.cleanup()
        raise ConfigError("the real dataset has no folder", fix="pass real= a dataset opened from a folder")
    from medanon.outputs import dataset_inputs

    reads = [real_dir, splits, *(dataset_inputs(real) if hasattr(real, "records") else [])]   # its images' folders
    _check_folders_first(out, cache_dir, reads, tmp_dir)   # before any release is made
    specs, saved_here = [], []
    try:
        for i, r in enumerate(releases):
            if isinstance(r, Release) and r.path is None:     # not saved yet: saved privately, mapping beside it
                name = f"{r.method}-{i}"
                saved_here.append(r)
                drawn, r._drawn = r._drawn, []             # a private draw, not a second release: no warning
                r.save(tmp / "releases" / name, mapping=tmp / "mappings" / f"{name}.json", progress=progress)
                r._drawn = [*drawn, None]                  # a later save() warns that it is another draw
            path = Path(getattr(r, "path", r))
            mapping = maps.pop(path.name, None) or getattr(r, "mapping", None)
            specs.append(ReleaseSpec(path, mapping=mapping))
            if mapping is None and not Path(f"{path}.mapping.json").is_file():
                _warn_no_mapping(path)
        if maps:
            raise ConfigError(f"mappings name releases that are not evaluated: {sorted(maps)}")
    except BaseException:
        for r in saved_here:                                 # their temporary folders go now
            r.path, r.mapping = None, None
        tmp_dir.cleanup()
        raise
    read_as = getattr(real, "read_options", None)            # an opened dataset: read its folder the same way
    try:
        with tmp_dir, (reading(real_dir, **vars(read_as)) if read_as is not None else contextlib.nullcontext()):
            folder = Path(out) if out is not None else tmp / "report"
            try:
                rep = run_evaluation(real_dir, specs, folder, config=config, splits=splits, device=device or "cpu",
                                     cache_dir=cache_dir, progress=progress, overwrite=overwrite)
            except UnknownSources as e:
                if not is_in_memory(real):
                    raise _as_given(e, tmp, releases) from None
                raise DataError(  # the temporary folder named is gone; what differs is how it was read
                    "a release names source images that real= does not hold: images held in memory are known by "
                    "their pixels as read, so a different value_range (or other images) gives other records",
                    fix="pass real= the images the releases were made from, with the same value_range=") from None
            except MedanonError as e:
                raise _as_given(e, tmp, releases) from None
            html = (folder / "report.html").read_text(encoding="utf-8")
            report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    finally:
        for r in saved_here:                                 # their temporary folders are gone
            r.path, r.mapping = None, None
    del rep
    read = [] if is_in_memory(real) else list(reads)      # an opened dataset's image folders, wherever they are
    read += [s.path for s in specs if not _inside(s.path, tmp)] + [s.mapping for s in specs if s.mapping and
                                                                     not _inside(s.mapping, tmp)]
    return EvaluationResult(releases=report.get("releases", []), controls=report.get("controls", {}),
                            real=report.get("real", {}), phantom=bool(report.get("phantom")),
                            notes=list(report.get("notes", [])), seconds=float(report.get("seconds", 0.0)),
                            report=report, html=html, out=Path(out) if out is not None else None,
                            comparisons=list(report.get("comparisons", [])),
                            differencing=list(report.get("differencing", [])), reads=[Path(p) for p in read if p])


def _as_given(e: MedanonError, tmp: Path, releases: Sequence) -> MedanonError:
    """``e`` with the temporary folders of releases saved only for this evaluation (gone when it ends) named as the
    caller passed them: ``releases[i] (method, not saved)``."""
    import copy

    from medanon.release.release import Release

    if not isinstance(e, MedanonError):
        return e
    names = {}
    for i, r in enumerate(releases):
        if isinstance(r, Release):
            name = f"{r.method}-{i}"
            names[str(tmp / "releases" / name)] = f"releases[{i}] ({r.method}, not saved)"
            names[str(tmp / "mappings" / f"{name}.json")] = f"the mapping of releases[{i}]"

    def said(text):
        for path, words in names.items():
            text = text.replace(path, words) if text else text
        return text

    out = copy.copy(e)
    out.message, out.fix = said(e.message), said(e.fix)
    if hasattr(out, "files"):
        out.files = [said(f) for f in out.files]
    out.args = (str(out),)
    return out


def _inside(path, folder: Path) -> bool:
    p = Path(path).absolute()
    return p == folder.absolute() or folder.absolute() in p.parents


def _check_folders_first(out, cache_dir, reads: list, tmp_dir) -> None:
    """``out`` and ``cache_dir`` checked before a release not yet saved is made (hours for ksalsa); the harness
    checks them again, with every release's folder."""
    from medanon.outputs import check_output, check_run_folder

    try:
        if out is not None:
            check_output(out, inputs=reads, existing_ok=True, kind="dir")
            check_run_folder(out, "evaluate")
        if cache_dir is not None:
            if out is not None:
                from medanon.evaluate.cache import check_cache_apart

                check_cache_apart(cache_dir, out)
            check_output(cache_dir, inputs=reads, existing_ok=True, kind="dir", name="cache",
                         what="evaluation-cache")
    except BaseException:
        tmp_dir.cleanup()
        raise

