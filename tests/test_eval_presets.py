"""Evaluation presets by name (full, fast, tiny) and the flat summary of an evaluation's results."""

import importlib.util

import pytest

from medanon.api.result import SUMMARY_FIELDS, EvaluationResult
from medanon.errors import ConfigError
from medanon.evaluate.config import PRESETS, EvalConfig, preset


def test_presets_by_name():
    assert PRESETS == ("full", "fast", "tiny")
    tiny = preset("tiny")
    assert tiny == EvalConfig.tiny(size=32) and tiny.size == 32 and not tiny.fidelity.inception
    assert tiny.utility.seeds == (0,) and tiny.attacks.identity.steps < EvalConfig.fast().attacks.identity.steps
    assert preset("fast", size=48) == EvalConfig.fast(size=48) and preset("full") == EvalConfig()
    tiny.validate()
    with pytest.raises(ConfigError, match="tiny"):
        preset("small")


def _result() -> EvaluationResult:
    risk = {"residual_risk": {"risk": 0.9, "ci": [0.8, 1.0]}, "n": 40}
    rel = {"name": "copy", "verdict": {"risk": 0.9, "ci": [0.8, 1.0], "attack": "linkability",
                                       "utility_kept": [{"task": "grade", "metric": "kappa", "kept": 1.0,
                                                         "ci": [0.9, 1.1]}]},
           "attacks": {"linkability": {"risk": risk, "risk_reverse": {**risk, "residual_risk": {"risk": 0.0,
                                                                                                 "ci": [0.0, 0.1]}}},
                       "membership": {"skipped": "no mapping"}},
           "validity": {"linkability": {"valid": True, "reason": None},
                        "linkability (reverse)": {"valid": False, "reason": "flags the noise release"}},
           "fidelity": {"n": 50, "fid": {"value": 12.0, "ci": [10.0, 14.0]},
                        "kid": {"mean": 0.01, "sd": 0.002, "error": "sd over subsets", "ci": [0.006, 0.014]}},
           "utility": {"grade": {"n_test": 30, "paired_bootstrap": {"kappa": {"release": {"value": 0.7,
                                                                                          "ci": [0.5, 0.8]}}}},
                       "sex": {"skipped": "no labels"}}}
    return EvaluationResult(releases=[rel], controls={}, real={}, phantom=True, notes=[], seconds=0.0, report={},
                            html="")


def test_summary_is_one_flat_record_per_number():
    recs = _result().summary()
    assert all(tuple(r) == SUMMARY_FIELDS for r in recs)
    by = {(r["attack"], r["metric"]): r for r in recs}
    assert by[("verdict", "residual_risk")]["reason"] == "linkability"
    rev = by[("linkability (reverse)", "residual_risk")]
    assert rev["valid"] is False and rev["reason"] == "flags the noise release" and rev["n"] == 40
    assert by[("fidelity", "fid")]["lo"] == 10.0 and by[("fidelity", "kid")]["hi"] == pytest.approx(0.014)
    res = _result()                          # as kid_with_error writes it for sets too large for its interval
    res.releases[0]["fidelity"]["kid"] = {"mean": 0.01, "sd": 0.002, "error": "sd over subsets"}
    (kid,) = [r for r in res.summary() if r["metric"] == "kid"]
    assert kid["value"] == 0.01 and kid["lo"] is None and kid["hi"] is None      # the sd is not an interval
    assert by[("utility: grade", "kappa")]["value"] == 0.7 and by[("utility: grade", "kappa")]["n"] == 30
    assert ("verdict", "utility_kept grade kappa") in by and len(recs) == 7

    diff = {"releases": ["k2", "k3"], "risk": {"residual_risk": {"risk": 0.2, "ci": [0.1, 0.3]}, "n": 30}}
    res = _result()
    res.differencing = [diff]
    (row,) = [r for r in res.summary() if r["attack"] == "differencing"]
    assert (row["release"], row["value"], row["lo"], row["n"]) == ("k2 + k3", 0.2, 0.1, 30)


def test_to_frame_needs_pandas():
    res = _result()
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ConfigError, match="pip install pandas"):
            res.to_frame()
    else:
        df = res.to_frame()
        assert list(df.columns) == list(SUMMARY_FIELDS) and len(df) == len(res.summary())
