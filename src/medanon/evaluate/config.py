"""``EvalConfig``: every setting of an evaluation, in one dataclass tree (YAML in, ``--set`` overrides).

The expensive knobs are here so a CPU run can be sized: the FID sample size and the Inception
switch (Inception-v3 at 299 px costs roughly 0.1-1 s per image on two CPU cores), the classifier's
steps and input size, the number of seeds, the identity network's steps. ``EvalConfig.fast()`` is
the preset the demo uses, ``EvalConfig.tiny()`` the one tests and notebooks use (seconds on a phantom, numbers
too rough to read); the defaults are the full protocol. :func:`preset` picks one by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from medanon.config import SplitConfig
from medanon.errors import ConfigError
from medanon.evaluate.attacks.siamese import SiameseConfig
from medanon.evaluate.learners import LEARNERS, ProbeConfig
from medanon.train.classifier import ClassifierTrainConfig
from medanon.train.identity import IdentityTrainConfig


@dataclass
class FidelityConfig:
    inception: bool = True                      # FID and KID on Inception-v3 features (the slow part on a CPU)
    samples: int = 0                            # released images per release for FID/KID/FD, the same N for every
                                                # release (0: each release's own records, up to max_samples; the
                                                # controls are measured at every N in use)
    max_samples: int = 1000                     # cap on the images per release
    reference_samples: int = 1000               # real source-split images in the reference set (cap)
    bootstrap: int = 50                         # bootstrap resamples for the FID / FD intervals
    kid_subsets: int = 100                      # KID subsets
    kid_subset_size: int = 1000                 # KID subset size (capped by the set sizes)
    in_domain: bool = True                      # Fréchet distance on the identity network's embeddings
    batch: int = 32                             # images per feature-network batch

    def validate(self) -> None:
        if self.samples < 0 or self.max_samples < 2 or self.reference_samples < 2:
            raise ConfigError("fidelity.samples must be >= 0, max_samples and reference_samples >= 2")
        if self.bootstrap < 0 or self.kid_subsets < 1 or self.kid_subset_size < 2 or self.batch < 1:
            raise ConfigError("fidelity.bootstrap >= 0, kid_subsets >= 1, kid_subset_size >= 2, batch >= 1")


@dataclass
class UtilityConfig:
    tasks: tuple[str, ...] = ()                 # labels to predict; () = grade / pneumonia; ('none',) = off
    seeds: tuple[int, ...] = (0, 1, 2)          # one classifier per seed on the release and on the same-N real images
    bootstrap: int = 1000                       # paired bootstrap resamples over test images (0 = no interval)
    learner: str = "cnn"                        # cnn: a classifier trained on the images (the papers' protocol);
                                                # probe: a linear probe on frozen ImageNet features (learners.py)
    classifier: ClassifierTrainConfig = field(default_factory=ClassifierTrainConfig)    # the cnn learner's
    probe: ProbeConfig = field(default_factory=ProbeConfig)                             # the probe learner's
    full_real: bool = True                      # also train on every real source image: a reference row, and
                                                # that model tested on the released images (DP-GLOW's direction)
    compare: tuple[tuple[str, str], ...] = ()   # pairs of release names (a, b): a - b on the same held-out images,
                                                # paired patient bootstrap (report.json "comparisons"); YAML
                                                # [[a, b], ...], --set 'utility.compare=[[a, b]]'

    def validate(self) -> None:
        if not self.seeds:
            raise ConfigError("utility.seeds must name at least one seed", fix="e.g. seeds 0,1,2")
        from medanon.evaluate.utility import choose_tasks

        choose_tasks(self.tasks, (), ())            # a label without classes is refused before any work
        negative = [s for s in self.seeds if s < 0]
        if negative:                                     # numpy refuses them, after the attackers were trained
            raise ConfigError(f"utility.seeds={list(self.seeds)} holds negative seeds {negative}; seeds are "
                              "integers >= 0", fix="e.g. seeds 0,1,2")
        if len(set(self.seeds)) != len(self.seeds):      # a repeated seed repeats a run: n and sd would be false
            raise ConfigError(f"utility.seeds={list(self.seeds)} names a seed more than once",
                              fix="name each seed once, e.g. 0,1,2")
        for pair in self.compare:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ConfigError(f"utility.compare entry {list(pair)} must name two different releases",
                                  fix="write pairs as [[release_a, release_b], ...] of two evaluated releases' "
                                      "names")
        if self.bootstrap < 0 or 0 < self.bootstrap < 20:
            raise ConfigError(f"utility.bootstrap={self.bootstrap} must be 0 (off) or at least 20")
        if self.learner not in LEARNERS:
            raise ConfigError(f"utility.learner={self.learner!r} is unknown", fix=f"use one of {list(LEARNERS)}")


@dataclass
class AttackConfig:
    membership: bool = True                     # k-SALSA top-K membership inference (needs the mapping)
    attribute: str = "sex"                      # VS-Snow attribute attacker's label ("" = off)
    attribute_classifier: ClassifierTrainConfig = field(default_factory=ClassifierTrainConfig)
    linkability: bool = True                    # GMIA inner / outer risk (needs the mapping)
    singling_out: bool = True                   # GMIA hidden rate / local cloaking (needs the mapping)
    inference: bool = True                      # anonymeter-style inference of `attribute` from released labels
    target_far: float = 0.01                    # FAR at which the verification threshold is fixed
    max_pairs: int = 5000                       # cap on genuine pairs per verification set
    confidence: float = 0.95                    # level of every Wilson / bootstrap interval
    identity: IdentityTrainConfig = field(default_factory=IdentityTrainConfig)
    identity_checkpoint: str = ""               # a trained identity network (kind "identity") instead of training
    attacker_split: str = "val"                 # patients neither released nor controls: what attackers train on
    nearest: bool = True                        # membership by nearest released record, members vs held-out controls
    membership_fpr: float = 0.1                 # its threshold: this share of calibration images pass it
    balance: str = "auto"                       # controls reweighted to the members' mix of this label (the one
                                                # that drives similarity); auto: grade, else pneumonia; "" = off
                                                # (inference's control: always on its own secret)
    independent_attacker: bool = True           # also attack with a second identity network: another architecture,
    independent_arch: str = "resnet10"          # input size and seed, trained on the attacker split with the
    independent_image_size: int = 48           # same budget (steps, batch, lr, loss) as attacks.identity
    independent_seed: int = 1
    independent_checkpoint: str = ""            # a trained independent identity network instead of training one
    siamese: bool = True                        # a Siamese verification attacker on image pairs (Packhäuser et al.
    siamese_net: SiameseConfig = field(default_factory=SiameseConfig)   # 2022), trained on the attacker split
    siamese_checkpoint: str = ""                # a trained Siamese attacker (kind "siamese") instead of training
    attribute_checkpoint: str = ""              # a trained attribute attacker (kind "classifier") instead of training
    screening: bool = True                      # near-copy screening of every released image
    near_copy_quantile: float = 0.01            # a released image is a near-copy below this quantile of real
                                                # image-to-nearest-other-patient distances
    differencing: bool = True                   # difference every two releases of the same people, record by
    differencing_fraction: float = 0.25         # record; recovered: within this share of the median distance
    differencing_max_work: float = 5e10         # between two patients; pairs x targets above this: not measured

    @property
    def independent(self) -> IdentityTrainConfig:
        """The independent attacker's training settings: the main network's, with its own arch, size and seed."""
        return replace(self.identity, arch=self.independent_arch, image_size=self.independent_image_size,
                       seed=self.independent_seed)

    def validate(self) -> None:
        if not 0 < self.target_far < 1:
            raise ConfigError(f"attacks.target_far={self.target_far} must be in (0, 1)")
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"attacks.confidence={self.confidence} must be in [0.5, 1)")
        if self.max_pairs < 10:
            raise ConfigError("attacks.max_pairs must be at least 10")
        if not 0 < self.membership_fpr < 1 or not 0 < self.near_copy_quantile < 1 or \
                not 0 < self.differencing_fraction < 1:
            raise ConfigError("attacks.membership_fpr, attacks.near_copy_quantile and attacks.differencing_fraction "
                              "must be in (0, 1)")
        if not self.differencing_max_work > 0:
            raise ConfigError(f"attacks.differencing_max_work={self.differencing_max_work} must be positive")
        self.independent.validate()
        n = self.siamese_net
        if n.image_size < 8 or n.width < 1 or n.steps < 1 or n.batch < 4 or n.lr <= 0:
            raise ConfigError("attacks.siamese_net needs image_size >= 8, width >= 1, steps >= 1, batch >= 4, lr > 0")
        if self.attacker_split not in ("", "train", "val", "test"):
            raise ConfigError(f"attacks.attacker_split={self.attacker_split!r} must be train, val, test or ''")


def _auto_split() -> SplitConfig:
    """The demo's split: stratified by grade (fundus) or pneumonia (X-ray), which ``stratify="auto"`` selects."""
    return SplitConfig(stratify="auto")


@dataclass
class EvalConfig:
    size: int = 64                              # images are evaluated at this side (releases resized to it)
    seed: int = 0                               # seeds every random choice of the evaluation
    source_split: str = "train"                 # split the releases were built from (their members)
    heldout_split: str = "test"                 # real patients never released: test set and attack controls
    split: SplitConfig = field(default_factory=_auto_split)  # recomputed split (no --splits CSV)
    grid: int = 6                               # released records shown per release in the report's image grid
    fidelity: FidelityConfig = field(default_factory=FidelityConfig)
    utility: UtilityConfig = field(default_factory=UtilityConfig)
    attacks: AttackConfig = field(default_factory=AttackConfig)

    def validate(self) -> None:
        if self.size < 16 or self.size > 1024:
            raise ConfigError(f"size={self.size} must be between 16 and 1024")
        splits = ("train", "val", "test")
        if self.source_split not in splits or self.heldout_split not in splits or \
                self.source_split == self.heldout_split:
            raise ConfigError(f"source_split={self.source_split!r} and heldout_split={self.heldout_split!r} must be "
                              f"two different splits among {splits}")
        if self.attacks.attacker_split in (self.source_split, self.heldout_split):
            raise ConfigError(f"attacks.attacker_split={self.attacks.attacker_split!r} must differ from the source "
                              f"and held-out splits: attackers train on patients who are neither members nor "
                              f"controls", fix="use attacks.attacker_split=val (or '' to fall back, with a warning)")
        if self.grid < 0:
            raise ConfigError("grid must be >= 0")

    def resolved(self, device) -> EvalConfig:
        """This config with every classifier's ``precision="auto"`` made concrete for ``device`` (bf16 where it
        is native, else fp32), so that the report and the cache keys record the precision that ran."""
        u, a = self.utility, self.attacks
        return replace(self, utility=replace(u, classifier=u.classifier.resolved(device)),
                       attacks=replace(a, attribute_classifier=a.attribute_classifier.resolved(device)))

    @classmethod
    def fast(cls, *, size: int = 64) -> EvalConfig:
        """A CPU-sized protocol: small FID samples, short identity training, two seeds, and utility by a linear
        probe on frozen EfficientNet-Lite0 features instead of a CNN trained per release (learners.py).

        Why the probe: on the demo's fundus split (560 training, 116 held-out images, 64 px) a CNN trained per release
        (small ResNet, 150 steps) reached quadratic kappa 0.269 ± 0.234 over 6 seeds on DR grade
        (`python benchmarks/classifier_precision.py`), the probe 0.876 (deterministic; 0.82-0.84 on 56-280 image
        subsamples), and pneumonia AUROC 0.865 ± 0.038 against 0.851: a stronger, steadier instrument, and the
        utility of 26 releases costs a few seconds of features and a convex fit each instead of two CNN trainings
        (`python benchmarks/utility_learners.py`). ``EvalConfig()`` (the full protocol) keeps the CNN.
        """
        # precision "auto": bf16 autocast where the device computes it natively (AVX512-BF16/AMX CPUs, most GPUs),
        # 1.3-1.65x less CPU per classifier with metrics equal within the seeds' spread
        # (`python benchmarks/classifier_precision.py`); fp32 elsewhere. The report records which ran.
        clf = ClassifierTrainConfig(image_size=min(size, 64), steps=150, batch=32, lr=5e-3, augment=False,
                                    precision="auto")
        indep = min(24, size)                   # neither E_id's 64 px nor the main 32 px; ~0.56x the cost of 32 px
        return cls(size=size,
                   fidelity=FidelityConfig(max_samples=50, reference_samples=100, bootstrap=20, kid_subsets=20),
                   utility=UtilityConfig(seeds=(0, 1), classifier=clf, bootstrap=200, learner="probe",
                                         probe=ProbeConfig(input_size=max(32, min(size, 64)))),
                   attacks=AttackConfig(attribute_classifier=clf,
                                        identity=IdentityTrainConfig(image_size=min(size, 32), steps=400),
                                        independent_image_size=indep,
                                        # 150 steps: held-out AUC 0.872 on the demo's fundus phantom, as 300 (0.870)
                                        siamese_net=SiameseConfig(steps=150)))

    @classmethod
    def tiny(cls, *, size: int = 32) -> EvalConfig:
        """The fast preset cut down for tests and notebooks on a tiny phantom: no Inception (no FID / KID), one
        utility seed, 20-step classifiers, 60-step identity and Siamese networks, a few bootstrap resamples and at
        most 200 genuine pairs per verification set. It checks that everything runs; its numbers are not a
        measurement."""
        cfg = cls.fast(size=size)
        clf = replace(cfg.utility.classifier, steps=20, batch=16)
        return replace(cfg, fidelity=replace(cfg.fidelity, inception=False, bootstrap=5, kid_subsets=3),
                       utility=replace(cfg.utility, seeds=(0,), classifier=clf, bootstrap=50),
                       attacks=replace(cfg.attacks, attribute_classifier=clf, max_pairs=200,
                                       identity=replace(cfg.attacks.identity, steps=60, batch=32),
                                       siamese_net=replace(cfg.attacks.siamese_net, steps=60, batch=32)))


PRESETS = ("full", "fast", "tiny")


def preset(name: str, *, size: int | None = None) -> EvalConfig:
    """The evaluation preset ``name``: ``full`` (the papers' protocol), ``fast`` (CPU-sized, the demo's) or ``tiny``
    (tests and notebooks); ``size``: the evaluation image side (default 64, tiny 32)."""
    if name == "full":
        return EvalConfig(size=size or 64)
    if name == "fast":
        return EvalConfig.fast(size=size or 64)
    if name == "tiny":
        return EvalConfig.tiny(size=size or 32)
    raise ConfigError(f"preset={name!r} is not an evaluation preset", fix=f"use one of {list(PRESETS)}")


CROSS_RELEASE = ("differencing", "differencing_fraction", "differencing_max_work")   # read only by attacks on
#                                                                                      releases together


def result_key(cfg: EvalConfig) -> dict:
    """``cfg`` as the key of results computed per release or from the real data: without the settings only the
    attacks on releases together read (:data:`CROSS_RELEASE`) and without ``utility.compare`` (comparisons read
    what each release left in the cache), so changing those never invalidates a cached result."""
    from medanon.config import to_dict

    out = to_dict(replace(cfg, utility=replace(cfg.utility, compare=())))
    for k in CROSS_RELEASE:
        out["attacks"].pop(k)
    return out
