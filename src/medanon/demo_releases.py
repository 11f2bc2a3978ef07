"""The releases of ``medanon demo``: every method whose model ships, through the Python API, each printed as its
equivalent ``$ medanon anonymize ...`` command, skipped when its folder exists (resume) unless the demo's settings
changed since it was made, and timed.

:func:`releases_fundus` and :func:`releases_xray` return the release folders they made or found; ``made`` (a
:class:`Made`) says whether existing releases are stale and collects the seconds of each release made in this run
(the demo logs them with its metrics).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from medanon.codecs.stylegan import load_codec
from medanon.config import DataConfig
from medanon.data.dataset import open_dataset
from medanon.runtime import resolve_device

if TYPE_CHECKING:
    from medanon.demo import DemoConfig
    from medanon.release.release import Release

KS = (2, 5, 10)
SNOW_PS = (0.1, 0.3, 0.5)
EPSILONS = ("1e3", "1e2", "1e1")                 # per element (x D = C*H*W per image)
LATENT_BATCH = 32                               # GMIA images per batch at 64 px on the CPU
# On a GPU the demo's GMIA batches hold up to 512 images (its training splits: 560 fundus, 564 X-ray images), since
# launches, not arithmetic, bound 64 px batches there; batching changes GMIA's result only by float rounding (a
# batch of 6 and one at a time agree to 1e-4, docs/gmia.md).
GPU_LATENT_BATCH = 512
# k-Centroid / k-SALSA clusters per batch: the demo's 70 clusters at k = 2 (140 training patients) in one batch of
# 80 instead of three of 32, fewer and larger batches; k = 5 and 10 fit one batch of 32 already. Batching changes the
# averages only by float rounding (docs/distributed.md).
CLUSTER_BATCH = 80
# The codec of the latent k-Same methods (k-Centroid, k-SALSA) and of their GAN-Inverted reference release: as in
# k-SALSA's paper, a ReStyle encoder trained against a frozen generator. The frozen generator is the one co-trained
# with a spatial latent map (W+ styles plus a 32 x 32 x 2 feature map; checkpoints/README.md), the only one here that
# draws vessels; its reconstructions keep the vessel tree and identity (reconstruction FID 47.7 against 56.1 for the
# co-trained encoder, docs/experiments.md). The releases' manifests name the codec and its latent space
# ("ws+map").
KSAME_CODEC = "restyle-map-fundus64.pt"


def latent_batch(device: str) -> int:
    """GMIA images per batch: :data:`LATENT_BATCH` on the CPU, :data:`GPU_LATENT_BATCH` on a GPU."""
    return LATENT_BATCH if resolve_device(device).type == "cpu" else GPU_LATENT_BATCH


@dataclass
class Made:
    """The releases of one demo run: ``remake`` when the settings they were made with changed (they are replaced,
    not reused), and the seconds of each release made in this run."""

    remake: bool = False
    times: dict[str, float] = field(default_factory=dict)
    flow_training: Path | None = None           # the folder the shipped X-ray flow was trained on (DP-GLOW's check)


def _release(command: str, dest: Path, make: Callable[[], Release], made: Made) -> None:
    """Make and save one release through the Python API unless ``dest`` exists and is not stale; print the
    equivalent command.

    ``make`` builds the :class:`~medanon.release.release.Release` (nothing is computed before ``save``); the
    private mapping goes next to the release (``dest.mapping.json``), outside it. The seconds it took go to
    ``made.times[dest.name]``.
    """
    click.secho("$ medanon " + command + f" --out {dest} --mapping {dest}.mapping.json", fg="cyan")
    if dest.exists() and not made.remake:
        click.echo("  (done already)")
        return
    from medanon.cli.library import library_call

    t0 = time.perf_counter()
    with library_call(command_flags(command)):      # its warnings in the words of the command printed above
        make().save(dest, mapping=dest.with_name(dest.name + ".mapping.json"), overwrite=made.remake)
    made.times[dest.name] = round(time.perf_counter() - t0, 2)


def command_flags(command: str) -> dict[str, str]:
    """The flags of the ``medanon anonymize`` command ``command`` (e.g. ``"anonymize kpca --data D --k 2"``) for
    the library's parameter words its warnings use (``pca_basis=dataset`` -> ``--basis-from DIR``)."""
    from medanon.cli import anonymize_dp, anonymize_gmia, anonymize_ksame, anonymize_snow
    from medanon.cli.library import RELEASE_FLAGS

    by = {**dict.fromkeys(("kpixel", "kpca", "kcentroid", "ksalsa", "inverted"), anonymize_ksame.FLAGS),
          "gmia": anonymize_gmia.FLAGS, **dict.fromkeys(("dpglow", "ldp-image"), anonymize_dp.FLAGS),
          **dict.fromkeys(("snow", "vs-snow"), anonymize_snow.FLAGS)}
    words = command.split()
    return {**RELEASE_FLAGS, **by.get(words[1] if len(words) > 1 else "", {})}


def releases_fundus(data: Path, rel: Path, ckpt: Path, cfg: DemoConfig, made: Made) -> list[Path]:
    import medanon.anonymize as anonymize

    ds = open_dataset(data, DataConfig(size=cfg.size))
    dev = cfg.device
    out: list[Path] = []
    latent = ckpt / KSAME_CODEC
    methods = ["kpixel", "kpca"] + (["kcentroid", "ksalsa"] if latent.exists() else [])
    if not latent.exists():
        click.echo(f"k-Centroid, k-SALSA and GAN-Inverted skipped: {latent} is not shipped")
    codec = None
    for method in methods:
        for k in KS:
            dest = rel / f"{method}-k{k}"
            command = f"anonymize {method} --data {data} --k {k} --seed {cfg.seed}"
            kw = {"k": k, "seed": cfg.seed, "device": dev}
            if method in ("kcentroid", "ksalsa"):
                # CLUSTER_BATCH clusters per batch (see its comment): the averages differ from other batch sizes only
                # by float rounding
                command += f" --model {latent} --batch {CLUSTER_BATCH}"
                codec = codec or load_codec(latent, map_location=resolve_device(dev))
                kw.update(codec=codec, batch=CLUSTER_BATCH)
            if method == "ksalsa":
                command += f" --steps {cfg.ksalsa_steps}"
                kw["steps"] = cfg.ksalsa_steps
            _release(command, dest, lambda m=method, kw=kw: getattr(anonymize, m)(ds, **kw), made)
            out.append(dest)
    if codec is not None:                       # the codec alone, NOT anonymised: what the latent methods start from
        dest = rel / "inverted"
        _release(f"anonymize inverted --data {data} --model {latent}", dest,
                 lambda: anonymize.inverted(ds, codec=codec, device=dev), made)
        out.append(dest)
    out += releases_gmia(ds, data, rel, ckpt, cfg, made)
    unet = ckpt / "unet-vessels64.pt"
    for method in ("snow", "vs-snow"):
        for p in SNOW_PS:
            dest = rel / f"{method}-p{p}"
            # no seed: a public seed would let anyone regenerate the hidden pixels (the release would then state no
            # formal guarantee); the subsets come from secret randomness
            command = f"anonymize {method} --data {data} --p {p}"
            if method == "snow":
                _release(command, dest, lambda p=p: anonymize.snow(ds, p=p, device=dev), made)
            else:
                _release(command + f" --checkpoint {unet}", dest,
                         lambda p=p: anonymize.vs_snow(ds, p=p, checkpoint=unet, device=dev), made)
            out.append(dest)
    return out


GMIA_NETWORKS = {
    "fundus": {"model": "cotrained-map-fundus64.pt", "identity": "identity-fundus64.pt",
               "utility": "classifier-grade-fundus64.pt"},
    "xray": {"model": "cotrained-map-xray64.pt", "identity": "identity-xray64.pt",
             "utility": "classifier-pneumonia-xray64.pt"},
}
GMIA_RELEASE = {"fundus": "gmia", "xray": "gmia-xray"}     # one releases/ folder serves both modalities


def releases_gmia(ds, data: Path, rel: Path, ckpt: Path, cfg: DemoConfig, made: Made,
                  modality: str = "fundus") -> list[Path]:
    """GMIA with the shipped co-trained codec, E_id and E_ut of ``modality`` (GMIA Table 2's setting with both
    losses); the paper's own modality is chest X-ray."""
    import medanon.anonymize as anonymize

    missing = [name for name in GMIA_NETWORKS[modality].values() if not (ckpt / name).exists()]
    if missing:
        click.echo(f"GMIA ({modality}) skipped: {', '.join(missing)} not shipped in {ckpt}")
        return []
    dest = rel / GMIA_RELEASE[modality]
    nets = {opt: ckpt / name for opt, name in GMIA_NETWORKS[modality].items()}
    batch = latent_batch(cfg.device)
    kw = {**nets, "batch": batch, "device": cfg.device}   # batch: speed, and float rounding (docs/gmia.md)
    command = f"anonymize gmia --data {data} " + " ".join(f"--{o} {p}" for o, p in nets.items())
    if cfg.gmia_steps is not None:
        kw["steps"] = cfg.gmia_steps
        command += f" --steps {cfg.gmia_steps}"
    _release(command + f" --batch {batch}", dest, lambda: anonymize.gmia(ds, **kw), made)
    return [dest]


def releases_xray(data: Path, rel: Path, ckpt: Path, cfg: DemoConfig, made: Made) -> list[Path]:
    import medanon.anonymize as anonymize

    ds = open_dataset(data, DataConfig(size=cfg.size))
    out: list[Path] = []
    flow = ckpt / "glow-xray64.pt"
    for method in ("dpglow", "ldp-image"):
        for eps in EPSILONS:
            dest = rel / f"{method}-eps{eps}"
            command = f"anonymize {method} --data {data} --epsilon {eps} --per-element"
            if method == "dpglow":
                seen = made.flow_training
                _release(command + f" --flow {flow}" + (f" --flow-training {seen}" if seen else ""), dest,
                         lambda e=float(eps), seen=seen: anonymize.dpglow(ds, epsilon=e, flow=flow, per_element=True,
                                                                          device=cfg.device, flow_training=seen), made)
            else:
                _release(command, dest, lambda e=float(eps): anonymize.ldp_image(ds, epsilon=e, per_element=True,
                                                                                 device=cfg.device), made)
            out.append(dest)
    return out + releases_gmia(ds, data, rel, ckpt, cfg, made, modality="xray")
