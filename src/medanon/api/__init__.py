"""medanon's Python API: what ``import medanon`` gives (see docs/design.md, "Python API").

* :func:`medanon.open_dataset` (:mod:`medanon.api.data`);
* ``medanon.anonymize.<method>`` (:mod:`medanon.api.ksame`, :mod:`medanon.api.dp`,
  :mod:`medanon.api.methods`), each returning a :class:`~medanon.release.release.Release`;
* :func:`medanon.audit` and ``medanon.evaluate(real=..., releases=...)`` (:mod:`medanon.api.evaluate`).

The command line builds the same calls from its options (``medanon.cli``): one release path.
"""
