"""A planned release: what a method will publish, before any image is computed.

Every ``medanon.anonymize.<method>(ds, ...)`` returns a :class:`Release`. It holds the plan (the
dataset, the method's settings, the labels to publish, the privacy statement, seeds and model
checksums) and a *producer*: the function that computes the released images and hands them, one
record at a time, to a :class:`~medanon.release.writer.ReleaseWriter`. Nothing is computed when the
release is created, and nothing is held in memory beyond one batch when it is saved:

* :meth:`Release.save` opens the writer (random names, aggregated labels, manifest, private
  mapping, atomic rename, resume after an interruption) and streams the producer through it;
* :meth:`Release.images` gives the released images as one ``(N, C, H, W)`` tensor: read from the folder once
  saved, else computed in memory for a look in a notebook (``limit`` images);
* ``len(release)`` is the number of records (for the k-Same family: the clusters are formed to count them),
  ``release[i]`` and ``for record in release`` give :class:`ReleasedRecord` s (image, published labels, people).

This is the one release path: the command line builds the same ``Release`` from its options and
saves it (docs/design.md, "Releases").

Example (k-Same-Pixel on a tiny phantom):
    >>> import medanon
    >>> root = medanon.make_phantom(patients=6)
    >>> rel = medanon.anonymize.kpixel(medanon.open_dataset(root, size=16), k=3)
    >>> rel                                             # doctest: +ELLIPSIS
    Release('kpixel' of 6 images, labels ['grade'], guarantee 'k-anonymity...', not saved)
    >>> rel.method, rel.privacy["k"]
    ('kpixel', 3)
    >>> len(rel), rel.images().shape                  # 6 patients, k = 3: two records
    (2, torch.Size([2, 3, 16, 16]))
    >>> out = rel.save(root.parent / "release", progress=False)
    >>> rel.summary["records"], medanon.audit(out).passed
    (2, True)
    >>> rel[0].people, sorted(rel[0].labels), len(list(rel))
    (3, ['grade', 'grade_counts'], 2)
"""

from __future__ import annotations

import copy
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from medanon.anonymize.privacy import PrivacyWarning
from medanon.data.records import Record, records_digest
from medanon.errors import ConfigError
from medanon.outputs import dataset_inputs
from medanon.release.aggregate import aggregate_labels
from medanon.release.files import png_to_float, read_release
from medanon.release.sharded import ShardWriter, open_release
from medanon.runtime import files_digest

__all__ = ["CaptureWriter", "PrivacyWarning", "Release", "ReleasedRecord", "is_phantom", "reading_params",
           "show_progress", "source_digest"]

# Methods whose every run draws fresh secret randomness: a preview before save() is another, independent release
# (so is one of a k-Same release with latent views, whose view noise is secret).
FRESH_RANDOMNESS = ("dpglow", "ldp-image", "snow", "vs-snow")

Producer = Callable[[Any, bool], dict[str, Any]]           # (writer, progress) -> summary of the run
Saver = Callable[[Path, Path | None, bool, bool], dict[str, Any]]   # (out, mapping, overwrite, progress) -> summary


def source_digest(dataset) -> dict[str, Any]:
    """What the private journal and mapping record about the source: layout, modality, one checksum over its
    files' content and one over each record's id, patient id and labels (a resumed release notices a changed
    ``labels.csv`` as well as changed images). Fingerprints only: no paths, no identifiers."""
    content = dataset.content_digest() if hasattr(dataset, "content_digest") else \
        files_digest([r.path for r in dataset.records], root=dataset.root)          # images in memory: their bytes
    from medanon.data.inputs import patients_known

    return {"layout": dataset.layout, "modality": dataset.modality, **content,
            "records_sha256": records_digest(dataset.records),
            **({} if patients_known(dataset) else {"patients_known": False})}   # each image counted as a person


def reading_params(dataset) -> dict[str, Any]:
    """How the images were read (side, channels, crop, and the chest X-ray views where only some were read): part
    of a release's settings, so that a resume reading them otherwise is refused instead of mixing records of both
    readings (the source digest covers the files' bytes, not how they were decoded). ``xray_views`` only where set:
    the settings of releases read whole stay as they were, and their resumes with them. ``split``: how the one
    patient-level split released was made (the splits file, or the seed, fractions and strata of the recomputed
    split), which the evaluation compares with its own."""
    views = getattr(getattr(dataset, "read_options", None), "xray_views", "")
    made = getattr(dataset, "split_made", None)         # one split of a folder: how it was made (no patient)
    return {"size": int(dataset.size), "channels": int(dataset.channels), "crop": getattr(dataset, "crop", None),
            **({"xray_views": views} if views else {}), **({"split": dict(made)} if made else {})}


def show_progress(progress: bool | None) -> bool:
    """``progress``, or when None: whether progress bars can be drawn (stderr is a terminal, or a notebook).
    A log file never gets bars: they would be lines of carriage returns and cursor movements."""
    if progress is not None:
        from medanon.config import check_type

        check_type("progress", progress, "bool")             # progress="no" would draw bars
        return bool(progress)
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty()) or "ipykernel" in sys.modules


def is_phantom(dataset) -> bool:
    """Whether ``dataset`` is a medanon phantom (its folder holds ``phantom.json``)."""
    return dataset.root is not None and (Path(dataset.root) / "phantom.json").is_file()


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):                  # (a loop of symbolic links: the writer names it)
        return False


@dataclass(frozen=True)
class ReleasedRecord:
    """One record of a release: its image (C, H, W) float in [-1, 1], the labels published with it (aggregated
    over its sources), and how many people it stands for. ``name``: its file in the release folder (None before
    saving)."""

    image: torch.Tensor
    labels: dict[str, Any]
    people: int
    name: str | None = None

    def __repr__(self) -> str:
        return (f"ReleasedRecord(image {tuple(self.image.shape)}, labels {self.labels}, people {self.people}"
                + (f", name {self.name!r})" if self.name else ")"))


def _cell(value: str) -> Any:
    try:
        return float(value) if value != "" else float("nan")
    except ValueError:
        return value


class _Enough(Exception):
    """Raised by the capture writer once it holds the images asked for."""


class CaptureWriter:
    """The writer interface (``done``, ``add``, ``entries``, ``privacy``, ``settings``) kept in memory.

    Used by :meth:`Release.images`: at most ``limit`` records are kept, then the producer is stopped.
    """

    def __init__(self, *, method: str, params: Mapping[str, Any], privacy: Mapping[str, Any],
                 labels: Sequence[str], limit: int | None):
        self.settings = {"method": method, "params": dict(params), "labels": list(labels)}
        self.privacy = dict(privacy)
        self.entries: dict[str, dict[str, Any]] = {}
        self.images: list[torch.Tensor] = []
        self.limit = limit

    def done(self, key: str) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, key: str, image: torch.Tensor, sources: Sequence[Record], *,
            quality: Mapping[str, Any] | None = None) -> str:
        if key in self.entries:
            raise ValueError(f"release record {key!r} was already written")
        if self.limit is not None and len(self.images) >= self.limit:
            raise _Enough
        self.entries[key] = {"key": key, "sources": [r.record_id for r in sources],
                             "patients": sorted({r.patient_id for r in sources}),
                             "labels": aggregate_labels(list(sources), self.settings["labels"])}
        self.images.append(image.detach().float().cpu().clamp(-1, 1))
        return key


def _job_summary(per_process: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of a torchrun job from its processes' summaries: what every process reports alike at the top
    (e.g. clusters), each process's own (e.g. its mean losses) under ``per_process``. A producer's "resumed" counts
    are left out: it counts the other processes' shares as done (the release's own count is ``resumed_records``)."""
    first = per_process[0]
    same = {k: v for k, v in first.items() if k != "written" and not k.startswith("resumed")
            and all(p.get(k) == v for p in per_process)}
    return {**same, "processes": len(per_process),
            "per_process": [{k: v for k, v in p.items() if k not in same and not k.startswith("resumed")}
                            for p in per_process]}


@dataclass(repr=False)
class Release:
    """A release of ``dataset`` by one method: the plan, and the producer that computes its images.

    Attributes are what the manifest will record: ``method``, ``params`` (the settings that define the
    result; also the resume check), ``privacy`` (the privacy statement), ``labels`` (the labels
    published, aggregated per record), ``seeds`` and ``models`` (checkpoint sha256). Methods that write their
    release themselves (GMIA, Snow, VS-Snow) add to ``params``, ``privacy`` and ``models`` what they compute while
    saving (image size, fill values, the codec's description, the optimisation's outcome): after :meth:`save` these
    three are the manifest's, and ``summary`` holds what the run reports (records, clusters, resumed records, ...).
    """

    method: str
    dataset: Any                                          # the medanon.data.dataset.ImageDataset released
    params: dict[str, Any]
    privacy: dict[str, Any]
    labels: list[str]
    produce: Producer | None = field(repr=False)          # streams the records into an open writer
    seeds: dict[str, int] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    saver: Saver | None = field(default=None, repr=False)  # a method whose module opens the writer itself
    notes: list[str] = field(default_factory=list)        # what the caller may want to know (e.g. calibration)
    inputs: list[Path] = field(default_factory=list)      # what else the method reads (a basis or calibration set)
    summary: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None                              # where save() wrote it
    mapping: Path | None = None                           # the private mapping save() wrote, if any
    count: Callable[[], int] | None = field(default=None, repr=False)   # records once planned (default: one an image)
    reproducible: bool = False                            # its randomness comes from a seed the caller chose (testing)
    private: dict[str, Any] = field(default_factory=dict, repr=False)   # what else the result depends on, kept
    # private (journal and mapping only): a dataset (its content digest) or a fingerprint; a resume compares them
    _preview: CaptureWriter | None = field(default=None, init=False, repr=False)
    _drawn: list[Path | None] = field(default_factory=list, init=False, repr=False)   # saves done (None: evaluate's)
    _stated: tuple[Any, Any] | None = field(default=None, init=False, repr=False)    # privacy and params as computed

    def __post_init__(self) -> None:
        from medanon.anonymize.privacy import with_standard_fields

        self.privacy = with_standard_fields(self.privacy)
        self._keep_statement()

    def _keep_statement(self) -> None:
        self._stated = copy.deepcopy((self.privacy, self.params))

    def _check_statement(self) -> None:
        """Refuse to write a privacy statement or settings edited after the method computed them: the manifest
        would claim what the images do not have (an epsilon the noise was not drawn for)."""
        if (self.privacy, self.params) != self._stated:
            what = [n for n, a, b in (("privacy statement", self.privacy, self._stated[0]),
                                      ("params", self.params, self._stated[1])) if a != b]
            raise ConfigError(f"the release's {' and '.join(what)} {'was' if len(what) == 1 else 'were'} changed "
                              "after the method computed them: the manifest would state what the images were not "
                              "made with",
                              fix="make the release again with the settings you want (e.g. another epsilon=)")

    @property
    def draws_secret_randomness(self) -> bool:
        """Whether every computation of this release draws new secret randomness (:data:`FRESH_RANDOMNESS`
        without a seed, or latent views), so that two saves are two different releases of the same images."""
        views = int(((self.params or {}).get("augmentation") or {}).get("views") or 1)
        return (self.method in FRESH_RANDOMNESS and not self.reproducible) or views > 1

    def _warn_second_draw(self, out: Path, overwrite: bool) -> None:
        """A release with secret randomness saved again (elsewhere, or over its earlier folder) is another,
        independent draw: warned, since publishing both weakens the privacy both state alone."""
        if not self.draws_secret_randomness or not self._drawn or (out.exists() and not overwrite):
            return                                   # (an existing folder without overwrite is refused: no draw)
        saved = [p for p in self._drawn if p is not None]
        if saved:
            where = "over " if any(_same_folder(p, out) for p in saved) else "besides "
            warnings.warn(f"{self.method}: this release was already saved to {saved[-1]}; saving it again draws new "
                          f"secret randomness, so {out} is a second, independent release of the same images (written "
                          f"{where}the first). Publishing both weakens the privacy each states alone: two noisy copies "
                          "spend twice the privacy budget, two Snow draws hide different pixels, two draws of latent "
                          "views average their noise away. Share one; to copy a release, copy its folder",
                          PrivacyWarning, stacklevel=3)
        else:
            warnings.warn(f"{self.method}: medanon.evaluate() measured another draw of this release's secret "
                          "randomness (saved to a temporary folder and removed), not the images this save writes; "
                          "its numbers describe the method, not this release. To report on the images you share, "
                          "save first and evaluate the saved release", UserWarning, stacklevel=3)

    def __len__(self) -> int:
        """The number of records: counted in the folder once saved; else planned (for the k-Same family the
        clusters are formed, which needs the images' embeddings but computes no released image)."""
        if self.path is not None:
            return int(read_release(self.path)[0]["counts"]["records"])
        return int(self.count()) if self.count is not None else len(self.dataset)

    def __iter__(self) -> Iterator[ReleasedRecord]:
        """Every record (:class:`ReleasedRecord`): read one at a time once saved, else computed in memory."""
        if self.path is not None:
            return self._saved_records(None)
        return iter(self._computed_records(None, show_progress(None)))

    def __getitem__(self, index: int) -> ReleasedRecord:
        """Record ``index``: before :meth:`save`, in the order computed; once saved, in the release folder's file
        order, which is a secret shuffle (so that the order says nothing of the sources'), and as the 8-bit PNG
        holds it. ``rel[0]`` before and after a save are in general two different records."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"release indices are integers, not {type(index).__name__}"
                            + ("; for the first records as one tensor use release.images(limit=N)"
                               if isinstance(index, slice) else ""))
        n = len(self) if index < 0 else None
        i = index + n if n is not None else index
        if i < 0:
            raise IndexError(f"record {index} of a release of {n} records")
        got = list(self._saved_records(i + 1)) if self.path is not None else \
            self._computed_records(i + 1, show_progress(None))
        if i >= len(got):
            raise IndexError(f"record {index} of a release of {len(got)} records")
        return got[i]

    def __repr__(self) -> str:
        guarantee = str(self.privacy.get("guarantee", ""))
        guarantee = guarantee if len(guarantee) <= 60 else guarantee[:57] + "..."
        where = f"saved to {self.path}" if self.path is not None else "not saved"
        return (f"Release({self.method!r} of {len(self.dataset)} images, labels {self.labels}, "
                f"guarantee {guarantee!r}, {where})")

    def save(self, path: str | Path, *, mapping: str | Path | None = None, overwrite: bool = False,
             progress: bool | None = None) -> Path:
        """Write the release folder ``path`` through :class:`~medanon.release.writer.ReleaseWriter`.

        ``mapping``: a file *outside* the release for the private record -> sources mapping (the
        audit and the evaluation's attacks need it). ``overwrite`` replaces an existing release.
        An interrupted save resumes when called again with the same settings: records already
        written are not recomputed. Returns ``path``; ``self.summary`` describes the run. ``progress``: bars on
        stderr (default: only when it is a terminal or a notebook). A release that :attr:`draws_secret_randomness`
        saved again (elsewhere, or over its folder) is a second, independent release: a :class:`PrivacyWarning`
        says so; after :func:`medanon.evaluate` saved it to a temporary folder, a ``UserWarning`` says the report
        measured another draw.
        """
        from medanon.errors import check_path_arg

        check_path_arg("path", path, optional=False, what="a folder path")
        check_path_arg("mapping", mapping)
        from medanon.config import check_type

        check_type("overwrite", overwrite, "bool")           # overwrite="no" must not replace a release
        progress = show_progress(progress)
        out = Path(path)
        self._check_statement()
        self._warn_second_draw(out, overwrite)
        self._preview = None
        mapping = Path(mapping) if mapping is not None else None
        before = self.path, self.mapping
        self.path, self.mapping = None, None
        try:
            return self._save(out, mapping, overwrite, progress)
        except BaseException:
            # a refused or failed save leaves an earlier save of this release as it was: its folder is still the
            # one this object reads, audits and evaluates (not a new draw)
            if before[0] is not None and (Path(before[0]) / "manifest.json").is_file():
                self.path, self.mapping = before
            raise

    def _save(self, out: Path, mapping: Path | None, overwrite: bool, progress: bool) -> Path:
        if self.saver is not None:
            self.summary = dict(self.saver(out, mapping, overwrite, progress))
            manifest, _ = read_release(out)
            self.params, self.privacy, self.models = manifest["params"], manifest["privacy"], manifest["models"]
            self._keep_statement()
            self.path, self.mapping = out, mapping
            self._drawn.append(out)
            return out
        with open_release(out, method=self.method, params=self.params, privacy=self.privacy, labels=self.labels,
                          seeds=self.seeds, models=self.models, source=self._source(),
                          phantom=is_phantom(self.dataset), mapping=mapping, overwrite=overwrite,
                          inputs=[*dataset_inputs(self.dataset), *self.inputs], source_now=self._source) as writer:
            resumed = len(writer)
            summary = self.produce(writer, progress)
            if isinstance(writer, ShardWriter):          # torchrun: this process computed one share
                summary = _job_summary(writer.gather({**summary, "written": len(writer.written)}))
        manifest, _ = read_release(out)                 # what was written, e.g. counts the run added
        self.params, self.privacy, self.models = manifest["params"], manifest["privacy"], manifest["models"]
        self._keep_statement()
        if "processes" in summary:
            summary["records"] = manifest["counts"]["records"]
        self.summary = {**summary, "resumed_records": resumed}
        self.path, self.mapping = out, mapping
        self._drawn.append(out)
        return out

    def _source(self) -> dict[str, Any]:
        """The private digest of what the release is made from: the dataset, and :attr:`private`'s entries."""
        extra = {name: source_digest(v) if hasattr(v, "records") else v for name, v in self.private.items()}
        return {**source_digest(self.dataset), **extra}

    def images(self, limit: int | None = 16, *, progress: bool | None = False) -> torch.Tensor:
        """The first ``limit`` released images as one (N, C, H, W) float tensor in [-1, 1] (``limit=None``: all).

        Once saved, they are read from the release folder (the images it publishes, in its file order).
        Before, they are computed in memory as :meth:`save` computes them, and nothing is written (for a
        look in a notebook; methods with secret randomness, :data:`FRESH_RANDOMNESS`, draw their own, so they are
        not the images a later ``save`` writes but another release, and a :class:`PrivacyWarning` says so); the
        producer stops once ``limit`` images are held, except for Snow and VS-Snow,
        whose module writes the release itself: they are saved to a temporary folder, read back and the
        folder removed. Computed images are kept until :meth:`save`: ``rel[0]`` after ``rel.images()`` is
        the same image. ``limit=None`` holds every image in memory.
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            from medanon.errors import ArgumentTypeError

            raise ArgumentTypeError(f"limit={limit!r} ({type(limit).__name__}) must be a count >= 0 or None",
                                    fix="pass limit= a whole number >= 0, or None for every image")
        recs = list(self._saved_records(limit)) if self.path is not None else \
            self._computed_records(limit, show_progress(progress))
        if not recs:
            c, s = getattr(self.dataset, "channels", 3), getattr(self.dataset, "size", 0)
            return torch.empty((0, c, s, s))
        return torch.stack([r.image for r in recs])

    def _saved_records(self, limit: int | None) -> Iterator[ReleasedRecord]:
        _, rows = read_release(self.path)
        for row in rows[:limit]:
            image = torch.from_numpy(png_to_float(self.path / row["image"]))
            yield ReleasedRecord(image, self._row_labels(row), int(row.get("n_people", 0)), row["image"])

    def _row_labels(self, row: dict[str, str]) -> dict[str, Any]:
        """A labels.csv row's published labels as the computed records hold them: each label and its
        ``<label>_counts`` text."""
        out: dict[str, Any] = {}
        for n in self.labels:
            if n in row:
                out[n] = _cell(row[n])
            if f"{n}_counts" in row:
                out[f"{n}_counts"] = row[f"{n}_counts"]
        return out

    def _computed_records(self, limit: int | None, progress: bool) -> list[ReleasedRecord]:
        cap = self._preview
        if cap is None or (cap.limit is not None and (limit is None or limit > cap.limit)):
            if self.draws_secret_randomness:
                warnings.warn(f"{self.method}: images before save() draw their own secret randomness, so they are "
                              "a second release of these images, independent of the one save() writes (two noisy "
                              "copies spend twice the privacy budget; two Snow draws hide different pixels; two "
                              "draws of latent views average their noise away): look at them, share only the saved "
                              "release", PrivacyWarning, stacklevel=3)
            if self.produce is None:
                cap = self._capture_via_folder(progress)
            else:
                cap = CaptureWriter(method=self.method, params=self.params, privacy=self.privacy, labels=self.labels,
                                    limit=limit)
                try:
                    self.produce(cap, progress)
                except _Enough:
                    pass
            self._preview = cap
        out = [ReleasedRecord(im, dict(e["labels"]), len(e["patients"])) for im, e in
               zip(cap.images, cap.entries.values(), strict=True)]
        return out[:limit]

    def _capture_via_folder(self, progress: bool) -> CaptureWriter:
        """For methods whose module writes the release itself: save to a temporary folder, read every record back
        (the folder is removed)."""
        cap = CaptureWriter(method=self.method, params=self.params, privacy=self.privacy, labels=self.labels,
                            limit=None)
        with tempfile.TemporaryDirectory(prefix="medanon-preview-") as tmp:
            out = Path(tmp) / "release"
            self.saver(out, None, False, progress)
            _, rows = read_release(out)
            for row in rows:
                cap.images.append(torch.from_numpy(png_to_float(out / row["image"])))
                cap.entries[row["image"]] = {"labels": self._row_labels(row),
                                             "patients": range(int(row.get("n_people", 0)))}
        return cap

    def grid(self, n: int = 8) -> torch.Tensor:
        """Up to ``n`` released images side by side, (C, H, n*W), e.g. for ``plt.imshow``."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"n={n!r}: grid() shows up to n images, a whole number of at least 1",
                              fix="e.g. rel.grid(8)")
        return torch.cat(list(self.images(n)), dim=-1)
