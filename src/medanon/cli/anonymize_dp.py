"""``medanon anonymize dpglow|ldp-image``: ε-LDP releases, in a GLOW latent or on pixels."""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path

import click

from medanon.cli.base import CONTEXT, anonymize
from medanon.cli.data import data_dir_argument, data_options, open_from_cli

log = logging.getLogger("medanon")


def dp_options(f):
    """Options shared by both mechanisms (privacy-critical ones have no silent default for epsilon)."""
    opts = [
        click.option("--out", type=click.Path(path_type=Path), required=True, help="Release folder."),
        click.option("--epsilon", type=float, required=True,
                     help="Privacy budget per image, or per pixel/latent element with --per-pixel; 'inf' adds "
                          "no noise (no privacy: a reconstruction baseline)."),
        click.option("--per-element", "--per-pixel", "per_pixel", is_flag=True,
                     help="--epsilon is per element (latent element for dpglow, pixel value for ldp-image): the "
                          "image budget is epsilon * D, D = C*H*W, as in the paper's 'ε = 10² · H · W'. Only a way "
                          "to write the image budget: there is no per-pixel guarantee (for DP-GLOW one pixel can "
                          "move every latent element). --per-pixel is the old name."),
        click.option("--clip-box", type=click.Choice(["public", "calibrated"]), default="public", show_default=True,
                     help="public: a data-independent box (pixels [-1, 1]; latent [-4, 4]), nothing private enters "
                          "the mechanism; calibrated: per-element min/max of training images (the paper), whose "
                          "leakage the bound does not cover."),
        click.option("--alpha", type=float, default=None,
                     help="Clip width as a fraction of the box's range (paper Eq. 11).  [default: 0.4; 1 for "
                          "ldp-image with the public box]"),
        click.option("--no-clip", is_flag=True, help="Only with --epsilon inf: the paper's '∞ without clip' row."),
        click.option("--calibrate-on", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
                     help="--clip-box calibrated: dataset folder whose images give the clip bounds and sensitivities "
                          "(the training set)."),
        click.option("--release-labels", "release_labels", default=None, metavar="A,B",
                     help="Labels to release (comma-separated).  [default: pneumonia for X-ray, grade for fundus]"),
        click.option("--batch", type=click.IntRange(min=1), default=32, help="Images per batch."),
        click.option("--seed", "noise_seed", type=int, default=None,
                     help="TESTING ONLY: seeded noise. Anyone who knows or guesses the seed can remove the noise. "
                          "Without it the noise comes from the OS CSPRNG and no seed exists."),
        click.option("--mapping", type=click.Path(path_type=Path), default=None,
                     help="Private record -> source mapping file (outside the release)."),
        click.option("--overwrite", is_flag=True, help="Replace --out if it exists."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _warn_loudly(caught: list[warnings.WarningMessage]) -> None:
    for w in caught:
        click.secho(f"WARNING: {w.message}", fg="yellow", err=True)


def _calibration_images(path: Path | None, data_opts: dict, ds):
    """Images for pixel calibration: --calibrate-on, else the released images themselves (with a warning)."""
    if path is None:
        click.secho("WARNING: no --calibrate-on: the clip bounds come from the images being released; the "
                    "per-element min and max of those images are then outside the privacy guarantee. Pass the "
                    "training set.", fg="yellow", err=True)
        return ds.tensors()[0]
    return open_from_cli(path, **{**data_opts, "size": ds.size, "channels": str(ds.channels)}).tensors()[0]


def _release(ctx, ds, privatiser, *, method, params, privacy, labels, models, data_dir, out, batch, noise_seed,
             mapping, overwrite) -> None:
    from medanon.anonymize.ldp import release_dataset
    from medanon.release import ReleaseWriter
    from medanon.release.labels import release_labels
    from medanon.runtime import files_digest, resolve_device

    dev = resolve_device(ctx.obj["device"])
    chosen = release_labels(ds, labels)
    if noise_seed is not None:
        click.secho(f"WARNING: --seed {noise_seed}: the noise is reproducible from the seed, so the seed must stay "
                    "secret (it is not written to the release). Use this for testing only.", fg="red", err=True)
        privacy = {**privacy, "noise_source": "seeded per-record torch generators (TESTING ONLY; the seed is not "
                                              "recorded and must stay secret)"}
    source = files_digest([r.path for r in ds.records], root=data_dir)
    with ReleaseWriter(out, method=method, params=params, privacy=privacy, labels=chosen, models=models,
                       source=source, phantom=(Path(data_dir) / "phantom.json").is_file(), mapping=mapping,
                       overwrite=overwrite, seeds={}) as writer:
        if len(writer):
            click.echo(f"resuming: {len(writer)} of {len(ds)} images already released")
        release_dataset(ds, privatiser, writer, batch=batch, device=dev, noise_seed=noise_seed)
    click.echo(f"wrote {len(ds)} images to {out} ({method}, epsilon {privacy['epsilon_image']} per image, "
               f"{privacy['epsilon_element']} per element, D = {privacy['D']})")


def _check_budget(epsilon: float, no_clip: bool) -> None:
    if not epsilon > 0:
        raise click.BadParameter(f"{epsilon} is not a positive budget", param_hint="--epsilon")
    if no_clip and math.isfinite(epsilon):
        raise click.BadParameter("--no-clip is only allowed with --epsilon inf (noise without clipping has "
                                 "unbounded sensitivity)", param_hint="--no-clip")


def _params(epsilon, per_pixel, alpha, no_clip, calibration) -> dict:
    return {"epsilon": epsilon if math.isfinite(epsilon) else "inf", "per_pixel": per_pixel, "alpha": alpha,
            "clip": not no_clip, "clip_box": "public" if calibration.public else "calibrated",
            "calibration_sha256": calibration.checksum()}


@anonymize.command("dpglow", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder to anonymise.")
@click.option("--flow", "flow_path", type=click.Path(path_type=Path), required=True,
              help="Flow checkpoint (flow.pt from `medanon train flow`, or checkpoints/glow-xray64.pt).")
@click.option("--center", type=click.Choice(["zero", "midrange"]), default="zero",
              help="Clip-box centre: zero = the standardised prior's mean (not data-derived; decodes more robustly, "
                   "see docs/dpglow.md); midrange = (max + min) / 2 of the training latents (the paper's Eq. 12).")
@data_options
@dp_options
@click.pass_context
def dpglow_cmd(ctx, data_dir, flow_path, out, center, epsilon, per_pixel, clip_box, alpha, no_clip, calibrate_on,
               release_labels, batch, noise_seed, mapping, overwrite, **data_opts) -> None:
    """DP-GLOW: the Laplace mechanism in a GLOW flow's standardised latent (ε-LDP per image)."""
    from medanon.anonymize.dpglow import DPGlow, calibrate_latent
    from medanon.runtime import resolve_device
    from medanon.train.flow import load_flow

    _check_budget(epsilon, no_clip)
    dev = resolve_device(ctx.obj["device"])
    codec, stored, blob = load_flow(flow_path, map_location=dev)
    data_opts["size"] = codec.flow.cfg.resolution
    data_opts["channels"] = str(codec.flow.cfg.channels)
    ds = open_from_cli(data_dir, **data_opts)
    from medanon.anonymize.dpglow import training_overlap
    from medanon.anonymize.ldp import ClipCalibration
    from medanon.runtime import files_digest

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        training_overlap((blob.get("extra") or {}).get("data"), files_digest([r.path for r in ds.records],
                                                                              root=data_dir))
    _warn_loudly(caught)
    if clip_box == "public":
        calibration = ClipCalibration.public_box("glow-eps", codec.dims)
    elif calibrate_on is not None:
        cal_ds = open_from_cli(calibrate_on, **data_opts)
        calibration = calibrate_latent(codec, cal_ds.tensors()[0])
    elif stored is not None:
        calibration = stored
        click.echo(f"calibration: the flow's training set ({stored.count} images, sha256 {stored.checksum()[:12]})")
    else:
        click.secho("WARNING: the flow holds no calibration statistics and no --calibrate-on was given: calibrating "
                    "on the images being released (their min and max are then outside the guarantee).",
                    fg="yellow", err=True)
        calibration = calibrate_latent(codec, ds.tensors()[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dp = DPGlow(codec, calibration, epsilon=epsilon, alpha=alpha, per_element=per_pixel, clip=not no_clip,
                    center=center)
    _warn_loudly(caught)
    _release(ctx, ds, dp, method="dpglow",
             params={**_params(epsilon, per_pixel, alpha, no_clip, calibration), "center": center},
             privacy=dp.privacy(), labels=release_labels, models={"glow": blob["sha256"]}, data_dir=data_dir,
             out=out, batch=batch, noise_seed=noise_seed, mapping=mapping, overwrite=overwrite)
    if codec.diverged:
        click.secho(f"WARNING: the inverse flow diverged on {codec.diverged} images released in this run (decoded "
                    "values beyond ±4 or not finite); each was decoded from its privatised latent shrunk towards the "
                    "prior's mode (post-processing: the guarantee holds) and may look averaged. Try --center zero, "
                    "or a better-trained flow (docs/dpglow.md).", fg="red", err=True)


@anonymize.command("ldp-image", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder to anonymise.")
@data_options
@dp_options
@click.pass_context
def ldp_image_cmd(ctx, data_dir, out, epsilon, per_pixel, clip_box, alpha, no_clip, calibrate_on, release_labels,
                  batch, noise_seed, mapping, overwrite, **data_opts) -> None:
    """Image-domain LDP (DP-GLOW's baseline): the Laplace mechanism on clipped pixels (ε-LDP per image)."""
    from medanon.anonymize.ldp_image import ImageLDP, calibrate_pixels

    _check_budget(epsilon, no_clip)
    ds = open_from_cli(data_dir, **data_opts)
    if clip_box == "public":
        from medanon.anonymize.ldp import ClipCalibration

        calibration = ClipCalibration.public_box("pixel", ds.channels * ds.size * ds.size)
    else:
        calibration = calibrate_pixels(_calibration_images(calibrate_on, data_opts, ds))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ldp = ImageLDP(calibration, epsilon=epsilon, alpha=alpha, per_element=per_pixel, clip=not no_clip)
    _warn_loudly(caught)
    _release(ctx, ds, ldp, method="ldp-image", params=_params(epsilon, per_pixel, alpha, no_clip, calibration),
             privacy=ldp.privacy(), labels=release_labels, models={}, data_dir=data_dir, out=out, batch=batch,
             noise_seed=noise_seed, mapping=mapping, overwrite=overwrite)
