from pathlib import Path

import pytest

from medanon.config import (
    DataConfig,
    PhantomConfig,
    RunConfig,
    apply_overrides,
    build,
    dump_yaml,
    from_dict,
    load_yaml,
)
from medanon.errors import ConfigError


def test_defaults_round_trip_through_yaml(tmp_path: Path):
    cfg = RunConfig()
    p = tmp_path / "c.yaml"
    p.write_text(dump_yaml(cfg))
    again = build(RunConfig, path=p)
    assert again == cfg


def test_yaml_then_overrides_then_explicit(tmp_path: Path):
    p = tmp_path / "c.yaml"
    p.write_text("size: 128\nmodality: xray\nseed: 3\n")
    cfg = build(PhantomConfig, path=p, overrides=["seed=7", "marker_rate=0.25"], size=32)
    assert (cfg.size, cfg.modality, cfg.seed, cfg.marker_rate) == (32, "xray", 7, 0.25)


def test_nested_override_and_tuple_conversion():
    data = apply_overrides({}, ["data.size=32", "data.crop=pad", "split.val=0.2"])
    cfg = from_dict(RunConfig, data)
    assert cfg.data.size == 32 and cfg.data.crop == "pad" and cfg.split.val == 0.2
    pc = build(PhantomConfig, overrides=["grade_weights=[1,1,1,1,1]"])
    assert pc.grade_weights == (1.0, 1.0, 1.0, 1.0, 1.0)


@pytest.mark.parametrize("overrides, fragment", [
    (["sizee=3"], "unknown key"),
    (["size=abc"], "not an integer"),
    (["size=63.5"], "not an integer"),
    (["marker_rate=2"], "probability"),
    (["modality=ct"], "fundus or xray"),
    (["grade_weights=[1,2]"], "five"),
])
def test_bad_values_name_the_field(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        build(PhantomConfig, overrides=overrides)


@pytest.mark.parametrize("size", [0, -64, 8, 100, 2048])
def test_impossible_sizes_are_rejected(size):
    with pytest.raises(ConfigError, match="power of two"):
        build(DataConfig, size=size)


def test_missing_or_invalid_yaml(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(lst)


def test_phantom_config_errors_name_fields_and_the_command_its_flags(tmp_path: Path):
    from click.testing import CliRunner

    from medanon.cli import cli
    from medanon.config import PhantomConfig, validate

    with pytest.raises(ConfigError, match="patients and per_patient must be at least 1"):
        validate(PhantomConfig(per_patient=0))
    with pytest.raises(ConfigError, match="size=8 is not possible") as e:
        validate(PhantomConfig(size=8))
    assert "--" not in str(e.value)
    r = CliRunner().invoke(cli, ["phantom", "--set", "per_patient=0", "--out", str(tmp_path / "p")])
    assert r.exit_code == 1 and "--patients and --per-patient must be at least 1" in r.output
    r = CliRunner().invoke(cli, ["phantom", "--set", "size=8", "--out", str(tmp_path / "p")])
    assert r.exit_code == 1 and "--size 8 is not possible" in r.output and "size=" not in r.output


@pytest.mark.parametrize(("data", "overrides", "said", "fix"), [
    ({"k": "two"}, [], "is not an integer", "a whole number"),
    ({"seed": 1.5}, [], "is not an integer", "a whole number"),
    ({"bogus_key": 1}, [], "unknown key", "remove or correct"),
    ({"kk": 3}, [], "unknown key", "kk -> k?"),
    ({}, ["k"], "must look like key.sub=value", "'=' and its value"),
])
def test_every_config_error_says_how_to_fix_it(data, overrides, said, fix):
    from medanon.anonymize.ksame_config import KSameConfig
    from medanon.config import apply_overrides, from_dict

    with pytest.raises(ConfigError, match=said) as e:
        from_dict(KSameConfig, apply_overrides(data, overrides))
    assert fix in (e.value.fix or "")
