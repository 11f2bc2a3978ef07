"""Reading images: dataset folders of every layout (:mod:`medanon.data.dataset`) and images held in memory
(:mod:`medanon.data.memory`); :func:`as_dataset` turns any of them into the dataset the methods read."""

from __future__ import annotations

__all__ = ["ValueRangeWarning", "as_dataset"]


def __getattr__(name: str):
    if name == "as_dataset":                     # imported on first use: medanon.data.* stay light to import
        from medanon.data.inputs import as_dataset

        return as_dataset
    if name == "ValueRangeWarning":
        from medanon.data.memory import ValueRangeWarning

        return ValueRangeWarning
    raise AttributeError(f"module 'medanon.data' has no attribute {name!r}")
