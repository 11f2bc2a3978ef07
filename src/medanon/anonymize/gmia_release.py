"""A GMIA release: the privacy statement, the checks of the networks against the data, and the release writer.

The optimisation itself is :class:`medanon.anonymize.gmia.GMIA`; this module turns its images into a
release folder through :class:`~medanon.release.writer.ReleaseWriter` (random names, per-patient labels,
resume) with the statement :func:`gmia_privacy` (no formal guarantee) in its manifest.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from medanon.anonymize.gmia import GMIA, GMIAConfig, GMIAResult, _concat, summarise
from medanon.anonymize.gmia_networks import frozen
from medanon.anonymize.ldp import release_dataset
from medanon.anonymize.privacy import NoFormalGuarantee, WeakSetting
from medanon.data.dataset import ImageDataset
from medanon.errors import ConfigError, user_stacklevel
from medanon.models.classifier import ResNet
from medanon.models.identity import IdentityNet
from medanon.release.labels import SENSITIVE_LABELS, default_labels, release_labels
from medanon.release.release import reading_params
from medanon.release.sharded import open_release

log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------- privacy


def gmia_privacy(cfg: GMIAConfig, networks: dict[str, Any]) -> dict[str, Any]:
    """The exact privacy statement of a GMIA release (written into its manifest): no formal guarantee."""
    ident = networks.get("identity") or {}
    return {
        "mechanism": ("GMIA latent optimisation (GMIA §2.2): per source image X_R, W_A starts at the encoder's "
                      "latent E(X_R) and Adam minimises lambda_id*max(0, cos(E_id(X_R), E_id(X_A)) - m) + "
                      "lambda_ut*||E_ut(X_R) - E_ut(X_A)||_2 over W_A only (its style rows and, with a spatial-map "
                      "codec, the map's rows, which GMIA does not have; every network frozen) "
                      f"(losses={cfg.losses}, steps={cfg.steps}, "
                      f"m={cfg.margin:g}); the release is X_A = G(W_A), one image per source image"),
        "guarantee": "none: GMIA has no formal privacy guarantee (no differential privacy, no k-anonymity)",
        "epsilon": None, "delta": None, "k": None,
        # what an evaluation needs to tell whether its attacker is this very network (same sha256), or one
        # trained the same way (same training config on the same patients gives the same network)
        "identity_network": {k: ident[k] for k in ("sha256", "embed_dim", "image_size", "train_config")
                             if k in ident},
        "margin_meaning": _margin_meaning(cfg, ident),
        "protection_measured_by": ("the attacks of `medanon evaluate` on this release and its private mapping: "
                                   "linkability (inner and outer risk, TAR at a fixed FAR), singling out (hidden rate, "
                                   "local cloaking) and top-K membership inference. Use an identity network for the "
                                   "evaluation other than this E_id: against E_id itself the outer risk is low by "
                                   "construction and says little about other attackers"),
        "assumptions": [
            "the attacker does not have the models (encoder, generator, E_id, E_ut): the optimisation is "
            "deterministic, so whoever has them and a candidate source image can recompute X_A (exactly with the "
            "same batch size) and link it. "
            "medanon's shipped checkpoints (the defaults) are public: a release made with them does not meet this "
            "assumption",
            "identity is what E_id recognises: features it ignores are not removed",
        ],
        "not_protected": [
            "each released image stands for exactly one source image and keeps its utility features, its label and "
            "whatever the identity network does not encode",
            "images of the same patient may stay linkable to each other (GMIA Table 3 reports a high inner risk)",
            "membership: whether a person's image is in the release (each released image is made from one source "
            "image and keeps more of the person than the identity network's embedding shows; top-K membership "
            "finds sources far above chance on phantoms, docs/gmia.md)",
            "linking by recomputation: whoever has the models and a candidate image reruns GMIA and finds its "
            "released image (exactly with the same batch size, else within a few grey levels in a few pixels; the "
            "models are public when they are medanon's shipped checkpoints)",
            "the sources' count, label distribution and, through the generator, the training data's appearance",
            "labels released with the images are released as they are",
        ],
    }


def _margin_meaning(cfg: GMIAConfig, ident: dict[str, Any]) -> str:
    """What the margin means for this release: a target only where an identity loss was optimised."""
    if cfg.steps == 0:
        return ("no margin applies: no optimisation step was run (steps=0), the release is the reconstruction "
                "G(E(X_R)) and no identity is removed")
    if not cfg.uses_id:
        return (f"no margin applies: no identity loss was optimised (losses={cfg.losses}); nothing pushes the "
                "released image's identity away from its source's, and identity is not removed")
    return (f"an optimisation target, not a bound: the released image's identity embedding under the identity network "
            f"E_id (sha256 {ident.get('sha256', 'n/a')}) is pushed to cosine <= {cfg.margin:g} with its source's. It "
            "says nothing about other recognisers, and is not reached for every image (see optimisation_outcome)")


def check_networks(gmia: GMIA, dataset: ImageDataset) -> list[tuple[str, type[UserWarning]]]:
    """Mismatches between the data and the networks: errors raised, doubts returned with their warning class."""
    g = gmia.codec.generator if hasattr(gmia.codec, "generator") else None
    trained = getattr(gmia.codec, "provenance", {}).get("trained_on")
    if trained is not None:                      # modality, channels and size the codec was trained on
        from medanon.codecs.stylegan import check_model_fits

        check_model_fits(gmia.codec.provenance.get("checkpoint", {}).get("path"), trained, dataset)
    if g is not None and (dataset.size, dataset.channels) != (g.img_resolution, g.img_channels):
        raise ConfigError(f"the codec renders {g.img_channels}x{g.img_resolution}px images, the data are "
                          f"{dataset.channels}x{dataset.size}px", fix=f"open the dataset with size={g.img_resolution}")
    doubts = []
    ut = gmia.utility
    ut_model = getattr(ut, "model", None)
    if isinstance(ut_model, ResNet) and ut_model.cfg.in_channels != dataset.channels:
        raise ConfigError(f"the utility classifier (utility=) takes {ut_model.cfg.in_channels}-channel images, "
                          f"the data have {dataset.channels}",
                          fix="train the classifier on this modality (`medanon train classifier`)")
    label = getattr(ut, "label", None)
    if label in SENSITIVE_LABELS:
        doubts.append((f"the utility network predicts {label!r}: L_ut will PRESERVE that sensitive attribute in "
                       "the released images. Train it on the utility label (grade or pneumonia)", WeakSetting))
    elif label is not None and default_labels(dataset) and label not in default_labels(dataset):
        doubts.append((f"the utility network predicts {label!r}, not this modality's utility label "
                       f"{default_labels(dataset)}", UserWarning))
    id_net = getattr(gmia.identity, "net", None)
    if isinstance(id_net, IdentityNet) and id_net.in_channels != dataset.channels:
        raise ConfigError(f"the identity network (identity=) was trained on {id_net.in_channels}-channel images, the "
                          f"data have {dataset.channels}: on converted images it would not recognise the patients "
                          "whose identity GMIA is to remove",
                          fix="train the identity network on this modality (`medanon train identity`)")
    for name, net in (("identity", gmia.identity), ("utility", gmia.utility)):
        _probe(net, name, dataset, gmia.device)
    return doubts


def _probe(net, name: str, dataset: ImageDataset, device) -> None:
    """One image of the data's shape through a loaded network given as ``name=``: a network that cannot take it, or
    gives no (N, D) features, is refused now rather than as torch's error mid-release."""
    if net is None:
        return
    x = torch.zeros(2, dataset.channels, dataset.size, dataset.size, device=device)
    try:
        # as GMIA runs it (frozen), every submodule's mode restored after: setting the wrapper's own flag back to
        # True left the loaded network's batch norm in training mode for the release
        with frozen(net if isinstance(net, torch.nn.Module) else None), torch.no_grad():
            out = net(x)
    except Exception as e:                               # a user's network: any failure is a wrong argument
        raise ConfigError(f"{name}= cannot take this data's images ({dataset.channels}x{dataset.size}px): "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                          fix=f"pass {name}= the {name} network of this modality (a checkpoint name on `medanon "
                              f"models`, a path, or an {'IdentityEncoder' if name == 'identity' else 'UtilityEncoder'})"
                          ) from None
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or len(out) != 2:
        raise ConfigError(f"{name}= gives {tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__} "
                          "for two images, not (2, D) features", fix=f"pass {name}= a network that maps images to "
                                                                    "feature vectors")


def _sha256(info: dict[str, Any] | None) -> str | None:
    if not info:
        return None
    return info.get("sha256") or (info.get("checkpoint") or {}).get("sha256")


def release_models(gmia: GMIA, networks: dict[str, Any] | None = None) -> dict[str, str]:
    """The manifest's models: each network's checkpoint sha256, or for one given in memory its weights'."""
    from medanon.checkpoint import weights_sha256

    networks = networks if networks is not None else gmia.describe()
    models = {name: sha for name in ("codec", "identity", "utility") if (sha := _sha256(networks[name]))}
    models.update({f"{name}:weights": sha for name in ("codec", "identity", "utility")   # networks given in memory
                   if name not in models and (sha := weights_sha256(getattr(gmia, name))) is not None})
    return models


def gmia_statement(gmia: GMIA, dataset: ImageDataset, networks: dict[str, Any] | None = None, *,
                   warn: bool = True) -> dict[str, Any]:
    """The privacy statement of ``gmia`` releasing ``dataset``: :func:`gmia_privacy`, and what it says of shipped
    models trained on the released people (:func:`gmia_models_overlap`; ``warn``: whether to warn of it)."""
    from medanon.models_shipped import shipped_name
    from medanon.phantoms.provenance import shipped_models_trained_on

    networks = networks if networks is not None else gmia.describe()
    files = {k: v for k, v in release_models(gmia, networks).items() if ":" not in k}
    overlap = shipped_models_trained_on(files, dataset.root, [r.patient_id for r in dataset.records])
    privacy = gmia_privacy(gmia.cfg, networks)
    public = {role: name for role, sha in files.items() if (name := shipped_name(sha)) is not None}
    if public:
        privacy = {**privacy, "public_models": public}
        if warn:
            warnings.warn(f"GMIA with medanon's shipped {', '.join(f'{r} ({n})' for r, n in public.items())}: "
                          "they are public, so whoever has them and a candidate image reruns the optimisation and "
                          "finds its released image; the release's assumption that the attacker does not have the "
                          "models does not hold. Train your own (codec, identity and utility networks) and keep them "
                          "as private as the data", NoFormalGuarantee, stacklevel=user_stacklevel())
    return gmia_models_overlap(privacy, overlap, warn=warn)


def gmia_models_overlap(privacy: dict[str, Any], overlap: dict[str, tuple[int, dict[str, Any]]], *,
                               warn: bool = True) -> dict:
    """The statement of a GMIA release whose shipped models were trained on released people (``overlap``:
    :func:`medanon.phantoms.provenance.shipped_models_trained_on`): GMIA claims no guarantee, but the released images
    then carry what the weights memorised of those people, and the optimisation's identity loss and outcome are
    measured by networks that have seen them. Warns :class:`~medanon.anonymize.privacy.CalibrationOverlap`."""
    from medanon.anonymize.privacy import CalibrationOverlap
    from medanon.phantoms.provenance import overlap_fact

    if not overlap:
        return privacy
    most, files, fact = overlap_fact(overlap)
    if warn:
        warnings.warn(f"{fact}: the released images carry what their weights memorised of them, and the identity "
                      "loss and the optimisation outcome are measured by networks that have seen these people; make "
                      "the phantom with another seed, or train the models on other data", CalibrationOverlap,
                      stacklevel=user_stacklevel())
    return {**privacy, "models_trained_on_released": {"files": sorted(overlap), "released_patients": most},
            "not_protected": [*privacy.get("not_protected", []),
                              f"what {files} memorised of the {most} released patients they were trained on ({fact}; "
                              "the optimisation outcome's identity cosines come from networks that have seen them)"]}


def gmia_release(dataset: ImageDataset, out: str | Path, *,
                 gmia: GMIA,                             # the optimiser (codec, E_id, E_ut, config)
                 labels: Sequence[str] | None = None,    # released labels (default: the utility label only)
                 mapping: str | Path | None = None,      # private record -> source mapping, outside the release
                 overwrite: bool = False,
                 progress: bool = True,
                 extra_params: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Anonymise every record of ``dataset`` with ``gmia`` into the release ``out``; ``extra_params`` go into the
    manifest's params (e.g. ``model_files``: which checkpoints were used and why).

    Resumable: records already written by an interrupted run with the same settings are skipped
    (results do not depend on how the images are batched). Returns the release folder and the
    aggregate outcome of the images optimised in this call (also written into the manifest).
    """
    from medanon.outputs import dataset_inputs
    from medanon.release.writer import check_release_outputs

    check_release_outputs(out, mapping, inputs=dataset_inputs(dataset), overwrite=overwrite)   # before any work
    for message, category in [*check_networks(gmia, dataset), *gmia.cfg.warnings()]:
        warnings.warn(message, category, stacklevel=user_stacklevel())
    names = release_labels(dataset, labels)
    networks = gmia.describe()
    from medanon.data.training_people import public_people

    params = {**gmia.cfg.params(),
              "latent_space": ("W: W_A = E(X_R) + one w_dim offset shared by every synthesis layer (the paper's W)"
                               if gmia.cfg.latent_space == "w" else "W+: one style vector per synthesis layer")
                              + ("; the codec's spatial map (not in the paper) is optimised freely with them"
                                 if networks["codec"].get("latent_space") == "ws+map" else ""),
              "codec": networks["codec"].get("name"),
              "utility_label": networks["utility"].get("label") if networks["utility"] else None,
              **reading_params(dataset)}
    if networks["codec"].get("amp"):             # mixed precision changes the images: part of the settings
        params["amp"] = networks["codec"]["amp"]
    people = public_people(networks["codec"].get("trained_people") or [])   # keyed: the manifest is public
    if people:                                   # whether an evaluation's controls trained the codec
        params["codec_trained_people"] = {"trained_people": people}
    params.update(extra_params or {})
    models = release_models(gmia, networks)
    from medanon.release.release import is_phantom, source_digest

    privacy = gmia_statement(gmia, dataset, networks)

    source = source_digest(dataset)                  # image bytes, record and patient ids, labels
    phantom = is_phantom(dataset)
    parts: list[GMIAResult] = []

    def privatise(images: torch.Tensor, generator=None) -> torch.Tensor:
        res = gmia.anonymise(images)
        parts.append(dataclasses.replace(res, images=res.images[:, :0]))    # the statistics, not the images
        return res.images

    with open_release(out, method="gmia", params=params, privacy=privacy, labels=names,
                      seeds={}, models=models, source=source, phantom=phantom, mapping=mapping,
                      overwrite=overwrite, source_now=lambda: source_digest(dataset)) as writer:
        if len(writer):
            log.info("resuming: %d of %d images already released", len(writer), len(dataset))
        # two batches side by side on a CPU, one torch thread each: each image's optimisation is its own
        release_dataset(dataset, privatise, writer, batch=gmia.cfg.batch_size, device=gmia.device, progress=progress,
                        side_by_side=2)
        if hasattr(writer, "gather"):            # torchrun (release/sharded.py): every process's images
            parts = [p for rank_parts in writer.gather(parts) for p in rank_parts]
        outcome = summarise(_concat(parts), gmia.cfg.margin) if parts else {"images": 0}
        outcome["scope"] = ("images optimised by the last run only" if len(writer) > outcome["images"]
                            else "every released image")
        outcome["measured_with"] = "E_id and E_ut of this run (the optimisation's own networks)"
        writer.privacy["optimisation_outcome"] = outcome
        writer.privacy["randomness"] = "none: the optimisation is deterministic given the models and the image"
    _warn_short_of_margin(outcome, gmia.cfg)
    return Path(out), outcome


SHORT_OF_MARGIN = 0.5           # below this share of images at or below the margin, the release warns


def _warn_short_of_margin(outcome: dict[str, Any], cfg: GMIAConfig) -> None:
    """A WeakSetting warning where fewer than half the images optimised reached the identity margin: the identity
    loss is the method's only push away from the person, and the manifest's outcome is read by few."""
    share = outcome.get("fraction_at_or_below_margin")
    if not cfg.uses_id or cfg.steps == 0 or share is None or share >= SHORT_OF_MARGIN:
        return
    warnings.warn(f"only {share:.0%} of the {outcome['images']} images optimised reached the identity margin "
                  f"m = {cfg.margin:g} in {cfg.steps} steps (E_id's cosine with their source is still above it for "
                  "the rest): raise steps= or lr=, or check the identity network", WeakSetting,
                  stacklevel=user_stacklevel())
