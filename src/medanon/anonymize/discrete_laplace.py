"""Exact discrete Laplace noise from operating-system random bits, with integer arithmetic only.

Floating-point Laplace samples leak their input through their low-order bits (Mironov 2012, "On
significance of the least significant bits for differential privacy"). This module samples the
discrete Laplace distribution ``P(X = x) ∝ exp(-|x| / t)`` on the integers *exactly*, following
Algorithms 1 and 2 of Canonne, Kamath & Steinke (2020, "The discrete Gaussian for differential
privacy"), the approach of OpenDP's and Google's libraries: every random decision is a comparison
of uniformly random integers, drawn by rejection from ``os.urandom`` bytes, so no floating-point
number is involved and the distribution is exactly the stated one (given uniform random bits).

Vectorised with numpy: all samples advance together, each loop of the algorithms runs until every
sample has left it (the loops end after a few rounds with overwhelming probability).

The scale ``t`` is a positive integer; :class:`medanon.anonymize.ldp.LaplaceMechanism` uses it on a
grid of ``M`` steps across each element's clip box (``t`` rounded *up*, i.e. at least the noise the
ε bound needs).
"""

from __future__ import annotations

import os

import numpy as np

_TOP = np.uint64(1 << 63)
MAX_SCALE = 1 << 50                             # t * k and t * V stay far below 2**62 for every k, V that occur


def uniform_below(n: np.ndarray) -> np.ndarray:
    """Exactly uniform integers in ``[0, n)`` for each entry of ``n`` (int64, 1 <= n < 2**62), by rejection
    from 63 random bits of ``os.urandom``."""
    n = np.asarray(n, dtype=np.int64)
    flat = n.reshape(-1).astype(np.uint64)
    if flat.size and (int(flat.min()) < 1 or int(flat.max()) >= 1 << 62):
        raise ValueError("uniform_below needs 1 <= n < 2**62")
    limit = (_TOP // np.maximum(flat, np.uint64(1))) * flat       # largest multiple of n below 2**63
    out = np.empty(flat.size, dtype=np.uint64)
    todo = np.arange(flat.size)
    while todo.size:
        raw = np.frombuffer(os.urandom(8 * todo.size), dtype=np.uint64) >> np.uint64(1)
        ok = raw < limit[todo]
        out[todo[ok]] = raw[ok] % flat[todo[ok]]
        todo = todo[~ok]
    return out.astype(np.int64).reshape(n.shape)


def bernoulli(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Exact Bernoulli(num / den) draws (0 <= num <= den, integer arrays)."""
    return uniform_below(den) < np.asarray(num, dtype=np.int64)


def bernoulli_exp_neg(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Exact Bernoulli(exp(-num / den)) for 0 <= num / den <= 1 (Canonne et al. 2020, Algorithm 1):
    K counts successive successes of Bernoulli(γ / k), k = 1, 2, ...; the result is K odd."""
    num = np.asarray(num, dtype=np.int64).reshape(-1)
    den = np.asarray(den, dtype=np.int64).reshape(-1)
    k = np.ones(num.size, dtype=np.int64)
    active = np.arange(num.size)
    while active.size:
        if int(k[active].max()) > 60:           # probability below 1/60!: never, but never overflow either
            raise RuntimeError("Bernoulli(exp(-x)) loop did not end")
        hit = bernoulli(num[active], den[active] * k[active])
        k[active[hit]] += 1
        active = active[hit]
    return k % 2 == 1


def geometric_exp_neg1(n: int) -> np.ndarray:
    """``n`` draws of V with P(V = v) = (1 - 1/e) e^(-v): the number of Bernoulli(exp(-1)) successes before a
    failure."""
    v = np.zeros(n, dtype=np.int64)
    active = np.arange(n)
    while active.size:
        one = np.ones(active.size, dtype=np.int64)
        hit = bernoulli_exp_neg(one, one)
        v[active[hit]] += 1
        active = active[hit]
    return v


def discrete_laplace(t: int, n: int) -> np.ndarray:
    """``n`` exact draws of the discrete Laplace distribution with integer scale ``t`` >= 1:
    P(X = x) = (1 - e^(-1/t)) / (1 + e^(-1/t)) * e^(-|x| / t) (Canonne et al. 2020, Algorithm 2 with s = 1)."""
    t = int(t)
    if t < 1 or t >= MAX_SCALE:
        raise ValueError(f"discrete Laplace scale {t} must be an integer in [1, 2**50)")
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        m = todo.size
        u = uniform_below(np.full(m, t, dtype=np.int64))
        keep = bernoulli_exp_neg(u, np.full(m, t, dtype=np.int64))        # accept U with prob. exp(-U/t)
        idx, u = todo[keep], u[keep]
        x = u + t * geometric_exp_neg1(idx.size)                          # Geometric(1 - e^(-1/t))
        negative = bernoulli(np.ones(idx.size, np.int64), np.full(idx.size, 2, np.int64))
        ok = ~(negative & (x == 0))                                       # -0 is rejected: 0 counted once
        out[idx[ok]] = np.where(negative[ok], -x[ok], x[ok])
        done = np.zeros(n, dtype=bool)
        done[idx[ok]] = True
        todo = todo[~done[todo]]
    return out
