"""medanon: de-identification of medical images for sharing and training.

Data flows one way (docs/design.md): ``data`` loads and preprocesses images, ``anonymize`` turns
them into a private release, ``release`` writes and audits it, ``evaluate`` measures it against the
real data. The Python API, flat::

    ds    = medanon.open_dataset(path, size=64)                     # any layout medanon reads
    train = medanon.split_dataset(ds)["train"]                      # patient-level split; release train only
    rel   = medanon.anonymize.kpixel(train, k=5)                    # one function per method
    rel.save("release-k5", mapping="private/k5.json")               # the one release path
    medanon.audit("release-k5", source=ds, mapping="private/k5.json")
    res   = medanon.evaluate(real=ds, releases=[rel], preset="fast")  # .to_dict(), .to_html(path)

Example:
    >>> import medanon
    >>> sorted(n for n in medanon.__all__ if not n.startswith("_"))   # doctest: +NORMALIZE_WHITESPACE
    ['CalibrationOverlap', 'DataDependentRelease', 'EvaluationResult', 'LabelDisclosure', 'LabelHomogeneity',
     'LayoutWarning', 'NoFormalGuarantee', 'NotAnonymised', 'PrivacyWarning', 'Release', 'ValueRangeWarning',
     'WeakBudget', 'WeakSetting', 'anonymize', 'as_dataset', 'audit', 'evaluate', 'make_phantom', 'open_dataset',
     'split_dataset']

The warning classes name each reason a setting weakens a statement, so a caller can escalate one precisely::

    warnings.simplefilter("error", medanon.NoFormalGuarantee)        # refuse releases that claim nothing

and the data warnings what looks wrong in the input (``ValueRangeWarning``: images using only a corner of their
declared range; ``LayoutWarning``: ids or labels that look wrong). ``as_dataset`` turns images in memory (or a folder)
into the dataset every method takes.
"""

__version__ = "0.1.0"

from medanon import anonymize
from medanon.anonymize.privacy import (
    CalibrationOverlap,
    DataDependentRelease,
    LabelDisclosure,
    LabelHomogeneity,
    NoFormalGuarantee,
    NotAnonymised,
    PrivacyWarning,
    WeakBudget,
    WeakSetting,
)
from medanon.api._callable import make_callable as _make_callable
from medanon.api.data import make_phantom, open_dataset, split_dataset
from medanon.api.evaluate import audit
from medanon.api.evaluate import evaluate as _evaluate
from medanon.api.result import EvaluationResult
from medanon.data.inputs import as_dataset
from medanon.data.layouts.common import LayoutWarning
from medanon.data.memory import ValueRangeWarning
from medanon.release.release import Release

evaluate = _make_callable("medanon.evaluate", _evaluate)   # the evaluation package, callable

__all__ = ["CalibrationOverlap", "DataDependentRelease", "EvaluationResult", "LabelDisclosure", "LabelHomogeneity",
           "LayoutWarning", "NoFormalGuarantee", "NotAnonymised", "PrivacyWarning", "Release", "ValueRangeWarning",
           "WeakBudget", "WeakSetting", "__version__", "anonymize", "as_dataset", "audit", "evaluate", "make_phantom",
           "open_dataset", "split_dataset"]
