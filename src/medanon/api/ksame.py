"""The k-Same family as Python functions: ``kpixel``, ``kpca``, ``kcentroid``, ``ksalsa``, ``inverted``.

Each builds a :class:`~medanon.anonymize.ksame.KSameConfig` from its keyword arguments (their
defaults are read from the config dataclasses: ``KSameConfig``, ``SalsaConfig``, ``StyleConfig``)
and calls :func:`ksame_release`, the one function the command line calls too.
``k`` is keyword-only and has no default: the number of people every record stands for is the
privacy claim, so the caller states it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medanon.anonymize.ksame import KSameConfig as _K
from medanon.anonymize.salsa import SalsaConfig as _S
from medanon.anonymize.style import StyleConfig as _St
from medanon.api._inputs import at_model_size, dataset_arg, device_arg, memory_range, model_arg, number
from medanon.errors import ConfigError, a_type

if TYPE_CHECKING:
    from medanon.data.dataset import ImageDataset
    from medanon.data.inputs import DataLike
    from medanon.release.release import Release

ABLATIONS: dict[str, dict[str, Any]] = {        # Table 4 and supplement D of the k-SALSA paper
    "none": {},
    "style-only": {"lam": 0.0},
    "content-only": {"lam": 1.0},
    "global-style": {"align": "global"},
    "no-alignment": {"align": "none"},
    "cos-cos": {"match": "cos", "distance": "cos"},
    "mse-mse": {"match": "mse", "distance": "mse"},
}

STYLE_LAYERS = {"efficientnet-lite0": "block1", "vgg19": "relu1_2"}   # the analogue of the paper's "second layer"


def load_codec_for(codec, device=None):
    """``codec`` as a loaded StyleGAN codec: a checkpoint path is loaded onto ``device`` (default CPU)."""
    if codec is None or not isinstance(codec, (str, Path)):
        return codec
    from medanon.codecs.stylegan import load_codec

    return load_codec(codec, map_location=device or "cpu")


def check_codec_matches(ds, codec) -> None:
    """The codec renders images of the dataset's size and channels, or a ConfigError says how to open it."""
    g = getattr(codec, "generator", None)
    if g is None:
        return
    trained = getattr(codec, "provenance", {}).get("trained_on")
    if trained is not None:                      # modality, channels and size the codec was trained on
        from medanon.codecs.stylegan import check_model_fits

        check_model_fits(codec.provenance.get("checkpoint", {}).get("path"), trained, ds)
    if (ds.size, ds.channels) != (g.img_resolution, g.img_channels):
        raise ConfigError(f"the codec renders {g.img_channels}x{g.img_resolution}px images, the dataset gives "
                          f"{ds.channels}x{ds.size}px",
                          fix=f"open the dataset with size={g.img_resolution}, channels={g.img_channels}")


def _device(device, codec):
    import torch

    if device is not None:
        return torch.device(device)
    dev = getattr(codec, "device", None)
    return torch.device(dev) if dev is not None else torch.device("cpu")


def ksame_release(ds: ImageDataset, cfg, *, codec=None, features=None,
                  release_labels: str | Sequence[str] | None = None, pca_basis=None, device=None,
                  model_files: dict[str, Any] | None = None, map_generator=None) -> Release:
    """A :class:`~medanon.release.release.Release` of ``ds`` by the k-Same method ``cfg.method``.

    ``cfg`` is a :class:`~medanon.anonymize.ksame.KSameConfig`; ``codec`` a StyleGAN inversion codec
    (or its checkpoint path; needed by ksalsa, kcentroid and inverted, optional for kpixel and kpca
    where it sets the clustering space); ``features`` the feature network of k-SALSA; ``pca_basis``
    a dataset separate from ``ds`` that the k-Same-PCA basis is fitted on (``cfg.pca_basis="separate"``).
    ``model_files``: which checkpoint files were used and why (recorded in the manifest's params).
    ``map_generator``: k-SALSA's map prior generator (a GAN checkpoint by name or path, or a loaded generator;
    default: the shipped one for the modality), used when the codec has a spatial map and
    ``cfg.salsa.map_init == "synthetic"`` (:mod:`medanon.anonymize.map_prior`).
    ``len(release)`` forms the clusters (the plan, not the images) and counts the records.
    """
    device = device_arg(device)
    from medanon.anonymize.eye_sides import align, check_mode

    check_mode(cfg.eye_sides, ds)                # now, not when the clusters are first planned
    from medanon.anonymize.ksame import (
        LATENT_METHODS,
        check_basis,
        ksame_models_overlap,
        manifest_params,
        model_checksums,
        plan_clusters,
        privacy_statement,
        release_ksame,
        seeds_used,
    )
    from medanon.anonymize.map_prior import has_map, map_prior_params, map_prior_statement, resolve_map_generator
    from medanon.config import validate
    from medanon.outputs import dataset_inputs
    from medanon.release.labels import release_labels as choose_labels
    from medanon.release.release import Release

    validate(cfg)
    if cfg.method != "inverted":                        # k counts people: a source without patient ids is refused
        from medanon.data.inputs import require_patient_ids

        require_patient_ids(ds, cfg.method)
    codec = load_codec_for(codec, device)
    if cfg.method in LATENT_METHODS and codec is None:
        raise ConfigError(f"{cfg.method} needs codec: an inversion codec (or its checkpoint, e.g. "
                          "restyle-map-fundus64, the fundus default)")
    if cfg.method == "ksalsa" and features is None:
        raise ConfigError("ksalsa needs features: a feature network (medanon.models.features.get_feature_network)")
    if codec is not None:
        check_codec_matches(ds, codec)
    check_basis(ds, cfg, pca_basis, content=False)      # its files are compared when the clusters are formed
    if cfg.stratify and cfg.stratify not in ds.label_names:
        raise ConfigError(f"stratify={cfg.stratify!r} is not a label of the dataset",
                          fix=f"use one of {ds.label_names} or leave stratify out")
    labels = choose_labels(ds, release_labels)
    dev = _device(device, codec)
    model_files = dict(model_files or {})
    prior_gen = resolve_map_generator(cfg, ds, codec, map_generator, dev, model_files)
    priors: list = []                            # the map prior, built once before the first cluster

    planned: dict[str, Any] = {}                 # the view and the clusters, once formed (len() or the first save)

    def plan(progress: bool = False) -> tuple:
        if not planned:                          # on the view that averages left eyes mirrored (eye_sides)
            planned["view"] = align(ds, cfg.eye_sides)
            planned["plan"] = plan_clusters(planned["view"], cfg, codec=codec, device=dev, progress=progress,
                                            pca_basis=pca_basis)
        return planned["plan"]

    def count() -> int:
        if cfg.method == "inverted":
            return len(ds)
        return len(plan()[0].clusters) * cfg.views

    def produce(writer, progress: bool) -> dict[str, Any]:
        from medanon.anonymize.map_prior import cached_map_prior

        if prior_gen is not None and not priors:
            gen, info = prior_gen
            priors.append(cached_map_prior(codec, gen, samples=cfg.salsa.map_samples, seed=cfg.seed,
                                           provenance=info))
        planned_now = None if cfg.method == "inverted" else plan(progress)
        summary = release_ksame(planned.get("view", ds), writer, cfg, codec=codec, features=features, device=dev,
                                progress=progress, pca_basis=pca_basis, plan=planned_now,
                                map_prior=priors[0] if priors else None, validated=True)
        writer.privacy.update(clusters=summary.get("clusters"), dropped_images=summary.get("dropped_images", 0))
        if "eye_sides" in summary:
            writer.privacy["eye_sides_applied"] = summary["eye_sides"]
        if cfg.method == "kpca":                 # the subspace the records live in: asked for vs what the basis gave
            writer.privacy["pca_components"] = {k: summary["pca"][k] for k in ("components", "asked", "fit_images")}
        return summary

    from medanon.release.release import reading_params

    params = {**manifest_params(cfg, codec=codec, features=features, modality=ds.modality), **reading_params(ds)}
    if cfg.method == "ksalsa":
        params["salsa"]["map_prior"] = map_prior_params(cfg, codec, prior_gen)
    if model_files:
        params["model_files"] = model_files
    models = model_checksums(codec, features)
    if prior_gen is not None and prior_gen[1].get("sha256"):
        models["map-generator"] = prior_gen[1]["sha256"]
    privacy = map_prior_statement(privacy_statement(cfg, None, labels=labels,
                                                    uses_models=codec is not None or features is not None,
                                                    mean_map=codec is not None and has_map(codec),
                                                    modality=ds.modality), prior_gen)
    if cfg.method in LATENT_METHODS and cfg.method != "inverted":     # records computed through the models' weights
        from medanon.phantoms.provenance import shipped_models_trained_on

        overlap = shipped_models_trained_on(models, ds.root, [r.patient_id for r in ds.records])
        privacy = ksame_models_overlap(privacy, overlap)
        # models trained by `medanon train` record (digests of) their training patients: are they released ones?
        from medanon.anonymize.ksame_statement import ksame_recorded_overlap
        from medanon.data.training_people import released_overlap

        people = [*(codec.describe().get("trained_people") or []),
                  *((prior_gen[1].get("_trained_people") or []) if prior_gen is not None else [])]
        privacy = ksame_recorded_overlap(privacy, released_overlap(people, ds))
    return Release(method=cfg.method, dataset=ds, params=params,
                   privacy=privacy, labels=labels, produce=produce,
                   seeds={**seeds_used(cfg, codec=codec), **({"map_prior": cfg.seed} if prior_gen else {})},
                   models=models,
                   inputs=dataset_inputs(pca_basis) if pca_basis is not None else [], count=count,
                   private={"pca_basis": pca_basis} if pca_basis is not None else {})


def _config(method: str, **kw):
    number("k", kw.get("k"), integer=True)
    return _K(method=method, **kw)


def _prepare(method: str, ds, codec, *, patient_ids, labels, modality, device, default_codec: bool,
             value_range=None):
    """The dataset (images in memory need ``patient_ids``) and the codec: by name, path, loaded, or (for the
    latent methods) the default for the modality; returns ``(ds, codec, model_files)``."""
    device = device_arg(device)
    given, kw = ds, {"method": method, "patient_ids": patient_ids, "labels": labels, "modality": modality,
                     "value_range": value_range, "require_patients": method != "inverted"}
    ds = dataset_arg(ds, **kw)
    used: dict[str, Any] = {}
    if codec is not None or default_codec:
        codec = model_arg(codec, role="ksame-codec", ds=ds, argument="codec", method=method, used=used)
    codec = load_codec_for(codec, device)
    g = getattr(codec, "generator", None)
    return at_model_size(given, ds, getattr(g, "img_resolution", None), **kw), codec, used


def kpixel(ds: DataLike, *, k: int, stratify: str = _K.stratify, drop_remainder: bool = _K.drop_remainder,
           eye_sides: str = _K.eye_sides, codec=None, batch: int = _K.batch, seed: int = _K.seed,
           release_labels: str | Sequence[str] | None = None, patient_ids=None, labels=None,
           modality: str | None = None, value_range=None, device=None) -> Release:
    """k-Same-Pixel: the mean image of each cluster of at least ``k`` patients.

    ``ds``: an opened dataset, a dataset folder (opened at the side of the model that reads it, else at 64 px;
    :func:`medanon.open_dataset` chooses another), or images in memory (a tensor or array (N, C, H, W), a list
    of PIL images) with ``patient_ids=`` (one per image: required, the guarantee counts people) and
    optional ``labels=`` (name -> one value per image) and ``modality=`` (:func:`medanon.data.as_dataset`).
    ``k``: people per released record, at least (keyword-only, no default). ``stratify``: cluster
    within strata of this label (a patient's worst value). ``drop_remainder``: leave out the N mod k
    leftover patients (the paper) instead of joining them to their nearest clusters. ``eye_sides``: fundus
    photographs are averaged as right eyes, left eyes mirrored (``"auto"``: by the ``laterality`` label, else by the
    optic disc; ``"labels"``: by the label only; ``"off"``: as they are), and each record is shown as its patients'
    majority side (:mod:`medanon.anonymize.eye_sides`). ``codec``:
    optional inversion codec (a name on ``medanon models``, a path or a loaded codec); with it, clusters are
    formed in its latent space, else in PCA space.
    ``seed`` seeds the PCA subsample. ``release_labels``: labels published (aggregated per record;
    default: the modality's utility label). Returns a :class:`~medanon.release.release.Release`.

    Example:
        >>> import medanon
        >>> root = medanon.make_phantom(patients=7)
        >>> rel = medanon.anonymize.kpixel(medanon.open_dataset(root, size=16), k=3)
        >>> rel.privacy["k"], rel.params["clustering"]["space"]
        (3, 'pca')
    """
    cfg = _config("kpixel", k=k, stratify=stratify, drop_remainder=drop_remainder, eye_sides=eye_sides, batch=batch,
                  seed=seed)
    ds, codec, used = _prepare("kpixel", ds, codec, patient_ids=patient_ids, labels=labels, modality=modality,
                               value_range=value_range, device=device, default_codec=False)
    return ksame_release(ds, cfg, codec=codec, release_labels=release_labels, device=device, model_files=used)


def kpca(ds: DataLike, *, k: int, pca_components: float = _K.pca_components, pca_basis=None,
         stratify: str = _K.stratify, drop_remainder: bool = _K.drop_remainder, eye_sides: str = _K.eye_sides,
         codec=None, batch: int = _K.batch,
         seed: int = _K.seed, release_labels: str | Sequence[str] | None = None, patient_ids=None, labels=None,
         modality: str | None = None, value_range=None, device=None) -> Release:
    """k-Same-PCA (k-Same-Eigen): cluster means of the images' principal-component coefficients.

    ``pca_components``: a count (e.g. 50) or a variance fraction in (0, 1). ``pca_basis``: a dataset
    separate from ``ds`` (e.g. public images) to fit the basis on, so that each record depends on its
    cluster's images only; by default the basis is fitted on ``ds`` and the statement says every record
    depends on the whole dataset through it (a ``DataDependentRelease`` warning). Other arguments as
    in :func:`kpixel`.

    Example:
        >>> import medanon
        >>> root = medanon.make_phantom(patients=6)
        >>> rel = medanon.anonymize.kpca(medanon.open_dataset(root, size=16), k=2, pca_components=3)
        >>> rel.params["pca"]["components"], len(list(rel.images()))
        (3, 3)
    """
    cfg = _config("kpca", k=k, pca_components=pca_components, stratify=stratify, drop_remainder=drop_remainder,
                  eye_sides=eye_sides, batch=batch, seed=seed,
                  pca_basis="separate" if pca_basis is not None else _K.pca_basis)
    given = ds
    ds, codec, used = _prepare("kpca", ds, codec, patient_ids=patient_ids, labels=labels, modality=modality,
                               value_range=value_range, device=device, default_codec=False)
    if pca_basis is not None:
        from medanon.data.inputs import as_dataset

        pca_basis = as_dataset(pca_basis, argument="pca_basis", size=ds.size,
                               value_range=memory_range(pca_basis, value_range, like=given))
    return ksame_release(ds, cfg, codec=codec, release_labels=release_labels, pca_basis=pca_basis, device=device,
                         model_files=used)


def kcentroid(ds: DataLike, *, k: int, codec=None, views: int = _K.views, view_sigma: float = _K.view_sigma,
              stratify: str = _K.stratify, drop_remainder: bool = _K.drop_remainder, eye_sides: str = _K.eye_sides,
              batch: int = _K.batch,
              seed: int = _K.seed, release_labels: str | Sequence[str] | None = None, patient_ids=None, labels=None,
              modality: str | None = None, value_range=None, device=None) -> Release:
    """k-Centroid: the mean latent of each cluster of at least ``k`` patients, rendered by the generator.

    ``codec``: a StyleGAN inversion codec, or its checkpoint by name (``"restyle-map-fundus64"``) or path;
    default: the shipped codec for the data's modality (fundus: ``restyle-map-fundus64.pt``; the manifest's
    ``params.model_files`` says which). The images must have its size. ``views``: images per cluster, the average and
    ``views - 1`` noisy copies (k-SALSA supplement E), with noise ``view_sigma`` times the prior's W
    standard deviation (secret: drawn from the operating system). Other arguments as in :func:`kpixel`.

    Example (see :func:`ksalsa` for a full run):
        >>> import inspect, medanon
        >>> [p for p in inspect.signature(medanon.anonymize.kcentroid).parameters][:3]
        ['ds', 'k', 'codec']
    """
    cfg = _config("kcentroid", k=k, stratify=stratify, drop_remainder=drop_remainder, eye_sides=eye_sides, batch=batch,
                  seed=seed, views=views, view_sigma=view_sigma)
    ds, codec, used = _prepare("kcentroid", ds, codec, patient_ids=patient_ids, labels=labels, modality=modality,
                               value_range=value_range, device=device, default_codec=True)
    return ksame_release(ds, cfg, codec=codec, release_labels=release_labels, device=device, model_files=used)


def feature_network(name: str = "efficientnet-lite0", *, weights: str | Path | None = None,
                    input_size: int | None = None, device=None):
    """The feature network k-SALSA compares styles and content with (frozen; see docs/ksalsa.md)."""
    from medanon.models.features import get_feature_network

    if name not in STYLE_LAYERS:
        raise ConfigError(f"features={name!r} is not one of {', '.join(STYLE_LAYERS)}")
    return get_feature_network(name, device=device, weights=weights, input_size=input_size)


def apply_ablation(salsa, ablation: str, *, lam_given: bool):
    """``salsa`` (a :class:`~medanon.anonymize.salsa.SalsaConfig`) changed into a variant of k-SALSA Table 4 /
    supplement D (:data:`ABLATIONS`); one that fixes λ cannot be combined with a λ the caller chose."""
    import dataclasses

    if ablation not in ABLATIONS:
        raise ConfigError(f"ablation={ablation!r} is not one of {', '.join(ABLATIONS)}")
    ab = dict(ABLATIONS[ablation])
    if lam_given and "lam" in ab:
        raise ConfigError(f"ablation={ablation!r} fixes lam (λ = {ab['lam']})", fix="leave lam out")
    lam = ab.pop("lam", salsa.lam)
    return dataclasses.replace(salsa, lam=lam, style=dataclasses.replace(salsa.style, **ab))


def check_layers(salsa, features, *, image_size: int | None = None, channels: int = 3) -> None:
    """The style and content layers of ``salsa`` exist in the feature network ``features``; with ``image_size``
    (the images' side), each style layer's feature map can be cut into ``salsa.style``'s grid (one forward pass of
    a blank image, before any image is inverted)."""
    for what, value, names in (("style_layer", salsa.style_layer, salsa.style_layers),
                               ("content_layer", salsa.content_layer, [salsa.content_layer])):
        if any(name not in features.layers for name in names):
            raise ConfigError(f"{what}={value!r} is not a layer of {features.name}"
                              + (" (nor layers joined by '+')" if what == "style_layer" else ""),
                              fix=f"choose from {', '.join(features.layers)}"
                                  + (", or several joined by '+'" if what == "style_layer" else ""))
    grid = salsa.style.patches_per_side
    if image_size is None or grid == 1:
        return
    import torch

    side = salsa.feature_size or image_size
    device = next((t.device for t in features.parameters()), "cpu") if hasattr(features, "parameters") else "cpu"
    with torch.no_grad():
        maps = features(torch.zeros(1, channels, side, side, device=device), layers=salsa.style_layers)
    for name, f in maps.items():
        if min(f.shape[-2:]) < grid:
            raise ConfigError(f"grid={grid}: the style layer {name} of {features.name} gives a "
                              f"{f.shape[-2]}x{f.shape[-1]} feature map of a {side} px image, which cannot be cut "
                              f"into {grid}x{grid} patches", fix=f"use grid= of at most {min(f.shape[-2:])}, or an "
                                                                  "earlier (larger) style layer")


def ksalsa(ds: DataLike, *, k: int, codec=None, lam: float | None = None, steps: int = _S.steps, lr: float = _S.lr,
           grid: int = _St.grid, ablation: str = "none", features="efficientnet-lite0",
           features_weights: str | Path | None = None, feature_size: int | None = None, style_layer: str | None = None,
           content_layer: str | None = None, views: int = _K.views, view_sigma: float = _K.view_sigma,
           stratify: str = _K.stratify, drop_remainder: bool = _K.drop_remainder, eye_sides: str = _K.eye_sides,
           batch: int = _K.batch,
           seed: int = _K.seed, map_init: str = _S.map_init, map_generator=None, map_samples: int = _S.map_samples,
           rows: str = _S.rows, release_labels: str | Sequence[str] | None = None, patient_ids=None, labels=None,
           modality: str | None = None, value_range=None, device=None) -> Release:
    """k-SALSA (Algorithm 1): each cluster's centroid latent, refined by local style alignment.

    Every released record is computed from the images of one cluster of at least ``k`` patients
    (keyword-only, no default). ``ds``: as in :func:`kpixel`. ``codec``: a StyleGAN inversion codec, or its
    checkpoint by name or path; default: the shipped one for the modality (as in :func:`kcentroid`).
    ``lam`` (λ, default 0.3, or the ablation's) weighs the content loss against G(w0) and 1 - λ the local style loss;
    ``steps`` Adam steps at ``lr`` per cluster; ``grid`` patches per side for local styles;
    ``ablation`` one of :data:`ABLATIONS`.
    ``features``: the feature network, by name (``efficientnet-lite0``; ``vgg19`` needs
    ``features_weights``) or as a loaded network; ``feature_size`` resizes images for it;
    ``style_layer``/``content_layer`` default to ``block1``/``pool``. ``views``, ``view_sigma``:
    the augmentation of :func:`kcentroid`. With a codec whose latent carries a spatial map, ``map_init="synthetic"``
    (an option; default ``"centroid"``, the paper's start, which keeps the grade) starts each cluster from the map of
    the synthetic image nearest to its centroid's map (``map_samples`` images of
    ``map_generator``, by name or path; default: the shipped generator of the modality, seeded by ``seed``) and
    ``rows="all"`` optimises every latent row from there (``rows="styles"`` keeps the start's map)
    (docs/ksalsa.md). Other arguments as in :func:`kpixel`.
    Returns a :class:`~medanon.release.release.Release`; ``.save(path, mapping=...)`` writes it.

    Example (a tiny untrained codec; the shipped default is ``restyle-map-fundus64.pt``):
        >>> import torch, medanon
        >>> from medanon.models.stylegan import Generator
        >>> from medanon.models.encoder import Encoder
        >>> from medanon.codecs.stylegan import StyleGANCodec
        >>> _ = torch.manual_seed(0)
        >>> G = Generator(z_dim=16, w_dim=16, img_resolution=16, img_channels=3, channel_base=128, channel_max=16)
        >>> E = Encoder(16, 3, G.num_ws, G.w_dim, iterative=False, channel_base=128, channel_max=16, head_dim=16)
        >>> root = medanon.make_phantom(patients=4)
        >>> ds = medanon.open_dataset(root, size=16)
        >>> rel = medanon.anonymize.ksalsa(ds, k=2, codec=StyleGANCodec(G, E), steps=2, feature_size=32)
        >>> rel.params["salsa"]["lambda"], rel.privacy["k"]
        (0.3, 2)
        >>> [tuple(im.shape) for im in rel.images(progress=False)]
        [(3, 16, 16), (3, 16, 16)]
    """
    number("k", k, integer=True)
    number("feature_size", feature_size, integer=True, allow_none=True)
    if feature_size is not None and feature_size < 32:
        raise ConfigError(f"feature_size={feature_size}: the feature network reads images of at least 32 px",
                          fix="leave feature_size= out (the network's own size) or pass e.g. feature_size=224")
    if not isinstance(features, str) and not all(hasattr(features, a) for a in ("name", "layers", "embedding_layer")):
        raise ConfigError(f"features= is {a_type(features)}, not a feature network",
                          fix="pass a name ('efficientnet-lite0', or 'vgg19' with features_weights=) or a network "
                              "from medanon.models.features.get_feature_network")
    if not isinstance(features, str) and (feature_size, features_weights) != (None, None):
        raise ConfigError("feature_size= and features_weights= describe a feature network given by name; features= "
                          "is a loaded network, which has its own weights and input size",
                          fix="leave them out, or pass features= the network's name")
    ds, codec, used = _prepare("ksalsa", ds, codec, patient_ids=patient_ids, labels=labels, modality=modality,
                               value_range=value_range, device=device, default_codec=True)
    net = features
    if isinstance(features, str):
        net = feature_network(features, weights=features_weights, input_size=feature_size,
                              device=device if device is not None else getattr(codec, "device", None))
    salsa = _S(lam=_S.lam if lam is None else lam, steps=steps, lr=lr,
               style_layer=style_layer or STYLE_LAYERS.get(net.name, _S.style_layer),
               content_layer=content_layer or net.embedding_layer, style=_St(grid=grid), map_init=map_init,
               map_samples=map_samples, rows=rows)
    salsa = apply_ablation(salsa, ablation, lam_given=lam is not None)
    check_layers(salsa, net, image_size=ds.size, channels=ds.channels)
    cfg = _config("ksalsa", k=k, stratify=stratify, drop_remainder=drop_remainder, eye_sides=eye_sides, batch=batch,
                  seed=seed,
                  views=views, view_sigma=view_sigma, salsa=salsa)
    return ksame_release(ds, cfg, codec=codec, features=net, release_labels=release_labels, device=device,
                         model_files=used, map_generator=map_generator)


def inverted(ds: DataLike, *, codec=None, release_labels: str | Sequence[str] | None = None,
             patient_ids=None, labels=None, modality: str | None = None, value_range=None, device=None) -> Release:
    """GAN-Inverted: G(E(x)) for every image. NOT anonymised (k = 1): the k-SALSA paper's comparison only.

    Saving it warns, and its manifest says ``guarantee: none``. ``ds`` and ``codec`` as in :func:`kcentroid`
    (``patient_ids`` optional: each image is a record of its own).

    Example:
        >>> import inspect, medanon
        >>> "NOT anonymised" in medanon.anonymize.inverted.__doc__
        True
    """
    cfg = _config("inverted", k=1)             # no seed: one inversion per image, nothing random
    ds, codec, used = _prepare("inverted", ds, codec, patient_ids=patient_ids, labels=labels, modality=modality,
                               value_range=value_range, device=device, default_codec=True)
    return ksame_release(ds, cfg, codec=codec, release_labels=release_labels, device=device, model_files=used)
