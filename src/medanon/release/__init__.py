"""Releases: the only link between anonymising and evaluating (docs/design.md §2).

A release folder holds images under random names, ``labels.csv`` with aggregated labels and
``manifest.json`` (method, parameters, privacy statement, seeds, model checksums, counts). Which
sources each record stands for is written only on request, to a private mapping file outside
the release. :mod:`medanon.release.audit` checks a release against its guarantees.
"""

from medanon.release.aggregate import aggregate_labels
from medanon.release.audit import AuditReport, audit_release
from medanon.release.files import read_release
from medanon.release.writer import ReleaseWriter

__all__ = ["AuditReport", "ReleaseWriter", "aggregate_labels", "audit_release", "read_release"]
