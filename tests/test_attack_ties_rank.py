"""Issue 29, item 1: a tie never counts for the attacker. Tie credit against brute force over every tie break,
and releases whose answer is known: a constant release (every record identical) is found at chance by every
rank statistic, an exact copy still at ~100 %."""

import itertools
import json

import numpy as np
import pytest
import torch

from medanon.evaluate.attacks.membership import descriptors, top_k_membership
from medanon.evaluate.attacks.nearest import nearest_record_membership
from medanon.evaluate.attacks.risk import inference_risk
from medanon.evaluate.attacks.singling_out import singling_out
from medanon.evaluate.attacks.stats import (
    exact_interval,
    mid_rank,
    threshold_at_far,
    top1_credit,
    topk_hits,
    topk_null,
    upper_tail,
)


def _brute_top1(scores: np.ndarray, own: np.ndarray):
    """Average over every ordering of the candidates used as the tie break: P(own first), E[rank of own]."""
    n, m = scores.shape
    first, rank = np.zeros(n), np.zeros(n)
    perms = list(itertools.permutations(range(m)))
    for perm in perms:
        pos = np.empty(m, int)
        pos[list(perm)] = np.arange(m)
        for i in range(n):
            order = sorted(range(m), key=lambda j, i=i: (-scores[i, j], pos[j]))
            r = order.index(own[i])
            first[i] += r == 0
            rank[i] += r
    return first / len(perms), rank / len(perms)


def test_top1_credit_and_mid_rank_match_brute_force():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, (12, 5)).astype(float)           # many ties
    own = rng.integers(0, 5, 12)
    p_first, e_rank = _brute_top1(scores, own)
    assert top1_credit(scores, own) == pytest.approx(p_first, abs=1e-12)
    assert mid_rank(scores, own) == pytest.approx(e_rank, abs=1e-12)
    assert top1_credit(np.ones((3, 4)), [0, 1, 3]).tolist() == [0.25] * 3  # all tied: 1 / candidates


def test_topk_hits_match_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(3):
        scores = rng.integers(0, 3, 7).astype(float)
        member = rng.random(7) < 0.4
        k = 3
        pmf = np.zeros(k + 1)
        perms = list(itertools.permutations(range(7)))
        for perm in perms:
            pos = np.empty(7, int)
            pos[list(perm)] = np.arange(7)
            top = sorted(range(7), key=lambda j: (-scores[j], pos[j]))[:k]
            pmf[int(member[top].sum())] += 1
        pmf /= len(perms)
        mean, got = topk_hits(scores, member, k)
        assert got == pytest.approx(pmf, abs=1e-12) and mean == pytest.approx((pmf * np.arange(k + 1)).sum())


def test_upper_tail_of_a_pmf_and_fractional_exact_interval():
    null, _ = topk_null([2, 2, 2], 12)
    obs = np.array([0.0, 0.25, 0.5, 0.25])
    assert upper_tail(null, obs) == pytest.approx(sum(p * upper_tail(null, h) for h, p in enumerate(obs)))
    assert upper_tail(null, np.array([0.0, 0.0, 1.0])) == pytest.approx(upper_tail(null, 2))
    assert exact_interval(3 + 1e-9, 10) == pytest.approx(exact_interval(3, 10), abs=1e-6)
    lo, hi = exact_interval(3.5, 10)
    assert exact_interval(3, 10)[0] < lo < exact_interval(4, 10)[0] and exact_interval(3, 10)[1] < hi


def test_threshold_ties_refuse_all_when_every_score_is_tied():
    t = threshold_at_far(np.zeros(50), 0.1)
    assert t > 0.0 and (np.zeros(50) >= t).sum() == 0


def _sources(seed=0, patients=15, per=2, d=16):
    rng = np.random.default_rng(seed)
    pid = np.repeat(np.arange(patients), per)
    emb = rng.standard_normal((patients, d))[pid] + 0.2 * rng.standard_normal((len(pid), d))
    return rng, emb, pid.astype(str)


def test_singling_out_constant_release_is_at_chance_copy_at_one():
    rng, emb, pid = _sources()
    n = len(emb)
    const = np.tile(rng.standard_normal(emb.shape[1]), (n, 1))    # every record identical
    so = singling_out(source_emb=emb, source_record=np.arange(n), release_emb=const, source_patients=pid)
    assert 1 - so["hidden_rate"] == pytest.approx(1 / n) and so["reverse_top1"] == pytest.approx(1 / n)
    assert so["LC_N_A"] == pytest.approx(so["chance_LC_N_A"])     # the own record's rank: the middle
    assert so["risk"]["residual_risk"]["risk"] == pytest.approx(0.0, abs=1e-9)
    assert so["hidden_rate_individual"] == pytest.approx((1 - 1 / n) ** 2)   # two images, each 1/n
    copy = singling_out(source_emb=emb, source_record=np.arange(n), release_emb=emb.copy(), source_patients=pid)
    assert copy["hidden_rate"] == 0.0 and copy["hidden_rate_individual"] == 0.0
    assert copy["risk"]["residual_risk"]["risk"] > 0.9
    # records 2i and 2i + 1 both a copy of image 2i (patient i's first): each source's own record is tied at the
    # top with the other copy, and counts 1/2
    dup = singling_out(source_emb=emb, source_record=np.arange(n), release_emb=emb[np.arange(n) // 2 * 2])
    assert 1 - dup["hidden_rate"] == pytest.approx(0.5)
    json.dumps(so)


def test_inference_nearest_record_constant_release_is_at_chance():
    rng, emb, pid = _sources(seed=1, patients=40, per=1)
    held = rng.standard_normal((30, emb.shape[1]))
    secret, hsecret = rng.integers(0, 2, len(emb)).astype(float), rng.integers(0, 2, 30).astype(float)
    rel_secret = np.r_[np.ones(10), np.zeros(30)]                  # record 0 says 1: first-index tie breaking cheats
    const = np.tile(rng.standard_normal(emb.shape[1]), (len(emb), 1))
    out = inference_risk(member_emb=emb, member_secret=secret, control_emb=held, control_secret=hsecret,
                         release_emb=const, release_secret=rel_secret, member_groups=pid,
                         control_groups=np.arange(30))
    share = np.mean(secret[:, None] == rel_secret[None, :])        # a random released label's expected success
    assert out["attack"]["rate"] == pytest.approx(share) and out["naive_baseline"]["rate"] == pytest.approx(share)
    assert out["residual_risk"]["risk"] < 0.2 and out["attack"]["patients"] == 40
    copy = inference_risk(member_emb=emb, member_secret=secret, control_emb=held, control_secret=hsecret,
                          release_emb=emb.copy(), release_secret=secret)
    assert copy["attack"]["rate"] == 1.0
    json.dumps(out)


def test_nearest_record_membership_all_scores_tied_claims_no_one():
    rng = np.random.default_rng(2)
    members, controls, calib = (rng.standard_normal((n, 8)) for n in (30, 20, 20))
    out = nearest_record_membership(member_emb=members, control_emb=controls, release_emb=np.zeros((5, 8)),
                                    calib_emb=calib)                # every similarity 0: all tied
    assert out["risk"]["attack"]["rate"] == 0.0 and out["risk"]["control"]["rate"] == 0.0
    assert out["auc"] == 0.5 and out["risk"]["residual_risk"]["risk"] == 0.0


@pytest.mark.parametrize("release", ["constant", "copy"])
def test_membership_top_k_constant_scores_at_chance(release):
    """Every descriptor identical: the attacker's scores are all tied, and the stable sort used to hand the first
    pool images, the first evaluated record's members, to every record (that record at 100 %, 0.1 overall against
    a chance of 0.05)."""
    n, k = 40, 2
    groups = [list(range(i, i + k)) for i in range(0, n, k)]
    if release == "constant":
        src = np.tile(descriptors(torch.zeros(1, 1, 8, 8), np.ones((1, 8))), (n, 1))
        rel, held = src[: len(groups)], src[:n]
    else:
        rng = np.random.default_rng(3)
        g = torch.Generator().manual_seed(0)
        src = descriptors(torch.rand(n, 1, 8, 8, generator=g), rng.standard_normal((n, 8)))
        held = descriptors(torch.rand(n, 1, 8, 8, generator=g), rng.standard_normal((n, 8)))
        rel = np.stack([src[g_].mean(0) for g_ in groups])
    out = top_k_membership(release_desc=rel, record_sources=groups, source_desc=src, heldout_desc=held, seed=0,
                           source_patients=np.arange(n).astype(str))
    if release == "constant":
        assert out["top_k_accuracy"] == pytest.approx(out["chance"]) and out["p_value"] > 0.3
        assert out["risk"]["residual_risk"]["risk"] == pytest.approx(0.0, abs=1e-9)
    else:
        assert out["top_k_accuracy"] > 0.9 and out["p_value_exact"] < 1e-6
        assert out["p_value"] == pytest.approx(1 / 401)                   # the one-sided patient bootstrap's floor
    json.dumps(out)


def test_near_copy_screen_shares_a_tied_nearest_image():
    """A released image equally close to its own source and to an identical image of someone else counts 1/2 as a
    copy of its own source (random tie breaking), not 1 because its source comes first in the source split."""
    from medanon.evaluate.nearcopy import screen

    g = torch.Generator().manual_seed(0)
    real = torch.rand(24, 1, 8, 8, generator=g) * 2 - 1
    real[1] = real[0]                                                  # another patient's identical image
    real[12:] = real[12:] * 0.2 + real[torch.arange(12, 24) - (torch.arange(12, 24) % 2)] * 0.8
    src, held = np.arange(12), np.arange(12, 24)
    emb = real.flatten(1).double().numpy()
    kw = dict(real_images=real, real_emb=emb, source_rows=src, heldout_rows=held,
              heldout_patients=np.repeat(np.arange(6), 2).astype(str), quantile=0.1)
    for own, share in ((0, 0.5), (1, 0.5), (2, 1.0)):
        rel = real[[own if own < 2 else 2]]
        out = screen(release_images=rel, release_emb=rel.flatten(1).double().numpy(), record_sources=[[own]], **kw)
        assert out["closest"][0]["own_source_share"] == pytest.approx(share)
        assert out["copies_of_one_source"] == pytest.approx(share)        # an exact copy is a near-copy


def test_top_k_interval_resamples_the_held_out_patients():
    """Every record has the same hits given the pool's held-out draw, so resampling the records alone shows no
    spread; the rate still hangs on which held-out people fill the pools. Held-out patient A's images outrank each
    record's weaker member, patient B's do not: a resample of A alone gives 1 hit in 2 slots, of B alone 2 in 2,
    each about a quarter of the resamples, so the interval is [0.5, 1.0], the spread of the held-out sample."""
    from medanon.evaluate.attacks.membership import _two_way_bootstrap

    records = 30
    on_held = np.array([5.0, 5.0, 5.0, -5.0, -5.0, -5.0])              # patient A's three images, then B's
    scored = [(np.array([10.0, 0.0]), np.array([]), on_held)] * records
    rate = _two_way_bootstrap(scored, np.full(records, 2.0), np.arange(records), np.arange(records), [4] * records,
                              ["A"] * 3 + ["B"] * 3, estimate=0.75, hits=45, confidence=0.95, seed=0,
                              n_resamples=400)
    assert rate.ci == (0.5, 1.0)
    assert rate.patients == records and "2 held-out patients" in rate.method
    draws = np.asarray(rate.draws)
    assert 0.15 < (draws == 0.5).mean() < 0.35 and 0.15 < (draws == 1.0).mean() < 0.35


@pytest.mark.parametrize("dense", [1 << 24, 20])
def test_top_k_bootstrap_hits_match_topk_hits(dense, monkeypatch):
    """The bootstrap's vectorised count of a record's hits equals :func:`topk_hits`' expected hits, ties included,
    with the comparisons kept (small pools) or made again in chunks of records (``dense=20``: large ones)."""
    from medanon.evaluate.attacks import membership
    from medanon.evaluate.attacks.membership import _ranked_members

    monkeypatch.setattr(membership, "_DENSE", dense)
    rng = np.random.default_rng(5)
    for _ in range(40):
        ks = rng.integers(1, 4, 5).astype(float)
        scored = [(rng.integers(0, 4, int(k)).astype(float), rng.integers(0, 4, 6).astype(float),
                   rng.integers(0, 4, 9).astype(float)) for k in ks]
        draw = rng.choice(9, 5, replace=bool(rng.random() < 0.5))
        got = _ranked_members(scored, ks)(np.bincount(draw, minlength=9))
        for (mine, others, held), k, g in zip(scored, ks, got, strict=True):
            pool = np.r_[mine, others, held[draw]]
            assert g == pytest.approx(topk_hits(pool, np.arange(len(pool)) < len(mine), int(k))[0])
