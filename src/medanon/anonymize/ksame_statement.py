"""What a k-Same release records: its privacy statement, method parameters, seeds and model checksums.

Written into the release manifest by :func:`medanon.api.ksame.ksame_release`; the parameters are
also the resume check (they must not change between an interrupted run and its resumption).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medanon.anonymize.clustering import Clustering
from medanon.anonymize.ksame_config import KSameConfig
from medanon.data.overlap import COMPARED


def privacy_statement(cfg: KSameConfig, clustering: Clustering | None, *, labels: Sequence[str] = (),
                      uses_models: bool = False, mean_map: bool = False, modality: str | None = None
                      ) -> dict[str, Any]:
    """The manifest's privacy field. ``labels``: the labels released next to the images; ``uses_models``: the
    records are computed through trained networks (a codec, a feature network); ``mean_map``: the codec's latent
    carries a spatial map (:func:`local_average`); ``modality``: the data's (fundus photographs are averaged as right
    eyes, :func:`eye_sides_applies`)."""
    from medanon.data.labels import spec
    from medanon.release.labels import SENSITIVE_LABELS

    counted = [n for n in labels if spec(n).kind != "continuous"]
    means = [n for n in labels if spec(n).kind == "continuous"]
    sensitive = [n for n in labels if n in SENSITIVE_LABELS]
    if cfg.method == "inverted":
        return {"guarantee": "none: GAN-Inverted releases G(E(x)) for every image, one record per person's image; "
                             "it is the paper's non-anonymous comparison, not a de-identification",
                "k": 1,
                "not_protected": ["everything: each released image is the codec's reconstruction of one source "
                                  "image and resembles it"]}
    private_basis = cfg.method == "kpca" and cfg.pca_basis == "private"
    computed = ("every released image is computed from the images of one cluster and the PCA basis (mean image and "
                "components), which is fitted on the whole private dataset being released (up to "
                f"{cfg.pca_fit_max} of its images): a record therefore also depends on images outside its cluster"
                if private_basis else
                "every released image is computed only from the images of one cluster"
                + (" and a PCA basis fitted on separate data" if cfg.method == "kpca" else ""))
    released = ("each released patient is in exactly one cluster; the leftover patients (N mod k, and strata with "
                "fewer than k patients) are dropped: none of their images is released"
                if cfg.drop_remainder else "each patient is in exactly one cluster")
    out: dict[str, Any] = {
        "guarantee": f"k-anonymity of records: {computed}, and every cluster holds all images of at least "
                     f"k={cfg.k} distinct patients; {released}"
                     + (f"; each cluster gives {cfg.views} images (augmented views of one average)"
                        if cfg.views > 1 else ""),
        "k": cfg.k, "unit": "patient (as identified by the source's patient ids)",
        "assumptions": ["the source's patient ids are correct: one id per person, one person per id",
                        "this is the only release of these patients' images: the guarantee is per release, and "
                        "two releases whose groups overlap (another k, method, split or subset) can be differenced",
                        *(["the models (codec, feature network) were not trained on the released patients' images, "
                           "or what they memorised of them is accepted as outside this guarantee; the guarantee does "
                           "not need the models to be secret (medanon's shipped checkpoints are public and were "
                           "trained on phantoms)"] if uses_models else []),
                        *([f"the separate basis data hold no image of the released patients (medanon refuses a "
                           f"basis that shares a released image or patient, {COMPARED})"]
                          if cfg.method == "kpca" and cfg.pca_basis == "separate" else [])],
        "not_guaranteed": "k-anonymity does not bound what can be inferred about a cluster member from the average "
                          "(it is not differential privacy); measure it with the top-K membership attack of "
                          "`medanon evaluate` (modelled on k-SALSA §4.5 with medanon's identity network, not the "
                          "paper's classifier; docs/evaluation.md)",
        "labels": ("aggregated per patient (each patient counts once, whatever their number of images); a label "
                   "that is the same for every patient of a record discloses each member's value (homogeneity)"
                   + (f": with stratify={cfg.stratify!r} every record is homogeneous in {cfg.stratify}, so its "
                      f"released {cfg.stratify} is each member's (worst) {cfg.stratify}" if cfg.stratify else "")),
        "not_protected": [
            "other releases of the same patients: the average of a group minus the averages of groups inside it "
            "(k·A − k'·B) is the average of the members left, down to one patient's image (k-Same releases at "
            "several k of one patient set)"
            + ("; the averages are latents, and whoever holds the codec (a shipped one is public) inverts the "
               "records and differences those" if cfg.method in ("kcentroid", "ksalsa") else "")
            + "; publish one k-Same release of a patient set",
            *(["the PCA basis is fitted on the whole private dataset: every record depends on images outside its "
               "cluster through it"] if private_basis else []),
            "a released label that is the same for every patient of a record discloses each member's value"
            + (f" (with stratify={cfg.stratify!r}: every record's {cfg.stratify})" if cfg.stratify else ""),
            *([f"each record's {', '.join(f'{n}_counts' for n in counted)}: how many of its patients have each "
               "value, so whoever knows the other members' values learns the remaining member's"] if counted else []),
            *([f"each record's mean {', '.join(means)}: with the other members' values it gives the remaining "
               "member's"] if means else []),
            *([f"{', '.join(sensitive)}: released (sensitive), protected only by the aggregation above"]
              if sensitive else []),
            *(["what the models (codec, feature network) memorised about their training images, where these "
               "include released patients: a record then depends on them through the weights"]
              if uses_models else []),
            *([local] if (local := local_average(cfg, mean_map=mean_map)) else []),
            *(["each record's orientation: the eye side of most of its patients (every member's side where they "
               "share one), whether or not a laterality label is released"]
              if eye_sides_applies(cfg, modality) else []),
            "each record's n_sources: how many images its patients have in all",
            *(["the dropped leftover patients are absent from the release, which reveals that they were leftovers"]
              if cfg.drop_remainder else []),
        ],
        "clusters": len(clustering.clusters) if clustering else None,
        "dropped_images": len(clustering.dropped) if clustering else 0,
    }
    if cfg.method == "kpca":
        out["pca_basis"] = ("fitted on the private dataset being released: the basis is not covered by k-anonymity"
                            if private_basis else "fitted on separate data supplied by the user (assumed not to "
                                                  f"contain the released patients: none was found in it, "
                                                  f"{COMPARED})")
    if eye_sides_applies(cfg, modality):
        out["eye_sides"] = ("images taken as left eyes (by their laterality label"
                            + (", else by the optic disc's position, an estimate that can be wrong" if
                               cfg.eye_sides == "auto" else "")
                            + ") are mirrored left-right before clustering and averaging, so that records average "
                              "eyes as right eyes; images whose side is unknown keep their orientation "
                              "(eye_sides_applied counts each kind); a record is shown mirrored back when most of its "
                              "patients' eyes are taken as left ones. Each image's side comes from its own label or "
                              "pixels: every record is still computed from its cluster only")
    if cfg.views > 1:
        out["augmentation"] = ("views are the cluster average plus Gaussian noise from secret operating-system "
                               "randomness (recorded nowhere); given the average they carry no further information "
                               "about the members, and every view stands for the same patients")
    return out


def local_average(cfg: KSameConfig, *, mean_map: bool = False) -> str | None:
    """The statement's item on what a per-position average keeps, where the records hold one: k-Same-Pixel's and
    k-Same-PCA's pixels, and the spatial map of a codec whose latent carries one (``mean_map``), which k-Centroid
    releases as the members' mean and k-SALSA starts from (``map_init="centroid"``, with ``rows="all"`` moved only by
    position-free Gram statistics). None for records that hold none (a W+-only codec, or k-SALSA's map prior)."""
    where = {"kpixel": "pixels are the per-pixel mean of its members' images",
             "kpca": "pixels are the per-pixel mean of its members' images, projected on the PCA basis"}.get(cfg.method)
    if where is None and mean_map and cfg.method == "kcentroid":
        where = "spatial map (the codec's latent carries one) is the per-position mean of its members' maps"
    if where is None and mean_map and cfg.method == "ksalsa" and cfg.salsa.map_init == "centroid":
        where = ("spatial map (the codec's latent carries one) starts as the per-position mean of its members' maps "
                 "(map_init='centroid'), and the style loss, which compares position-free Gram statistics, does not "
                 "remove what one member has at one place")
    if where is None:
        return None
    return (f"a local feature of one member (a burned-in marker, a lesion, a vessel's course) where it lies: a "
            f"record's {where}, so the feature survives in it faded to about 1/k of its contrast")


def ksame_models_overlap(privacy: dict[str, Any], overlap: dict[str, tuple[int, dict[str, Any]]]) -> dict:
    """The statement of a latent k-Same release whose models (``overlap``: file -> (released patients it was trained
    on, its training phantom), :func:`medanon.phantoms.provenance.shipped_models_trained_on`) were trained on released
    people: k-anonymity of the records' composition still holds, but a record is no longer computed from its
    cluster's images only, and the statement says so (as for a PCA basis fitted on the released data). Warns
    :class:`~medanon.anonymize.privacy.CalibrationOverlap`."""
    from medanon.phantoms.provenance import overlap_fact

    if not overlap:
        return privacy
    most, files, fact = overlap_fact(overlap)
    seed = next(iter(overlap.values()))[1]["seed"]
    return _trained_on_released(privacy, most, files, fact, f"a phantom of seed {seed}",
                                "make the phantom with another seed, or train the models on other data")


def ksame_recorded_overlap(privacy: dict[str, Any], found: list[tuple[str, int | None, str]]) -> dict:
    """The statement of a latent k-Same release whose models record their training patients
    (:func:`medanon.data.training_people.released_overlap` of the released dataset, ``found``): models trained on
    released patients are stated as :func:`ksame_models_overlap` states shipped ones; a model trained on another
    part of this very folder, which medanon cannot compare patient by patient, turns the assumption into a stated
    unknown. Warns :class:`~medanon.anonymize.privacy.CalibrationOverlap` for either."""
    import warnings

    from medanon.anonymize.privacy import CalibrationOverlap
    from medanon.errors import user_stacklevel

    trained = [(m, n, how) for m, n, how in found if n]
    if trained:
        counted = [n for _, n, _ in trained if n > 0]
        most = max(counted) if counted else None           # None: released patients, how many not recorded
        files = ", ".join(sorted({m for m, _, _ in trained}))
        fact = (f"the models {files} were trained on {_released(most)} (their record: {trained[0][2]})")
        privacy = _trained_on_released(privacy, most, files, fact, "their recorded training patients",
                                       "train the models on patients who are not released (another split)")
    unseen = sorted({f"{m}: {how}" for m, n, how in found if n == 0})
    if unseen:                                  # the assumption is known to hold for these
        privacy = {**privacy, "models_not_trained_on_released": unseen}
    unknown = [(m, how) for m, n, how in found if n is None]
    if unknown:
        said = "; ".join(f"{m}: {how}" for m, how in unknown)
        warnings.warn(f"the models were trained on this folder and medanon cannot tell whether on released patients "
                      f"({said}): what they memorised of them would be outside the k-anonymity statement (which "
                      "says so); train them on a split that is not released", CalibrationOverlap,
                      stacklevel=user_stacklevel())
        unknown_too = (f"the models {', '.join(sorted({m for m, _ in unknown}))} were trained on images of the "
                       f"released folder ({said}): whether they include the released patients is not known here, and "
                       "what the models memorised of any of them is accepted as outside this guarantee")
        kept = [a for a in privacy.get("assumptions", []) if not a.startswith("the models (codec")
                and not _map_generator_among(a, [m for m, _ in unknown])]
        privacy = {**privacy, "assumptions": [*kept, unknown_too]}
    return privacy


def _map_generator_among(assumption: str, files: list[str]) -> bool:
    """Whether ``assumption`` is k-SALSA's map-prior assumption about one of ``files`` (:mod:`.map_prior`)."""
    return assumption.startswith("the map generator (") and any(assumption.startswith(f"the map generator ({f})")
                                                                   for f in files)


def _released(most: int | None) -> str:
    return f"{most} of the released patients" if most is not None else "released patients (how many is not recorded)"


def _trained_on_released(privacy: dict[str, Any], most: int | None, files: str, fact: str, source: str,
                         fix: str) -> dict:
    """``privacy`` restated for models (``files``) trained on ``most`` released patients (``fact``; ``source``: what
    they were trained on, in a few words)."""
    import warnings

    from medanon.anonymize.privacy import CalibrationOverlap
    from medanon.errors import user_stacklevel

    fact += ", so a record also depends on them through the models' weights"
    before = privacy.get("models_trained_on_released") or {}     # another kind of model already stated: both kept
    files_all = sorted({*before.get("files", []), *files.split(", ")})
    counts = [c for c in (before.get("released_patients"), most) if c is not None]
    warnings.warn(f"{fact}: what the weights memorised of them is outside the k-anonymity statement (which says "
                  f"so); {fix}", CalibrationOverlap, stacklevel=user_stacklevel())
    only = "every released image is computed only from the images of one cluster"
    guarantee = privacy["guarantee"].replace(
        only, f"every released image is computed from the images of one cluster and the weights of models trained on "
              f"{_released(most)} ({files}: {source}; what they memorised of them is "
              "not covered)") if only in privacy["guarantee"] else privacy["guarantee"] + f"; {fact} (not covered)"
    # the assumption that the models were not trained on the released people is known to fail: state the fact
    named = files.split(", ")
    assumptions = [f"what the models memorised of the released patients they were trained on is accepted as "
                   f"outside this guarantee ({fact}); the guarantee does not need the models to be secret"
                   if a.startswith("the models (codec") else a for a in privacy.get("assumptions", [])
                   if not _map_generator_among(a, named)]     # the map generator's own assumption, known to fail
    return {**privacy, "guarantee": guarantee, "assumptions": assumptions,
            "models_trained_on_released": {"files": files_all, "released_patients": max(counts) if counts else None},
            "not_protected": [*privacy.get("not_protected", []),
                              f"what {files} memorised of the "
                              + (f"{most} released patients" if most is not None else "released patients")
                              + " they were trained on"]}


def eye_sides_applies(cfg: KSameConfig, modality: str | None) -> bool:
    """Whether the release averages left eyes mirrored (:mod:`medanon.anonymize.eye_sides`): fundus photographs, a
    method that averages, ``eye_sides`` not ``off``."""
    return modality == "fundus" and cfg.method != "inverted" and cfg.eye_sides != "off"


def manifest_params(cfg: KSameConfig, *, codec=None, features=None, modality: str | None = None) -> dict[str, Any]:
    """The method parameters the release manifest records (also the resume check: they must not change).
    ``modality``: the data's (fundus photographs record ``eye_sides``)."""
    p: dict[str, Any] = {"k": cfg.k if cfg.method != "inverted" else 1, "clustering": {
        "algorithm": "greedy same-size (k-SALSA §3.4), people-level, leftovers join nearest clusters"
                     if not cfg.drop_remainder else "greedy same-size (k-SALSA §3.4), people-level, leftovers dropped",
        "space": cfg.space if cfg.space != "auto" else ("latent" if codec is not None else "pca"),
        "stratify": cfg.stratify or None, "deterministic": True},
        "weights": "each patient 1/P in its cluster, shared among the patient's images"}
    if cfg.method == "inverted":
        p.pop("clustering")
        p.pop("weights")
    if cfg.method == "kpca" or p.get("clustering", {}).get("space") == "pca":
        p["pca"] = {"components": cfg.pca_components, "fit_max": cfg.pca_fit_max}
    if cfg.method == "ksalsa":
        p["salsa"] = cfg.salsa.describe()
        if features is not None and hasattr(features, "describe"):
            d = features.describe()
            p["salsa"]["feature_network"] = {"name": d.get("display_name", d.get("name")),
                                             "input_size": d.get("input_size")}
    if cfg.views > 1:
        p["augmentation"] = {"views": cfg.views, "sigma": cfg.view_sigma,
                             "noise": "w + sigma * std_prior(w) * N(0, I), one shift per view shared by all ws; "
                                      "secret operating-system randomness, no seed (std_prior is estimated from "
                                      "seeded draws of the prior: seeds.augmentation_scale)"}
        if codec is not None and getattr(codec, "latent_space", "ws") == "ws+map":
            p["augmentation"]["noise"] += "; the spatial map's rows are not shifted"
    if cfg.method == "kpca":
        p["pca_basis"] = cfg.pca_basis
    if eye_sides_applies(cfg, modality):        # (off: recorded as before it existed, so old partial runs resume)
        from medanon.anonymize.eye_sides import DISC_SIGMA, MIDLINE

        p["eye_sides"] = cfg.eye_sides
        if cfg.eye_sides == "auto":             # a resumed run must find the sides as the run it continues
            p["disc_finder"] = {"blur": DISC_SIGMA, "midline": MIDLINE}
    if codec is not None:
        from medanon.data.training_people import public_people

        p["codec"] = {k: v for k, v in codec.describe().items() if k in ("name", "latent_space", "iterations", "num_ws",
                                                                         "w_dim", "map", "resolution", "noise_mode",
                                                                         "amp")}
        people = public_people(codec.describe().get("trained_people") or [])   # keyed: the manifest is public
        if people:
            p["codec"]["trained_people"] = people
    return p


def seeds_used(cfg: KSameConfig, *, codec=None) -> dict[str, int]:
    """The seeds a run depends on (clustering, inversion and k-SALSA are deterministic and need none)."""
    space = cfg.space if cfg.space != "auto" else ("latent" if codec is not None else "pca")
    seeds = {}
    if cfg.method == "kpca" or (space == "pca" and cfg.method != "inverted"):
        seeds["pca_subsample"] = cfg.seed
    if cfg.views > 1:                    # the prior's per-dimension scale of the views' noise, estimated from seeded z
        seeds["augmentation_scale"] = cfg.seed
    return seeds


def model_checksums(codec=None, features=None) -> dict[str, str]:
    from medanon.checkpoint import weights_sha256

    out = {}
    if codec is not None:
        d = codec.describe()
        sha = (d.get("checkpoint") or {}).get("sha256")
        if sha:
            out[f"codec:{d.get('name')}"] = sha
        elif (weights := weights_sha256(codec)) is not None:       # given in memory: its weights' checksum
            out[f"codec:{d.get('name')}:weights"] = weights
        gen = d.get("generator_checkpoint")
        if isinstance(gen, dict) and gen.get("sha256"):
            out["generator"] = gen["sha256"]
    if features is not None and hasattr(features, "describe"):
        d = features.describe()
        if d.get("weights_sha256"):
            out[f"features:{d.get('name')}"] = d["weights_sha256"]
    return out
