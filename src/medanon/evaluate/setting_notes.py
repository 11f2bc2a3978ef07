"""What weakens the claims of one evaluation, said loudly in its log and its report: small or unequal FID samples,
a single utility seed, a release without its mapping, releases of the same people, releases of public models,
a release optimised against the attacks' own identity network or a look-alike of it, and a DP-GLOW release whose
images were decoded by its fallback where the inverse flow diverged."""

from __future__ import annotations

from collections.abc import Sequence

from medanon.config import to_dict
from medanon.evaluate.cautions import public_models, shared_people
from medanon.evaluate.config import EvalConfig
from medanon.evaluate.inputs import ReleaseData
from medanon.fsutil import sha256_file


def _as_preset(cfg: EvalConfig) -> EvalConfig:
    """``cfg`` with the classifiers' precision as a preset leaves it ("auto"; the device resolves it)."""
    from dataclasses import replace

    def auto(c):
        return replace(c, precision="auto")

    return replace(cfg, utility=replace(cfg.utility, classifier=auto(cfg.utility.classifier)),
                   attacks=replace(cfg.attacks, attribute_classifier=auto(cfg.attacks.attribute_classifier)))


def setting_notes(cfg: EvalConfig, rels: Sequence[ReleaseData], n_fid: dict[str, int]) -> list[str]:
    """Settings that weaken what the report can claim, said loudly (log and report)."""
    out = []
    if _as_preset(cfg) == type(cfg).tiny(size=cfg.size):
        out.append("preset tiny: its networks train for a few dozen steps and its intervals rest on a few resamples; "
                   "it checks that the evaluation runs, and its numbers are not a measurement of this release "
                   "(use preset fast or full)")
    small = {name: n for name, n in n_fid.items() if n < 50}
    if cfg.fidelity.inception and small:
        named = ", ".join(f"{k} (N = {v})" for k, v in small.items())
        out.append(f"FID is computed on fewer than 50 images for {named}: at such N its bias dominates; compare "
                   f"each with the control of the same N, and releases of different N by KID, which is unbiased")
    if (cfg.fidelity.inception or cfg.fidelity.in_domain) and len(set(n_fid.values())) > 1:
        out.append("releases are measured on different N (each on its own records, up to fidelity.max_samples): "
                   + ("FID and FD are" if cfg.fidelity.inception else "FD is")
                   + " biased by N, so compare a release with the control of its N, not with a release of another N"
                   + (" (KID is unbiased)" if cfg.fidelity.inception else "") + "; set fidelity.samples for one "
                   "common N")
    if len(cfg.utility.seeds) < 2:
        out.append("utility uses a single seed: the reported sd is 0 and says nothing about training variance")
    for r in rels:
        if r.sources is None:
            out.append(f"release {r.name}: no private mapping, so no attack that needs ground truth of who is in "
                       f"which record is measured (membership, linkability, singling out, differencing, and "
                       f"attribute inference unless the release publishes the attribute), and nothing ties "
                       f"the release to this real data (the public manifest holds no fingerprint of its sources): "
                       f"were it made from other images, the other attacks would measure strangers; its fidelity "
                       f"intervals resample its records one by one (too narrow where records of one patient are "
                       f"alike)")
    out += [n for r in rels if (n := fallback_note(r.name, r.manifest.get("quality"),
                                                   (r.manifest.get("counts") or {}).get("records", len(r.rows))))]
    shared = shared_people(rels)
    if shared:
        out.append(f"releases {', '.join(shared)} are made from images of the same people (their mappings share "
                   "source images): compare them, but publish at most one. Together they protect less than each "
                   f"alone: {_together({r.method for r in rels if r.name in shared})}")
    for name, files in public_models(rels).items():
        out.append(f"release {name} was made with medanon's public shipped models ({', '.join(files)}): anyone "
                   "holding a candidate image recomputes its released image exactly and links it, whatever the "
                   "attacks below measure (they assume the models are secret)")
    sha = sha256_file(cfg.attacks.identity_checkpoint) if cfg.attacks.identity_checkpoint else None
    ours = to_dict(cfg.attacks.identity)
    for r in rels:
        target = _identity_optimised_against(r)
        if target is None:
            continue
        if sha is not None and target.get("sha256") == sha:
            out.append(f"release {r.name} was optimised against the very identity network the attacks use "
                       f"({cfg.attacks.identity_checkpoint}): its linkability and singling-out numbers are "
                       f"optimistic; evaluate with an independently trained identity network")
        theirs = target.get("train_config") or {}
        if sha is None and theirs and all(theirs.get(k) == v for k, v in ours.items() if k in theirs):
            out.append(f"release {r.name} was optimised against an identity network trained with the same settings "
                       f"and seed as the attacks' own ({theirs}): on the same patients that is the same network, "
                       f"and its linkability and singling-out numbers are optimistic; change attacks.identity.seed")
        out += _independence(cfg, r.name, theirs)
    return out


_KSAME = {"kpixel", "kpca", "kcentroid", "ksalsa", "ksame"}


def _together(methods: set[str]) -> str:
    """What releases of these methods give up together that each alone does not."""
    parts = []
    if methods & _KSAME:
        parts.append("averages of overlapping groups can be differenced down to one person's image (k-Same releases "
                     "at several k)")
    if methods & {"dpglow", "ldp-image"}:
        parts.append("ε budgets add up (basic composition)")
    if methods & {"snow", "vs-snow"}:
        parts.append("Snow's unchanged pixels add up")
    if methods - _KSAME - {"dpglow", "ldp-image", "snow", "vs-snow"}:
        parts.append("each is another view of the same people, and an attacker may combine them")
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]


def views_notes(real_views: str, rels: Sequence[ReleaseData]) -> list[str]:
    """A note for each release made from other chest X-ray views than the real data is read with (xray_views=):
    the attackers, controls and utility test set would see views the release does not hold, or miss some it does."""
    from medanon.data.views import canonical_views

    out, real = [], canonical_views(real_views or "")
    for r in rels:
        made = canonical_views((r.manifest.get("params") or {}).get("xray_views") or "")
        if made != real:
            out.append(f"release {r.name} was made from the images of xray_views={made!r} ({made or 'every view'}), "
                       f"and the real data is read with xray_views={real!r} ({real or 'every view'}): its controls, "
                       "attackers and utility test set hold other views than its records; read the real data with "
                       f"the release's views (xray_views={made!r} in Python, --xray-views {made or chr(39) * 2} on the "
                       "command line)")
    return out


def size_notes(size: int, rels: Sequence[ReleaseData]) -> list[str]:
    """A note for each release whose images have another side than the evaluation's ``size``
    (:func:`other_size`)."""
    return [f"release {r.name}: {why}" for r in rels if (why := other_size(release_side(r), size))]


def release_side(rel: ReleaseData) -> int | tuple[int, int] | None:
    """The side of a release's image files (read with it; (height, width) where they are not square), else what
    its manifest records, else None."""
    side = getattr(rel, "side", None)
    side = side if side is not None else (rel.manifest.get("params") or {}).get("size")
    return side if isinstance(side, (int, tuple)) else None


def other_size(side: int | tuple[int, int] | None, size: int) -> str | None:
    """Why no attack row of a release of ``side`` px is trusted at the evaluation's ``size`` (None: the same side,
    or not known): its images are resized, while the real images are decoded at ``size`` from their files, so an
    exact copy of a real image differs from it by a few grey levels. The screens
    that invalidate a release holding copies of held-out images, or a mapping that is not its own, look for copies
    within one level and cannot fire."""
    if side is None or side == size:
        return None
    side = f"{side[0]} x {side[1]}" if isinstance(side, tuple) else side   # a non-square release: resized too
    return (f"its images are {side} px and were evaluated at {size} px: resized, an exact copy of a real image "
            f"differs from the real image decoded at {size} px by a few grey levels, so the copy screens that "
            "invalidate a release holding held-out patients' images or a mapping that is not its own cannot fire, "
            f"and no attack row is trusted (evaluate at the release's size: size={side})")


def fallback_note(name: str, quality: dict | None, records: int) -> str | None:
    """What a release's manifest ``quality`` says of DP-GLOW's decoder fallback, or None where it was not used (or
    the release records nothing of it)."""
    n, unknown = int((quality or {}).get("diverged") or 0), int((quality or {}).get("diverged_unknown") or 0)
    if not n and not unknown:
        return None
    text = (f"release {name}: the inverse flow diverged on {n} of {records} images: they were decoded from latents "
            "shrunk towards the prior's mode and may look averaged; its utility and fidelity measure that decoder "
            "fallback, not the flow")
    return text + (f" (for {unknown} records the release did not record whether it diverged)" if unknown else "")


def _independence(cfg: EvalConfig, name: str, theirs: dict) -> list[str]:
    """Say which attacker networks share the architecture and input size of the network a release was optimised
    against (its protection transfers to a look-alike network and is overstated there)."""
    if not {"arch", "image_size"} <= set(theirs):
        return []
    nets = [] if cfg.attacks.identity_checkpoint else [("the attacks' identity network", cfg.attacks.identity)]
    if cfg.attacks.independent_attacker:
        nets.append(("the independent attacker", cfg.attacks.independent))
    alike = [what for what, c in nets if c.arch == theirs["arch"] and c.image_size == theirs["image_size"]]
    if not cfg.attacks.independent_attacker or len(alike) == len(nets):
        return [f"release {name} was optimised away from an identity network ({theirs['arch']}, "
                f"{theirs['image_size']} px), and no attacker network differs from it in architecture and input "
                f"size ({', '.join(alike) or 'no independent attacker'}): its protection transfers to look-alike "
                f"networks and is overstated; enable attacks.independent_attacker with another arch and image_size"]
    return []


def _identity_optimised_against(rel: ReleaseData) -> dict | None:
    """The identity network a release's images were optimised away from (GMIA with L_id and steps > 0), as its
    manifest records it; None for every other release."""
    ident = (rel.manifest.get("privacy") or {}).get("identity_network")
    if not ident:
        return None
    p = rel.params or {}
    if p.get("steps") == 0 or p.get("losses") == "ut":
        return None
    return ident
