"""``medanon demo``: the main job, on the embedded phantom datasets.

1. generate the fundus and chest X-ray phantoms and split them by patient;
2. write the training split of each as its own dataset folder (what a data team would anonymise);
3. run every method whose model ships in ``checkpoints/`` through the Python API (``medanon.anonymize``;
   each call printed as its equivalent ``$ medanon ...`` command): k-Same-Pixel and k-Same-PCA (and
   k-Centroid and k-SALSA when the inversion encoder ships) at k = 2, 5, 10, GMIA (when its networks
   ship), Snow and VS-Snow at p = 0.1, 0.3, 0.5 on fundus images; DP-GLOW and image-domain LDP at
   ε = 10³, 10², 10¹ per element and GMIA (the paper's modality) on X-rays;
4. audit every release, evaluate them with :func:`medanon.evaluate.harness.evaluate`, and write
   the HTML reports; the X-ray report also holds DP-GLOW Table 3 and its Figs. 4–7 picture
   (:func:`dpglow_study`, on the held-out patients of the shipped flows).

Every number it prints is a PHANTOM result. Each step is skipped when its output exists, so an
interrupted demo resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import click
import yaml

from medanon.config import DataConfig, PhantomConfig, to_dict
from medanon.data.dataset import open_dataset
from medanon.data.records import Record
from medanon.data.splits import split_patients, write_splits_csv
from medanon.data.summary import format_summary, summarize
from medanon.demo_releases import KS, Made, releases_fundus, releases_xray
from medanon.errors import ConfigError, DataError
from medanon.fsutil import atomic_dir, atomic_write_text
from medanon.output_inventory import foreign_files
from medanon.outputs import check_output, write_marker
from medanon.phantoms.generate import generate, recorded_settings
from medanon.runtime import RunDir, resolve_device, seed_everything

MIN_PATIENTS = 20      # per modality: the training split (about 70 %) must hold k = max(KS) = 10 patients
MIN_PATIENTS_EVALUATED = 30   # and two records at k = 10 (21 training patients), the fewest FID and the attacks take

log = logging.getLogger(__name__)


@dataclass
class DemoConfig:
    patients: int = 200                         # phantom patients per modality
    per_patient: int = 4                        # acquisitions per patient
    size: int = 64                              # image side in pixels (the shipped checkpoints are 64 px)
    seed: int = 0                               # seeds phantoms, splits and every method
    device: str = "auto"                        # resolved at run time
    ksalsa_steps: int = 100                     # Adam steps per k-SALSA cluster
    gmia_steps: int | None = None               # Adam steps per GMIA batch (None: the command's default)
    checkpoints: str = ""                       # folder with the shipped checkpoints
    inception: bool = True                      # FID/KID on Inception-v3 (needs medanon[features])


def default_checkpoints() -> Path:
    """The first folder of the model search path holding checkpoints (``$MEDANON_MODELS``, then the source
    checkout's ``checkpoints/``; see :mod:`medanon.models_registry`)."""
    from medanon.models_registry import SOURCE_CHECKPOINTS, models_folder

    return models_folder() or SOURCE_CHECKPOINTS


def _phantoms(cfg: PhantomConfig, out: Path) -> Path:
    """Generate phantom data unless ``out`` already holds the same settings (resume)."""
    info = out / "phantom.json"
    if info.exists():
        settings = json.loads(info.read_text())["settings"]
        if settings == recorded_settings(cfg):
            edited = foreign_files(out)
            if edited:                          # its releases and audits would read data the demo did not make
                raise DataError(f"{out} holds {len(edited)} file(s) changed or added since the demo generated it, "
                                f"e.g. {edited[0]}", files=[str(out / e) for e in edited[:5]],
                                fix=f"move {out} away (the demo then generates its phantoms again) or restore it")
            log.info("reusing phantom data in %s", out)
            return out
        click.echo(f"{out} holds phantoms with other settings: regenerating")
    return generate(cfg, out, overwrite=True, progress=True)


def write_subset(root: Path, records: list[Record], out: Path) -> Path:
    """Copy ``records`` of a medanon-layout dataset into their own dataset folder (atomically), unless ``out``
    already holds exactly these rows (resume); a subset of other rows (other demo settings) is replaced."""
    descriptor = yaml.safe_load((root / "dataset.yaml").read_text())
    root = root.resolve()
    keep = {str(r.path.resolve().relative_to(root)) for r in records}
    lines = (root / descriptor["labels"]).read_text().splitlines()
    header = lines[0].split(",")
    img_col = header.index(descriptor["image_col"])
    mask_col = header.index(descriptor["mask_col"]) if descriptor.get("mask_col") in header else None
    rows = [lines[0], *(line for line in lines[1:] if line.split(",")[img_col] in keep)]
    held = out / descriptor["labels"]
    if (out / "dataset.yaml").exists() and held.is_file() and held.read_text() == "\n".join(rows) + "\n" \
            and _phantom_settings(out) == _phantom_settings(root):
        return out
    with atomic_dir(out, overwrite=True, marker="dataset") as tmp:
        for line in rows[1:]:
            cells = line.split(",")
            for col in (img_col, mask_col):
                if col is not None and cells[col]:
                    (tmp / cells[col]).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(root / cells[col], tmp / cells[col])
        (tmp / descriptor["labels"]).write_text("\n".join(rows) + "\n")
        (tmp / "dataset.yaml").write_text(yaml.safe_dump(descriptor, sort_keys=False))
        if (root / "phantom.json").is_file():          # a part of a phantom is phantom data: its releases say so
            info = json.loads((root / "phantom.json").read_text(encoding="utf-8"))
            info.update(images=len(records), patients=len({r.patient_id for r in records}), subset=True)
            (tmp / "phantom.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def _phantom_settings(folder: Path) -> dict | None:
    info = folder / "phantom.json"
    return json.loads(info.read_text(encoding="utf-8")).get("settings") if info.is_file() else None


# What the demo's data and releases depend on: a change since the last run replaces its releases
RELEASE_SETTINGS = ("patients", "per_patient", "size", "seed", "ksalsa_steps", "gmia_steps", "checkpoints")


RELEASES_MADE = "releases.json"    # modality -> the RELEASE_SETTINGS its releases were all made with


# What the releases state: raised when the privacy statements the methods write change, so that a demo folder made
# by an earlier version remakes its releases instead of reusing statements that are no longer true.
STATEMENTS = 2
FUNDUS_ONLY = ("ksalsa_steps",)      # settings of methods the X-ray releases do not use


def checkpoints_digest(cfg: DemoConfig) -> str:
    """One sha256 over the checkpoint files (a checkpoint retrained or replaced in the same folder, under the same
    name, changes the releases made with it)."""
    from medanon.runtime import files_digest

    ckpt = Path(cfg.checkpoints)
    return files_digest(sorted(ckpt.glob("*.pt")), root=ckpt)["sha256"]


def check_checkpoints(ckpt: Path) -> None:
    """Load every checkpoint of the folder once before any work: a damaged one (a truncated copy, a failed
    download) is named now, not after the releases and evaluations of the checkpoints before it."""
    from medanon.checkpoint import load_checkpoint
    from medanon.errors import MedanonError

    bad = []
    for f in sorted(ckpt.glob("*.pt")):
        try:
            load_checkpoint(f)
        except MedanonError as e:
            bad.append(f"{f.name}: {e.message}")
    if bad:
        raise DataError(f"{len(bad)} checkpoint(s) in {ckpt} cannot be loaded; nothing was made:", files=bad,
                        fix="restore them from the source checkout (git checkout -- checkpoints/) or copy them again")


def release_settings(cfg: DemoConfig, modality: str, checkpoints: str) -> dict:
    """:data:`RELEASE_SETTINGS` of ``cfg`` that ``modality``'s releases depend on, with ``checkpoints``
    (:func:`checkpoints_digest`)."""
    now = to_dict(cfg)
    return {**{k: now[k] for k in RELEASE_SETTINGS if not (modality == "xray" and k in FUNDUS_ONLY)},
            "checkpoint_files": checkpoints, "statements": STATEMENTS}


def stale_modalities(out: Path, cfg: DemoConfig) -> set[str]:
    """The modalities whose releases in ``out`` may have been made with other settings than ``cfg``: those
    :data:`RELEASES_MADE` records with other settings, and, for those it does not record, all when the last run's
    config.yaml differs (an interrupted run, or a folder from before the record)."""
    digest = checkpoints_digest(cfg)
    now = {m: release_settings(cfg, m, digest) for m in ("fundus", "xray")}
    made = _releases_made(out)
    try:
        last = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        last = None
    cfg_now = to_dict(cfg)
    last_differs = isinstance(last, dict) and any(last.get(k) != cfg_now[k] for k in RELEASE_SETTINGS)
    return {m for m in ("fundus", "xray") if (made[m] != now[m] if m in made else last_differs)}


def _releases_made(out: Path) -> dict:
    """What :data:`RELEASES_MADE` records (empty when absent or unreadable)."""
    try:
        made = json.loads((out / RELEASES_MADE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return made if isinstance(made, dict) else {}


def forget_releases_made(out: Path, modality: str) -> None:
    """Drop ``modality`` from :data:`RELEASES_MADE` before its releases are made again: a run interrupted while
    remaking them leaves some of each setting, which the old record would vouch for."""
    made = _releases_made(out)
    if modality in made:
        del made[modality]
        atomic_write_text(out / RELEASES_MADE, json.dumps(made, indent=1, sort_keys=True) + "\n")


def record_releases_made(out: Path, modality: str, cfg: DemoConfig) -> None:
    made = {**_releases_made(out), modality: release_settings(cfg, modality, checkpoints_digest(cfg))}
    atomic_write_text(out / RELEASES_MADE, json.dumps(made, indent=1, sort_keys=True) + "\n")


def report_folder(out: Path, modality: str) -> Path:
    """``out/report-<modality>``, created as medanon's own folder (marked), so that the evaluation may write into
    it after the demo has put the DP-GLOW figure there (a folder medanon cannot recognise is never written)."""
    report = out / f"report-{modality}"
    check_output(report, existing_ok=True, kind="dir", what="report")
    report.mkdir(parents=True, exist_ok=True)
    write_marker(report, "report")
    return report



# The phantom the shipped X-ray flows were trained on (checkpoints/README.md): their held-out patients are the
# test set of DP-GLOW Table 3. The demo's own X-ray patients are its first `--patients` patients, which the
# flows partly saw, so Table 3 is computed on this dataset instead (regenerated, and checked by checksum).
FLOW_PHANTOM = PhantomConfig(modality="xray", patients=400, per_patient=4, size=64, seed=0)


def flow_training_folder(out: Path, ckpt: Path) -> Path | None:
    """``OUT/data/xray-flows``: the phantom the shipped X-ray flow was trained on, regenerated (or reused), or None
    when the flow is not shipped or the regenerated folder's checksum is not the one the flow recorded."""
    from medanon.checkpoint import load_checkpoint
    from medanon.runtime import files_digest
    from medanon.train.flow import KIND as FLOW_KIND

    flow = ckpt / "glow-xray64.pt"
    if not flow.exists():
        return None
    data_dir = _phantoms(FLOW_PHANTOM, out / "data" / "xray-flows")
    recorded = load_checkpoint(flow, kind=FLOW_KIND)["extra"]["data"]["source"]["sha256"]
    ds = open_dataset(data_dir, DataConfig(size=FLOW_PHANTOM.size))
    return data_dir if files_digest([r.path for r in ds.records], root=data_dir)["sha256"] == recorded else None


def dpglow_study(out: Path, ckpt: Path, device, seed: int, test: PhantomConfig | None = None) -> dict | None:
    """DP-GLOW Table 3 and the Figs. 4–7 picture with the shipped flows, on the flows' own held-out patients, or on
    every image of the ``test`` phantom (another seed: people neither flow saw; ``OUT/data/xray-test``).

    Returns None (with a message) when the normal-only flow is not shipped or the regenerated phantom does
    not match the checksum the flow recorded (a changed phantom generator): then no test set is known to be
    unseen by the flows, and no number is better than a biased one."""
    from medanon.evaluate.flow_lr import evaluate_dpglow

    mixture, normal = ckpt / "glow-xray64.pt", ckpt / "glow-xray64-normal.pt"
    if not normal.exists():
        click.echo(f"DP-GLOW Table 3 skipped: {normal} is not shipped")
        return None
    data_dir = flow_training_folder(out, ckpt)
    if data_dir is None:
        click.echo(f"DP-GLOW Table 3 skipped: the regenerated phantom is not the one {mixture.name} was trained on "
                   "(its checksum differs), so its held-out patients are unknown")
        return None
    report = report_folder(out, "xray")          # the figure goes where the X-ray report will be
    test_dir = None if test is None else _phantoms(test, out / "data" / "xray-test")
    result = evaluate_dpglow(data_dir, mixture_flow=mixture, normal_flow=normal,
                             figure=report / "dpglow_markers.png", seed=seed, device=device, test_dir=test_dir)
    if test is not None:
        result["data_note"] = (f"Test set: every image of `medanon phantom --modality xray --patients {test.patients} "
                               f"--per-patient {test.per_patient} --size {test.size} --seed {test.seed}`, people "
                               f"neither flow saw (they were trained on seed {FLOW_PHANTOM.seed}).")
        return result
    result["data_note"] = (f"Test set: the patients of `medanon phantom --modality xray --patients "
                           f"{FLOW_PHANTOM.patients} --per-patient {FLOW_PHANTOM.per_patient} --size "
                           f"{FLOW_PHANTOM.size} --seed {FLOW_PHANTOM.seed}` that the shipped flows held out (their "
                           f"recorded split); the demo's own X-ray patients are a subset of that phantom the flows "
                           f"partly trained on, so they are not used here.")
    return result


def attacker_checkpoint(modality: str, ckpt: Path) -> Path:
    return ckpt / f"identity-attacker-{modality}64.pt"


def independent_checkpoint(modality: str, ckpt: Path) -> Path:
    return ckpt / f"identity-attacker-independent-{modality}24.pt"


def pair_attacker_checkpoints(modality: str, ckpt: Path) -> dict[str, Path]:
    """The Siamese and sex attackers (benchmarks/train_demo_attackers.py), by their ``attacks.*`` setting."""
    return {"siamese_checkpoint": ckpt / f"attacker-siamese-{modality}64.pt",
            "attribute_checkpoint": ckpt / f"attacker-sex-{modality}64.pt"}


# The phantoms the shipped attacker identity networks were trained on (checkpoints/README.md): patients of other
# seeds, so neither the demo's members nor its controls (nor its attacker split) were ever seen by them; the
# independent attacker (ResNet-10 at 24 px, the fast preset's settings) also on other patients than the main one.
ATTACKER_PHANTOM_SEED = 1
INDEPENDENT_PHANTOM_SEED = 2


def eval_config(modality: str, size: int, ckpt: Path, patients: int, per_patient: int, seed: int, *,
                inception: bool = True):
    """The CPU-sized evaluation protocol; at 64 px, the shipped attacker identity network.

    The shipped network (`identity-attacker-<modality>64.pt`, 64 px, 1,500 steps, seed 0) was trained on all 800
    images of a phantom of seed 1, i.e. on patients disjoint from the demo's members, controls and attacker split
    (the demo's phantoms are seed 0): an attacker about as strong as the evaluation's full protocol, without the
    minutes of training, that treats members and controls alike. It is independent of GMIA's E_id (seed 1, other
    data). With ``--seed 1`` its training patients would be the demo's own, so the fast preset trains its own.
    Likewise the independent attacker (`identity-attacker-independent-<modality>24.pt`: ResNet-10, 24 px, 400
    steps, seed 1, as the fast preset would train it, but on all 800 images of a seed-2 phantom instead of the
    demo's 120-image attacker split), which saves training it in every demo run. And the Siamese and sex
    attackers (`attacker-siamese-<modality>64.pt`, `attacker-sex-<modality>64.pt`: the fast preset's settings, on
    all 800 images of the seed-1 phantom instead of the 120-image attacker split)."""
    from dataclasses import replace

    from medanon.evaluate.config import EvalConfig

    cfg = EvalConfig.fast(size=size)
    if not inception:
        cfg = replace(cfg, fidelity=replace(cfg.fidelity, inception=False))
    attacker, indep = attacker_checkpoint(modality, ckpt), independent_checkpoint(modality, ckpt)
    if attacker.exists() and size == 64 and seed != ATTACKER_PHANTOM_SEED:
        cfg = replace(cfg, attacks=replace(cfg.attacks, identity_checkpoint=str(attacker)))
    if indep.exists() and seed != INDEPENDENT_PHANTOM_SEED:
        cfg = replace(cfg, attacks=replace(cfg.attacks, independent_checkpoint=str(indep)))
    shipped = {k: str(p) for k, p in pair_attacker_checkpoints(modality, ckpt).items() if p.exists()}
    if size == 64 and seed != ATTACKER_PHANTOM_SEED and cfg.attacks.attribute == "sex":
        cfg = replace(cfg, attacks=replace(cfg.attacks, **shipped))
    return cfg


def run_demo(out: str | Path, *, patients: int = 200, per_patient: int = 4, size: int = 64, seed: int = 0,
             device: str = "auto", ksalsa_steps: int = 100, gmia_steps: int | None = None,
             checkpoints: str | Path | None = None,
             evaluation: bool = True, inception: bool = True) -> dict:
    from medanon.evaluate.harness import evaluate
    from medanon.release.audit import audit_release

    ckpt = Path(checkpoints) if checkpoints else default_checkpoints()
    cfg = DemoConfig(patients=patients, per_patient=per_patient, size=size, seed=seed, device=device,
                     ksalsa_steps=ksalsa_steps, gmia_steps=gmia_steps, checkpoints=str(ckpt), inception=inception)
    least = MIN_PATIENTS_EVALUATED if evaluation else MIN_PATIENTS
    if patients < least:
        what = (f", and its evaluation needs two records at k = {max(KS)}" if evaluation else "")
        raise ConfigError(f"patients={patients}: the demo releases its training split (about 70 % of the patients) "
                          f"at k = {max(KS)}{what}, which needs at least {least} patients per modality",
                          fix=f"use patients={least} or more" + ("" if not evaluation else
                                                                  f" ({MIN_PATIENTS} without the evaluation)"))
    if size != 64:
        raise ConfigError(f"the demo's shipped checkpoints are 64 px; size={size} is not possible",
                          fix="run the demo at size=64, or train models at your size with `medanon train`")
    if not (ckpt / "glow-xray64.pt").exists():
        raise DataError(f"the shipped checkpoints are not in {ckpt}",
                        fix="run the demo from a medanon source checkout, or pass checkpoints= DIR")
    out = Path(out)
    check_output(out, inputs=[ckpt], existing_ok=True, kind="dir")     # resumes its own folder, nothing else
    check_checkpoints(ckpt)
    seed_everything(seed)
    dev = resolve_device(device)
    cfg.device = str(dev)
    stale = stale_modalities(out, cfg)                 # read before RunDir writes this run's config.yaml
    run = RunDir(out, config=cfg, command="demo", seeds={"phantoms": seed, "splits": seed, "methods": seed},
                 continues=True)                      # a rerun reuses what earlier runs made: their parts are kept
    t_start = time.perf_counter()
    click.echo(f"medanon demo -> {out}   (device {dev}; all results below are on PHANTOM data)")
    results: dict = {"phantom": True, "data": {}, "reports": {}}
    releases: dict[str, list[Path]] = {}
    for modality in ("fundus", "xray"):
        t0 = time.perf_counter()
        pcfg = PhantomConfig(modality=modality, patients=patients, per_patient=per_patient, size=size, seed=seed)
        data_dir = _phantoms(pcfg, out / "data" / modality)
        ds = open_dataset(data_dir, DataConfig(size=size))
        run.record_input(f"{modality}_phantom", data_dir, files=[r.path for r in ds.records])
        stratify = "grade" if modality == "fundus" else "pneumonia"
        assignment = split_patients(ds.records, val=0.15, test=0.15, stratify=stratify, seed=seed)
        splits_csv = out / f"splits_{modality}.csv"
        write_splits_csv(splits_csv, ds.records, assignment)
        train = write_subset(data_dir, [r for r in ds.records if assignment[r.patient_id] == "train"],
                             out / "data" / f"{modality}-train")
        summary = summarize(ds)
        summary["split_patients"] = {s: sum(v == s for v in assignment.values()) for s in ("train", "val", "test")}
        results["data"][modality] = summary
        run.log_metrics(step="phantoms", modality=modality, images=len(ds), seconds=round(time.perf_counter() - t0, 2))
        click.echo(f"\n== {modality} phantom ==\n{format_summary(summary)}")
        click.echo("split     " + ", ".join(f"{k} {v} patients" for k, v in summary["split_patients"].items()))

        click.echo(f"\n== {modality}: anonymising the training split ==")
        t0 = time.perf_counter()
        make = releases_fundus if modality == "fundus" else releases_xray
        if modality in stale and (out / "releases").is_dir():
            click.echo(f"the {modality} releases in {out / 'releases'} were made with other settings: made again")
        made = Made(remake=modality in stale)
        if modality in stale:
            forget_releases_made(out, modality)     # until every release is made with this run's settings
        if modality == "xray":                  # the flow's training phantom: DP-GLOW checks its people against it
            made.flow_training = flow_training_folder(out, ckpt)
        releases[modality] = make(train, out / "releases", ckpt, cfg, made)
        record_releases_made(out, modality, cfg)
        run.log_metrics(step="anonymise", modality=modality, releases=len(releases[modality]),
                        seconds=round(time.perf_counter() - t0, 1), release_seconds=made.times)

        click.echo(f"\n== {modality}: audit ==")
        t0 = time.perf_counter()
        for rel in releases[modality]:
            mapping = rel.with_name(rel.name + ".mapping.json")
            rep = audit_release(rel, mapping=mapping if mapping.exists() else None, source_records=ds.records,
                                source_root=ds.root, source_modality=ds.modality)
            click.echo(f"  {rel.name:<18} {'PASSED' if rep.passed else 'FAILED'}"
                       + "".join(f"; {c.name}: {c.detail}" for c in rep.checks if not c.passed))
            if not rep.passed:
                raise DataError(f"release {rel} failed its audit (the checks that failed are listed above)",
                                fix=f"if {rel} or the demo's data were changed after the release was made, move the "
                                    "release away and run the demo again to make it anew; otherwise this is a bug: "
                                    "please report it")
        run.log_metrics(step="audit", modality=modality, seconds=round(time.perf_counter() - t0, 1))

        if not evaluation:
            continue
        click.echo(f"\n== {modality}: evaluation ==")
        t0 = time.perf_counter()
        report_dir = report_folder(out, modality)
        studies = {}
        if modality == "xray":
            t1 = time.perf_counter()
            study = dpglow_study(out, ckpt, dev, seed)
            if study is not None:
                studies["dpglow_table3"] = study
                # the rows with their N, unit and what the test set is (the report has the whole study)
                results["dpglow_table3"] = {"rows": study["rows"], "images": study["images"],
                                            "patients": study["patients"], "interval": study["interval"],
                                            "test_set": study["data"]["test_set"],
                                            "test_unseen": study["data"]["test_unseen"]}
            run.log_metrics(step="dpglow_table3", seconds=round(time.perf_counter() - t1, 1))
        evaluate(data_dir, releases[modality], report_dir, config=eval_config(modality, size, ckpt, patients,
                                                                              per_patient, seed,
                                                                              inception=inception),
                 splits=splits_csv, device=dev, cache_dir=out / "cache" / modality, studies=studies)
        results["reports"][modality] = str(report_dir / "report.html")
        run.log_metrics(step="evaluate", modality=modality, seconds=round(time.perf_counter() - t0, 1))

    results["seconds"] = round(time.perf_counter() - t_start, 1)
    atomic_write_text(out / "summary.json", json.dumps(results, indent=2) + "\n")
    run.update(seconds=results["seconds"], reports=results["reports"])
    run.finish()
    click.echo(f"\nreports: {', '.join(results['reports'].values())}" if results["reports"] else
               "\nno report: the evaluation was skipped")
    click.echo(f"demo finished in {results['seconds']:.0f} s; wrote {out / 'summary.json'} and {out / 'manifest.json'}")
    return results
