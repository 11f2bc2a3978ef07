"""``medanon anonymize snow|vs-snow``: Snow and VS-Snow releases, one per p.

Each command parses its options into a :class:`~medanon.anonymize.snow.SnowConfig` or
:class:`~medanon.anonymize.snow.VSSnowConfig` (defaults from the dataclass, then ``--config FILE``,
``--set key=value``, then the options given), makes one library call,
:func:`medanon.anonymize.snow.snow_sweep`, and prints; the library's warnings are printed as
``WARNING:`` lines and its errors name the command's flags.
"""

from __future__ import annotations

from pathlib import Path

import click

from medanon.anonymize.snow import SnowConfig, VSSnowConfig
from medanon.cli.anonymize_ksame import MODEL, check_release_before_work
from medanon.cli.base import CONTEXT, FiniteRange, anonymize, note_without_mapping
from medanon.cli.data import data_dir_argument, data_options
from medanon.cli.library import RELEASE_FLAGS, config_options, default, library_call
from medanon.cli.splits import open_split, split_options
from medanon.release.labels import parse_label_list

FLAGS = {"give p=": "give --p", "p=": "--p ", "ps=[0.1, 0.3, 0.5]": "--p 0.1,0.3,0.5", "seed=": "--seed ",
         "fill=": "--fill ", "vessels=": "--vessels ", "masks_dir=": "--masks ",
         "checkpoint=": "--checkpoint ", "vessel_fraction=": "--vessel-fraction ",
         "leave vessel_fraction out": "leave --vessel-fraction out",
         "batch_size=": "--batch ",
         "batch=": "--batch ", "workers=": "--workers ", "open the dataset with channels=": "pass --channels ",
         **RELEASE_FLAGS}


def _parse_ps(values: tuple[str, ...]) -> tuple[float, ...] | None:
    """The p values given as --p (repeated or comma-separated); None when none was given (then the config's)."""
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
    if values and not out:
        raise click.BadParameter("give at least one value", param_hint="--p")
    return tuple(out) or None


def _release_options(cfg_cls, example: str, *, method: str, p_help: str):
    def deco(f):
        opts = [
            data_dir_argument(help="Dataset folder to anonymise."),
            click.option("--p", "ps", multiple=True, metavar="P[,P...]",
                         help=f"{p_help}; repeat or comma-separate for one release each.  [required: here or in "
                              "--config]"),
            click.option("--out", required=True, metavar="DIR",
                         help=f"Release folder; with several p, {{p}} in it is replaced by each "
                              f"(rel/{method}-p{{p}})."),
            click.option("--seed", type=int, default=None,
                         help="TESTING ONLY: seeds every image's random subset (recorded; anyone who knows it "
                              "regenerates the subsets, so the release states no formal guarantee). Without it a "
                              "secret seed is drawn from the operating system and recorded nowhere."),
            click.option("--release-labels", default=None, metavar="NAME[,NAME...]",
                         help="Labels to release. [default: the utility label only: grade (fundus), pneumonia "
                              "(X-ray)]"),
            click.option("--mapping", default=None, metavar="FILE",
                         help="Private record -> source mapping, outside the release ({p} as in --out)."),
            click.option("--batch", "--batch-size", "batch_size", type=click.IntRange(min=1), default=None,
                         help="Images per batch (speed only)." + default(cfg_cls, "batch_size")),
            click.option("--workers", type=click.IntRange(min=1), default=None,
                         help="Threads reading images." + default(cfg_cls, "workers")),
            click.option("--overwrite", is_flag=True, help="Replace existing releases."),
            config_options(cfg_cls.__name__, example=example),
            split_options,
        ]
        for o in reversed(opts):
            f = o(f)
        return data_options(f)
    return deco


def _run(ctx: click.Context, method: str, cfg_cls, *, data_dir: Path, ps, out, seed, release_labels, mapping,
         overwrite, config_file, overrides, opts, **fields) -> None:
    """Build the config, make the one library call, print."""
    from medanon.anonymize.snow import snow_sweep
    from medanon.anonymize.snow_release import release_paths
    from medanon.config import build
    from medanon.runtime import resolve_device

    device = resolve_device(ctx.obj["device"])
    with library_call(FLAGS):
        cfg = build(cfg_cls, path=config_file, overrides=overrides, p=_parse_ps(ps), **fields)
        ps = sorted({float(p) for p in cfg.p})
        outs = release_paths(out, ps)
        maps = release_paths(mapping, ps, name="mapping") if mapping is not None else dict.fromkeys(ps)
        for p in ps:                             # before any image is decoded (--skip-bad decodes them all)
            check_release_before_work(outs[p], maps[p], overwrite, data_dir, opts, opts.get("splits_csv"))
        split = [opts.pop(k) for k in ("split", "splits_csv", "split_seed")]
        ds = open_split(data_dir, opts, *split, FLAGS)
        kw = {"fill": cfg.fill} if method == "snow" else {"vessels": cfg.source()}
        outs = snow_sweep(ds, out, method=method, ps=list(cfg.p), seed=seed, labels=parse_label_list(release_labels),
                          mapping=mapping, device=device, batch_size=cfg.batch_size, workers=cfg.workers,
                          overwrite=overwrite, **kw)
    for p, path in outs.items():
        click.echo(f"p={p:g}: wrote {len(ds)} images to {path}")
    where = "each release's manifest.json" if len(outs) > 1 else "its manifest.json"
    click.echo(f"privacy: no image or patient is protected (see 'privacy' in {where}); measure what the release "
               "reveals with medanon evaluate")
    note_without_mapping(mapping)


@anonymize.command("snow", context_settings=CONTEXT)
@_release_options(SnowConfig, example="fill=grey", method="snow",
                  p_help="Fraction of each image's pixel positions replaced, in (0, 1) (p = 1 would release nothing "
                         "but the fill value)")
@click.option("--fill", default=None, metavar="grey|value:R,G,B|dataset",
              help="grey: constant mid-grey (original Snow; data-independent); value:R,G,B: a constant you supply "
                   "(0-255, e.g. the mean of a public dataset); dataset: per-channel mean of the released images "
                   "(VS-Snow Eq. 1): data-derived, the release then states NO formal guarantee."
                   + default(SnowConfig, "fill"))
@click.pass_context
def snow_cmd(ctx, data_dir, ps, out, seed, release_labels, mapping, batch_size, workers, overwrite, config_file,
             overrides, fill, **opts):
    """Snow: in each image, a random fraction p of the pixel positions is set to the fill value in every
    channel. It protects no image and no patient. With the default grey fill and no --seed the paper's bound holds
    for single pixel positions only: (0, delta)-differential privacy, delta = 1 - round(p*H*W)/(H*W), about 1-p,
    the probability a pixel is released unchanged (the manifest gives it); --fill dataset or --seed: not even that.

    \b
    Example:
      medanon anonymize snow --data /data/fundus --p 0.1,0.3 --out releases/snow-p{p} \\
            --mapping private/snow-p{p}.json
    """
    _run(ctx, "snow", SnowConfig, data_dir=data_dir, ps=ps, out=out, seed=seed, release_labels=release_labels,
         mapping=mapping, overwrite=overwrite, config_file=config_file, overrides=overrides, opts=opts,
         batch_size=batch_size, workers=workers, fill=fill)


@anonymize.command("vs-snow", context_settings=CONTEXT)
@_release_options(VSSnowConfig, example="vessels=frangi", method="vs-snow",
                  p_help="Fraction of each image's vessel pixels replaced (by the mean of their vessel neighbours), in "
                         "(0, 1]")
@click.option("--vessels", type=click.Choice(["unet", "frangi", "sato", "dataset", "files"]), default=None,
              help="Vessel masks: trained U-Net, Frangi / Sato vesselness, the layout's masks, or files in --masks."
                   + default(VSSnowConfig, "vessels"))
@click.option("--checkpoint", type=MODEL, default=None,
              help="--vessels unet: segmenter, a name from `medanon models` or a path.  [default: unet-vessels64]")
@click.option("--masks", "masks_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="--vessels files: folder with one vessel mask per image (same stem, or DRIVE id).")
@click.option("--vessel-fraction", type=FiniteRange(0, 1, min_open=True, max_open=True), default=None,
              help="--vessels frangi|sato: share of the field of view labelled vessel."
                   + default(VSSnowConfig, "vessel_fraction"))
@click.pass_context
def vs_snow_cmd(ctx, data_dir, ps, out, seed, release_labels, mapping, batch_size, workers, overwrite, config_file,
                overrides, vessels, checkpoint, masks_dir, vessel_fraction, **opts):
    """VS-Snow: in each image, a random fraction p of the vessel pixels take the mean of their vessel
    neighbours. No formal privacy guarantee is claimed: measure it with the evaluation.

    \b
    Example:
      medanon anonymize vs-snow --data /data/fundus --p 0.3 --out release-vs-snow
    """
    _run(ctx, "vs-snow", VSSnowConfig, data_dir=data_dir, ps=ps, out=out, seed=seed, release_labels=release_labels,
         mapping=mapping, overwrite=overwrite, config_file=config_file, overrides=overrides, opts=opts,
         batch_size=batch_size, workers=workers, vessels=vessels,
         checkpoint=str(checkpoint) if checkpoint is not None else None,
         masks_dir=str(masks_dir) if masks_dir is not None else None, vessel_fraction=vessel_fraction)
