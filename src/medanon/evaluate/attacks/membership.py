"""Membership inference, k-SALSA §4.5: rank real images for membership in each released record.

Paper protocol: an attacker network is trained on the training set to score whether an image
belongs to a synthetic average's cluster; the test set is split into two halves, averages are
built on the first, and for every average the images of *both* halves are ranked; the score is
the top-K accuracy (fraction of the K best-ranked images that are members) with K = k.

The same protocol on a release folder (the evaluator reads only the release, its private mapping as
ground truth, and the real data):

1. The release's records are split at random (seeded) into an attacker half and a target half.
2. **Attacker training** (what the paper's attacker sees): the attacker half's released images
   with the membership of their clusters — pairs (record, member image) are positives, pairs
   (record, member of another attacker-half record) negatives. The attacker is a logistic regression
   on the pair features ``[|d(a) - d(c)|, d(a) * d(c)]`` of an image descriptor ``d`` (unit identity
   embedding and a standardised 8x8 thumbnail), i.e. a learned similarity, trained only on those pairs.
3. **Target**: the target-half records, in random order, are cut into consecutive pools: each pool holds
   the members of its records and as many held-out real images (patients never in the release), like the
   paper's two halves, and no more members than there are held-out images. Every target record is
   evaluated (one pool when the held-out images suffice, as in the paper; several, each with its own draw
   of held-out images, when they do not); a record with more source images than there are held-out images
   cannot be balanced and is counted in ``records_not_evaluated``. For each record all images of its pool
   are ranked by the attacker's score.
4. Top-K accuracy, the hits over all evaluated records' K slots, with K = the record's number of distinct source
   images (k in a release whose records each stand for k images; not the ``k`` setting where records have more or
   fewer sources). **Ties never
   count for the attacker**: pool images tied at the K-th place share the slots left (a tied member
   is a hit with probability slots / tied, its expected hits under random tie breaking; a constant score
   gives the chance of a random ranking, not the members that happen to come first in the pool). The
   interval: with ``source_patients``, the patient cluster bootstrap of the hits over the slots, resampling
   clusters of evaluated records linked by a common patient and, independently, the held-out patients
   (``heldout_patients``), from whose resample every pool's held-out images are drawn again: the rate rests on both
   samples (``ci``; :mod:`.bootstrap`); else, and always in
   ``ci_slots``, the exact (Clopper-Pearson) interval of the hits over the K slots. Its **baseline** is the
   *exact* chance of a random ranking (record ``r`` draws ``k_r`` of its pool at random, its own patients'
   other images left out of it: hypergeometric hits, expected ``k_r / pool_r``), and the p-value is the exact
   upper tail of the convolution of those hypergeometric laws (:func:`medanon.evaluate.attacks.stats.topk_null`),
   averaged over the attacker's hits under random tie breaking (``p_value_exact``). That test treats the pool's
   images as independent; with ``source_patients`` the reported ``p_value`` is the patient cluster bootstrap's
   instead (one-sided: the share of resampled hit rates at or below the exact chance, :func:`.bootstrap.bootstrap_p`,
   never below 1 / (resamples + 1)). This is a baseline (random guessing), not a control: ranking held-out patients
   has no member to find.

Worst case as in the paper: the member images offered to the attacker are the exact source images.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from medanon.evaluate.attacks.bootstrap import BOOT_RESAMPLES, bootstrap_p, cluster_weights, components, summarise_draws
from medanon.evaluate.attacks.risk import Rate, exact_rate, rate, risk_entry
from medanon.evaluate.attacks.stats import TIE_TOL, exact_interval, topk_hits, topk_null, upper_tail
from medanon.evaluate.attacks.views import assumptions

ASSUMPTIONS = ("attacker knows the method well enough to hold released records with their cluster membership for "
               "half of the release (as k-SALSA's attacker trained on training-set averages) and ranks candidate "
               "images: the exact source images of the other half plus as many images of held-out patients; K = the "
               "record's number of source images; images tied at the K-th place share the slots left")


def descriptors(images: torch.Tensor, identity_emb: np.ndarray, *, thumb: int = 8) -> np.ndarray:
    """Per-image descriptor: unit identity embedding and an area-downsampled, standardised thumbnail."""
    t = F.adaptive_avg_pool2d(images.float(), thumb).flatten(1).double().numpy()
    t = (t - t.mean(1, keepdims=True)) / np.maximum(t.std(1, keepdims=True), 1e-6) / np.sqrt(t.shape[1])
    e = np.asarray(identity_emb, np.float64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    return np.concatenate([e, t], axis=1)


def pair_features(a: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.concatenate([np.abs(a - c), a * c], axis=1)


def top_k_membership(*, release_desc: np.ndarray, record_sources: Sequence[Sequence[int]],
                     source_desc: np.ndarray, heldout_desc: np.ndarray, seed: int = 0, negatives: int = 4,
                     confidence: float = 0.95, source_patients: Sequence | None = None,
                     heldout_patients: Sequence | None = None, n_resamples: int = BOOT_RESAMPLES,
                     release_desc_mirrored: np.ndarray | None = None) -> dict:
    """Run the attack. ``record_sources[r]`` indexes ``source_desc`` rows of record ``r``'s source images;
    ``source_patients[i]``: the patient of ``source_desc`` row ``i`` (for the patient-level interval);
    ``heldout_patients[j]``: the patient of ``heldout_desc`` row ``j`` (the interval resamples them too; without
    them each held-out image is a unit of its own).
    ``release_desc_mirrored``: the descriptors of the released images mirrored left-right. A training record, whose
    members the attacker holds, is taken in the orientation nearer them on average; a ranked record meets each
    candidate in the orientation whose descriptor is nearer the candidate's (:mod:`.views`)."""

    def facing(r: int, cands: np.ndarray, *, as_one: bool = False) -> np.ndarray:
        """Record ``r``'s descriptor once per candidate row: in the orientation nearer each candidate, or
        (``as_one``) in the one nearer the candidates on average."""
        a = np.repeat(release_desc[r:r + 1], len(cands), 0)
        if release_desc_mirrored is None:
            return a
        mirrored, released = cands @ release_desc_mirrored[r], cands @ release_desc[r]
        flip = np.full(len(cands), mirrored.mean() > released.mean()) if as_one else mirrored > released
        return np.where(flip[:, None], release_desc_mirrored[r][None, :], a)

    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed)
    # the records in an order of their own, not the release's file order (secret random names, so another run of
    # the same release listed them otherwise and the seeded split drew other records: top-K read 0.75 or 0.81)
    canon = sorted(range(len(record_sources)), key=lambda r: (sorted(int(i) for i in record_sources[r]),
                                                              np.asarray(release_desc[r], np.float64).tobytes()))
    # records of one source set (augmentation views of one cluster) are one unit: split apart, the attacker would
    # train on a view of the very cluster it ranks, and a pool would hold the members once per view (chance 0.06
    # read as 0.03); the first view ranks, every view trains. Records that share a patient (one record per image of
    # a patient with several) are one unit too: the person is what is protected, and one of their images on the
    # attacker's side would teach it the very person it ranks
    sp = None if source_patients is None else np.asarray(source_patients)
    views: dict[frozenset, list[int]] = {}
    for r in canon:
        views.setdefault(frozenset(int(i) for i in record_sources[r]), []).append(int(r))
    sets = list(views.values())
    if sp is not None:
        linked = components([{sp[i] for i in record_sources[v[0]]} for v in sets])[0]
        by_person: dict[int, list[list[int]]] = {}
        for v, c in zip(sets, linked, strict=True):
            by_person.setdefault(int(c), []).append(v)
        units = list(by_person.values())
    else:
        units = [[v] for v in sets]
    n_rec = len(units)
    if n_rec < 4 or len(heldout_desc) < 2:
        raise ValueError("membership inference needs at least 4 released clusters (records of distinct source sets "
                         "and patients) and 2 held-out images")
    order = rng.permutation(n_rec)
    train_recs = np.asarray([r for u in order[: n_rec // 2] for v in units[u] for r in v], np.int64)
    target_recs = np.asarray([v[0] for u in order[n_rec // 2:] for v in units[u]], np.int64)

    def own_people(r: int, candidates: np.ndarray) -> np.ndarray:
        """Which ``candidates`` (source rows) are images of record ``r``'s patients that are not its sources: the
        same people, so neither a non-member to train against nor one to rank below the record's sources."""
        if sp is None:
            return np.zeros(len(candidates), bool)
        srcs = np.asarray(record_sources[r], np.int64)
        return np.isin(sp[candidates], sp[srcs]) & ~np.isin(candidates, srcs)

    # 2. attacker training pairs
    feats, labels = [], []
    train_members = np.concatenate([np.asarray(record_sources[r], np.int64) for r in train_recs])
    for r in train_recs:
        mem = np.asarray(record_sources[r], np.int64)
        others = np.setdiff1d(train_members, mem)
        others = others[~own_people(r, others)]
        seen = facing(r, source_desc[mem], as_one=True)[:1]          # its orientation, from its known members
        feats.append(pair_features(np.repeat(seen, len(mem), 0), source_desc[mem]))
        labels += [1] * len(mem)
        if len(others):
            neg = rng.choice(others, min(len(others), negatives * len(mem)), replace=False)
            feats.append(pair_features(np.repeat(seen, len(neg), 0), source_desc[neg]))
            labels += [0] * len(neg)
    x = np.concatenate(feats)
    y = np.asarray(labels)
    clf = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced")
    clf.fit(x, y)

    # 3. balanced target pools: each holds target records' members and as many held-out images
    pools = _pools(target_recs, record_sources, len(heldout_desc))
    if not pools:
        raise ValueError("not enough held-out images to balance even one target record's members")
    chosen = [r for pool_recs in pools for r in pool_recs]

    # 4. rank each record within its pool and score (ties at the K-th place share the slots left)
    hits, ks, hit_pmfs, pool_sizes, record_pool, scored, ranked_in = [], [], [], [], [], [], []
    for pool_recs in pools:
        pool_idx = np.concatenate([np.asarray(record_sources[r], np.int64) for r in pool_recs])
        held = rng.choice(len(heldout_desc), len(pool_idx), replace=False)
        pool_sizes.append(2 * len(pool_idx))
        for r in pool_recs:
            srcs = {int(s) for s in record_sources[r]}
            k = len(srcs)
            mem_idx = pool_idx[~own_people(r, pool_idx)]          # the record's people's other images: left out
            ranked_in.append(len(mem_idx) + len(held))
            # each candidate is scored on its own (its orientation too): the pool's members, and the held-out
            # images: the pool's draw ``held``, or every one where the interval draws the pools again
            on_members = clf.decision_function(pair_features(facing(r, source_desc[mem_idx]), source_desc[mem_idx]))
            cands = heldout_desc if source_patients is not None else heldout_desc[held]
            on_heldout = clf.decision_function(pair_features(facing(r, cands), cands))
            on_drawn = on_heldout[held] if source_patients is not None else on_heldout
            is_member = np.isin(mem_idx, list(srcs))
            h, pmf = topk_hits(np.r_[on_members, on_drawn], np.r_[is_member, np.zeros(len(held), bool)], k)
            hits.append(h)
            ks.append(k)
            hit_pmfs.append(pmf)
            record_pool.append(len(pool_sizes) - 1)
            scored.append((on_members[is_member], on_members[~is_member], on_heldout))
    hits_a, ks_a = np.asarray(hits), np.asarray(ks, np.float64)
    observed = np.ones(1)
    for pmf in hit_pmfs:
        observed = np.convolve(observed, pmf)                         # the attacker's total hits, over tie breaks
    # records are ranked independently, each among its pool less its own people's other images
    null, expected_hits = topk_null(ks, ranked_in)
    hits_total, k_total = float(hits_a.sum()), int(ks_a.sum())
    groups = None
    if source_patients is not None:
        sp = np.asarray(source_patients)
        groups = components([{sp[int(s)] for s in record_sources[r]} for r in chosen])[0]
        attack = _two_way_bootstrap(scored, ks_a, groups, np.asarray(record_pool), pool_sizes,
                                    np.arange(len(heldout_desc)) if heldout_patients is None else heldout_patients,
                                    estimate=hits_total / k_total, hits=hits_total, confidence=confidence, seed=seed,
                                    n_resamples=n_resamples)
    else:
        attack = rate(hits_a, trials=ks_a, confidence=confidence)
    base = exact_rate(expected_hits / k_total, k_total, confidence=confidence)      # exact: no sampling error
    slots_ci = exact_interval(hits_total, k_total, confidence=confidence)
    p_exact = upper_tail(null, observed)
    # one estimand throughout: the hits over all evaluated records' slots (what the interval, the test and the risk
    # table measure); a mean of per-record ratios would differ from it where records have different K
    chance = expected_hits / k_total
    return {"top_k_accuracy": hits_total / k_total, "ci": list(attack.ci) if groups is not None else slots_ci,
            "ci_slots": slots_ci, "interval": attack.method if groups is not None else
            "Clopper-Pearson over the K slots of the evaluated records", "hits": hits_total if hits_total % 1 else
            int(hits_total), "slots": k_total, "chance": chance, "baseline": chance,
            # one-sided: an attack better than a random ranking (a hit rate below chance is no evidence of a leak)
            "p_value": p_exact if groups is None else bootstrap_p(attack.draws, base.raw, alternative="greater"),
            "p_value_exact": p_exact,
            "test": "exact: convolution of the records' hypergeometric hits under a random ranking" if groups is None
            else "one-sided patient cluster bootstrap of the hit rate against the exact chance (interval inversion); "
                 "the exact test of a random ranking, which treats the pool's images as independent, in "
                 "p_value_exact",
            "ties": "pool images tied at the K-th place share the slots left",
            "records_evaluated": len(chosen), "records_attacker": len(train_recs), "n": len(chosen),
            "views_scored_once": len(record_sources) - sum(len(u) for u in units),
            "own_people_left_out": int(sum(pool_sizes[p] - n for p, n in zip(record_pool, ranked_in, strict=True))),
            "records_not_evaluated": len(target_recs) - len(chosen), "pools": len(pools), "pool_sizes": pool_sizes,
            "pool": max(pool_sizes), "members_in_pool": sum(pool_sizes) // 2, "heldout_in_pool": sum(pool_sizes) // 2,
            "k": sorted(set(ks)), "assumptions": assumptions(ASSUMPTIONS, release_desc_mirrored),
            "risk": {**risk_entry(attack, None, what="a top-K ranked image is a member of the record",
                                  control_is="none: ranking held-out patients alone has no member to find",
                                  baseline=base, baseline_is="the exact expected hits of a random ranking"),
                     # the people the pools' non-members are drawn from: the rate rests on them too
                     "pool_patients": len(set(np.asarray(heldout_patients).astype(str).tolist()))
                     if heldout_patients is not None else None}}


def _two_way_bootstrap(scored, ks: np.ndarray, groups: np.ndarray, record_pool: np.ndarray, pool_sizes: list[int],
                       heldout_patients, *, estimate: float, hits: float, confidence: float, seed: int,
                       n_resamples: int) -> Rate:
    """The top-K rate's interval over both samples it rests on: the evaluated records, resampled by their patient
    clusters (``groups``), and the held-out patients, resampled on their own (other people, drawn independently),
    from whom each pool's held-out images are drawn again. ``scored[i]``: record ``i``'s scores on its members, on
    the other members of its pool and on every held-out image."""
    codes = np.unique(np.asarray(heldout_patients).astype(str), return_inverse=True)[1].ravel()
    n_patients, n_images = int(codes.max()) + 1, len(codes)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 1]))     # stream 0: the records' weights
    weights = cluster_weights(groups, n_resamples=n_resamples, seed=seed, stream=0)
    pools = [(np.flatnonzero(record_pool == p), size // 2) for p, size in enumerate(pool_sizes)]
    ranked = [_ranked_members([scored[i] for i in recs], ks[recs]) for recs, _ in pools]
    hits_b = np.empty(len(ks))
    draws = np.empty(n_resamples)
    for b in range(n_resamples):
        counts = rng.multinomial(n_patients, np.full(n_patients, 1.0 / n_patients))
        population = np.repeat(np.arange(n_images), counts[codes])
        for (recs, need), rank in zip(pools, ranked, strict=True):   # a pool: as many held-out images as members
            draw = population[rng.choice(len(population), need, replace=len(population) < need)]
            hits_b[recs] = rank(np.bincount(draw, minlength=n_images))
        draws[b] = (weights[b] @ hits_b) / (weights[b] @ ks)
    clusters = int(np.unique(groups).size)
    s = summarise_draws(draws[None], clusters, {"rate": (estimate, True)}, confidence=confidence, seed=seed,
                        n_resamples=n_resamples)["rate"]
    lo, hi = s["ci"]
    how = (f"{s['interval']}, over the evaluated records' {clusters} patient clusters and the {n_patients} held-out "
           "patients, from whom each resample draws the pools' held-out images again")
    return Rate(estimate, (hi - lo) / 2, int(hits) if float(hits).is_integer() else hits, int(ks.sum()), confidence,
                interval=(lo, hi), method=how, patients=clusters, resamples=s["resamples"], seed=seed,
                draws=s["draws"])


_DENSE = 1 << 24        # member x held-out comparisons kept between resamples (two float32 arrays: 128 MiB)


def _ranked_members(scored, ks: np.ndarray):
    """For the records of one pool (``scored``: each record's scores on its members, on the pool's other members and
    on every held-out image), the function from a draw of held-out images (``counts``: how often each held-out image
    is in it) to each record's expected hits among its K best (:func:`.stats.topk_hits`' mean): a member with ``g``
    candidates above it and ``e`` tied with it (itself included) fills ``min(max((K - g) / e, 0), 1)`` of a slot.
    Each member's comparisons with the held-out images are made once (within ``_DENSE``; in chunks of records
    again for each draw beyond it), so a draw costs a product with its counts."""
    width = max(len(mine) for mine, _, _ in scored)
    mine = np.full((len(scored), width), np.nan)
    above, tied = np.zeros((len(scored), width)), np.zeros((len(scored), width))
    for i, (m, others, _) in enumerate(scored):
        mine[i, :len(m)] = m
        fixed = np.r_[m, others]
        tol = TIE_TOL * np.maximum(1.0, np.abs(m))
        above[i, :len(m)] = (fixed[None, :] > (m + tol)[:, None]).sum(1)
        tied[i, :len(m)] = (np.abs(fixed[None, :] - m[:, None]) <= tol[:, None]).sum(1)
    on_held = np.stack([h for _, _, h in scored])
    tol = TIE_TOL * np.maximum(1.0, np.abs(mine))
    chunk = max(1, _DENSE // max(1, width * on_held.shape[1]))
    starts = range(0, len(scored), chunk)

    def compare(a: int) -> tuple[np.ndarray, np.ndarray]:      # (records, width, held-out): above, tied (NaN: 0)
        m, t, h = mine[a:a + chunk, :, None], tol[a:a + chunk, :, None], on_held[a:a + chunk, None, :]
        return (h > m + t).astype(np.float32), (np.abs(h - m) <= t).astype(np.float32)

    dense = [compare(a) for a in starts] if len(starts) == 1 else None

    def hits(counts: np.ndarray) -> np.ndarray:
        c = np.asarray(counts, np.float32)
        parts = [(a_ @ c, t_ @ c) for a_, t_ in (dense if dense is not None else (compare(a) for a in starts))]
        g = above + np.concatenate([p[0] for p in parts])
        e = tied + np.concatenate([p[1] for p in parts])
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.clip((ks[:, None] - g) / e, 0.0, 1.0)
        return np.where(np.isnan(mine), 0.0, share).sum(1)
    return hits


def _pools(target_recs, record_sources, budget: int) -> list[list[int]]:
    """Target records in their (random) order, cut into consecutive pools whose members fit ``budget`` held-out
    images; a record with more source images than ``budget`` cannot be balanced and is left out."""
    pools: list[list[int]] = [[]]
    used = 0
    for r in target_recs:
        n = len(record_sources[r])
        if n > budget:
            continue
        if used + n > budget:
            pools.append([])
            used = 0
        pools[-1].append(int(r))
        used += n
    return [p for p in pools if p]
