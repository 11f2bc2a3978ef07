"""``medanon models``: the trained models medanon finds, with their checksums, and where it looks."""

from __future__ import annotations

import json

import click

from medanon.cli.base import CONTEXT, cli


@cli.command("models", context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def models(as_json: bool) -> None:
    """List the checkpoints on the model search path: $MEDANON_MODELS (folders separated by ':'), then
    checkpoints/ of the source checkout. Each with its kind and sha256 (the checksum a release manifest
    records for the models it used), the roles it is the default for (DEFAULT), and its card: what it was
    trained on, its measured quality and its intended use (commands in checkpoints/README.md), and whether it
    is one of medanon's shipped checkpoints, which are public (by digest, whatever its name). Methods take
    a model by its name here, with or without .pt (e.g. codec="restyle-map-fundus64").

    \b
    Example:
      MEDANON_MODELS=/srv/models medanon models
    """
    from dataclasses import asdict

    from medanon.models_registry import CARDS, ENV, defaults_of, list_models, search_path

    found = list_models()
    if as_json:
        click.echo(json.dumps({"search_path": [str(p) for p in search_path()],
                               "models": [{"name": m.name, "path": str(m.path), "bytes": m.bytes, "kind": m.kind,
                                           "sha256": m.sha256, "shadowed": m.shadowed, "shipped": m.shipped,
                                           "default_for": defaults_of(m.name),
                                           "card": asdict(CARDS[m.shipped]) if m.shipped in CARDS else None}
                                          for m in found]}, indent=2))
        return
    click.echo("search path ($" + ENV + ", then the source checkout's checkpoints/ if medanon runs from one):")
    for p in search_path():
        click.echo(f"  {p}" + ("" if p.is_dir() else "  (a file, not a folder: searched for nothing)" if p.exists()
                               else "  (missing)"))
    if not found:
        click.echo(f"no checkpoints found: set {ENV} to a folder holding the shipped checkpoints/*.pt")
        return
    width = max(len(m.name) for m in found)
    for m in sorted(found, key=lambda m: (not defaults_of(m.name), m.shadowed)):   # the defaults first
        roles = defaults_of(m.name)
        if not m.sha256:                            # a dangling link or an unreadable file: said, and skipped
            click.echo(f"{m.name:<{width}}  {m.kind}\n{'':<{width}}  {m.path}")
            continue
        click.echo(f"{m.name:<{width}}  {m.kind:<20} {m.bytes / 1e6:6.1f} MB  sha256 {m.sha256}"
                   + ("  (shadowed)" if m.shadowed else "") + f"\n{'':<{width}}  {m.path}")
        if roles and not m.shadowed and (m.kind == "not a medanon checkpoint" or "(damaged" in m.kind):
            click.secho(f"{'':<{width}}  named as the DEFAULT for {', '.join(roles)}, and found first on the search "
                        f"path, but it is {m.kind.split(' (')[0] if '(damaged' not in m.kind else 'damaged'}: "
                        "the methods refuse it (remove or rename it, or set $" + ENV + " to a folder without it)",
                        fg="yellow")
        elif roles and not m.shadowed:
            click.echo(f"{'':<{width}}  DEFAULT for {', '.join(roles)}")
        click.echo(f"{'':<{width}}  " + (f"shipped (public): {m.shipped}" if m.shipped else
                                         "not a shipped checkpoint (its digest is none of medanon's public ones)"))
        card = CARDS.get(m.shipped) if m.shipped else None     # by digest: a file's name says nothing of it
        if card is None and m.name in CARDS:
            click.echo(f"{'':<{width}}  card: none (the card of the shipped {m.name} is not this file's: what it was "
                       "trained on and how well it works are unknown to medanon)")
        if card is not None:
            click.echo(f"{'':<{width}}  use: {card.use}\n{'':<{width}}  trained on: {card.trained_on}\n"
                       f"{'':<{width}}  quality: {card.quality}")


def shipped_default(data_dir, data_opts: dict, role: str, *, flag: str, method: str,
                    used: dict | None = None, argument: str | None = None):
    """The shipped model ``role`` uses for the data's modality (``medanon models`` marks it), told to the user; the
    modality is the ``--modality`` given or the layout's (no pixel is decoded). ``used[argument]`` records which
    file was chosen and why, as the Python API records it (the manifest's ``params.model_files``)."""
    from pathlib import Path

    from medanon.data.layouts import scan
    from medanon.errors import MedanonError
    from medanon.fsutil import sha256_file
    from medanon.models_registry import ROLE_WORDS, default_model, find_model
    from medanon.models_shipped import shipped_name

    modality = data_opts.get("modality") if data_opts.get("modality") not in (None, "auto") else None
    unread = None
    if modality is None:
        try:
            modality = scan(Path(data_dir), data_opts.get("layout") or "auto").modality
        except MedanonError as e:                # e.g. a layout that needs --labels: the modality stays unknown
            unread = e
    name = default_model(role, modality)
    if name is None and unread is not None:
        raise unread                             # the data's own error, not "no model for this data"
    if name is None:
        raise click.UsageError(f"{method} needs {flag}: medanon ships no {ROLE_WORDS[role].split(' (')[0]} for "
                               f"{modality or 'this'} data (train one: docs/backbone.md)")
    path = find_model(name)
    what = ROLE_WORDS[role].split(' (')[0]
    shipped = shipped_name(sha256_file(path)) == name
    if shipped:
        click.echo(f"{flag}: {name}, the shipped {what} for {modality} data", err=True)
    else:
        click.echo(f"{flag}: {path}, the {what} for {modality} data by its name, but not the shipped file (its "
                   "digest is none of medanon's public ones)", err=True)
    if used is not None:
        used[argument] = {"file": path.name, "chosen": f"default for {modality}"
                          + ("" if shipped else " by its name; not the shipped file")}
    return path


def given_model(used: dict, argument: str, path) -> None:
    """Record in ``used`` (the manifest's ``params.model_files``) that the model file ``path`` was given."""
    from pathlib import Path

    if path is not None:
        used[argument] = {"file": Path(path).name, "chosen": "given"}

