"""``medanon anonymize snow|vs-snow``: Snow and VS-Snow releases, one per p."""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from medanon.anonymize.privacy import NoFormalGuarantee
from medanon.cli.base import CONTEXT, anonymize
from medanon.cli.data import data_dir_argument, data_options, open_from_cli
from medanon.release.labels import parse_label_list


def _parse_ps(values: tuple[str, ...]) -> list[float]:
    out = []
    for v in values:
        for part in v.split(","):
            if not part.strip():
                continue
            try:
                p = float(part)
            except ValueError:
                raise click.BadParameter(f"{part!r} is not a number", param_hint="--p") from None
            if not 0 < p <= 1:
                raise click.BadParameter(f"{p:g} is not in (0, 1]", param_hint="--p")
            out.append(p)
    if not out:
        raise click.BadParameter("give at least one value", param_hint="--p")
    return out


def _release_options(f):
    opts = [
        data_dir_argument(help="Dataset folder to anonymise."),
        click.option("--p", "ps", multiple=True, required=True, metavar="P[,P...]",
                     help="Fraction of pixels replaced, in (0, 1]; repeat or comma-separate for one release each."),
        click.option("--out", required=True, metavar="DIR",
                     help="Release folder; with several p, {p} in it is replaced by each (rel/snow-p{p})."),
        click.option("--seed", type=int, default=None,
                     help="TESTING ONLY: seeds every image's random subset (recorded; anyone who knows it regenerates "
                          "the subsets, so the release states no formal guarantee). Without it a secret seed is "
                          "drawn from the operating system and recorded nowhere."),
        click.option("--release-labels", default=None, metavar="NAME[,NAME...]",
                     help="Labels to release. [default: the utility label only: grade (fundus), pneumonia (X-ray)]"),
        click.option("--mapping", default=None, metavar="FILE",
                     help="Private record -> source mapping, outside the release ({p} as in --out)."),
        click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True),
        click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
                     help="Threads reading images."),
        click.option("--overwrite", is_flag=True, help="Replace existing releases."),
    ]
    for o in reversed(opts):
        f = o(f)
    return data_options(f)


def _run(ctx: click.Context, method: str, data_dir: Path, ps, out, seed, release_labels, mapping, batch_size,
         workers, overwrite, opts, **kw) -> None:
    from medanon.anonymize.snow import snow_sweep
    from medanon.runtime import resolve_device

    device = resolve_device(ctx.obj["device"])
    ds = open_from_cli(data_dir, **opts)
    labels = parse_label_list(release_labels)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = snow_sweep(ds, out, method=method, ps=_parse_ps(ps), seed=seed, labels=labels, mapping=mapping,
                          device=device, batch_size=batch_size, workers=workers, overwrite=overwrite, **kw)
    for w in caught:
        red = issubclass(w.category, NoFormalGuarantee)
        click.secho(f"WARNING: {w.message}", fg="red" if red else "yellow", err=True)
    for p, path in outs.items():
        click.echo(f"p={p:g}: wrote {len(ds)} images to {path}")
    click.echo("privacy: see 'privacy' in each manifest.json; measure it with the evaluation (sex attacker)")


@anonymize.command("snow", context_settings=CONTEXT)
@_release_options
@click.option("--fill", default="grey", show_default=True, metavar="grey|value:R,G,B|dataset",
              help="grey: constant mid-grey (original Snow; data-independent); value:R,G,B: a constant you supply "
                   "(0-255, e.g. the mean of a public dataset); dataset: per-channel mean of the released images "
                   "(VS-Snow Eq. 1): data-derived, the release then states NO formal guarantee.")
@click.pass_context
def snow_cmd(ctx, data_dir, ps, out, seed, release_labels, mapping, batch_size, workers, overwrite, fill, **opts):
    """Snow: in each image, a random fraction p of the pixel positions is set to the fill value in every
    channel. With the default grey fill and no --seed: (0, 1-p)-differential privacy for single pixel positions
    only, not for images or patients; --fill dataset or --seed: no formal guarantee.

    \b
    Example:
      medanon anonymize snow --data /data/fundus --p 0.1,0.3 --out releases/snow-p{p} \\
            --mapping private/snow-p{p}.json
    """
    _run(ctx, "snow", data_dir, ps, out, seed, release_labels, mapping, batch_size, workers, overwrite, opts,
         fill=fill)


@anonymize.command("vs-snow", context_settings=CONTEXT)
@_release_options
@click.option("--vessels", type=click.Choice(["unet", "frangi", "sato", "dataset", "files"]), default="unet",
              show_default=True, help="Vessel masks: trained U-Net, Frangi / Sato vesselness, the layout's masks, "
                                      "or files in --masks.")
@click.option("--checkpoint", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="--vessels unet: segmenter checkpoint.  [default: checkpoints/unet-vessels64.pt]")
@click.option("--masks", "masks_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="--vessels files: folder with one vessel mask per image (same stem, or DRIVE id).")
@click.option("--vessel-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.10,
              show_default=True, help="--vessels frangi|sato: share of the field of view labelled vessel.")
@click.pass_context
def vs_snow_cmd(ctx, data_dir, ps, out, seed, release_labels, mapping, batch_size, workers, overwrite, vessels,
                checkpoint, masks_dir, vessel_fraction, **opts):
    """VS-Snow: in each image, a random fraction p of the vessel pixels take the mean of their vessel
    neighbours. No formal privacy guarantee is claimed: measure it with the evaluation.

    \b
    Example:
      medanon anonymize vs-snow --data /data/fundus --p 0.3 --out release-vs-snow
    """
    from medanon.segment.vessels import VesselSource

    source = VesselSource(vessels, checkpoint=checkpoint, masks_dir=masks_dir, fraction=vessel_fraction)
    _run(ctx, "vs-snow", data_dir, ps, out, seed, release_labels, mapping, batch_size, workers, overwrite, opts,
         vessels=source)
