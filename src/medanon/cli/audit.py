"""``medanon audit``: check a release against its guarantees."""

from __future__ import annotations

import json
from pathlib import Path

import click

from medanon.cli.base import CONTEXT, cli
from medanon.cli.data import layout_options, scan_from_cli


@cli.command(context_settings=CONTEXT)
@click.argument("release", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--k", type=click.IntRange(min=1), default=None,
              help="Minimum people per record to require (default: the k the method recorded, if any).")
@click.option("--mapping", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The private record -> sources mapping written with --mapping at anonymisation.")
@click.option("--source", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="The source dataset: its file names, record ids and patient ids are searched for.")
@layout_options
@click.option("--modality", type=click.Choice(["fundus", "xray"]), default=None,
              help="The source's modality, compared with the release's; needed only where the layout does not say "
                   "(generic).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def audit(ctx: click.Context, release: Path, k, mapping, source, modality, as_json, **layout_opts) -> None:
    """Verify that every record of RELEASE stands for at least k people and that no source file name,
    record id or patient id appears anywhere in it (paths, CSV, manifest, image metadata); that the privacy
    statement's numbers agree with each other and the settings; with --source and --mapping, that no record is a
    copy of a source, that each kpixel record is its sources' average, and that an LDP-image release holds the
    noise its epsilon needs.

    Exit status: 0 every check passed, 1 a check failed, 2 a usage error (an option, or a path that does not
    exist), 3 the audit could not run (not a release, an unreadable mapping or source, another release's mapping,
    a source that is not the release's dataset).

    Example: medanon audit release-k5 --source /data/brset --mapping private/release-k5.json"""
    from medanon.cli.library import translate
    from medanon.cli.words import DATA_FLAGS
    from medanon.errors import MedanonError
    from medanon.release.audit import audit_release

    try:
        # every file the labels name is searched for, inside the folder or not: names are read, never pixels
        scanned = scan_from_cli(source, **{**layout_opts, "allow_outside": True}) if source is not None else None
        if scanned is not None and modality and scanned.modality and modality != scanned.modality:
            raise click.BadParameter(f"{modality} contradicts the source's layout, which holds {scanned.modality} "
                                     "images: it is needed only where the layout does not say (generic); leave it "
                                     "out", param_hint="--modality")
        rep = audit_release(release, k=k, mapping=mapping, source_records=scanned and scanned.records,
                            source_root=scanned and scanned.root,
                            source_modality=scanned and (scanned.modality or modality))
    except (MedanonError, OSError, ValueError, KeyError) as e:
        said = translate(str(e), DATA_FLAGS) if isinstance(e, MedanonError) else e
        click.secho(f"error: the audit could not run: {said}", fg="red", err=True)
        ctx.exit(3)
    click.echo(json.dumps(rep.to_dict(), indent=2) if as_json else rep.format())
    if not rep.complete:
        ctx.exit(3)
    if not rep.passed:
        ctx.exit(1)
