"""The settings of a k-Same release: which method, k, the clustering, PCA, augmentation, k-SALSA.

:class:`KSameConfig` is what :func:`medanon.anonymize.ksame.release_ksame` runs, what the API functions
(:mod:`medanon.api.ksame`) build from their keyword arguments and what ``medanon anonymize
ksalsa|kcentroid|kpixel|kpca|inverted --config FILE --set key=value`` reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from medanon.anonymize.averaging import check_components, check_k
from medanon.anonymize.eye_sides import check_mode
from medanon.anonymize.salsa import SalsaConfig
from medanon.errors import ConfigError

METHODS = ("ksalsa", "kcentroid", "kpixel", "kpca", "inverted")
DEFAULT_VIEW_SIGMA = 0.05                       # measured: docs/ksalsa.md, "Latent augmentation" (docs/view_sigma.py)
LATENT_METHODS = ("ksalsa", "kcentroid", "inverted")


@dataclass
class KSameConfig:
    method: str = "ksalsa"                      # ksalsa | kcentroid | kpixel | kpca | inverted
    k: int = 5                                  # people per record, at least
    stratify: str = ""                          # cluster within strata of this label (patient's worst value)
    drop_remainder: bool = False                # leave out the N mod k leftovers (and strata smaller than k)
    space: str = "auto"                         # clustering space: auto | latent | pca (auto: latent with a codec)
    batch: int = 0                              # clusters averaged together (0: 32 on the CPU at 64 px, 64 on a GPU)
    pca_components: float = 0.9                 # k-Same-PCA (and the pca space): count or variance fraction
    pca_fit_max: int = 2000                     # images the PCA is fitted on (seeded subsample beyond)
    pca_basis: str = "private"                  # kpca: private (fitted on the released data) | separate (basis=)
    views: int = 1                              # images per cluster (supplement E augmentation; 1 = off)
    view_sigma: float = DEFAULT_VIEW_SIGMA      # augmentation noise, relative to the prior's W std (docs/ksalsa.md)
    seed: int = 0                               # PCA subsample (the augmentation noise is secret, never seeded)
    eye_sides: str = "auto"                     # fundus: average left eyes mirrored (auto | labels | off; eye_sides.py)
    salsa: SalsaConfig = field(default_factory=SalsaConfig)

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"method {self.method!r} is not one of {', '.join(METHODS)}")
        if self.space not in ("auto", "latent", "pca"):
            raise ConfigError(f"clustering space {self.space!r} must be auto, latent or pca")
        if self.batch < 0:
            raise ConfigError(f"batch={self.batch} must be at least 1, or 0 for the device's default")
        if self.views < 1:
            raise ConfigError(f"views={self.views} must be at least 1")
        if self.pca_basis not in ("private", "separate"):
            raise ConfigError(f"pca_basis={self.pca_basis!r} must be private or separate")
        check_components(self.pca_components)
        if self.pca_fit_max < 2:
            raise ConfigError(f"pca_fit_max={self.pca_fit_max} must be at least 2 (images the PCA is fitted on)")
        if not (self.view_sigma >= 0 and math.isfinite(self.view_sigma)):
            raise ConfigError(f"view_sigma={self.view_sigma} must be a finite number >= 0 (the views' noise)",
                              fix=f"e.g. view_sigma={DEFAULT_VIEW_SIGMA}")
        if self.views == 1 and self.view_sigma != DEFAULT_VIEW_SIGMA:
            raise ConfigError(f"view_sigma={self.view_sigma} with views=1: there are no views to add noise to, so it "
                              "would change nothing", fix="leave view_sigma out, or ask for views= of 2 or more")
        if self.views > 1 and self.method not in ("ksalsa", "kcentroid"):
            raise ConfigError(f"views={self.views}: the augmentation applies to latent averages (ksalsa, kcentroid)")
        if self.method != "inverted":
            check_k(self.k, self.method)
        if self.eye_sides in (False, "False"):  # YAML reads an unquoted `off` (a --config file, --set) as false
            self.eye_sides = "off"
        check_mode(self.eye_sides)
        self.salsa.validate()
