"""``medanon anonymize ksalsa|kcentroid|kpixel|kpca|inverted``: the k-Same family (k-SALSA paper)."""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from medanon.cli.base import CONTEXT, anonymize
from medanon.cli.data import data_dir_argument, data_options, open_from_cli

ABLATIONS = {                                   # Table 4 and supplement D of the k-SALSA paper
    "none": {},
    "style-only": {"lam": 0.0},
    "content-only": {"lam": 1.0},
    "global-style": {"align": "global"},
    "no-alignment": {"align": "none"},
    "cos-cos": {"match": "cos", "distance": "cos"},
    "mse-mse": {"match": "mse", "distance": "mse"},
}

STYLE_LAYERS = {"efficientnet-lite0": "block1", "vgg19": "relu1_2"}   # the analogue of the paper's "second layer"


def ksame_options(*, model_required: bool, k: bool = True):
    """Options every k-Same command shares."""
    def deco(f):
        opts = [
            data_dir_argument(help="Dataset folder to anonymise."),
            click.option("--model", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                         required=model_required, default=None,
                         help="Inversion codec checkpoint (ReStyle encoder + its generator, e.g. "
                              "checkpoints/restyle-fundus64.pt)."
                              + ("" if model_required else " Optional: with it, clusters are formed in its latent "
                                                           "space (the paper's setting), else in the PCA space.")),
            click.option("--out", type=click.Path(path_type=Path), required=True, help="Release folder."),
            click.option("--mapping", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Private record -> sources mapping file (must be outside the release)."),
            click.option("--release-labels", default=None, metavar="A,B",
                         help="Labels to release, aggregated per record.  [default: grade for fundus, pneumonia "
                              "for X-ray]"),
            click.option("--overwrite", is_flag=True, help="Replace --out if it exists."),
            click.option("--seed", type=int, default=0, help="Seeds the PCA subsample and the augmentation noise."),
        ]
        if k:
            opts[2:2] = [
                click.option("--k", type=click.IntRange(min=1), default=5, help="People per record, at least."),
                click.option("--stratify", default="", metavar="LABEL",
                             help="Cluster within strata of LABEL (a patient's worst value), e.g. grade."),
                click.option("--drop-remainder", is_flag=True,
                             help="Leave out the N mod k leftover patients (the paper) instead of joining them to "
                                  "their nearest clusters."),
                click.option("--batch", type=click.IntRange(min=1), default=8, help="Clusters averaged together."),
            ]
        for o in reversed(opts):
            f = o(f)
        return data_options(f)
    return deco


def view_options(f):
    f = click.option("--view-sigma", type=click.FloatRange(min=0), default=0.25,
                     help="Augmentation noise, relative to the generator prior's W standard deviation.")(f)
    return click.option("--views", type=click.IntRange(min=1), default=1,
                        help="Images per cluster: the average and views-1 noisy copies (supplement E).")(f)


def _run(ctx, cfg, *, data_dir, model, out, mapping, release_labels, overwrite, features=None, data_opts) -> None:
    from medanon.anonymize.ksame import (
        manifest_params,
        model_checksums,
        privacy_statement,
        release_ksame,
        seeds_used,
    )
    from medanon.codecs.stylegan import load_codec
    from medanon.release import ReleaseWriter
    from medanon.release.labels import release_labels as choose_release_labels
    from medanon.runtime import files_digest, resolve_device

    dev = resolve_device(ctx.obj["device"])
    codec = None
    if model is not None:
        codec = load_codec(model, map_location=dev)
        res = codec.generator.img_resolution
        if data_opts.get("size") not in (None, res):
            raise click.BadParameter(f"{data_opts['size']} differs from the {res} px the model {model} works at",
                                     param_hint="--size")
        data_opts["size"] = res
        data_opts["channels"] = str(codec.generator.img_channels)
    ds = open_from_cli(data_dir, **data_opts)
    labels = choose_release_labels(ds, release_labels)
    unknown = [n for n in labels if n not in ds.label_names]
    if unknown:
        raise click.BadParameter(f"unknown label(s) {unknown}; the dataset has {ds.label_names}",
                                 param_hint="--release-labels")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg.validate()
        params = manifest_params(cfg, codec=codec, features=features)
        with ReleaseWriter(out, method=cfg.method, params=params, privacy=privacy_statement(cfg, None),
                           labels=labels, seeds=seeds_used(cfg, codec=codec),
                           models=model_checksums(codec, features),
                           source=files_digest([r.path for r in ds.records], root=data_dir),
                           phantom=(Path(data_dir) / "phantom.json").is_file(), mapping=mapping,
                           overwrite=overwrite) as writer:
            if len(writer):
                click.echo(f"resuming: {len(writer)} records already written")
            summary = release_ksame(ds, writer, cfg, codec=codec, features=features, device=dev)
            writer.privacy.update(clusters=summary.get("clusters"), dropped_images=summary.get("dropped_images", 0))
    for w in caught:
        click.secho(f"WARNING: {w.message}", fg="red" if cfg.method == "inverted" else "yellow", err=True)
    click.echo(f"wrote {out}: " + ", ".join(f"{k} {v}" for k, v in summary.items() if k != "pca"))


def _config(method, k=5, stratify="", drop_remainder=False, batch=8, seed=0, **kw):
    from medanon.anonymize.ksame import KSameConfig

    return KSameConfig(method=method, k=k, stratify=stratify, drop_remainder=drop_remainder, batch=batch, seed=seed,
                       **kw)


@anonymize.command("ksalsa", context_settings=CONTEXT)
@ksame_options(model_required=True)
@click.option("--lam", "lam", type=click.FloatRange(0, 1), default=None,
              help="λ, the content weight (style gets 1 - λ).  [default: 0.3]")
@click.option("--steps", type=click.IntRange(min=0), default=100, help="Adam steps per cluster.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=0.1, help="Adam learning rate.")
@click.option("--grid", type=click.IntRange(min=1), default=4, help="Patches per side for local styles.")
@click.option("--ablation", type=click.Choice(list(ABLATIONS)), default="none",
              help="A variant of Table 4 / supplement D instead of the method.")
@click.option("--features", "features_name", type=click.Choice(["efficientnet-lite0", "vgg19"]),
              default="efficientnet-lite0", help="Feature network for style and content (vgg19 needs your weights).")
@click.option("--features-weights", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Weights file of the feature network (required for vgg19).")
@click.option("--feature-size", type=click.IntRange(min=32), default=None,
              help="Resize images to this size for the feature network.  [default: the images' own size]")
@click.option("--style-layer", default=None, help="Early layer for Grams.  [default: block1; relu1_2 for vgg19]")
@click.option("--content-layer", default=None, help="Embedding layer for content.  [default: pool]")
@view_options
@click.pass_context
def ksalsa_cmd(ctx, data_dir, model, k, stratify, drop_remainder, batch, out, mapping, release_labels, overwrite,
               seed, lam, steps, lr, grid, ablation, features_name, features_weights, feature_size, style_layer,
               content_layer, views, view_sigma, **data_opts) -> None:
    """k-SALSA: centroid latents refined by local style alignment (Algorithm 1)."""
    from medanon.anonymize.salsa import SalsaConfig
    from medanon.anonymize.style import StyleConfig
    from medanon.models.features import get_feature_network
    from medanon.runtime import resolve_device

    ab = dict(ABLATIONS[ablation])
    if lam is not None and "lam" in ab:
        raise click.BadParameter(f"--ablation {ablation} fixes λ", param_hint="--lam")
    lam = ab.pop("lam", SalsaConfig.lam if lam is None else lam)
    style = StyleConfig(grid=grid, **ab)
    net = get_feature_network(features_name, device=resolve_device(ctx.obj["device"]), weights=features_weights,
                              input_size=feature_size)
    layers = net.layers
    s_layer = style_layer or STYLE_LAYERS[features_name]
    c_layer = content_layer or net.embedding_layer
    for name, value in (("--style-layer", s_layer), ("--content-layer", c_layer)):
        if value not in layers:
            raise click.BadParameter(f"{value!r} is not a layer of {features_name}; choose from {', '.join(layers)}",
                                     param_hint=name)
    salsa = SalsaConfig(lam=lam, steps=steps, lr=lr, style_layer=s_layer, content_layer=c_layer, style=style)
    cfg = _config("ksalsa", k, stratify, drop_remainder, batch, seed, views=views, view_sigma=view_sigma, salsa=salsa)
    _run(ctx, cfg, data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, features=net, data_opts=data_opts)


@anonymize.command("kcentroid", context_settings=CONTEXT)
@ksame_options(model_required=True)
@view_options
@click.pass_context
def kcentroid_cmd(ctx, data_dir, model, k, stratify, drop_remainder, batch, out, mapping, release_labels, overwrite,
                  seed, views, view_sigma, **data_opts) -> None:
    """k-Centroid: the mean latent of each cluster, rendered by the generator (k-Same-Net style)."""
    cfg = _config("kcentroid", k, stratify, drop_remainder, batch, seed, views=views, view_sigma=view_sigma)
    _run(ctx, cfg, data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, data_opts=data_opts)


@anonymize.command("kpixel", context_settings=CONTEXT)
@ksame_options(model_required=False)
@click.pass_context
def kpixel_cmd(ctx, data_dir, model, k, stratify, drop_remainder, batch, out, mapping, release_labels, overwrite,
               seed, **data_opts) -> None:
    """k-Same-Pixel: the mean image of each cluster."""
    cfg = _config("kpixel", k, stratify, drop_remainder, batch, seed)
    _run(ctx, cfg, data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, data_opts=data_opts)


@anonymize.command("kpca", context_settings=CONTEXT)
@ksame_options(model_required=False)
@click.option("--pca-components", type=float, default=0.9,
              help="Principal components kept: a count (e.g. 50) or a variance fraction in (0, 1).")
@click.pass_context
def kpca_cmd(ctx, data_dir, model, k, stratify, drop_remainder, batch, out, mapping, release_labels, overwrite,
             seed, pca_components, **data_opts) -> None:
    """k-Same-PCA (k-Same-Eigen): cluster means of the images' principal-component coefficients."""
    cfg = _config("kpca", k, stratify, drop_remainder, batch, seed, pca_components=pca_components)
    _run(ctx, cfg, data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, data_opts=data_opts)


@anonymize.command("inverted", context_settings=CONTEXT)
@ksame_options(model_required=True, k=False)
@click.pass_context
def inverted_cmd(ctx, data_dir, model, out, mapping, release_labels, overwrite, seed, **data_opts) -> None:
    """GAN-Inverted: G(E(x)) for every image. NOT anonymised (k = 1): the paper's comparison only."""
    cfg = _config("inverted", k=1, seed=seed)
    _run(ctx, cfg, data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, data_opts=data_opts)
