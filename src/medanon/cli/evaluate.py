"""``medanon evaluate``: fidelity, utility and privacy attacks of releases against the real data, as a report."""

from __future__ import annotations

from pathlib import Path

import click

from medanon.cli.anonymize_ksame import MODEL
from medanon.cli.base import CONTEXT, cli
from medanon.cli.data import declared_from_cli, file_options, layout_options
from medanon.cli.words import speaks_flags

# the evaluation's parameters as this command's flags (library messages name parameters)
FLAGS = {"mapping= file": "--mapping NAME=FILE", "splits= CSV": "--splits CSV", "split_seed=": "--split-seed",
         "release folder in releases=": "--release DIR", "size=": "--size ", "fidelity.samples=": "--fid-samples ",
         "lower fidelity.samples": "lower --fid-samples",
         "or attacks.identity_checkpoint='' to train": "or leave --identity out to train",
         "attacks.identity_checkpoint=": "--identity ",
         "fidelity.max_samples=": "--set fidelity.max_samples=",
         "or the config's split.seed": "or --split-seed",
         "(anonymise medanon.split_dataset(...)['train'])": "(`medanon anonymize ... --split train --splits CSV`)"}


def _mappings(items: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for item in items:
        if "=" not in item:
            raise click.BadParameter(f"{item!r} must look like RELEASE_NAME=FILE", param_hint="--mapping")
        name, path = item.split("=", 1)
        if not Path(path).is_file():
            raise click.BadParameter(f"mapping file {path} does not exist", param_hint="--mapping")
        out[name.strip()] = Path(path)
    return out


@cli.command(context_settings=CONTEXT)
@click.option("--real", "real_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="The real dataset the releases were made from (any layout medanon reads; the layout options "
                   "below describe it, as for every command that reads a dataset).")
@layout_options
@file_options
@click.option("--release", "releases", type=click.Path(exists=True, file_okay=False, path_type=Path), multiple=True,
              required=True, help="A release folder (repeatable).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Report folder: report.html, report.json, manifest.json, cache/ (re-running resumes).")
@click.option("--splits", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Splits CSV the releases were made with (record_id, patient_id, split), e.g. the demo's "
                   "splits_fundus.csv. Without it the split is recomputed from --split-seed.")
@click.option("--split-seed", type=int, default=None, help="Seed of the patient-level split.  [default: 0]")
@click.option("--mapping", "mappings", multiple=True, metavar="NAME=FILE",
              help="Private mapping of the release named NAME (default: <release>.mapping.json beside the release "
                   "folder, where there is one; anonymize writes a mapping only where its --mapping says). "
                   "Without it no attack that needs to know whose images a record stands for runs (membership, "
                   "linkability, singling out, differencing, attribute inference unless the release publishes the "
                   "attribute): the report then gives fidelity, utility and the near-copy screen.")
@click.option("--preset", type=click.Choice(["full", "fast", "tiny"]), default="full",
              help="full: 3 seeds of 300-step classifiers at 64 px, FID on up to 1000 images; fast: CPU-sized "
                   "(utility by a linear probe on frozen EfficientNet-Lite0 features, 2 seeds; 150-step attribute "
                   "classifier in bf16 where the CPU/GPU computes it natively; a 400-step identity network at 32 px; "
                   "FID on up to 50 images); tiny: checks that everything runs on a tiny phantom (no Inception "
                   "FID, only the in-domain FD; 20-step classifiers, 32 px): its numbers are not a measurement.")
@click.option("--size", type=click.IntRange(16, 1024), default=None,
              help="Evaluation image side.  [default: 64; 32 with --preset tiny]")
@click.option("--fid-samples", type=click.IntRange(min=0), default=None,
              help="Released images per method for FID/KID (0 = the smallest release).")
@click.option("--no-inception", is_flag=True, help="Skip FID/KID on Inception-v3 (the slow part on a CPU).")
@click.option("--seeds", default=None, help="Comma-separated utility seeds, e.g. 0,1,2.")
@click.option("--identity", "identity_ckpt", type=MODEL, default=None,
              help="A trained identity network (`medanon train identity`; a name from `medanon models` or a path) "
                   "instead of training one.")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Cache for what is computed from the real data alone (default: OUT/cache).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="YAML file with EvalConfig fields (see medanon.evaluate.config).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a config field, e.g. --set utility.classifier.steps=500 (repeatable).")
@click.option("--overwrite", is_flag=True,
              help="Replace the report of another evaluation in --out (a report of the same real data whose releases "
                   "are all evaluated again is extended without it).")
@click.pass_context
@speaks_flags(FLAGS)
def evaluate(ctx: click.Context, real_dir, releases, out, splits, split_seed, mappings, preset, size, fid_samples,
             no_inception, seeds, identity_ckpt, cache_dir, config_file, overrides, overwrite, **read_opts) -> None:
    """Evaluate release folders against the real data they were made from: FID/KID and an in-domain Fréchet
    distance, downstream classifiers (train on the release, test on held-out real images), and the privacy
    attacks (membership, attribute inference, linkability, singling out) with their controls. Writes a JSON
    report and a self-contained HTML page.

    \b
    The releases must hold only the source split's patients (anonymize ... --split train --splits
    private/splits.csv): the held-out patients are the attacks' controls and the utility's test set.

    \b
    Example:
      medanon evaluate --real /data/fundus --release release-k5 --release release-snow \\
            --mapping release-k5=private/release-k5.json \\
            --mapping release-snow=private/release-snow.json --splits private/splits.csv --out report
    """
    from medanon.config import apply_overrides, from_dict, load_yaml, to_dict, validate
    from medanon.evaluate.config import EvalConfig
    from medanon.evaluate.config import preset as preset_config
    from medanon.evaluate.harness import ReleaseSpec
    from medanon.evaluate.harness import evaluate as run_evaluation
    from medanon.runtime import resolve_device

    base = preset_config(preset, size=size)
    data = to_dict(base)
    if config_file is not None:
        data = _merge(data, load_yaml(config_file))
    data = apply_overrides(data, overrides)
    overridden = {item.split("=", 1)[0].strip() for item in overrides}
    given = {"size": size, "split.seed": split_seed, "fidelity.samples": fid_samples,
             "fidelity.inception": True if no_inception else None, "utility.seeds": seeds,
             "attacks.identity_checkpoint": identity_ckpt}
    twice = sorted(k for k, v in given.items() if v is not None and k in overridden)
    if twice:                                    # the option would win and the override go unchecked
        raise click.UsageError(f"{', '.join(twice)} set twice: by --set and by its own option; give each setting "
                               "once")
    if size is not None:
        data["size"] = size
    if split_seed is not None:
        from medanon.cli.splits import check_split_seed

        check_split_seed(splits, split_seed)
        data["split"]["seed"] = split_seed
    if fid_samples is not None:
        data["fidelity"]["samples"] = fid_samples
    if no_inception:
        data["fidelity"]["inception"] = False
    if seeds is not None:
        try:
            data["utility"]["seeds"] = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            raise click.BadParameter(f"{seeds!r} is not a comma-separated list of integers",
                                     param_hint="--seeds") from None
    if identity_ckpt is not None:
        data["attacks"]["identity_checkpoint"] = str(identity_ckpt)
    cfg = from_dict(EvalConfig, data)
    validate(cfg)
    maps = _mappings(mappings)
    unknown = set(maps) - {r.name for r in releases}
    if unknown:
        raise click.BadParameter(f"no --release is named {', '.join(sorted(unknown))}: NAME in NAME=FILE is a release "
                                 f"folder's name, not its path (here: {', '.join(sorted(r.name for r in releases))})",
                                 param_hint="--mapping")
    from medanon.cli.base import check_outputs

    check_outputs((out, "dir", "--out"), (cache_dir, "dir", "--cache"), data_dir=real_dir, opts=read_opts,
                  reads=[*releases, splits, identity_ckpt, *maps.values()], existing_ok=True)   # resumes its own
    specs = [ReleaseSpec(r, mapping=maps.get(r.name)) for r in releases]
    device = resolve_device(ctx.obj["device"])
    if preset == "full" and device.type == "cpu" and \
            ctx.get_parameter_source("preset") == click.core.ParameterSource.DEFAULT:
        click.echo("note: the default --preset full trains 3 seeds of 300-step classifiers per task and release and "
                   "every attack network, the papers' protocol, which is slow on a CPU; --preset fast is sized for "
                   "CPUs (a linear probe, 2 seeds, shorter attackers), --preset full says you chose it", err=True)
    with declared_from_cli(real_dir, **read_opts):
        rep = run_evaluation(real_dir, specs, out, config=cfg, splits=splits,
                             device=device, cache_dir=cache_dir, progress=True,
                             overwrite=overwrite)
    click.echo(f"wrote {out / 'report.html'} and {out / 'report.json'} ({len(rep['releases'])} releases, "
               f"{rep['seconds']} s)" + ("; PHANTOM data: phantom results" if rep["phantom"] else ""))


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
