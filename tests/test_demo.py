"""Pieces of `medanon demo` that its end-to-end test (tests/test_cli.py, without evaluation) does not reach."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from medanon import demo
from medanon.config import PhantomConfig


def test_dpglow_study_refuses_data_the_flows_were_not_trained_on(tmp_path: Path, monkeypatch, capsys):
    # a different phantom than the one recorded in the shipped flow: its held-out patients are unknown,
    # so Table 3 must not be computed on it
    monkeypatch.setattr(demo, "FLOW_PHANTOM", PhantomConfig(modality="xray", patients=3, per_patient=1, size=64,
                                                            seed=0))
    assert demo.dpglow_study(tmp_path, demo.default_checkpoints(), torch.device("cpu"), 0) is None
    assert "is not the one glow-xray64.pt was trained on" in capsys.readouterr().out


def test_dpglow_study_skips_without_the_normal_flow(tmp_path: Path, capsys):
    assert demo.dpglow_study(tmp_path, tmp_path, torch.device("cpu"), 0) is None
    assert "not shipped" in capsys.readouterr().out


def test_eval_config_uses_the_shipped_attacker_trained_on_other_patients():
    """The shipped attacker was trained on a phantom of another seed (patients disjoint from the demo's members,
    controls and attacker split); the demo uses it unless its own phantom is that seed."""
    from medanon.models.identity import load_identity

    ckpt = demo.default_checkpoints()
    for modality in ("fundus", "xray"):
        cfg = demo.eval_config(modality, 64, ckpt, 200, 4, 0)
        assert cfg.attacks.identity_checkpoint == str(ckpt / f"identity-attacker-{modality}64.pt")
        extra = load_identity(cfg.attacks.identity_checkpoint)[1]["extra"]
        assert extra["phantom"]["seed"] == demo.ATTACKER_PHANTOM_SEED != 0 and extra["phantom"]["modality"] == modality
        assert "disjoint" in extra["trained_on"]
        indep = load_identity(cfg.attacks.independent_checkpoint)[1]["extra"]
        assert indep["phantom"]["seed"] == demo.INDEPENDENT_PHANTOM_SEED not in (0, demo.ATTACKER_PHANTOM_SEED)
        assert indep["train_config"]["arch"] == cfg.attacks.independent_arch != cfg.attacks.identity.arch
        assert indep["train_config"]["image_size"] == cfg.attacks.independent_image_size != 64
    assert demo.eval_config("xray", 64, ckpt, 40, 2, 0).attacks.identity_checkpoint != ""   # other demo sizes too
    assert demo.eval_config("xray", 64, ckpt, 200, 4, demo.ATTACKER_PHANTOM_SEED).attacks.identity_checkpoint == ""


def test_eval_config_uses_the_shipped_siamese_and_sex_attackers():
    """Trained once on the seed-1 phantom (benchmarks/train_demo_attackers.py) instead of in every demo run; the
    files are the kinds the settings expect, for the modality, and say where they were trained."""
    from medanon.evaluate.attacks.siamese import load_siamese
    from medanon.models.classifier import load_classifier

    ckpt = demo.default_checkpoints()
    for modality, channels in (("fundus", 3), ("xray", 1)):
        a = demo.eval_config(modality, 64, ckpt, 200, 4, 0).attacks
        net, blob = load_siamese(a.siamese_checkpoint)
        assert net.branch[0].in_channels == channels and blob["extra"]["phantom"]["seed"] == demo.ATTACKER_PHANTOM_SEED
        model, blob = load_classifier(a.attribute_checkpoint)
        assert blob["extra"]["label"] == a.attribute == "sex" and model.cfg.in_channels == channels
        assert "disjoint" in blob["extra"]["trained_on"] and blob["extra"]["phantom"]["modality"] == modality
        own = demo.eval_config(modality, 64, ckpt, 200, 4, demo.ATTACKER_PHANTOM_SEED).attacks
        assert own.siamese_checkpoint == own.attribute_checkpoint == ""      # its own patients: train instead
        assert demo.eval_config(modality, 32, ckpt, 200, 4, 0).attacks.attribute_checkpoint == ""


def test_the_report_folder_the_demo_prepares_is_one_the_evaluation_may_write(tmp_path: Path):
    """The demo puts the DP-GLOW figure into report-xray before the evaluation writes its report there; the
    evaluation's run folder refuses folders medanon did not write, so the demo must mark it (a full demo failed)."""
    from medanon.outputs import UnsafeOutputError
    from medanon.runtime import RunDir

    report = demo.report_folder(tmp_path, "xray")
    (report / "dpglow_markers.png").write_bytes(b"png")
    RunDir(report, config={}, command="evaluate")                       # accepted: medanon's own folder
    (tmp_path / "report-fundus").mkdir()
    (tmp_path / "report-fundus" / "notes.txt").write_text("mine")
    with pytest.raises(UnsafeOutputError):
        demo.report_folder(tmp_path, "fundus")                          # a foreign folder stays foreign


def test_the_demos_part_of_a_phantom_is_phantom_data_and_its_releases_say_so(tmp_path: Path):
    import json

    import medanon

    root = medanon.make_phantom(tmp_path / "fundus", patients=6, per_patient=2, size=16)
    ds = medanon.open_dataset(root, size=16)
    part = demo.write_subset(root, ds.records[:6], tmp_path / "fundus-train")
    info = json.loads((part / "phantom.json").read_text())
    assert info["phantom"] and info["subset"] and (info["images"], info["patients"]) == (6, 3)
    medanon.anonymize.kpixel(medanon.open_dataset(part, size=16), k=3).save(tmp_path / "release", progress=False)
    assert json.loads((tmp_path / "release" / "manifest.json").read_text())["phantom"] is True


def test_releases_made_with_other_settings_are_made_again_not_reused(tmp_path: Path):
    """A demo re-run with other settings (more patients, more k-SALSA steps) replaces its releases, also after an
    interrupted run that had already written the new settings to config.yaml; the same settings reuse them."""
    import yaml

    from medanon.config import to_dict

    out = tmp_path / "demo"
    out.mkdir()
    a = demo.DemoConfig(patients=20, ksalsa_steps=1, checkpoints="ck")
    b = demo.DemoConfig(patients=24, ksalsa_steps=3, checkpoints="ck")
    assert demo.stale_modalities(out, a) == set()                          # a fresh folder: nothing to replace
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(a)))
    demo.record_releases_made(out, "fundus", a)
    demo.record_releases_made(out, "xray", a)
    assert demo.stale_modalities(out, a) == set()
    assert demo.stale_modalities(out, b) == {"fundus", "xray"}
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(b)))           # run b interrupted after its fundus
    demo.record_releases_made(out, "fundus", b)
    assert demo.stale_modalities(out, b) == {"xray"}                       # config.yaml alone would say neither
    assert demo.stale_modalities(out, demo.DemoConfig(patients=24, ksalsa_steps=3, checkpoints="ck",
                                                      device="cuda", inception=False)) == {"xray"}
    # releases an earlier version made, whose statements this version words differently, are made again
    made = json.loads((out / demo.RELEASES_MADE).read_text())
    del made["fundus"]["statements"]                                     # as an earlier version recorded it
    (out / demo.RELEASES_MADE).write_text(json.dumps(made))
    assert demo.stale_modalities(out, b) == {"fundus", "xray"}
    # run b remakes a's xray releases and is interrupted: a run with a's settings must not take the mix for a's
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(a)))
    demo.record_releases_made(out, "xray", a)
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(b)))
    assert "xray" in demo.stale_modalities(out, b)
    demo.forget_releases_made(out, "xray")                               # what the demo does before remaking them
    assert "xray" in demo.stale_modalities(out, a)


def test_the_demos_subset_is_replaced_when_its_rows_change(tmp_path: Path):
    import medanon

    root = medanon.make_phantom(tmp_path / "fundus", patients=6, per_patient=1, size=16)
    ds = medanon.open_dataset(root, size=16)
    part = demo.write_subset(root, ds.records[:3], tmp_path / "train")
    stamp = (part / "labels.csv").stat().st_mtime_ns
    assert demo.write_subset(root, ds.records[:3], tmp_path / "train") == part
    assert (part / "labels.csv").stat().st_mtime_ns == stamp                # the same rows: reused
    demo.write_subset(root, ds.records[:4], tmp_path / "train")
    assert len((part / "labels.csv").read_text().splitlines()) == 1 + 4     # other rows: replaced


def test_releases_made_with_a_checkpoint_since_replaced_are_made_again(tmp_path: Path):
    """A checkpoint retrained into the same folder under the same name: the releases made with the old one are
    stale, though every setting the demo records is the same."""
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "restyle-map-fundus64.pt").write_bytes(b"old weights")
    out = tmp_path / "demo"
    out.mkdir()
    cfg = demo.DemoConfig(patients=30, checkpoints=str(ck))
    demo.record_releases_made(out, "fundus", cfg)
    assert demo.stale_modalities(out, cfg) == set()
    (ck / "restyle-map-fundus64.pt").write_bytes(b"new weights")
    assert demo.stale_modalities(out, cfg) == {"fundus"}


def test_the_demos_phantoms_edited_since_are_refused_not_reused(tmp_path: Path):
    from PIL import Image

    from medanon.errors import DataError

    cfg = PhantomConfig(modality="fundus", patients=3, per_patient=1, size=16, workers=1)
    data = demo._phantoms(cfg, tmp_path / "fundus")
    assert demo._phantoms(cfg, data) == data                               # unchanged: reused
    png = sorted((data / "images").glob("*.png"))[0]
    a = np.asarray(Image.open(png)).copy()
    a[0, 0] = 255 - a[0, 0]
    Image.fromarray(a).save(png)                                          # one pixel edited
    with pytest.raises(DataError, match="changed or added since the demo generated it"):
        demo._phantoms(cfg, data)
    assert png.exists()                                                   # nothing replaced


def test_a_fundus_only_setting_leaves_the_xray_releases_alone(tmp_path: Path):
    out = tmp_path / "demo"
    out.mkdir()
    a = demo.DemoConfig(patients=30, ksalsa_steps=100, checkpoints="ck")
    demo.record_releases_made(out, "fundus", a)
    demo.record_releases_made(out, "xray", a)
    assert demo.stale_modalities(out, demo.DemoConfig(patients=30, ksalsa_steps=50, checkpoints="ck")) == {"fundus"}


def test_the_demo_command_offers_only_what_the_demo_accepts():
    """--help's ranges are the demo's own: the fewest patients it takes, and the shipped checkpoints' size."""
    from medanon.cli.demo import demo as command

    opts = {p.name: p for p in command.params}
    assert opts["patients"].type.min == demo.MIN_PATIENTS and str(demo.MIN_PATIENTS_EVALUATED) in opts["patients"].help
    assert opts["size"].type.min == opts["size"].type.max == demo.DemoConfig().size == 64


def test_a_damaged_checkpoint_is_named_before_the_demo_makes_anything(tmp_path: Path):
    """A truncated X-ray flow was found only after the fundus releases and their evaluation had run."""
    import shutil

    from medanon.errors import DataError

    shipped = Path(__file__).resolve().parents[1] / "checkpoints"
    ck = tmp_path / "ck"
    ck.mkdir()
    for name in ("glow-xray64.pt", "unet-vessels64.pt"):
        shutil.copy(shipped / name, ck / name)
    demo.check_checkpoints(ck)                                    # intact: nothing to say
    data = (ck / "glow-xray64.pt").read_bytes()
    (ck / "glow-xray64.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="1 checkpoint") as e:
        demo.run_demo(tmp_path / "out", patients=40, checkpoints=ck, evaluation=False)
    assert "glow-xray64.pt" in str(e.value) and "unet-vessels64.pt" not in str(e.value)
    assert not (tmp_path / "out").exists()
