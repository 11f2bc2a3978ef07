"""Evaluation of releases: fidelity, utility, privacy attacks and the report.

Evaluation reads only release folders (images, ``labels.csv``, ``manifest.json``, and the private
mapping file where the data custodian provides it) and the real data; it never touches a method's
internals (docs/design.md §2). The entry point is :func:`medanon.evaluate.harness.evaluate`.
"""
