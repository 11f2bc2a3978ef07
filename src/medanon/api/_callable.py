"""Subpackages that are also functions: ``medanon.evaluate(...)``, ``medanon.anonymize.gmia(ds, ...)``.

The public API names some functions after modules that already exist (``medanon.evaluate`` is the
evaluation package, ``medanon.anonymize.gmia`` the GMIA module). Binding a function to such a name
would be undone the first time the module is imported, so the module itself is made callable: it
stays the module for every ``import`` and ``from ... import``, and calling it calls the API function.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable


class CallableModule(types.ModuleType):
    """A module whose call is delegated to ``__api_function__`` (set by :func:`make_callable`)."""

    def __call__(self, *args, **kwargs):
        return self.__dict__["__api_function__"](*args, **kwargs)


def make_callable(module_name: str, function: Callable) -> types.ModuleType:
    """Import ``module_name`` and make calling it call ``function`` (signature shown by ``inspect``)."""
    module = importlib.import_module(module_name)
    module.__class__ = CallableModule
    module.__api_function__ = function
    module.__signature__ = inspect.signature(function)
    # help() shows the call first (what a user of the function reads), then what the module holds
    sig = f"{module_name.rsplit('.', 1)[-1]}{module.__signature__}"
    module.__doc__ = (f"{sig}\n\n{inspect.getdoc(function) or ''}\n\nThe module {module_name}:\n\n"
                      f"{inspect.cleandoc(module.__doc__ or '')}")
    return module
