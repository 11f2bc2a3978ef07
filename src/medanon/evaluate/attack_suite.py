"""The privacy attacks of one release, as a registry: each attack is a function of the real context and the
release's :class:`Target`, registered with the switch that enables it. :func:`run_attacks` runs them all
with the attacks' identity network and, where configured, repeats the identity attacks with the independent
network (another architecture and input size, trained on the attacker split). Every attack scores each released
image against a real one as released and mirrored left-right and keeps the higher score
(:mod:`medanon.evaluate.attacks.views`): a mirrored copy is a copy.

Every result carries its N, an interval and, in ``risk``, its control (same attack on held-out patients)
or, where no control population exists, its baseline (random guessing), named as such.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from medanon.evaluate.attacks.attribute import attribute_inference
from medanon.evaluate.attacks.bootstrap import patient_clusters
from medanon.evaluate.attacks.linkability import linkability
from medanon.evaluate.attacks.membership import descriptors, top_k_membership
from medanon.evaluate.attacks.nearest import nearest_record_membership
from medanon.evaluate.attacks.risk import inference_risk
from medanon.evaluate.attacks.siamese import embed as siamese_embed
from medanon.evaluate.attacks.siamese import siamese_attack
from medanon.evaluate.attacks.singling_out import singling_out
from medanon.evaluate.config import AttackConfig
from medanon.evaluate.context import RealContext
from medanon.evaluate.inputs import ReleaseData
from medanon.release.aggregate import aggregate_labels

NEED_MAP = ("needs the release's private mapping file (<release>.mapping.json next to the release unless another is "
            "given for it)")


@dataclass
class Target:
    """What the attacks share for one release, under one identity network."""
    rel: ReleaseData
    rel_emb: np.ndarray                         # released images' identity embeddings
    real_emb: np.ndarray                        # every real image's identity embedding (same network)
    tables: bool = True                         # False: residual risks only (the known-answer calibration)
    src_flat: np.ndarray | None = None          # real rows of the records' sources, flattened
    rec_flat: np.ndarray | None = None          # the record of each of them
    record_patients: list[frozenset] | None = None
    rel_emb_mirrored: np.ndarray | None = None  # the released images mirrored left-right (same network)

    def clusters(self, patients) -> np.ndarray | None:
        """The resampling unit of each of ``patients``: its cluster of patients linked by released records."""
        return None if self.record_patients is None else patient_clusters(self.record_patients, patients)

    @classmethod
    def of(cls, ctx: RealContext, rel: ReleaseData, rel_emb: np.ndarray, real_emb: np.ndarray, tables: bool = True,
           rel_emb_mirrored: np.ndarray | None = None) -> Target:
        t = cls(rel, rel_emb, real_emb, tables, rel_emb_mirrored=rel_emb_mirrored)
        if rel.sources is not None:
            t.src_flat = np.asarray([i for rows in rel.sources for i in rows], np.int64)
            t.rec_flat = np.asarray([r for r, rows in enumerate(rel.sources) for _ in rows], np.int64)
            t.record_patients = [frozenset(ctx.real.patients[rows].tolist()) for rows in rel.sources]
        return t


Attack = Callable[[RealContext, Target], dict]
ATTACKS: dict[str, tuple[Callable[[AttackConfig], bool], Attack, bool]] = {}   # name -> (enabled, run, identity)


def register(name: str, enabled: Callable[[AttackConfig], bool], *, identity: bool = False):
    """Register an attack; ``identity`` attacks are repeated with the independent identity network."""
    def deco(fn: Attack) -> Attack:
        ATTACKS[name] = (enabled, fn, identity)
        return fn
    return deco


def _needs_mapping(fn: Attack) -> Attack:
    def run(ctx: RealContext, t: Target) -> dict:
        if t.rel.sources is None:
            return {"skipped": NEED_MAP}
        try:
            return fn(ctx, t)
        except ValueError as e:
            return {"skipped": str(e)}
    return run


@register("membership", lambda a: a.membership)
@_needs_mapping
def _membership(ctx: RealContext, t: Target) -> dict:
    return top_k_membership(release_desc=descriptors(t.rel.images, t.rel_emb), record_sources=t.rel.sources,
                            source_desc=ctx.real_desc, heldout_desc=ctx.real_desc[ctx.held], seed=ctx.cfg.seed,
                            confidence=ctx.cfg.attacks.confidence, source_patients=ctx.real.patients,
                            heldout_patients=np.asarray(ctx.real.patients)[ctx.held],
                            release_desc_mirrored=None if t.rel_emb_mirrored is None else
                            descriptors(t.rel.images.flip(-1), t.rel_emb_mirrored))


def truth_from_sources(ctx: RealContext, rel: ReleaseData, label: str) -> tuple[np.ndarray, int]:
    """Per record, the value of ``label`` its patients hold by majority, each patient counted once (the release's
    label rule); NaN where the patients split evenly between the most common values: such a record has no true
    value to guess, and the release's tie rule (the higher value) would credit an attacker who always guesses it.
    Returns the values and the number of such records."""
    vals, ties = [], 0
    for rows in rel.sources or []:
        agg = aggregate_labels([ctx.real.records[i] for i in rows], [label])
        counts = [int(c.split(":")[1]) for c in str(agg.get(f"{label}_counts") or "").split(";") if c]
        tied = len(counts) > 1 and sorted(counts)[-1] == sorted(counts)[-2]
        vals.append(math.nan if tied else float(agg[label]))
        ties += tied
    return np.asarray(vals, np.float64), ties


@register("attribute", lambda a: bool(a.attribute))
def _attribute(ctx: RealContext, t: Target) -> dict:
    a, rel, real = ctx.cfg.attacks, t.rel, ctx.real
    attacker, trained_on = ctx.attribute_attacker(a.attribute)
    truth, ties = truth_from_sources(ctx, rel, a.attribute) if rel.sources is not None else (
        rel.label(a.attribute) if a.attribute in rel.label_names else None, 0)
    if attacker is None:
        return {"skipped": f"the real data has no usable {a.attribute!r} labels to train an attacker on"}
    if truth is None or np.isnan(truth).all():
        return {"skipped": f"no truth for {a.attribute!r}: {NEED_MAP}, or a released {a.attribute!r} column"}
    out = attribute_inference(
        attacker=attacker, image_size=ctx.attribute_image_size, release_images=rel.images,
        release_truth=truth, heldout_images=real.images[ctx.held], heldout_truth=real.label(a.attribute)[ctx.held],
        attribute=a.attribute, confidence=a.confidence, trained_on=trained_on,
        source_images=real.images if rel.sources is not None else None,
        record_sources=[list(r) for r in rel.sources] if rel.sources is not None else None,
        heldout_scores=ctx.attribute_scores(a.attribute)[ctx.held], source_scores=ctx.attribute_scores(a.attribute),
        record_patients=t.record_patients, heldout_groups=real.patients[ctx.held], seed=ctx.cfg.seed)
    if ties:
        out["tied_records_left_out"] = ties          # patients split evenly: no true value to guess
    return out


@register("linkability", lambda a: a.linkability, identity=True)
@_needs_mapping
def _linkability(ctx: RealContext, t: Target) -> dict:
    a, real, held = ctx.cfg.attacks, ctx.real, ctx.held
    return linkability(control_emb=t.real_emb[held], control_patients=list(real.patients[held]),
                       release_emb=t.rel_emb, record_patients=t.record_patients, source_emb=t.real_emb[t.src_flat],
                       source_patients=list(real.patients[t.src_flat]), source_record=t.rec_flat.tolist(),
                       target_far=a.target_far, seed=ctx.cfg.seed, max_pairs=a.max_pairs, confidence=a.confidence,
                       balance=ctx.balance(t.src_flat, held), tables=t.tables,
                       release_emb_mirrored=t.rel_emb_mirrored)


@register("singling_out", lambda a: a.singling_out, identity=True)
@_needs_mapping
def _singling_out(ctx: RealContext, t: Target) -> dict:
    if len(t.rel.images) < 2:
        return {"skipped": "a single released record cannot be singled out among others"}
    return singling_out(source_emb=t.real_emb[t.src_flat], source_record=t.rec_flat, release_emb=t.rel_emb,
                        source_patients=list(ctx.real.patients[t.src_flat]), confidence=ctx.cfg.attacks.confidence,
                        seed=ctx.cfg.seed, source_clusters=t.clusters(ctx.real.patients[t.src_flat]),
                        release_emb_mirrored=t.rel_emb_mirrored)


@register("nearest", lambda a: a.nearest, identity=True)
@_needs_mapping
def _nearest(ctx: RealContext, t: Target) -> dict:
    a = ctx.cfg.attacks
    calib, control = ctx.heldout_halves
    members = np.unique(t.src_flat)
    return nearest_record_membership(member_emb=t.real_emb[members], control_emb=t.real_emb[control],
                                     release_emb=t.rel_emb, calib_emb=t.real_emb[calib], fpr=a.membership_fpr,
                                     confidence=a.confidence, member_groups=ctx.real.patients[members],
                                     control_groups=ctx.real.patients[control], calib_groups=ctx.real.patients[calib],
                                     seed=ctx.cfg.seed, balance=ctx.balance(members, control),
                                     member_clusters=t.clusters(ctx.real.patients[members]),
                                     release_emb_mirrored=t.rel_emb_mirrored)


@register("siamese", lambda a: a.siamese)
@_needs_mapping
def _siamese(ctx: RealContext, t: Target) -> dict:
    a = ctx.cfg.attacks
    calib, control = ctx.heldout_halves
    net = ctx.siamese
    out = siamese_attack(net, real_feats=ctx.real_siamese, release_feats=siamese_embed(net, t.rel.images),
                         patients=ctx.real.patients, source_rows=t.src_flat, record_patients=t.record_patients,
                         member_rows=np.unique(t.src_flat), calib_rows=calib, control_rows=control,
                         target_far=a.target_far, fpr=a.membership_fpr, max_pairs=a.max_pairs, seed=ctx.cfg.seed,
                         confidence=a.confidence, balance=ctx.balance(np.unique(t.src_flat), control),
                         tables=t.tables, release_feats_mirrored=siamese_embed(net, t.rel.images.flip(-1)),
                         reference_ids=ctx.siamese_ids)
    out["trained_on"] = ctx.siamese_trained_on
    return out


@register("inference", lambda a: a.inference and bool(a.attribute))
def _inference(ctx: RealContext, t: Target) -> dict:
    a, real, rel = ctx.cfg.attacks, ctx.real, t.rel
    secret = real.label(a.attribute)
    if a.attribute not in rel.label_names or np.isnan(rel.label(a.attribute)).all():
        return {"skipped": f"the release publishes no {a.attribute!r} label to infer from"}
    if t.src_flat is None:
        return {"skipped": "no mapping: it says whose attribute to infer (the records' patients); the whole source "
                           "split in their place would dilute the risk and borrow the split's size"}
    members_pat = set(real.patients[t.src_flat].tolist())
    m_rows = np.asarray([i for i in ctx.src if real.patients[i] in members_pat and not np.isnan(secret[i])])
    c_rows = np.asarray([i for i in ctx.held if not np.isnan(secret[i])])
    if len(m_rows) == 0 or len(c_rows) == 0:
        return {"skipped": f"no member or control targets with a known {a.attribute!r}"}
    if not np.isin(secret[m_rows], secret[c_rows]).any():
        return {"skipped": f"no member's {a.attribute!r} value is held by a control target: nothing to compare with"}
    out = inference_risk(member_emb=t.real_emb[m_rows], member_secret=secret[m_rows],
                         control_emb=t.real_emb[c_rows], control_secret=secret[c_rows], release_emb=t.rel_emb,
                         release_secret=rel.label(a.attribute), confidence=a.confidence, seed=ctx.cfg.seed,
                         member_groups=(t.clusters(real.patients[m_rows]) if t.record_patients is not None
                                        else real.patients[m_rows]), control_groups=real.patients[c_rows],
                         secret_name=a.attribute, release_emb_mirrored=t.rel_emb_mirrored)
    out["members_are"] = "real images of the patients the mapping lists"
    out["n"] = len(m_rows)
    return out


def run_attacks(ctx: RealContext, rel: ReleaseData, rel_emb: np.ndarray | None = None,
                rel_emb_mirrored: np.ndarray | None = None, *, tables: bool = True) -> dict:
    """Every enabled attack; the identity attacks again with the independent network (``independent``). Every
    attack compares each released image with a real one as released and mirrored left-right, the higher score kept
    (:mod:`medanon.evaluate.attacks.views`). ``rel_emb`` / ``rel_emb_mirrored``: the released images' embeddings by
    the main network, as released and mirrored, if already computed. ``tables=False``: the residual risks without
    the verification tables that only the report's attack sections show (the known-answer calibration; the risk
    entries are the same)."""
    a = ctx.cfg.attacks
    emb = ctx.embed(rel.images) if rel_emb is None else rel_emb
    emb_m = ctx.embed(rel.images.flip(-1)) if rel_emb_mirrored is None else rel_emb_mirrored
    primary = Target.of(ctx, rel, emb, ctx.real_emb, tables, emb_m)
    out: dict = {}
    for name, (enabled, fn, _) in ATTACKS.items():
        if enabled(a):
            out[name] = fn(ctx, primary)
    if ctx.independent is not None:
        second = Target.of(ctx, rel, ctx.embed(rel.images, ctx.independent), ctx.real_emb_independent, tables,
                           ctx.embed(rel.images.flip(-1), ctx.independent))
        out["independent"] = {name: fn(ctx, second) for name, (enabled, fn, ident) in ATTACKS.items()
                              if ident and enabled(a)}
    return out
