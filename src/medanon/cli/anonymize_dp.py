"""``medanon anonymize dpglow|ldp-image``: ε-LDP releases, in a GLOW latent or on pixels.

Each command parses its options into an :class:`~medanon.api.dp.LDPConfig` (defaults from the
dataclass, then ``--config FILE``, ``--set key=value``, then the options given), makes one library
call (:func:`medanon.api.dp.dpglow`, :func:`medanon.api.dp.ldp_image`), saves the release and prints;
the library's warnings are printed as ``WARNING:`` lines and its errors name the command's flags.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from medanon.api.dp import LDPConfig
from medanon.cli.anonymize_ksame import MODEL, check_release_before_work
from medanon.cli.base import CONTEXT, anonymize, note_without_mapping
from medanon.cli.data import data_dir_argument, data_options, open_from_cli
from medanon.cli.library import RELEASE_FLAGS, config_options, default, library_call
from medanon.cli.models import shipped_default
from medanon.cli.splits import open_split, split_options


class Budget(click.ParamType):
    """A privacy budget: a positive number, or ``inf`` written as such. A number too large for a float (``1e400``)
    would silently become ``inf``, a release without noise: it is refused instead."""

    name = "float"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            x = float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number (e.g. 10, 1e4 or inf)", param, ctx)
        if math.isinf(x) and "inf" not in str(value).strip().lower():
            self.fail(f"{value!r} is beyond a float's range and would be read as inf, a release without noise; "
                      "write inf if that is meant", param, ctx)
        return x


def dp_options(f):
    """Options shared by both mechanisms (privacy-critical ones have no silent default for epsilon)."""
    opts = [
        click.option("--out", type=click.Path(path_type=Path), required=True, help="Release folder."),
        click.option("--epsilon", type=Budget(), default=None,
                     help="Privacy budget per image, or per pixel/latent element with --per-element; 'inf' adds "
                          "no noise (no privacy: a reconstruction baseline).  [required: here or in --config]"),
        click.option("--per-element", "--per-pixel", "per_pixel", is_flag=True, default=None,
                     help="--epsilon is per element (latent element for dpglow, pixel value for ldp-image): the "
                          "image budget is epsilon * D, D = C*H*W, as in the paper's 'ε = 10² · H · W'. Only a way "
                          "to write the image budget: there is no per-pixel guarantee (for DP-GLOW one pixel can "
                          "move every latent element). --per-pixel is an alias."),
        click.option("--clip-box", type=click.Choice(["public", "calibrated"]), default=None,
                     help="public: a data-independent box (pixels [-1, 1]; latent [-4, 4], clipped to alpha of it "
                          "about 0: [-1.6, 1.6] at the default 0.4), no image enters the box (DP-GLOW's flow weights "
                          "still come from its training images); calibrated: per-element min/max of training images "
                          "(the paper), whose leakage the bound does not cover." + default(LDPConfig, "clip_box")),
        click.option("--alpha", type=float, default=None,
                     help="Clip width as a fraction of the box's range (paper Eq. 11).  [default: 0.4; 1 for "
                          "ldp-image with the public box]"),
        click.option("--no-clip", is_flag=True, default=None,
                     help="Only with --epsilon inf: the paper's '∞ without clip' row."),
        click.option("--calibrate-on", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
                     help="--clip-box calibrated: dataset folder whose images give the clip bounds and sensitivities "
                          "(the training set)."),
        click.option("--release-labels", "release_labels", default=None, metavar="A,B",
                     help="Labels to release (comma-separated).  [default: pneumonia for X-ray, grade for fundus]"),
        click.option("--batch", type=click.IntRange(min=1), default=None,
                     help="Images per batch." + default(LDPConfig, "batch")),
        click.option("--seed", "noise_seed", type=int, default=None,
                     help="TESTING ONLY: seeded noise. Anyone who knows or guesses the seed can remove the noise. "
                          "Without it the noise comes from the OS CSPRNG and no seed exists."),
        click.option("--mapping", type=click.Path(path_type=Path), default=None,
                     help="Private record -> source mapping file (outside the release)."),
        click.option("--overwrite", is_flag=True, help="Replace --out if it exists."),
        config_options("LDPConfig", example="epsilon=1"),
        split_options,
    ]
    for o in reversed(opts):
        f = o(f)
    return f


FLAGS = {"give epsilon=": "give --epsilon", "epsilon=math.inf": "--epsilon inf", "epsilon=inf": "--epsilon inf",
         "epsilon=": "--epsilon ", "keep clip=True": "leave --no-clip out", "clip=False": "--no-clip",
         "per_element=True": "--per-element", "clip_box=": "--clip-box ", "calibrate_on": "--calibrate-on",
         "noise_seed=": "--seed ", "alpha=": "--alpha ", "flow_training=": "--flow-training ", "center=": "--center ",
         "batch=": "--batch ",
         "release_labels": "--release-labels", "open the dataset with size=": "pass --size ", **RELEASE_FLAGS}


def _config(config_file, overrides, *, no_clip, **options) -> LDPConfig:
    """The release's LDPConfig: defaults <- --config <- --set <- the options given (checked before any work)."""
    from medanon.config import build

    with library_call(FLAGS):
        return build(LDPConfig, path=config_file, overrides=overrides, clip=False if no_clip else None, **options)


def _calibration(path: Path | None, data_opts: dict, ds):
    """The --calibrate-on dataset, read at the size and channels of the released one."""
    if path is None:
        return None
    return open_from_cli(path, **{**data_opts, "size": ds.size, "channels": str(ds.channels)})


def _report(release, ds, out, mapping) -> None:
    for note in release.notes:
        click.echo(note)
    s, privacy = release.summary, release.privacy
    if s.get("resumed_records"):
        click.echo(f"resuming: {s['resumed_records']} of {len(ds)} images already released")
    from medanon.anonymize.privacy import no_guarantee
    from medanon.evaluate.privacy_text import headline

    why = str(privacy.get("guarantee") or "").partition(":")[2].strip()
    what = ((why if why.startswith("no formal guarantee") else "no formal guarantee" + (f": {why}" if why else ""))
            if no_guarantee(privacy) else headline(privacy))
    click.echo(f"wrote {len(ds)} images to {out} ({release.method}, {what})")
    note_without_mapping(mapping)


@anonymize.command("dpglow", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder to anonymise.")
@click.option("--flow", "flow_path", type=MODEL, default=None,
              help="Flow: a name from `medanon models` (e.g. glow-xray64) or a checkpoint path (flow.pt from "
                   "`medanon train flow`). Default: the shipped flow for the data's modality.")
@click.option("--flow-training", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="The folder the flow was trained on (checked against the digest the flow recorded): released "
                   "images found in it withdraw the guarantee. Without it the statement assumes the flow never saw "
                   "the released people.")
@click.option("--center", type=click.Choice(["zero", "midrange"]), default=None,
              help="Clip-box centre: zero = the standardised prior's mean (not data-derived; decodes more robustly, "
                   "see docs/dpglow.md); midrange = (max + min) / 2 of the training latents (the paper's Eq. 12), with "
                   "--clip-box calibrated only (the public box's midpoint is 0)."
                   + default(LDPConfig, "center"))
@data_options
@dp_options
@click.pass_context
def dpglow_cmd(ctx, data_dir, flow_path, flow_training, out, center, epsilon, per_pixel, clip_box, alpha, no_clip,
               calibrate_on, release_labels, batch, noise_seed, mapping, overwrite, config_file, overrides,
               **data_opts) -> None:
    """DP-GLOW: the Laplace mechanism in a GLOW flow's standardised latent (ε-LDP per image).

    \b
    Example:
      medanon anonymize dpglow --data /data/rsna --flow glow-xray64 --epsilon 100 --per-element \\
            --out release-dpglow --mapping private/release-dpglow.json
    """
    from medanon.api.dp import dpglow, load_flow_for
    from medanon.runtime import resolve_device

    cfg = _config(config_file, overrides, epsilon=epsilon, per_element=per_pixel, clip_box=clip_box, alpha=alpha,
                  no_clip=no_clip, center=center, batch=batch)
    dev = resolve_device(ctx.obj["device"])
    defaulted = flow_path is None               # then the library chooses the same default, and records it so
    if defaulted:
        flow_path = shipped_default(data_dir, data_opts, "dpglow-flow", flag="--flow", method="dpglow")
    check_release_before_work(out, mapping, overwrite, data_dir, data_opts, flow_path, calibrate_on,
                              data_opts.get("splits_csv"))        # before the flow is loaded or a box calibrated
    flow = load_flow_for(flow_path, dev)
    fcfg = flow[0].flow.cfg
    for key, value in (("size", fcfg.resolution), ("channels", fcfg.channels)):
        if data_opts.get(key) not in (None, str(value), value):
            raise click.UsageError(f"--{key} {data_opts[key]}: the flow {flow_path} works on {fcfg.channels}-channel "
                                   f"{fcfg.resolution} px images; leave --{key} out (the flow's is used) or train a "
                                   f"flow at that {key}")
        data_opts[key] = str(value) if key == "channels" else value
    split = [data_opts.pop(k) for k in ("split", "splits_csv", "split_seed")]
    ds = open_split(data_dir, data_opts, *split, FLAGS)
    with library_call(FLAGS):
        # the flow by file (read again, small), so that the manifest's model_files names it (and why it was used)
        release = dpglow(ds, flow=None if defaulted else flow_path, **vars(cfg),
                         calibrate_on=_calibration(calibrate_on, data_opts, ds), noise_seed=noise_seed,
                         release_labels=release_labels, device=dev, flow_training=flow_training)
        release.save(out, mapping=mapping, overwrite=overwrite)
    _report(release, ds, out, mapping)


@anonymize.command("ldp-image", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder to anonymise.")
@data_options
@dp_options
@click.pass_context
def ldp_image_cmd(ctx, data_dir, out, epsilon, per_pixel, clip_box, alpha, no_clip, calibrate_on, release_labels,
                  batch, noise_seed, mapping, overwrite, config_file, overrides, **data_opts) -> None:
    """Image-domain LDP (DP-GLOW's baseline): the Laplace mechanism on clipped pixels (ε-LDP per image).

    \b
    Example:
      medanon anonymize ldp-image --data /data/rsna --epsilon 100 --per-element --out release-ldp
    """
    from medanon.api.dp import ldp_image
    from medanon.runtime import resolve_device

    cfg = _config(config_file, overrides, epsilon=epsilon, per_element=per_pixel, clip_box=clip_box, alpha=alpha,
                  no_clip=no_clip, batch=batch)
    check_release_before_work(out, mapping, overwrite, data_dir, data_opts, calibrate_on,
                              data_opts.get("splits_csv"))        # before any image is read or a box calibrated
    split = [data_opts.pop(k) for k in ("split", "splits_csv", "split_seed")]
    ds = open_split(data_dir, data_opts, *split, FLAGS)
    with library_call(FLAGS):
        settings = {k: v for k, v in vars(cfg).items() if k != "center"}
        release = ldp_image(ds, **settings, calibrate_on=_calibration(calibrate_on, data_opts, ds),
                            noise_seed=noise_seed, release_labels=release_labels,
                            device=resolve_device(ctx.obj["device"]))
        release.save(out, mapping=mapping, overwrite=overwrite)
    _report(release, ds, out, mapping)
