"""Everything an evaluation computes from the real data alone, built lazily and cached (:class:`RealContext`).

Three disjoint groups of real patients:

- **source** (``cfg.source_split``, ``train``): the patients a release may contain, its members;
- **held-out** (``cfg.heldout_split``, ``test``): never released; the utility test set and the *controls*
  of the attacks (the same attack run on people who are not in the release);
- **attacker** (``cfg.attacks.attacker_split``, ``val``): neither members nor controls; what the attacker
  trains on: the attribute classifier, the identity network (unless a checkpoint is given) and the
  independent identity network (:meth:`AttackConfig.independent`).

Thresholds that need people who are neither members nor controls *and* unseen by the networks (the
nearest-record attack's) come from half of the held-out patients (:attr:`RealContext.heldout_halves`).

An attacker trained on the members would measure memorisation of its own training images, and an
identity network trained on them would separate members from controls for reasons unrelated to the
release. Where the attacker split is too small the source split is used instead, and the report says so
(:attr:`RealContext.notes`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import cached_property
from typing import Any

import numpy as np
import torch

from medanon.config import to_dict
from medanon.errors import ConfigError, DataError
from medanon.evaluate import fidelity as fid
from medanon.evaluate import utility as util
from medanon.evaluate.attacks import siamese as sia
from medanon.evaluate.attacks.attribute import scores
from medanon.evaluate.attacks.balance import Balance
from medanon.evaluate.attacks.membership import descriptors
from medanon.evaluate.cache import Cache, digest
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.inputs import RealData
from medanon.evaluate.learners import make_learner
from medanon.fsutil import sha256_file
from medanon.models.classifier import load_classifier, save_classifier
from medanon.models.identity import IdentityNet, load_identity
from medanon.train.classifier import train_classifier
from medanon.train.identity import eye_ids, identity_units, train_identity

log = logging.getLogger(__name__)

BALANCE_AUTO = ("grade", "pneumonia")           # the labels that drive image similarity, in order of preference


def with_seed(tcfg, seed: int):
    return replace(tcfg, seed=int(seed))


def _repeat_patients(patients: np.ndarray) -> int:
    """Patients with two or more images (what an identity network can learn from)."""
    _, counts = np.unique(patients, return_counts=True)
    return int((counts >= 2).sum())


def recorded_patients(extra: dict | None, ctx: RealContext) -> tuple[str, np.ndarray] | None:
    """Which of the evaluation's patient sets a checkpoint's recorded training patients are, where it records that
    it was trained on this very dataset (``medanon train identity``: ``extra.data.source``, the digest of the
    dataset's files, equal to the real data's) and the digest of those patients' sorted ids
    (``extra.data.patients_digest``): ``("the release's members (the source split)", rows)``, the controls, both,
    or every patient of the real data; None where they are another set, or the checkpoint records no dataset or
    another one (ids alone do not tell people apart: every phantom numbers its patients P00001, P00002, ...). A
    digest tells equal sets only: a checkpoint trained on some of these people and others is not recognised."""
    from medanon.data.training_people import patients_digest

    data = (extra or {}).get("data") or {}
    said, source = data.get("patients_digest"), (data.get("source") or {}).get("sha256")
    if not said or not source or source != getattr(ctx.real, "files_sha256", None):
        return None
    return next(((what, rows) for what, rows in patient_sets(ctx)
                 if patients_digest(ctx.real.patients[rows].tolist()) == said), None)


def patient_sets(ctx: RealContext) -> list[tuple[str, np.ndarray]]:
    """The patient sets a model's recorded training patients are recognised as: the members, the controls, both,
    every patient of the real data (name, rows)."""
    cfg = ctx.cfg
    return [(f"the release's members (the {cfg.source_split!r} split)", ctx.src),
            (f"the controls (the {cfg.heldout_split!r} split)", ctx.held),
            ("the members and the controls", np.concatenate([ctx.src, ctx.held])),
            ("every patient of the real data", np.arange(len(ctx.real.patients)))]


def checkpoint_trained_on(path: str, ctx: RealContext | None = None) -> str:
    """What an attacker's checkpoint says it was trained on (``extra.trained_on``, written by whoever exported it,
    or the split ``medanon train identity`` records), with, given the evaluation ``ctx``, whether those patients are
    the evaluation's own; or that its training patients are unknown to the evaluator."""
    from medanon.checkpoint import load_checkpoint

    extra = load_checkpoint(path).get("extra") or {}
    said, data = extra.get("trained_on"), extra.get("data") or {}
    if not said and data.get("split"):
        said = f"the {data['split']!r} split of its dataset ({data.get('images', '?')} images)"
    which = recorded_patients(extra, ctx) if ctx is not None else None
    if which is not None:
        said = f"{said or 'recorded patients'}: exactly {which[0]} of this evaluation"
    return f"checkpoint {path}: {said}" if said else \
        f"checkpoint {path} (its training patients are not known here)"


def split_rows(real: RealData, cfg: EvalConfig) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the source and the held-out split; too few of either is refused (before the report is made)."""
    src, held = real.rows(cfg.source_split), real.rows(cfg.heldout_split)
    if len(src) < 2 or len(held) < 2:
        raise DataError(f"the real dataset's {cfg.source_split!r} split has {len(src)} images and its "
                        f"{cfg.heldout_split!r} split {len(held)}: too few to evaluate",
                        fix="use a larger dataset or other split fractions")
    return src, held


class RealContext:
    """Everything computed from the real data alone, built lazily and cached."""

    def __init__(self, real: RealData, cfg: EvalConfig, cache: Cache, device: torch.device, progress: bool):
        self.real, self.cfg, self.cache, self.device, self.progress = real, cfg, cache, device, progress
        self.src, self.held = split_rows(real, cfg)
        self.key = digest(real.digest, real.split.tolist(), cfg.size)
        self.notes: list[str] = []
        self._models: dict[str, Any] = {}               # classifiers trained on real data, by content key
        self._attribute_scores: dict[str, np.ndarray] = {}
        self._attribute_size: int | None = None         # a checkpointed attribute attacker's input side
        self.member_fallbacks: set[str] = set()         # attackers that had to be trained on the members
        self._units_recorded: dict[str, str] = {}       # identity unit a network checkpoint records (unit_of)
        a = cfg.attacks
        att = real.rows(a.attacker_split) if a.attacker_split else np.zeros(0, np.int64)
        if _repeat_patients(real.patients[att]) >= 2:
            self.attacker_rows, self.attacker_from = att, a.attacker_split
        else:
            self.attacker_rows, self.attacker_from = self.src, cfg.source_split
            self.note(f"the attacker split {a.attacker_split!r} has {_repeat_patients(real.patients[att])} patient(s) "
                      f"with two or more images: the attackers (identity network, attribute classifier) are trained "
                      f"on the release's source split instead, i.e. on its members, and measure memorisation too")
        self.identity_info: dict[str, Any] = (
            {"checkpoint": a.identity_checkpoint, "sha256": sha256_file(a.identity_checkpoint),
             "trained_on": checkpoint_trained_on(a.identity_checkpoint, self),
             "identity_unit": self.unit_of("identity")}
            if a.identity_checkpoint else
            {"trained_on": f"real {self.attacker_from} split ({len(self.attacker_rows)} images, "
                           f"{len(set(real.patients[self.attacker_rows]))} patients)", "config": to_dict(a.identity),
             "identity_unit": self.attacker_units[1]})

    @cached_property
    def attacker_units(self) -> tuple[list[str], str]:
        """The identities the attacker networks trained here learn on the attacker split: a fundus patient's eyes
        where the laterality label tells them apart and eyes are photographed repeatedly, else the patient
        (:func:`medanon.train.identity.identity_units`)."""
        rows = self.attacker_rows
        sides = (self.real.label("laterality")[rows] if self.real.modality == "fundus"
                 and "laterality" in self.real.label_names else None)
        return identity_units(self.real.patients[rows], sides)

    def unit_of(self, net: str) -> str:
        """The identity a network learned (``identity``, ``independent``): recorded in its checkpoint (``patient``
        where a checkpoint records none; read once), else this evaluation's choice for the networks it trains."""
        a = self.cfg.attacks
        path = a.identity_checkpoint if net == "identity" else a.independent_checkpoint
        if not path:
            return self.attacker_units[1]
        if net not in self._units_recorded:
            from medanon.checkpoint import load_checkpoint

            extra = load_checkpoint(path, kind="identity").get("extra") or {}
            self._units_recorded[net] = str(extra.get("identity_unit", "patient"))
        return self._units_recorded[net]

    @cached_property
    def siamese_ids(self) -> np.ndarray:
        """Every real image's identity as the Siamese attacker learned it (trained here: :attr:`attacker_units`; a
        checkpoint: the patient)."""
        unit = "patient" if self.cfg.attacks.siamese_checkpoint else self.attacker_units[1]
        return self.identity_ids(np.arange(len(self.real.patients)), unit)

    def identity_ids(self, rows: np.ndarray, unit: str) -> np.ndarray:
        """The identities of ``rows`` in ``unit``: each image's eye (``eye``) or patient."""
        pats = self.real.patients[rows]
        if unit != "eye" or "laterality" not in self.real.label_names:
            return np.asarray(pats)
        return np.asarray(eye_ids(pats, self.real.label("laterality")[rows]))

    def note(self, text: str) -> None:
        """A warning for the log and the report, once."""
        if text not in self.notes:
            log.warning(text)
            self.notes.append(text)

    def split_name(self, rows: np.ndarray) -> str:
        return f"{len(rows)} images of {len(set(self.real.patients[rows].tolist()))} patients"

    # -- identity networks -----------------------------------------------------------------------------

    def _train_identity(self, tcfg, name: str) -> IdentityNet:
        rows = self.attacker_rows
        units, unit = self.attacker_units
        path = self.cache.path(f"{name}-{digest(self.key, to_dict(tcfg), rows.tolist(), unit)}", ".pt")
        return train_identity(self.real.images[rows], units, cfg=tcfg, out=path,
                              device=self.device, progress=self.progress)

    @cached_property
    def identity(self) -> IdentityNet:
        a = self.cfg.attacks
        if a.identity_checkpoint:
            net, _ = load_identity(a.identity_checkpoint, map_location=self.device)
            return net
        return self._train_identity(a.identity, "identity")

    @cached_property
    def independent(self) -> IdentityNet | None:
        """A second attacker: another architecture and input size, trained on the attacker split."""
        a = self.cfg.attacks
        if not a.independent_attacker:
            return None
        if a.independent_checkpoint:
            return load_identity(a.independent_checkpoint, map_location=self.device)[0]
        return self._train_identity(a.independent, "identity-independent")

    def embed(self, images: torch.Tensor, net: IdentityNet | None = None) -> np.ndarray:
        return (net or self.identity).embed(images.to(self.device)).double().numpy()

    @cached_property
    def _identity_key(self) -> str:
        """What the real images' identity embeddings depend on: the data, the identity network and its training."""
        a = self.cfg.attacks
        return digest(self.key, to_dict(a.identity), self.identity_info.get("sha256"), self.attacker_rows.tolist(),
                      None if a.identity_checkpoint else self.attacker_units[1])

    @cached_property
    def real_emb(self) -> np.ndarray:
        return self.cache.array(f"real-identity-{self._identity_key}", lambda: self.embed(self.real.images))

    @cached_property
    def real_emb_mirrored(self) -> np.ndarray:
        """:attr:`real_emb` of the real images mirrored left-right (the near-copy screen's second orientation)."""
        return self.cache.array(f"real-identity-mirrored-{self._identity_key}",
                                lambda: self.embed(self.real.images.flip(-1)))

    @cached_property
    def real_sides(self) -> np.ndarray | None:
        """Fundus data: each real image's eye side (1 right, 0 left, -1 unknown), as an attacker reads it (its
        ``laterality`` label, else the optic disc's position: :func:`medanon.anonymize.eye_sides.image_sides`); None
        for other data. Differencing turns a patient's left eyes with it, as an aligned k-Same release averages them."""
        if self.real.modality != "fundus":
            return None
        from medanon.anonymize.eye_sides import image_sides

        labels = self.real.label("laterality") if "laterality" in self.real.label_names else None
        return image_sides(self.real.images, labels)

    @cached_property
    def real_emb_independent(self) -> np.ndarray | None:
        a = self.cfg.attacks
        if self.independent is None:
            return None
        ck = sha256_file(a.independent_checkpoint) if a.independent_checkpoint else None
        unit = None if ck else self.attacker_units[1]
        name = (f"real-identity-indep-"
                f"{digest(self.key, to_dict(a.independent), self.attacker_rows.tolist(), ck, unit)}")
        return self.cache.array(name, lambda: self.embed(self.real.images, self.independent))

    @cached_property
    def siamese(self) -> sia.SiameseNet | None:
        """The Siamese verification attacker: ``attacks.siamese_checkpoint``, or trained on the attacker split
        (cached by content)."""
        a = self.cfg.attacks
        if not a.siamese:
            return None
        if a.siamese_checkpoint:
            net = sia.load_siamese(a.siamese_checkpoint, map_location=self.device)[0]
            takes = net.branch[0].in_channels
            if takes != self.real.images.shape[1]:
                raise DataError(f"the Siamese attacker {a.siamese_checkpoint} takes {takes}-channel images and "
                                f"{self.real.root} has {self.real.images.shape[1]}",
                                files=[a.siamese_checkpoint], fix="pass a Siamese checkpoint of this modality")
            return net
        rows = self.attacker_rows
        net = sia.SiameseNet(self.real.images.shape[1], a.siamese_net).to(self.device)
        units, unit = self.attacker_units
        path = self.cache.path(f"siamese-{digest(self.key, to_dict(a.siamese_net), rows.tolist(), unit)}", ".pt")
        if path is not None and path.is_file():
            try:
                net.load_state_dict(torch.load(path, map_location=self.device, weights_only=True))
                return net.eval()
            except Exception as e:                  # written by an older version, or damaged: trained again below
                log.warning("the cached Siamese attacker %s cannot be read (%s): training it again", path,
                            str(e).splitlines()[0][:120] if str(e) else type(e).__name__)
        net = sia.train_siamese(self.real.images[rows], np.asarray(units), cfg=a.siamese_net,
                                device=self.device)
        if path is not None:
            import io

            from medanon.fsutil import atomic_write_bytes

            buf = io.BytesIO()
            torch.save(net.state_dict(), buf)
            atomic_write_bytes(path, buf.getvalue())    # as every cache file: a killed run leaves no torn one
        return net

    @cached_property
    def siamese_trained_on(self) -> str:
        a = self.cfg.attacks
        return checkpoint_trained_on(a.siamese_checkpoint, self) if a.siamese_checkpoint else \
            f"real {self.attacker_from} split ({self.split_name(self.attacker_rows)})"

    @cached_property
    def real_siamese(self) -> torch.Tensor:
        """The Siamese branch's features of every real image (pairs are scored by its head)."""
        return sia.embed(self.siamese, self.real.images)

    @cached_property
    def real_desc(self) -> np.ndarray:
        return descriptors(self.real.images, self.real_emb)

    @cached_property
    def heldout_halves(self) -> tuple[np.ndarray, np.ndarray]:
        """Held-out rows split by patient (seeded) into a calibration half and a control half: thresholds are
        set on people who are neither members nor the controls they are then tested on, and on whom no
        attacker network was trained."""
        pats = np.unique(self.real.patients[self.held])
        rng = np.random.default_rng(np.random.SeedSequence([self.cfg.seed, 5]))
        cal = set(rng.permutation(pats)[: len(pats) // 2].tolist())
        is_cal = np.asarray([p in cal for p in self.real.patients[self.held]])
        return self.held[is_cal], self.held[~is_cal]

    @cached_property
    def balance_label(self) -> str | None:
        """The label controls are reweighted on to the members' mix (``attacks.balance``; ``auto``: the first of
        ``BALANCE_AUTO`` the real data has), or None."""
        want = self.cfg.attacks.balance
        if not want:
            return None
        for name in BALANCE_AUTO if want == "auto" else (want,):
            if name in self.real.label_names and (~np.isnan(self.real.label(name))).any():
                return name
        if want != "auto":
            raise ConfigError(f"attacks.balance={want!r}: the real data has no {want!r} labels",
                              fix=f"use one of {self.real.label_names}, auto, or '' (no reweighting)")
        return None

    def balance(self, member_rows: np.ndarray, control_rows: np.ndarray) -> Balance | None:
        """The stratifying label's values of member and control rows (None: no reweighting)."""
        if self.balance_label is None:
            return None
        v = self.real.label(self.balance_label)
        return Balance(self.balance_label, v[member_rows], v[control_rows])

    # -- fidelity reference ----------------------------------------------------------------------------

    @cached_property
    def ref_rows(self) -> np.ndarray:
        n = min(self.cfg.fidelity.reference_samples, len(self.src))
        rng = np.random.default_rng(np.random.SeedSequence([self.cfg.seed, 1]))
        return np.sort(rng.choice(self.src, n, replace=False))

    @cached_property
    def inception(self):
        """(extractor, provenance), or None when the Inception weights are not installed (said in the report)."""
        if not self.cfg.fidelity.inception:
            return None
        from medanon.models.features import FeatureNetworkUnavailable, WeightsChecksumError

        try:
            return fid.inception_extractor(device=self.device)
        except (FeatureNetworkUnavailable, WeightsChecksumError, ImportError) as e:  # report, do not crash
            self.note(f"Inception FID network unavailable ({type(e).__name__}: {e}); FID and KID not computed")
            return None

    def inception_features(self, images: torch.Tensor, desc: str) -> np.ndarray:
        ext, _ = self.inception
        return fid.extract_features(ext, images, batch=self.cfg.fidelity.batch, progress=self.progress, desc=desc)

    def real_inception(self, rows: np.ndarray, what: str) -> np.ndarray:
        """The real rows' Inception features, cached under the network's weights and implementation (features of
        another implementation differ by float rounding, and must not meet this one's in an FID)."""
        net = self.inception[1]
        key = digest(self.key, rows.tolist(), net.get("weights_sha256"), net.get("implementation"))
        return self.cache.array(f"inception-{what}-{key}",
                                lambda: self.inception_features(self.real.images[rows], f"Inception ({what})"))

    # -- classifiers trained on real data --------------------------------------------------------------

    def _real_classifier(self, name: str, rows: np.ndarray, y: np.ndarray, num_classes: int, tcfg) -> Any:
        key = f"{name}-{digest(self.key, rows.tolist(), to_dict(tcfg))}"
        if key in self._models:                         # once per evaluation, not once per release
            return self._models[key]
        path = self.cache.path(key, ".pt")
        if path is not None and path.is_file():
            model = load_classifier(path, map_location=self.device)[0]
        else:
            model = train_classifier(self.real.images[rows], y, num_classes=num_classes, cfg=tcfg,
                                     device=self.device, progress=self.progress, desc=name)
            if path is not None:
                save_classifier(path, model, extra={"rows": len(rows)})
        self._models[key] = model
        return model

    def attribute_attacker(self, label: str):
        """The attribute classifier: ``attacks.attribute_checkpoint``, or trained on the attacker split (patients
        neither released nor controls)."""
        a = self.cfg.attacks
        if a.attribute_checkpoint:
            key = f"attribute-checkpoint-{label}"
            if key not in self._models:
                model, blob = load_classifier(a.attribute_checkpoint, map_location=self.device)
                said = (blob.get("extra") or {}).get("label")
                if said not in (None, label) or model.cfg.num_classes != 2:
                    raise ConfigError(f"the attribute attacker {a.attribute_checkpoint} predicts {said!r} with "
                                      f"{model.cfg.num_classes} classes; the evaluation attacks {label!r} (2 classes)",
                                      fix=f"pass a classifier of the label {label!r}, or set "
                                          f"attacks.attribute={said!r}")
                size = ((blob.get("extra") or {}).get("train_config") or {}).get("image_size")
                self._attribute_size = int(size or a.attribute_classifier.image_size)
                self._models[key] = model, checkpoint_trained_on(a.attribute_checkpoint, self)
            return self._models[key]
        tcfg = a.attribute_classifier
        rows = self.attacker_rows
        v = self.real.label(label)[rows]
        ok = ~np.isnan(v)
        if ok.sum() < 2 or len(np.unique(v[ok])) < 2:
            rows = self.src
            v = self.real.label(label)[rows]
            ok = ~np.isnan(v)
            if ok.sum() < 2 or len(np.unique(v[ok])) < 2:
                return None, ""
            self.member_fallbacks.add("attribute")
            self.note(f"the attacker split has too few {label!r} labels: the {label} attacker is trained on the "
                      f"release's source split (its members), so it measures memorisation too")
        model = self._real_classifier(f"attacker-{label}", rows[ok], v[ok].astype(int), 2, tcfg)
        return model, f"real {self.attacker_from if rows is self.attacker_rows else self.cfg.source_split} split " \
                      f"({self.split_name(rows[ok])})"

    @property
    def attribute_image_size(self) -> int:
        """The side the attribute attacker takes (its checkpoint's training size, else the config's)."""
        return self._attribute_size or self.cfg.attacks.attribute_classifier.image_size

    def attribute_scores(self, label: str) -> np.ndarray:
        """The attribute attacker's probability on every real image, computed once for all releases."""
        if label not in self._attribute_scores:
            model, _ = self.attribute_attacker(label)
            self._attribute_scores[label] = scores(model, self.real.images, self.attribute_image_size)
        return self._attribute_scores[label]

    def test_set(self, task: util.Task) -> tuple[np.ndarray, np.ndarray]:
        ok, y = task.targets(self.real.label(task.label)[self.held])
        return self.held[ok], y

    # -- the utility learner (learners.py: a CNN trained on the images, or a linear probe on frozen features) --

    @cached_property
    def learner(self):
        return make_learner(self.cfg.utility, device=self.device, progress=self.progress)

    @property
    def learner_key(self) -> str:
        u = self.cfg.utility
        return digest(self.key, u.learner, to_dict(u.probe if u.learner == "probe" else u.classifier))

    @cached_property
    def real_inputs(self):
        """Every real image encoded for the learner once (the probe's features, cached; the CNN's images)."""
        if self.learner.name == "cnn":
            return self.real.images
        return self.cache.array(f"probe-features-{self.learner_key}",
                                lambda: self.learner.encode(self.real.images, "probe features (real)"))

    def real_same_n_probs(self, task: util.Task, n: int, seed: int) -> np.ndarray:
        """Probabilities on the held-out test set of a learner trained on ``n`` real source images (seeded
        subsample; cached): the paired reference of the release's."""
        name = f"real-same-n-probs-{task.label}-{n}-{seed}-{self.learner_key}"

        def make() -> np.ndarray:
            ok, y = task.targets(self.real.label(task.label)[self.src])
            rows = self.src[ok]
            pick = util.subsample(len(rows), n, seed)
            test_rows, _ = self.test_set(task)
            model = self.learner.fit(self.real_inputs[rows[pick]], y[pick], num_classes=task.num_classes, seed=seed,
                                     desc=f"same-N real classifier {task.label} n={len(pick)} seed {seed}")
            return self.learner.proba(model, self.real_inputs[test_rows])

        return self.cache.array(name, make)

    def full_real_model(self, task: util.Task):
        """The learner trained on every real source image with a ``task`` label (the first seed)."""
        ok, y = task.targets(self.real.label(task.label)[self.src])
        if self.learner.name == "cnn":
            tcfg = with_seed(self.cfg.utility.classifier, self.cfg.utility.seeds[0])
            return self._real_classifier(f"real-{task.label}", self.src[ok], y, task.num_classes, tcfg)
        key = f"probe-real-{task.label}-{self.learner_key}"
        if key not in self._models:                     # a convex fit in memory: cheaper than a file round trip
            self._models[key] = self.learner.fit(self.real_inputs[self.src[ok]], y, num_classes=task.num_classes,
                                                 seed=self.cfg.utility.seeds[0])
        return self._models[key]
