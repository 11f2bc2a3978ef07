"""Where medanon finds trained models (checkpoints), and what it finds there.

The search path, in order:

1. ``$MEDANON_MODELS``: one folder, or several separated by ``os.pathsep`` (``:`` on Linux), e.g. a
   folder the shipped ``checkpoints/*.pt`` were copied to next to an installed wheel;
2. ``checkpoints/`` of the source checkout medanon runs from (an editable install, or ``src/`` on
   ``PYTHONPATH``), which is where the shipped 64 px models live (``checkpoints/README.md`` says how
   each was trained and reproduces it).

The checkpoints are not package data: at about 82 MB (``du -cb checkpoints/*.pt``) they stay out of the
wheel, and a hospital workstation usually installs from a copy of the source tree. ``medanon models`` lists every
checkpoint on the search path with its kind, sha256 (the checksum a release manifest records
for the models it used), the role it is the default for (:data:`DEFAULTS`) and its card
(:data:`CARDS`: what it was trained on, its measured quality, its intended use; the commands that
measured them are in ``checkpoints/README.md``).

Every method argument that takes a model (``codec=``, ``model=``, ``flow=``, ``identity=``,
``utility=``, ``checkpoint=``) takes a name on the search path (``"restyle-map-fundus64"``, with or
without ``.pt``), a path, or a loaded network; left out, the method uses :func:`default_model` for
the data's modality.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> os.environ[ENV] = folder
    >>> search_path()[0] == Path(folder)
    True
    >>> find_model("no-such-model.pt")                 # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    medanon.errors.DataError: model no-such-model.pt is not on medanon's model search path...
    >>> del os.environ[ENV]
    >>> default_model("ksame-codec", "fundus"), default_model("gmia-codec", "xray")
    ('restyle-map-fundus64.pt', 'cotrained-map-xray64.pt')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from medanon.errors import DataError, a_type

ENV = "MEDANON_MODELS"
_ROOT = Path(__file__).resolve().parents[2]     # src/medanon/ -> the repository root, in a source checkout
SOURCE_CHECKPOINTS = _ROOT / "checkpoints"


def search_path() -> list[Path]:
    """The folders searched for checkpoints, in order: ``$MEDANON_MODELS`` entries, then the source checkout's
    (when medanon runs from one: an installed wheel has none)."""
    folders = [Path(p).expanduser() for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]
    if (_ROOT / "pyproject.toml").is_file():
        folders.append(SOURCE_CHECKPOINTS)
    return list(dict.fromkeys(folders))


def find_model(name: str | Path) -> Path:
    """The first checkpoint named ``name`` (``.pt`` optional) on the search path; a path to a file is kept.

    Raises :class:`~medanon.errors.DataError` listing the folders searched when none holds it.
    """
    p = Path(name)
    if p.is_file():
        return p
    # a path, not a name (pathlib drops a leading "./"): never replaced by a model of that name
    if p.parent != Path(".") or str(name).startswith(("./", ".\\")):
        raise DataError(f"model file {os.fspath(name)} does not exist", files=[os.fspath(name)],
                        fix="pass an existing checkpoint, or the name of one `medanon models` lists")
    names = [p.name] if p.suffix == ".pt" else [p.name, p.name + ".pt"]
    for folder in search_path():
        for n in names:
            if (folder / n).is_file():
                return folder / n
    raise DataError(f"model {p.name} is not on medanon's model search path",
                    files=[str(f) for f in search_path()],
                    fix=f"copy the checkpoints (checkpoints/*.pt of the source tree) into a folder and set {ENV} "
                        "to it, or pass the checkpoint's path")


def models_folder() -> Path | None:
    """The first folder of the search path that holds checkpoints (the demo's default), or None."""
    for folder in search_path():
        if folder.is_dir() and any(folder.glob("*.pt")):
            return folder
    return None


@dataclass
class ModelInfo:
    name: str                                   # file name, e.g. glow-xray64.pt
    path: Path
    bytes: int
    sha256: str
    kind: str                                   # the checkpoint's model family (restyle-encoder, glow, ...)
    shadowed: bool = False                      # an earlier folder of the search path has a file of this name

    @property
    def shipped(self) -> str | None:
        """The shipped (public) checkpoint this file is, by digest, whatever its name or folder; None if none."""
        from medanon.models_shipped import shipped_name

        return shipped_name(self.sha256) if self.sha256 else None


def list_models() -> list[ModelInfo]:
    """Every ``*.pt`` on the search path, in search order, with its sha256 and checkpoint kind."""
    from medanon.checkpoint import load_checkpoint, missing_state
    from medanon.errors import ConfigError

    out, seen = [], set()
    for folder in search_path():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.pt")):
            if not path.is_file():                  # a dangling link, or a folder named *.pt: listed, not read
                where = f"a link to {os.readlink(path)}, which does not exist" if path.is_symlink() else "not a file"
                out.append(ModelInfo(path.name, path, 0, "", f"unreadable: {where}", shadowed=path.name in seen))
                continue
            try:
                blob = load_checkpoint(path)
                kind, sha = str(blob.get("kind")), blob["sha256"]
                if lacks := missing_state(blob):        # a damaged or partial export: listed as such
                    kind += f" (damaged: no {', '.join(repr(k) for k in lacks)} weights)"

            except ConfigError:
                from medanon.fsutil import sha256_file

                try:
                    kind, sha = "not a medanon checkpoint", sha256_file(path)
                except OSError as e:
                    kind, sha = f"unreadable: {e.strerror or e}", ""
            out.append(ModelInfo(path.name, path, path.stat().st_size, sha, kind, shadowed=path.name in seen))
            seen.add(path.name)
    return out


# The shipped model each role uses when none is given, per modality: the demo's choices (src/medanon/demo.py).
DEFAULTS: dict[str, dict[str, str]] = {
    "ksame-codec": {"fundus": "restyle-map-fundus64.pt"},           # kcentroid, ksalsa, inverted (codec=)
    "ksalsa-map-generator": {"fundus": "stylegan2-fundus64-wide.pt"},   # ksalsa's map prior (map_generator=)
    "gmia-codec": {"fundus": "cotrained-map-fundus64.pt", "xray": "cotrained-map-xray64.pt"},   # gmia (model=)
    "gmia-identity": {"fundus": "identity-fundus64.pt", "xray": "identity-xray64.pt"},          # gmia (identity=)
    "gmia-utility": {"fundus": "classifier-grade-fundus64.pt", "xray": "classifier-pneumonia-xray64.pt"},  # utility=
    "dpglow-flow": {"xray": "glow-xray64.pt", "fundus": "glow-fundus64.pt"},                    # dpglow (flow=)
    "vessel-segmenter": {"fundus": "unet-vessels64.pt"},                                        # vs_snow (checkpoint=)
    "evaluation-identity-attacker": {"fundus": "identity-attacker-fundus64.pt", "xray": "identity-attacker-xray64.pt"},
    "evaluation-independent-attacker": {"fundus": "identity-attacker-independent-fundus24.pt",
                                        "xray": "identity-attacker-independent-xray24.pt"},
    "evaluation-siamese-attacker": {"fundus": "attacker-siamese-fundus64.pt", "xray": "attacker-siamese-xray64.pt"},
    "evaluation-sex-attacker": {"fundus": "attacker-sex-fundus64.pt", "xray": "attacker-sex-xray64.pt"},
}

ROLE_WORDS = {"ksame-codec": "k-Same codec (kcentroid, ksalsa, inverted codec=)",
              "ksalsa-map-generator": "k-SALSA map prior generator (map_generator=)",
              "gmia-codec": "GMIA codec (model=)",
              "gmia-identity": "GMIA E_id (identity=)", "gmia-utility": "GMIA E_ut (utility=)",
              "dpglow-flow": "DP-GLOW flow (flow=)", "vessel-segmenter": "VS-Snow segmenter (checkpoint=)",
              "evaluation-identity-attacker": "evaluation: main identity attacker",
              "evaluation-independent-attacker": "evaluation: independent attacker",
              "evaluation-siamese-attacker": "evaluation: Siamese attacker",
              "evaluation-sex-attacker": "evaluation: attribute (sex) attacker"}


@dataclass(frozen=True)
class Card:
    """What a shipped checkpoint is: trained on what, measured how well, meant for what (checkpoints/README.md)."""

    trained_on: str
    quality: str
    use: str


_PH = "phantoms only (medanon phantom, 64 px), never a real patient"
CARDS: dict[str, Card] = {
    "restyle-map-fundus64.pt": Card(f"{_PH}: ph-fundus64, frozen G of cotrained-map-fundus64.pt",
                                    "PH2: vessel AUROC 0.863, TAR 1.000, recon. FID 47.7",
                                    "default codec of k-Centroid, k-SALSA and GAN-Inverted (fundus)"),
    "cotrained-map-fundus64.pt": Card(f"{_PH}: ph-fundus64", "PH2: vessel AUROC 0.855, TAR 0.995, recon. FID 56.1",
                                      "default GMIA codec (fundus)"),
    "cotrained-map-xray64.pt": Card(f"{_PH}: ph-xray64", "PH2X: recon. FID 93.6, TAR 0.995, pneumonia AUROC 0.952",
                                    "default GMIA codec (X-ray)"),
    "restyle-fundus64.pt": Card(f"{_PH}: ph-fundus64, G of stylegan2-fundus64.pt",
                                "PH2: vessel AUROC 0.495, TAR 0.010", "comparison W+ codec (no map)"),
    "cotrained-fundus64.pt": Card(f"{_PH}: ph-fundus64", "PH2: vessel AUROC 0.557, TAR 0.055",
                                  "comparison W+ codec (no map)"),
    "cotrained-xray64.pt": Card(f"{_PH}: ph-xray64", "PH2X: FID 91.8, TAR 0.805, AUROC 0.765",
                                "W+ X-ray codec; start of the X-ray map codec"),
    "stylegan2-fundus64-wide.pt": Card(f"{_PH}: ph-fundus64", "PH2 sample FID 58.4 [54.1, 62.0]",
                                       "k-SALSA's map prior (fundus); generator of medanon generate; start of the "
                                       "fundus map codecs"),
    "stylegan2-fundus64-wide.resume.pt": Card(f"{_PH}: ph-fundus64", "as stylegan2-fundus64-wide.pt",
                                              "training state (G, D, optimiser) to continue the wide GAN"),
    "stylegan2-fundus64.pt": Card(f"{_PH}: ph-fundus64", "PH2 sample FID 205.5", "narrow generator of the W+ codecs"),
    "identity-fundus64.pt": Card(f"{_PH}: demo training split", "test split: verification AUC 0.9986",
                                 "default GMIA E_id (fundus)"),
    "identity-xray64.pt": Card(f"{_PH}: demo training split", "test split: verification AUC 1.0000",
                               "default GMIA E_id (X-ray)"),
    "classifier-grade-fundus64.pt": Card(f"{_PH}: demo training split", "test split: grade kappa 0.742",
                                         "default GMIA E_ut (fundus); a codec judge"),
    "classifier-pneumonia-xray64.pt": Card(f"{_PH}: demo training split", "test split: pneumonia AUROC 0.887",
                                           "default GMIA E_ut (X-ray)"),
    "identity-attacker-fundus64.pt": Card(f"{_PH}: seed-1 phantom", "demo controls: verification AUC 0.9952",
                                          "the evaluation's main identity attacker (fundus)"),
    "identity-attacker-xray64.pt": Card(f"{_PH}: seed-1 phantom", "demo controls: verification AUC 0.99998",
                                        "the evaluation's main identity attacker (X-ray)"),
    "identity-attacker-independent-fundus24.pt": Card(f"{_PH}: seed-2 phantom", "demo held-out pairs: AUC 0.912",
                                                      "the evaluation's independent attacker (fundus)"),
    "identity-attacker-independent-xray24.pt": Card(f"{_PH}: seed-2 phantom", "demo held-out pairs: AUC 0.974",
                                                    "the evaluation's independent attacker (X-ray)"),
    "attacker-siamese-fundus64.pt": Card(f"{_PH}: seed-1 phantom", "demo held-out: AUC 0.966",
                                         "the evaluation's Siamese attacker (fundus)"),
    "attacker-siamese-xray64.pt": Card(f"{_PH}: seed-1 phantom", "demo held-out: AUC 0.996",
                                       "the evaluation's Siamese attacker (X-ray)"),
    "attacker-sex-fundus64.pt": Card(f"{_PH}: seed-1 phantom", "demo held-out: AUROC 0.593",
                                     "the evaluation's attribute (sex) attacker (fundus)"),
    "attacker-sex-xray64.pt": Card(f"{_PH}: seed-1 phantom", "demo held-out: AUROC 0.986",
                                   "the evaluation's attribute (sex) attacker (X-ray)"),
    "classifier-grade-independent-fundus64.pt": Card(f"{_PH}: seed-1 phantom (500 patients)",
                                                     "PH2 sources: kappa 0.909",
                                                     "independent judge of the grade the codecs keep"),
    "glow-xray64.pt": Card(f"{_PH}: training split of a 400-patient phantom", "bits/dim val 3.881",
                           "default DP-GLOW flow (X-ray); the likelihood-ratio mixture flow"),
    "glow-fundus64.pt": Card(f"{_PH}: training split of a 400-patient phantom", "bits/dim val 3.249",
                             "default DP-GLOW flow (fundus)"),
    "glow-xray64-normal.pt": Card(f"{_PH}: the same X-ray split, pneumonia = 0", "bits/dim val 3.869",
                                  "likelihood-ratio classifier's normal-only flow (DP-GLOW Table 3)"),
    "unet-vessels64.pt": Card(f"{_PH}: phantom vessel masks (200 patients)", "phantom test: Dice 0.834, AUROC 0.986",
                              "default VS-Snow vessel segmenter"),
}


def default_model(role: str, modality: str | None) -> str | None:
    """The shipped file ``role`` uses for ``modality`` when none is given (None: no default for it)."""
    if role not in DEFAULTS:
        raise KeyError(f"no model role {role!r}; roles: {', '.join(DEFAULTS)}")
    return DEFAULTS[role].get(modality or "")


def defaults_of(name: str) -> list[str]:
    """The roles (with modality) for which the file ``name`` is the default, e.g. ``['gmia-codec (xray)']``."""
    return [f"{role} ({m})" for role, by in DEFAULTS.items() for m, n in by.items() if n == name]


# What a loaded network given for a role must have (duck-typed, so a user's own codec qualifies), and what it is
LOADED: dict[str, tuple[tuple[str, ...], str]] = {
    "ksame-codec": (("encode", "decode", "render", "describe"),
                    "a StyleGAN codec (medanon.codecs.stylegan.load_codec(path), or StyleGANCodec(G, E))"),
    "gmia-codec": (("encode", "decode", "render", "describe"),
                   "a StyleGAN codec (medanon.codecs.stylegan.load_codec(path), or StyleGANCodec(G, E))"),
    "dpglow-flow": (("encode", "decode", "describe", "flow"),
                    "a flow codec (medanon.models.glow.GlowCodec(glow), or medanon.train.flow.load_flow(path)[0])"),
    "gmia-identity": (("forward",), "an identity network (medanon.anonymize.gmia.IdentityEncoder)"),
    "gmia-utility": (("forward",), "a utility network (medanon.anonymize.gmia.UtilityEncoder)"),
}
# The checkpoint kind a loaded network must come from, where it says (``provenance["kind"]``, as medanon's wrappers
# record it): a utility classifier given as the identity network is refused as its checkpoint would be
LOADED_KINDS = {"gmia-identity": "identity", "gmia-utility": "classifier"}


def _check_loaded(value, *, role: str, argument: str) -> None:
    """A loaded network given for ``role`` has what the method calls, or a ConfigError says what to pass."""
    from medanon.errors import ConfigError, a_type

    if isinstance(value, tuple):
        if role == "dpglow-flow" and len(value) == 3:       # medanon.train.flow.load_flow(path): (codec, clip, info)
            _check_loaded(value[0], role=role, argument=argument)
            return
        raise ConfigError(f"{argument}= is a tuple of {len(value)}, not one model",
                          fix=f"pass {argument}= one loaded network, a checkpoint name on `medanon models` or a path")
    if role not in LOADED:
        return
    needs, what = LOADED[role]
    provenance = getattr(value, "provenance", None)
    kind = provenance.get("kind") if isinstance(provenance, dict) else None
    if role in LOADED_KINDS and kind is not None and kind != LOADED_KINDS[role]:
        raise ConfigError(f"{argument}= is {a_type(value)} of a {kind!r} checkpoint, not {what}",
                          fix=f"pass {argument}= {what}, a checkpoint name on `medanon models` or a path")
    _check_raw_network(value, role=role, argument=argument, what=what)
    missing = [a for a in needs if not hasattr(value, a)]
    if missing:
        hint = (": wrap the Glow in GlowCodec(glow)" if role == "dpglow-flow" and hasattr(value, "log_prob") else "")
        raise ConfigError(f"{argument}= is {a_type(value)}, not {what}: it has no {', '.join(missing)}{hint}",
                          fix=f"pass {argument}= {what}, a checkpoint name on `medanon models` or a path")


def _check_raw_network(value, *, role: str, argument: str, what: str) -> None:
    """GMIA's networks as medanon's loaders return them (``load_identity``, ``load_classifier``: the bare networks,
    without the wrappers that prepare, resize and normalise their inputs and outputs) run, but compute something else:
    a ConfigError says which wrapper, or that it is the other network."""
    if role not in ("gmia-identity", "gmia-utility"):
        return
    from medanon.errors import ConfigError
    from medanon.models.classifier import ResNet
    from medanon.models.identity import IdentityNet

    if not isinstance(value, (ResNet, IdentityNet)):
        return
    family = "an identity network (IdentityNet)" if isinstance(value, IdentityNet) else "a classifier (ResNet)"
    if (role == "gmia-identity") != isinstance(value, IdentityNet):
        raise ConfigError(f"{argument}= is {family}, not {what}",
                          fix=f"pass {argument}= {what}, a checkpoint name on `medanon models` or a path")
    wrapper = "IdentityEncoder.from_checkpoint(path)" if role == "gmia-identity" else \
        "UtilityEncoder.from_checkpoint(path)"
    raise ConfigError(f"{argument}= is {family} as loaded, without GMIA's wrapper (which prepares its input and gives "
                      f"{'unit embeddings' if role == 'gmia-identity' else 'its penultimate features'})",
                      fix=f"pass {argument}= medanon.anonymize.gmia.{wrapper}, or the checkpoint's name or path")


def resolve_model(value, *, role: str, modality: str | None, argument: str, method: str):
    """A method's model argument as ``(path or loaded object, record)``: a loaded network is kept; a name is
    looked up on the search path (:func:`find_model`), a path kept; None is the role's default for ``modality``.

    ``record`` says which file was used and why, for the release manifest (``{"file": ..., "chosen": ...}``; for a
    loaded network the file it was loaded from, where it records one, else None, and ``"chosen": "loaded"``; its
    weights' digest is in the release's ``models`` either way). Raises :class:`~medanon.errors.ConfigError` when
    there is no default.
    """
    from medanon.errors import ConfigError

    chosen = "given"
    if value is None:
        value = default_model(role, modality)
        if value is None:
            raise ConfigError(f"{method} needs {argument}=: no shipped {ROLE_WORDS[role]} for {modality or 'these'} "
                              "images", fix=f"pass {argument}= a checkpoint (name on `medanon models` or path) or a "
                                            "loaded network")
        chosen = f"default for {modality}"
    if not isinstance(value, (str, os.PathLike)):
        if type(value).__module__ == "builtins" and not isinstance(value, tuple):   # 7, True, {}, [...]: no model
            raise ConfigError(f"{argument}={value!r} is {a_type(value)}; {argument}= takes a checkpoint "
                              f"(a name on `medanon models` or a path) or a loaded network",
                              fix=f"pass {argument}= a checkpoint name or path, a loaded network, or leave it out for "
                                  "the default")
        _check_loaded(value, role=role, argument=argument)
        prov = getattr(value, "provenance", None)
        ckpt = prov.get("checkpoint") if isinstance(prov, dict) else None
        source = ckpt.get("path") if isinstance(ckpt, dict) else None
        return value, {"file": Path(source).name if source else None, "chosen": "loaded"}
    path = find_model(value)
    return path, {"file": path.name, "chosen": chosen}
