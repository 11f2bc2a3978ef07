"""``medanon anonymize ksalsa|kcentroid|kpixel|kpca|inverted``: the k-Same family (k-SALSA paper).

Each command parses its options into a :class:`~medanon.anonymize.ksame.KSameConfig` (defaults
from the dataclass, then ``--config FILE``, ``--set key=value``, then the options given), makes one
library call, :func:`medanon.api.ksame.ksame_release`, saves the release and prints what it did.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from medanon.anonymize.ksame import KSameConfig
from medanon.api.ksame import ABLATIONS, STYLE_LAYERS
from medanon.cli.base import CONTEXT, FiniteRange, anonymize, note_without_mapping
from medanon.cli.data import data_dir_argument, data_options, open_from_cli
from medanon.cli.library import RELEASE_FLAGS, config_options, default, library_call
from medanon.cli.splits import open_split, split_options

FLAGS = {"features='vgg19', features_weights=PATH (k-SALSA)": "--features vgg19 --features-weights PATH",
         "features_weights=": "--features-weights ", "stratify=": "--stratify ",
         "eye_sides='off'": "--eye-sides off", "eye_sides=": "--eye-sides ",
         "leave stratify out": "leave --stratify out", "needs codec": "needs --model",
         "codec=": "--model ", "map_generator=": "--map-generator ", "map_init='centroid'": "--map-init centroid",
         "map_samples=": "--map-samples ",
         "features=": "--features ", "ablation=": "--ablation ", "fixes lam": "fixes λ (--lam)",
         "leave lam out": "leave --lam out",
         "style_layer=": "--style-layer ", "grid=": "--grid ", "content_layer=": "--content-layer ",
         "views=": "--views ",
         "release_labels": "--release-labels", "open the dataset with size=": "pass --size ",
         "pca_basis=dataset": "--basis-from DIR", "pca_basis=": "--set pca_basis=", "k=": "--k ",
         "use k = ": "use --k ", "drop_remainder=True": "--drop-remainder", "needs features": "needs --features",
         "pca_components=": "--pca-components ", "space=": "--set space=", "lr=": "--lr ", "steps=": "--steps ",
         "open both datasets with the same size= and channels=": "read both with the same --size and --channels",
         **RELEASE_FLAGS}
AMP_FLAGS = {"amp='fp16'": "--amp fp16", "use amp='bf16'": "use --amp bf16", "amp=": "--amp "}
FLAGS.update(AMP_FLAGS)


def amp_option(f):
    """``--amp bf16|fp16``: the codec's encoder and generator under torch.autocast (docs/distributed.md)."""
    return click.option("--amp", type=click.Choice(["off", "bf16", "fp16"]), default="off",
                        help="Mixed precision of the codec's forward passes (inversion, rendering, the k-SALSA/GMIA "
                             "optimisation): bf16 on CPU or GPU, fp16 on CUDA only; results differ from float32 by "
                             "a few 8-bit levels (docs/distributed.md, 'Mixed precision').")(f)





class ModelParam(click.ParamType):
    """A checkpoint by its name on the model search path (``medanon models``; ``.pt`` optional) or by its path."""

    name = "NAME|PATH"

    def convert(self, value, param, ctx):
        from medanon.errors import DataError
        from medanon.models_registry import find_model

        if isinstance(value, Path):
            return value
        try:
            return find_model(value)
        except DataError as e:
            self.fail(f"{value!r} is neither a file nor a model on the search path ({e.fix}); `medanon models` "
                      "lists them", param, ctx)


MODEL = ModelParam()


def check_release_before_work(out, mapping, overwrite: bool, data_dir, data_opts: dict, *reads) -> None:
    """The release's and the mapping's paths checked against everything the command reads (the dataset's files from
    a scan, which decodes no pixel, and ``reads``: models, a splits file) before the data is read or a model loaded."""
    from medanon.cli.data import scan_from_cli
    from medanon.errors import MedanonError
    from medanon.outputs import dataset_inputs
    from medanon.release.writer import check_release_outputs

    try:
        scanned = scan_from_cli(data_dir, **data_opts)
        files = [*dataset_inputs(scanned), *getattr(scanned, "files", ())]
    except MedanonError:
        files = []                               # the data's own error comes when it is opened
    check_release_outputs(out, mapping, overwrite=overwrite,
                          inputs=[data_dir, data_opts.get("labels_csv"), data_opts.get("images_dir"), *reads, *files])


def ksame_options(*, model_required: bool, k: bool = True, seed: bool = True):
    """Options every k-Same command shares (``seed``: the command has a PCA subsample to seed)."""
    def deco(f):
        opts = [
            data_dir_argument(help="Dataset folder to anonymise."),
            click.option("--model", type=MODEL, default=None,
                         help="Inversion codec: a name from `medanon models` or a checkpoint path (ReStyle "
                              "encoder + its generator)."
                              + (" Default: the shipped codec for the data's modality (fundus: "
                                 "restyle-map-fundus64; none ships for X-rays)." if model_required else
                                 " Optional: with it, clusters are formed in its latent space (the paper's "
                                 "setting), else in the PCA space.")),
            click.option("--out", type=click.Path(path_type=Path), required=True, help="Release folder."),
            click.option("--mapping", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Private record -> sources mapping file (must be outside the release)."),
            click.option("--release-labels", default=None, metavar="A,B",
                         help="Labels to release, aggregated per record.  [default: grade for fundus, pneumonia "
                              "for X-ray]"),
            click.option("--overwrite", is_flag=True, help="Replace --out if it exists."),
        ]
        if seed:
            opts.append(click.option("--seed", type=int, default=None,
                                     help="Seeds the PCA subsample (the augmentation noise is secret, never seeded)."
                                          + default(KSameConfig, "seed")))
        if k:
            opts[2:2] = [
                click.option("--k", type=click.IntRange(min=2), default=None,
                             help="People per record, at least: the privacy claim, so it has no default.  "
                                  "[required: here or in --config / --set k=N]"),
                click.option("--stratify", default=None, metavar="LABEL",
                             help="Cluster within strata of LABEL (a patient's worst value), e.g. grade."),
                click.option("--drop-remainder", is_flag=True, default=None,
                             help="Leave out the N mod k leftover patients (the paper) instead of joining them to "
                                  "their nearest clusters."),
                click.option("--eye-sides", type=click.Choice(["auto", "labels", "off"]), default=None,
                             help="Fundus: average left eyes mirrored, as right eyes, and show each record as its "
                                  "patients' majority side; a left eye is one labelled so (laterality), else, with "
                                  "auto, one whose optic disc lies left of the centre. off: the paper's, as they are."
                                  + default(KSameConfig, "eye_sides")),
                click.option("--batch", type=click.IntRange(min=0), default=None,
                             help="Clusters averaged together (0: 32 on the CPU at 64 px, a quarter as many per "
                                  "doubling of the side; 64 on a GPU, halved if it runs out of memory). A speed "
                                  "setting: averages differ only by float rounding."
                                  + default(KSameConfig, "batch")),
            ]
        opts.append(config_options("KSameConfig"))
        opts.append(amp_option)
        opts.append(split_options)
        for o in reversed(opts):
            f = o(f)
        return data_options(f)
    return deco


def view_options(f):
    f = click.option("--view-sigma", type=FiniteRange(min=0), default=None,
                     help="Augmentation noise, relative to the generator prior's W standard deviation."
                          + default(KSameConfig, "view_sigma"))(f)
    return click.option("--views", type=click.IntRange(min=1), default=None,
                        help="Images per cluster: the average and views-1 noisy copies (supplement E)."
                             + default(KSameConfig, "views"))(f)


def _k_given(k, config_file, overrides) -> bool:
    """Whether the command was told k: --k, --set k=N or a --config file with k."""
    import yaml

    if k is not None or any(o.split("=", 1)[0].strip() == "k" for o in overrides):
        return True
    return bool(config_file) and "k" in (yaml.safe_load(Path(config_file).read_text(encoding="utf-8")) or {})


def _run(ctx, method: str, *, data_dir, model, out, mapping, release_labels, overwrite, config_file, overrides,
         data_opts, features=None, salsa=None, basis_from=None, **fields) -> None:
    """Build the config, make the one library call, save, print."""
    from medanon.api.ksame import ksame_release
    from medanon.codecs.stylegan import load_codec
    from medanon.config import build
    from medanon.runtime import resolve_device

    split = [data_opts.pop(k) for k in ("split", "splits_csv", "split_seed")]
    if basis_from is not None:
        fields["pca_basis"] = "separate"
    with library_call(FLAGS, red=method == "inverted"), warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the settings are checked before any work; warned once, below
        cfg = build(KSameConfig, path=config_file, overrides=overrides, method=method, **fields)
    if method != "inverted" and not _k_given(fields.get("k"), config_file, overrides):
        raise click.UsageError("--k is required: the number of people every record stands for is the privacy "
                               "claim, so it has no default (e.g. --k 5)")

    dev = resolve_device(ctx.obj["device"])
    amp = data_opts.pop("amp", "off")
    codec = None
    from medanon.cli.models import given_model, shipped_default

    used: dict = {}                              # the manifest's params.model_files, as the Python API writes it
    if model is None and method in ("ksalsa", "kcentroid", "inverted"):
        model = shipped_default(data_dir, data_opts, "ksame-codec", flag="--model", method=method, used=used,
                                argument="codec")
    elif model is not None:
        given_model(used, "codec", model)
    check_release_before_work(out, mapping, overwrite, data_dir, data_opts, model, basis_from, split[1])
    if model is not None:
        with library_call(FLAGS):
            codec = load_codec(model, map_location=dev, amp=amp)
        res = codec.generator.img_resolution
        if data_opts.get("size") not in (None, res):
            raise click.BadParameter(f"{data_opts['size']} differs from the {res} px the model {model} works at",
                                     param_hint="--size")
        data_opts["size"] = res
        channels = codec.generator.img_channels
        if data_opts.get("channels") not in (None, "0", str(channels)):
            raise click.BadParameter(f"{data_opts['channels']} differs from the {channels} channel(s) the model "
                                     f"{model} works on; leave --channels out", param_hint="--channels")
        data_opts["channels"] = str(channels)
    ds = open_split(data_dir, data_opts, *split, FLAGS)
    basis = None
    if basis_from is not None:                  # k-Same-PCA: the basis from separate data, read like the data
        basis = open_from_cli(basis_from, **{**data_opts, "size": ds.size, "channels": str(ds.channels)})
    net = None
    with library_call(FLAGS, red=method == "inverted"):
        if salsa is not None:                   # k-SALSA: the feature network, the ablation, the layers
            from medanon.api.ksame import apply_ablation, check_layers, feature_network

            net = feature_network(features["name"], weights=features["weights"], input_size=features["size"],
                                  device=dev)
            cfg.salsa = apply_ablation(cfg.salsa, salsa["ablation"], lam_given=salsa["lam"] is not None)
            check_layers(cfg.salsa, net, image_size=ds.size, channels=ds.channels)
        release = ksame_release(ds, cfg, codec=codec, features=net, release_labels=release_labels, pca_basis=basis,
                                device=dev, map_generator=(salsa or {}).get("map_generator"), model_files=used)
        release.save(out, mapping=mapping, overwrite=overwrite)
    note_without_mapping(mapping)
    summary = release.summary
    if summary.get("resumed_records"):
        click.echo(f"resuming: {summary['resumed_records']} records already written")
    click.echo(f"wrote {out}: " + ", ".join(f"{k} {v}" for k, v in summary.items()
                                             if k not in ("pca", "resumed_records")))


@anonymize.command("ksalsa", context_settings=CONTEXT)
@ksame_options(model_required=True)
@click.option("--lam", "lam", type=FiniteRange(0, 1), default=None,
              help="λ, the content weight (style gets 1 - λ)." + default(KSameConfig, "salsa.lam"))
@click.option("--steps", type=click.IntRange(min=0), default=None,
              help="Adam steps per cluster." + default(KSameConfig, "salsa.steps"))
@click.option("--lr", type=FiniteRange(min=0, min_open=True), default=None,
              help="Adam learning rate." + default(KSameConfig, "salsa.lr"))
@click.option("--grid", type=click.IntRange(min=1), default=None,
              help="Patches per side for local styles." + default(KSameConfig, "salsa.style.grid"))
@click.option("--ablation", type=click.Choice(list(ABLATIONS)), default="none",
              help="A variant of Table 4 / supplement D instead of the method.")
@click.option("--features", "features_name", type=click.Choice(list(STYLE_LAYERS)),
              default="efficientnet-lite0", help="Feature network for style and content (vgg19 needs your weights).")
@click.option("--features-weights", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Weights file of the feature network (required for vgg19).")
@click.option("--feature-size", type=click.IntRange(min=32), default=None,
              help="Resize images to this size for the feature network.  [default: the images' own size]")
@click.option("--style-layer", default=None, help="Early layer for Grams.  [default: block1; relu1_2 for vgg19]")
@click.option("--content-layer", default=None, help="Embedding layer for content.  [default: pool]")
@click.option("--map-init", type=click.Choice(["synthetic", "centroid"]), default=None,
              help="A spatial map's start: the members' mean map (the paper's centroid; keeps the grade), or the "
                   "nearest synthetic image's map (one vessel tree, lower FID, loses the grade)."
                   + default(KSameConfig, "salsa.map_init"))
@click.option("--map-generator", default=None,
              help="GAN checkpoint (name or path) the synthetic maps are drawn from.  [default: the shipped one for "
                   "the modality: stylegan2-fundus64-wide]")
@click.option("--map-samples", type=click.IntRange(min=1), default=None,
              help="Synthetic images to choose maps from." + default(KSameConfig, "salsa.map_samples"))
@click.option("--rows", type=click.Choice(["styles", "all"]), default=None,
              help="Latent rows the optimiser moves (all; styles: a spatial map stays as started)."
                   + default(KSameConfig, "salsa.rows"))
@view_options
@click.pass_context
def ksalsa_cmd(ctx, data_dir, model, k, stratify, drop_remainder, eye_sides, batch, out, mapping, release_labels,
               overwrite, seed, config_file, overrides, lam, steps, lr, grid, ablation, features_name, features_weights,
               feature_size, style_layer, content_layer, map_init, map_generator, map_samples, rows, views,
               view_sigma, **data_opts) -> None:
    """k-SALSA: centroid latents refined by local style alignment (Algorithm 1).

    \b
    Example:
      medanon anonymize ksalsa --data /data/fundus --k 5 --model restyle-map-fundus64 \\
            --out release-ksalsa-k5 --mapping private/release-ksalsa-k5.json
    """
    if lam is not None and "lam" in ABLATIONS[ablation]:
        raise click.BadParameter(f"--ablation {ablation} fixes λ", param_hint="--lam")
    _run(ctx, "ksalsa", data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, config_file=config_file, overrides=overrides, data_opts=data_opts,
         features={"name": features_name, "weights": features_weights, "size": feature_size},
         salsa={"ablation": ablation, "lam": lam, "map_generator": map_generator}, salsa__lam=lam,
         salsa__steps=steps, salsa__lr=lr, salsa__style__grid=grid, salsa__content_layer=content_layer,
         salsa__map_init=map_init, salsa__map_samples=map_samples, salsa__rows=rows,
         salsa__style_layer=style_layer or (STYLE_LAYERS[features_name] if features_name != "efficientnet-lite0"
                                            else None),
         k=k, stratify=stratify, drop_remainder=drop_remainder, eye_sides=eye_sides, batch=batch, seed=seed,
         views=views, view_sigma=view_sigma)


@anonymize.command("kcentroid", context_settings=CONTEXT)
@ksame_options(model_required=True)
@view_options
@click.pass_context
def kcentroid_cmd(ctx, data_dir, model, k, stratify, drop_remainder, eye_sides, batch, out, mapping, release_labels,
                  overwrite, seed, config_file, overrides, views, view_sigma, **data_opts) -> None:
    """k-Centroid: the mean latent of each cluster, rendered by the generator.

    \b
    Example:
      medanon anonymize kcentroid --data /data/fundus --k 5 --model restyle-map-fundus64 --out release-kc5
    """
    _run(ctx, "kcentroid", data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, config_file=config_file, overrides=overrides, data_opts=data_opts, k=k,
         stratify=stratify, drop_remainder=drop_remainder, eye_sides=eye_sides, batch=batch, seed=seed, views=views,
         view_sigma=view_sigma)


@anonymize.command("kpixel", context_settings=CONTEXT)
@ksame_options(model_required=False)
@click.pass_context
def kpixel_cmd(ctx, data_dir, model, k, stratify, drop_remainder, eye_sides, batch, out, mapping, release_labels,
               overwrite, seed, config_file, overrides, **data_opts) -> None:
    """k-Same-Pixel: the mean image of each cluster.

    \b
    Example:
      medanon anonymize kpixel --data /data/fundus --k 5 --out release-k5 --mapping private/release-k5.json
    """
    _run(ctx, "kpixel", data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, config_file=config_file, overrides=overrides, data_opts=data_opts, k=k,
         stratify=stratify, drop_remainder=drop_remainder, eye_sides=eye_sides, batch=batch, seed=seed)


@anonymize.command("kpca", context_settings=CONTEXT)
@ksame_options(model_required=False)
@click.option("--pca-components", type=float, default=None,
              help="Principal components kept: a count (e.g. 50) or a variance fraction in (0, 1)."
                   + default(KSameConfig, "pca_components"))
@click.option("--basis-from", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Dataset folder SEPARATE from the released one (e.g. public images) to fit the PCA basis on, so "
                   "that each record depends only on its cluster's images.  [default: the released images]")
@click.pass_context
def kpca_cmd(ctx, data_dir, model, k, stratify, drop_remainder, eye_sides, batch, out, mapping, release_labels,
             overwrite, seed, config_file, overrides, pca_components, basis_from, **data_opts) -> None:
    """k-Same-PCA (k-Same-Eigen): cluster means of the images' principal-component coefficients.

    \b
    Example:
      medanon anonymize kpca --data /data/fundus --k 5 --basis-from /data/public-fundus --out release-kpca5
    """
    _run(ctx, "kpca", data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, config_file=config_file, overrides=overrides, data_opts=data_opts, k=k,
         stratify=stratify, drop_remainder=drop_remainder, eye_sides=eye_sides, batch=batch, seed=seed,
         pca_components=pca_components, basis_from=basis_from)


@anonymize.command("inverted", context_settings=CONTEXT)
@ksame_options(model_required=True, k=False, seed=False)
@click.pass_context
def inverted_cmd(ctx, data_dir, model, out, mapping, release_labels, overwrite, config_file, overrides,
                 **data_opts) -> None:
    """GAN-Inverted: G(E(x)) for every image. NOT anonymised (k = 1): the paper's comparison only.

    \b
    Example:
      medanon anonymize inverted --data /data/fundus --model restyle-map-fundus64 --out release-inv
    """
    _run(ctx, "inverted", data_dir=data_dir, model=model, out=out, mapping=mapping, release_labels=release_labels,
         overwrite=overwrite, config_file=config_file, overrides=overrides, data_opts=data_opts, k=1)
