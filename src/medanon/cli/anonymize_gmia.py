"""``medanon anonymize gmia``: GMIA identity-removing latent optimisation, through the release writer."""

from __future__ import annotations

from pathlib import Path

import click

from medanon.anonymize.gmia import GMIAConfig
from medanon.cli.anonymize_ksame import (
    AMP_FLAGS,
    MODEL,
    amp_option,
    check_release_before_work,
)
from medanon.cli.base import CONTEXT, anonymize, note_without_mapping, to_json
from medanon.cli.data import data_dir_argument, data_options
from medanon.cli.library import RELEASE_FLAGS, config_options, default, library_call
from medanon.cli.splits import open_split, split_options

FLAGS = {"losses=": "--losses ", "steps=": "--steps ", "lr=": "--lr ", "margin=": "--margin ",
         "lambda_id=": "--lambda-id ", "lambda_ut=": "--lambda-ut ", "latent_space=": "--latent-space ",
         "batch_size=": "--batch ", "batch=": "--batch ", "identity=": "--identity ", "utility=": "--utility ",
         "open the dataset with size=": "pass --size ", "(map_location=, device=)": "(--device)", **RELEASE_FLAGS,
         **AMP_FLAGS}


@anonymize.command("gmia", context_settings=CONTEXT)
@data_dir_argument(help="Dataset folder to anonymise.")
@click.option("--model", "model_path", type=MODEL, default=None,
              help="Codec checkpoint: co-trained encoder + generator (`medanon train autoencoder --export`), or a "
                   "ReStyle encoder (E-training, GMIA's comparison). Default: the shipped GMIA codec for the data's "
                   "modality (`medanon models`).")
@click.option("--identity", "identity_path", type=MODEL,
              default=None, help="E_id: identity network checkpoint (`medanon train identity`), for L_id. Default: "
                                 "the shipped one for the data's modality.")
@click.option("--utility", "utility_path", type=MODEL,
              default=None, help="E_ut: classifier checkpoint trained on the utility label (`medanon train classifier "
                                 "--label grade|pneumonia`); its penultimate features, for L_ut. Default: the "
                                 "shipped one for the data's modality.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Release folder.")
@click.option("--losses", type=click.Choice(["id+ut", "id", "ut"]), default=None,
              help="GMIA Table 2: both losses (the method), L_id only, or L_ut only." + default(GMIAConfig, "losses"))
@click.option("--steps", type=click.IntRange(min=0), default=None,
              help="Adam steps on W_A; 0 releases the reconstructions G(E(X)) (no anonymisation)."
                   + default(GMIAConfig, "steps"))
@click.option("--lr", type=float, default=None, help="Adam learning rate." + default(GMIAConfig, "lr"))
@click.option("--margin", type=float, default=None,
              help="m of L_id = max(0, cos - m): the identity cosine the optimisation aims below."
                   + default(GMIAConfig, "margin"))
@click.option("--lambda-id", type=float, default=None, help="Weight of L_id." + default(GMIAConfig, "lambda_id"))
@click.option("--lambda-ut", type=float, default=None, help="Weight of L_ut." + default(GMIAConfig, "lambda_ut"))
@click.option("--latent-space", type=click.Choice(["w", "w+"]), default=None,
              help="w: one w offset shared by every layer (the paper's W and official code); w+: one vector per "
                   "layer." + default(GMIAConfig, "latent_space"))
@click.option("--batch", "--batch-size", "batch_size", type=click.IntRange(min=1), default=None,
              help="Images optimised together (speed; other batch sizes change the images by float rounding, in a few "
                   "8-bit pixel values)."
                   + default(GMIAConfig, "batch_size"))
@config_options("GMIAConfig", example="steps=20")
@split_options
@click.option("--release-labels", default=None, metavar="NAME[,NAME...]",
              help="Labels to release.  [default: the utility label only: grade (fundus), pneumonia (X-ray)]")
@click.option("--mapping", type=click.Path(path_type=Path), default=None,
              help="Private record -> source mapping file, outside the release (the evaluation's attacks need it).")
@click.option("--threads", type=click.IntRange(min=0), default=0, help="CPU threads for torch; 0 = torch's default.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@amp_option
@data_options
@click.pass_context
def gmia_cmd(ctx: click.Context, data_dir, model_path, identity_path, utility_path, out, losses, steps, lr, margin,
             lambda_id, lambda_ut, latent_space, batch_size, config_file, overrides, split, splits_csv, split_seed,
             release_labels, mapping, threads, overwrite, **data_opts) -> None:
    """GMIA: each image's latent W_A starts at the encoder's W and is optimised (the networks stay frozen; with a
    spatial-map codec the map's rows, which GMIA does not have, move too) so that the identity network no longer
    matches it to its source while the utility features stay close.
    NO formal privacy guarantee: measure the protection with `medanon evaluate` (linkability, singling out).

    \b
    Example:
      medanon anonymize gmia --data /data/fundus --model cotrained-map-fundus64 \\
            --identity identity-fundus64 --utility classifier-grade-fundus64 \\
            --out release-gmia --mapping private/release-gmia.json
    """
    import torch

    from medanon.cli.models import given_model, shipped_default
    from medanon.config import build

    with library_call(FLAGS):
        cfg = build(GMIAConfig, path=config_file, overrides=overrides, losses=losses, steps=steps, lr=lr,
                    margin=margin, lambda_id=lambda_id, lambda_ut=lambda_ut, latent_space=latent_space,
                    batch_size=batch_size)
    _check_loss_options(cfg.losses, overrides, margin=margin, lambda_id=lambda_id, identity=identity_path,
                        lambda_ut=lambda_ut, utility=utility_path)
    used: dict = {}                              # the manifest's params.model_files, as the Python API writes it
    for given in ((model_path, "model"), (identity_path, "identity"), (utility_path, "utility")):
        given_model(used, given[1], given[0])
    if model_path is None:
        model_path = shipped_default(data_dir, data_opts, "gmia-codec", flag="--model", method="gmia", used=used,
                                     argument="model")
    if identity_path is None and "id" in cfg.losses.split("+"):
        identity_path = shipped_default(data_dir, data_opts, "gmia-identity", flag="--identity", method="gmia",
                                        used=used, argument="identity")
    if utility_path is None and "ut" in cfg.losses.split("+"):
        utility_path = shipped_default(data_dir, data_opts, "gmia-utility", flag="--utility", method="gmia",
                                       used=used, argument="utility")
    check_release_before_work(out, mapping, overwrite, data_dir, data_opts, model_path, identity_path,
                              utility_path, splits_csv)             # before the networks are loaded

    from medanon.anonymize.gmia import GMIA
    from medanon.anonymize.gmia_release import gmia_release
    from medanon.codecs.stylegan import check_amp
    from medanon.runtime import resolve_device

    with library_call(FLAGS):
        device = resolve_device(ctx.obj["device"])
        if device.type == "cpu" and threads:
            torch.set_num_threads(threads)
        gmia = GMIA.from_checkpoints(model_path, identity=identity_path, utility=utility_path, cfg=cfg,
                                     device=device)
        gmia.codec.amp = check_amp(data_opts.pop("amp"), gmia.codec.device)   # autocast of encoder and generator
    g = gmia.codec.generator
    for opt, want in (("size", g.img_resolution), ("channels", str(g.img_channels))):
        if data_opts.get(opt) not in (None, want):
            raise click.BadParameter(f"the codec renders {g.img_channels}x{g.img_resolution}px images",
                                     param_hint=f"--{opt}")
        data_opts[opt] = want
    ds = open_split(data_dir, data_opts, split, splits_csv, split_seed, FLAGS)
    labels = [s.strip() for s in release_labels.split(",") if s.strip()] if release_labels is not None else None
    with library_call(FLAGS):
        path, outcome = gmia_release(ds, out, gmia=gmia, labels=labels, mapping=mapping, overwrite=overwrite,
                                     extra_params={"model_files": used} if used else None)
    note_without_mapping(mapping)
    click.echo(f"wrote {len(ds)} GMIA images ({cfg.losses}, {cfg.steps} steps, m={cfg.margin:g}, "
               f"{cfg.latent_space.upper()}) to {path}")
    click.echo(to_json({"optimisation_outcome": outcome}))
    click.echo("privacy: NO formal guarantee. Measure it: medanon evaluate (linkability, singling out, membership) "
               "with the private --mapping, and an identity network other than --identity.")


def _check_loss_options(losses: str, overrides, **given) -> None:
    """Refuse an option of a loss that ``losses`` does not optimise (``--margin`` with ``--losses ut``): it would
    change nothing, and the user would believe it did."""
    set_keys = {o.split("=", 1)[0].strip() for o in overrides or ()}
    used = set(losses.split("+"))
    for loss, names in (("id", ("margin", "lambda_id", "identity")), ("ut", ("lambda_ut", "utility"))):
        if loss in used:
            continue
        for name in names:
            if given.get(name) is not None or name in set_keys:
                flag = "--" + name.replace("_", "-")
                raise click.BadParameter(f"--losses {losses} optimises no {'identity' if loss == 'id' else 'utility'} "
                                         f"loss, so {flag} would change nothing", param_hint=flag)
