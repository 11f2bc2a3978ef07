"""Anonymisation methods: one Python call per method, each returning a :class:`~medanon.release.release.Release`.

    >>> import medanon
    >>> sorted(medanon.anonymize.METHODS)                       # doctest: +NORMALIZE_WHITESPACE
    ['dpglow', 'gmia', 'inverted', 'kcentroid', 'kpca', 'kpixel', 'ksalsa', 'ldp_image', 'snow', 'vs_snow']

``medanon.anonymize.<method>(ds, *, ...)`` takes an opened dataset (:func:`medanon.open_dataset`), a
dataset folder, or images in memory (a tensor or array (N, C, H, W), a list of PIL images) with
``patient_ids=`` (:func:`medanon.data.as_dataset`), and the method's settings, keyword-only; the
privacy-critical ones (``k``, ``epsilon``, ``p``) have no default, and secret randomness stays secret unless a seed
is given (Snow's ``seed``, the DP methods' ``noise_seed``: for tests, and the statement then says the noise can be
regenerated).
Nothing is computed until the release is saved (``rel.save(path, mapping=...)``) or looked at (``rel.images()``).
The functions live in :mod:`medanon.api`; the algorithms in one module per method family here (``ksame``, ``salsa``,
``dpglow``, ``ldp_image``, ``gmia``, ``snow``, ...). ``gmia``, ``snow``, ``dpglow`` and ``ldp_image``
are both those modules and callable: ``medanon.anonymize.snow(ds, p=0.1, seed=0)`` calls the API
function, ``from medanon.anonymize.snow import snow_sweep`` imports from the module. The namespace
shows the methods (``dir(medanon.anonymize)``, ``__all__``); the algorithm modules stay importable by
their full names (``import medanon.anonymize.ksame``).

    >>> [n for n in dir(medanon.anonymize) if not n.startswith("_")] == sorted(medanon.anonymize.__all__)
    True
"""

from medanon.api._callable import make_callable as _make_callable
from medanon.api.dp import dpglow as _dpglow
from medanon.api.dp import ldp_image as _ldp_image
from medanon.api.ksame import inverted, kcentroid, kpca, kpixel, ksalsa
from medanon.api.methods import gmia as _gmia
from medanon.api.methods import snow as _snow
from medanon.api.methods import vs_snow

dpglow = _make_callable("medanon.anonymize.dpglow", _dpglow)
ldp_image = _make_callable("medanon.anonymize.ldp_image", _ldp_image)
gmia = _make_callable("medanon.anonymize.gmia", _gmia)
snow = _make_callable("medanon.anonymize.snow", _snow)

METHODS = ("kpixel", "kpca", "kcentroid", "ksalsa", "inverted", "gmia", "snow", "vs_snow", "dpglow", "ldp_image")

__all__ = ["METHODS", "dpglow", "gmia", "inverted", "kcentroid", "kpca", "kpixel", "ksalsa", "ldp_image", "snow",
           "vs_snow"]


def __dir__() -> list[str]:
    """The public namespace: the methods (the algorithm modules are internals, imported by their full names)."""
    return sorted(__all__)
