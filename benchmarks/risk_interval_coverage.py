"""Coverage of the residual-risk interval where no patient ids reach an attack (Wilson rates: MOVER,
``medanon.evaluate.attacks.risk.residual_risk``), computed exactly by summing over every binomial outcome of the
attack and the control: the share of releases whose true risk lies above the upper bound (nominal 0.025), below
the lower one, and the coverage, for each case. One JSON line per case.

    python benchmarks/risk_interval_coverage.py
"""

from __future__ import annotations

import json
import warnings

import numpy as np
from scipy.stats import binom

from medanon.evaluate.attacks.risk import exact_rate, residual_risk, success_rate

# (attack rate, attack targets, control rate, control targets; None: an exact baseline)
CASES = [(0.02, 100, 0.01, None), (0.05, 30, 0.0, None), (0.3, 20, 0.2, None),
         (0.05, 30, 0.0, 30), (0.1, 20, 0.05, 20), (0.3, 50, 0.1, 50), (0.02, 100, 0.01, 400),
         (0.05, 60, 0.0, 200), (0.5, 200, 0.5, 200)]


def coverage(pa: float, na: int, pc: float, nc: int | None, *, tail: float = 1e-9) -> dict:
    true = (pa - pc) / (1 - pc)
    a_vals = np.arange(na + 1)
    a_p = binom.pmf(a_vals, na, pa)
    c_vals, c_p = (np.array([None]), np.array([1.0])) if nc is None else (np.arange(nc + 1), binom.pmf(
        np.arange(nc + 1), nc, pc))
    above = below = 0.0
    for a, p_a in zip(a_vals, a_p, strict=True):
        if p_a < tail:
            continue
        for c, p_c in zip(c_vals, c_p, strict=True):
            if p_c < tail:
                continue
            control = exact_rate(pc, na) if c is None else success_rate(int(c), nc)
            lo, hi = residual_risk(success_rate(int(a), na), control).unclipped_ci
            above += p_a * p_c * (true > hi)
            below += p_a * p_c * (true < lo)
    return {"attack_rate": pa, "attack_n": na, "control_rate": pc, "control_n": nc or "exact",
            "true_risk": round(true, 4), "above_upper": round(above, 4), "below_lower": round(below, 4),
            "coverage": round(1 - above - below, 4), "nominal_each_side": 0.025}


def main() -> None:
    warnings.simplefilter("ignore")
    for case in CASES:
        print(json.dumps(coverage(*case)), flush=True)


if __name__ == "__main__":
    main()
