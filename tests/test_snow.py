"""Snow and VS-Snow: exact fractions, only vessel pixels, seeds, nesting, the per-pixel claim, releases, CLI."""

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from medanon.anonymize.privacy import NoFormalGuarantee
from medanon.anonymize.snow import (
    ChannelMean,
    count_for,
    image_generators,
    random_order,
    snow,
    snow_privacy,
    snow_selection,
    snow_sweep,
    vessel_neighbour_mean,
    vs_snow,
    vs_snow_selection,
)
from medanon.cli import cli
from medanon.config import DataConfig, PhantomConfig
from medanon.data.dataset import open_dataset
from medanon.errors import ConfigError
from medanon.phantoms.generate import generate
from medanon.release import audit_release, read_release
from medanon.segment import VesselSource


def _images(n=3, c=3, h=12, w=10, seed=0) -> torch.Tensor:
    return torch.rand(n, c, h, w, generator=torch.Generator().manual_seed(seed)) * 2 - 1


@settings(max_examples=40, deadline=None)
@given(p=st.floats(0.01, 1.0), n=st.integers(1, 3), c=st.sampled_from([1, 3]), h=st.integers(3, 17),
       w=st.integers(3, 17), seed=st.integers(0, 2**31))
def test_snow_replaces_exactly_round_p_hw_positions_in_every_channel(p, n, c, h, w, seed):
    x = _images(n, c, h, w, seed)                # continuous values: no pixel equals the fill by chance
    means = torch.linspace(-0.5, 0.5, c)
    y = snow(x, p=p, means=means, generator=image_generators(seed, range(n)))
    changed = y != x
    k = math.floor(p * (h * w) + 0.5)                   # round(p·HW) with HW counted first, as count_for
    assert (changed.all(dim=1) == changed.any(dim=1)).all()          # one subset for all channels (Eq. 1)
    assert changed[:, 0].flatten(1).sum(1).tolist() == [k] * n
    assert torch.equal(y[changed], means.view(1, c, 1, 1).expand_as(y)[changed])


def test_same_seed_same_output_and_independent_of_batching():
    x = _images(5)
    a = snow(x, p=0.3, means=[0.0, 0.1, 0.2], generator=image_generators(7, range(5)))
    b = snow(x, p=0.3, means=[0.0, 0.1, 0.2], generator=image_generators(7, range(5)))
    assert torch.equal(a, b)
    c = snow(x, p=0.3, means=[0.0, 0.1, 0.2], generator=image_generators(8, range(5)))
    assert not torch.equal(a, c)
    one = snow(x[3:4], p=0.3, means=[0.0, 0.1, 0.2], generator=image_generators(7, [3]))
    assert torch.equal(one[0], a[3])             # an image's output depends on (seed, index) only
    high = snow(x, p=0.3, means=[0.0, 0.1, 0.2], generator=image_generators(7 + 2**40, range(5)))
    assert not torch.equal(a, high)              # every bit of the 63-bit run seed counts (not its low 32 only)
    order = random_order(5, 8, 8, generator=image_generators(7, range(5)))
    assert (order.sort(dim=1).values == torch.arange(64)).all()       # each row a permutation


def test_subsets_are_nested_across_p():
    order = random_order(4, 16, 16, generator=image_generators(0, range(4)))
    sets = [snow_selection(order, p, 16, 16) for p in (0.1, 0.3, 0.5)]
    assert (sets[0] <= sets[1]).all() and (sets[1] <= sets[2]).all()
    assert [int(s[0].sum()) for s in sets] == [count_for(p, 256) for p in (0.1, 0.3, 0.5)]
    v = torch.rand(4, 1, 16, 16, generator=torch.Generator().manual_seed(2)) < 0.2
    vsets = [vs_snow_selection(v, p, generator=None, order=order) for p in (0.1, 0.3, 0.5)]
    assert (vsets[0] <= vsets[1]).all() and (vsets[1] <= vsets[2]).all() and (vsets[2] <= v).all()


def test_every_position_is_hidden_with_probability_k_over_hw():
    """The per-pixel (0, 1 - p) claim needs each position hidden with probability k/(H*W) whatever its place:
    over 4000 images every one of the 64 positions' hit rate is within 5 binomial sigmas of 0.25."""
    n, h, w, p = 4000, 8, 8, 0.25                 # one PCG64 generator per image, as a release draws them
    hits = snow_selection(random_order(n, h, w, generator=image_generators(1, range(n))), p, h, w)
    rate = hits.double().mean(0).flatten()
    sigma = math.sqrt(p * (1 - p) / n)
    assert (rate - p).abs().max() < 5 * sigma
    assert snow_privacy(p, h, w, fill="grey")["delta"] == pytest.approx(1 - count_for(p, 64) / 64)
    v = torch.zeros(n, 1, h, w, dtype=torch.bool)
    v[:, :, 2:6, 1:7] = True                      # 24 vessel pixels: each chosen with probability 6 / 24
    rate = vs_snow_selection(v, p, generator=torch.Generator().manual_seed(2)).double().mean(0)
    assert (rate[v[0]] - p).abs().max() < 5 * sigma and rate[~v[0]].max() == 0


def _reference_neighbour_mean(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    n, _, h, w = x.shape
    out = np.zeros_like(x)
    for i in range(n):
        for r in range(h):
            for s in range(w):
                nb = [(a, b) for a in range(r - 1, r + 2) for b in range(s - 1, s + 2)
                      if (a, b) != (r, s) and 0 <= a < h and 0 <= b < w]
                ves = [(a, b) for a, b in nb if v[i, 0, a, b]]
                use = ves or nb
                out[i, :, r, s] = np.mean([x[i, :, a, b] for a, b in use], axis=0)
    return out


def test_neighbour_mean_matches_a_loop_reference():
    x = _images(2, 3, 7, 9)
    v = torch.rand(2, 1, 7, 9, generator=torch.Generator().manual_seed(3)) < 0.35
    v[0, 0] = False
    v[0, 0, 3, 4] = True                          # an isolated vessel pixel: falls back to all 8 neighbours
    v[1, 0, 0, 0] = True                          # a corner
    ref = _reference_neighbour_mean(x.double().numpy(), v.numpy())
    np.testing.assert_allclose(vessel_neighbour_mean(x.double(), v).numpy(), ref, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(p=st.floats(0.01, 1.0), seed=st.integers(0, 2**31), density=st.floats(0.05, 0.6))
def test_vs_snow_changes_only_a_fraction_p_of_vessel_pixels(p, seed, density):
    x = _images(3, 3, 16, 16, seed)
    v = torch.rand(3, 1, 16, 16, generator=torch.Generator().manual_seed(seed + 1)) < density
    y = vs_snow(x, v, p=p, generator=image_generators(seed, range(3)))
    changed = (y != x).any(dim=1, keepdim=True)
    assert not (changed & ~v).any()                                   # never outside the vessel mask
    for i in range(3):
        k = math.floor(p * int(v[i].sum()) + 0.5)
        assert int(changed[i].sum()) == k                             # continuous data: every selected one moves
    target = vessel_neighbour_mean(x, v)
    assert torch.allclose(y[changed.expand_as(y)], target[changed.expand_as(y)])


def test_channel_mean_matches_numpy():
    acc = ChannelMean()
    parts = [_images(2, 3, 5, 5, s) for s in range(3)]
    for part in parts:
        acc.update(part)
    ref = torch.cat(parts).double().numpy().mean(axis=(0, 2, 3))
    np.testing.assert_allclose(acc.compute().numpy(), ref, rtol=1e-12)


@pytest.fixture(scope="module")
def phantoms(tmp_path_factory) -> Path:
    return generate(PhantomConfig(patients=6, per_patient=2, size=32, workers=1),
                    tmp_path_factory.mktemp("snow") / "fundus", progress=False)


def test_sweep_releases_each_p_with_its_privacy_statement(tmp_path: Path, phantoms: Path):
    ds = open_dataset(phantoms, DataConfig(size=32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = snow_sweep(ds, tmp_path / "snow-p{p}", ps=[0.5, 0.1], progress=False, batch_size=5)
    assert any("publish at most one" in str(w.message) for w in caught)
    assert not any(issubclass(w.category, NoFormalGuarantee) for w in caught)     # defaults keep the guarantee
    assert sorted(outs) == [0.1, 0.5]
    for p, out in outs.items():
        manifest, rows = read_release(out)
        assert len(rows) == len(ds) and manifest["labels"] == ["grade"] and manifest["phantom"]
        assert manifest["params"]["p"] == p and manifest["seeds"] == {}          # the secret seed is recorded nowhere
        assert manifest["privacy"]["delta"] == pytest.approx(1 - count_for(p, 1024) / 1024)
        assert manifest["privacy"]["guarantee"].startswith("no image or patient is protected. The paper's bound")
        assert "ONE PIXEL POSITION" in manifest["privacy"]["guarantee"] and manifest["privacy"]["epsilon"] == 0.0
        assert manifest["params"]["fill"] == "grey" and manifest["params"]["fill_value"] == [0.0, 0.0, 0.0]
        assert audit_release(out, source_records=ds.records).passed
    with pytest.raises(ConfigError, match=r"\{p\}"):
        snow_sweep(ds, tmp_path / "flat", ps=[0.1, 0.3], seed=0, progress=False)


def test_snow_at_its_defaults_passes_a_strict_privacy_filter_vs_snow_does_not(tmp_path: Path, phantoms: Path):
    """A PrivacyWarning marks a setting that weakens a statement: default Snow has none (its per-pixel guarantee is
    what the method gives), VS-Snow has no formal guarantee at all and says so."""
    import medanon
    from medanon.anonymize.privacy import PrivacyWarning

    ds = open_dataset(phantoms, DataConfig(size=32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        medanon.anonymize.snow(ds, p=0.3).save(tmp_path / "snow", progress=False)
    with pytest.warns(NoFormalGuarantee, match="VS-Snow: no formal privacy guarantee"):
        medanon.anonymize.vs_snow(ds, p=0.3, vessels="frangi").save(tmp_path / "vs", progress=False)


def test_vs_snow_release_resumes_after_interruption(tmp_path: Path, phantoms: Path, monkeypatch):
    ds = open_dataset(phantoms, DataConfig(size=32))
    kw = dict(method="vs-snow", ps=[0.5], seed=1, vessels=VesselSource("dataset"), progress=False, batch_size=4)
    with pytest.warns(NoFormalGuarantee, match="seed=1"):
        full = snow_sweep(ds, tmp_path / "full", **kw)[0.5]
    import medanon.anonymize.snow_release as mod  # where snow_sweep looks the mechanism up

    calls = {"n": 0}
    real = mod.vs_snow

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(mod, "vs_snow", flaky)
    with pytest.raises(KeyboardInterrupt):
        snow_sweep(ds, tmp_path / "again", **kw)
    assert (tmp_path / "again.partial").exists() and not (tmp_path / "again").exists()
    monkeypatch.setattr(mod, "vs_snow", real)
    again = snow_sweep(ds, tmp_path / "again", **kw)[0.5]
    manifest, _ = read_release(again)
    assert manifest["privacy"]["guarantee"].startswith("none") and manifest["privacy"]["delta"] is None
    assert "reproducible" in manifest["privacy"]["randomness"]
    pixels = sorted(p.read_bytes() for p in (full / "images").iterdir())
    assert pixels == sorted(p.read_bytes() for p in (again / "images").iterdir())   # same seed, same release


def test_cli_snow_and_vs_snow(tmp_path: Path, phantoms: Path):
    runner = CliRunner()
    r = runner.invoke(cli, ["anonymize", "snow", str(phantoms), "--size", "32", "--p", "0.1,0.3", "--seed", "0",
                            "--out", str(tmp_path / "s-{p}"), "--release-labels", "grade,sex"])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())                   # the library's warnings, printed by the CLI
    assert "releasing sex" in said and "publish at most one" in said and "--seed 0" in said
    assert (tmp_path / "s-0.1").is_dir() and (tmp_path / "s-0.3").is_dir()
    assert read_release(tmp_path / "s-0.3")[0]["labels"] == ["grade", "sex"]
    r = runner.invoke(cli, ["anonymize", "vs-snow", str(phantoms), "--size", "32", "--p", "0.5", "--seed", "0",
                            "--vessels", "frangi", "--out", str(tmp_path / "v")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "v" / "manifest.json").read_text())["params"]["vessels"]["method"] == "frangi"
    r = runner.invoke(cli, ["anonymize", "vs-snow", str(phantoms), "--size", "32", "--p", "0.3", "--seed", "0",
                            "--vessels", "files", "--masks", str(phantoms / "masks"), "--out", str(tmp_path / "f")])
    assert r.exit_code == 0, r.output                  # the phantom masks, read as user files (same stems)
    r = runner.invoke(cli, ["anonymize", "snow", str(phantoms), "--size", "32", "--p", "1.5", "--seed", "0",
                            "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "(0, 1]" in r.output
    r = runner.invoke(cli, ["anonymize", "vs-snow", str(phantoms), "--size", "32", "--p", "0.5", "--seed", "0",
                            "--vessels", "files", "--out", str(tmp_path / "y")])
    assert r.exit_code == 1 and "--masks" in r.output


def test_cli_snow_and_vs_snow_take_a_config_file_and_overrides(tmp_path: Path, phantoms: Path):
    """defaults (SnowConfig / VSSnowConfig) <- --config FILE <- --set key=value <- the options given."""
    runner = CliRunner()
    base = ["anonymize", "snow", str(phantoms), "--size", "32", "--seed", "0"]
    (tmp_path / "snow.yaml").write_text("p: [0.2]\nfill: value:255,0,127.5\nbatch_size: 5\n")
    r = runner.invoke(cli, [*base, "--config", str(tmp_path / "snow.yaml"), "--set", "p=[0.25]", "--out",
                            str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    params = read_release(tmp_path / "a")[0]["params"]
    assert params["p"] == 0.25 and params["fill_value"] == pytest.approx([1.0, -1.0, 0.0])
    assert "batch_size" not in params                    # speed only: not a parameter, so a resume may change it
    r = runner.invoke(cli, [*base, "--config", str(tmp_path / "snow.yaml"), "--p", "0.4", "--fill", "grey",
                            "--batch", "4", "--out", str(tmp_path / "b")])          # options given win
    params = read_release(tmp_path / "b")[0]["params"]
    assert r.exit_code == 0 and params["p"] == 0.4 and params["fill"] == "grey"
    r = runner.invoke(cli, [*base, "--set", "p=0.1,0.3", "--out", str(tmp_path / "c-{p}")])
    assert r.exit_code == 0 and (tmp_path / "c-0.1").is_dir() and (tmp_path / "c-0.3").is_dir(), r.output
    r = runner.invoke(cli, [*base, "--p", "0.2", "--set", "fill=mean", "--out", str(tmp_path / "d")])
    assert r.exit_code == 1 and "--fill 'mean' is not grey" in r.output and not (tmp_path / "d").exists()
    r = runner.invoke(cli, ["anonymize", "vs-snow", str(phantoms), "--size", "32", "--seed", "0", "--p", "0.5",
                            "--set", "vessels=frangi", "--set", "vessel_fraction=0.2", "--out", str(tmp_path / "v")])
    assert r.exit_code == 0, r.output
    vessels = read_release(tmp_path / "v")[0]["params"]["vessels"]
    assert vessels["method"] == "frangi" and vessels["fraction"] == 0.2
    helps = {c: " ".join(runner.invoke(cli, ["anonymize", c, "--help"]).output.split()) for c in ("snow", "vs-snow")}
    assert "[default: grey]" in helps["snow"] and "[default: 32]" in helps["snow"] and "--config FILE" in helps["snow"]
    assert "[default: unet]" in helps["vs-snow"] and "[default: 0.1]" in helps["vs-snow"]


def test_xray_snow_releases_pneumonia_and_vs_snow_refuses(tmp_path: Path):
    root = generate(PhantomConfig(modality="xray", patients=3, per_patient=1, size=32, workers=1),
                    tmp_path / "xray", progress=False)
    ds = open_dataset(root, DataConfig(size=32))
    out = snow_sweep(ds, tmp_path / "rel", ps=[0.2], seed=0, fill="grey", progress=False)[0.2]
    manifest, _ = read_release(out)
    assert manifest["labels"] == ["pneumonia"] and manifest["params"]["fill_value"] == [0.0]
    with pytest.raises(ConfigError, match="colour fundus"):
        snow_sweep(ds, tmp_path / "vs", method="vs-snow", ps=[0.2], seed=0, vessels=VesselSource("frangi"),
                   progress=False)


def test_default_fill_is_data_independent_and_a_data_derived_fill_claims_nothing(tmp_path: Path, phantoms: Path):
    """Issue 14.1: grey by default; value:R,G,B a user constant; dataset (the paper's mean) voids the guarantee."""
    ds = open_dataset(phantoms, DataConfig(size=32))
    images, _ = ds.tensors(progress=False)
    with pytest.warns(NoFormalGuarantee, match="fill=dataset"):
        out = snow_sweep(ds, tmp_path / "d", ps=[0.3], fill="dataset", progress=False)[0.3]
    man, _ = read_release(out)
    priv = man["privacy"]
    assert priv["guarantee"] == "none: no formal guarantee (data-derived fill)"
    assert priv["epsilon"] is None and priv["delta"] is None and "disjoint" in " ".join(priv["why_no_guarantee"])
    assert man["params"]["fill_value"] == pytest.approx(images.double().mean((0, 2, 3)).tolist(), abs=1e-6)
    # one source image left out moves the fill of every other released image under fill=dataset, never under grey
    from medanon.anonymize.snow_release import dataset_channel_means
    from medanon.anonymize.snow_statement import parse_fill
    from medanon.data.dataset import subset

    fewer = subset(ds, range(1, len(ds)))
    assert not torch.allclose(dataset_channel_means(ds, progress=False), dataset_channel_means(fewer, progress=False))
    assert parse_fill("grey", 3)[1].abs().max() == 0           # grey: mid-grey, computed from no image
    out = snow_sweep(ds, tmp_path / "v", ps=[0.3], fill="value:255,0,127.5", progress=False)[0.3]
    man, _ = read_release(out)
    assert man["params"]["fill_value"] == pytest.approx([1.0, -1.0, 0.0])
    assert man["privacy"]["delta"] is not None and "supplied by the user" in man["privacy"]["fill"]
    with pytest.raises(ConfigError, match="gives 2 value"):
        snow_sweep(ds, tmp_path / "bad", ps=[0.3], fill="value:1,2", progress=False)
    with pytest.raises(ConfigError, match="outside 0-255"):                 # three values, one out of range
        snow_sweep(ds, tmp_path / "bad", ps=[0.3], fill="value:300,0,0", progress=False)
    runner = CliRunner()
    r = runner.invoke(cli, ["anonymize", "snow", str(phantoms), "--size", "32", "--p", "0.2", "--fill", "dataset",
                            "--out", str(tmp_path / "cli")])
    assert r.exit_code == 0 and "WARNING: --fill dataset" in r.output, r.output
    assert "no formal guarantee" in read_release(tmp_path / "cli")[0]["privacy"]["guarantee"]


def test_a_seeded_snow_release_states_no_formal_guarantee(tmp_path: Path, phantoms: Path):
    """Issue 14.4 for Snow: a user-chosen seed makes the hidden sets reproducible; without one they differ per run."""
    ds = open_dataset(phantoms, DataConfig(size=32))
    with pytest.warns(NoFormalGuarantee, match="seed=5"):
        out = snow_sweep(ds, tmp_path / "s", ps=[0.3], seed=5, progress=False)[0.3]
    man, _ = read_release(out)
    assert man["privacy"]["guarantee"] == "none: no formal guarantee (reproducible randomness, testing only)"
    assert man["seeds"] == {"snow": 5}
    a = snow_sweep(ds, tmp_path / "a", ps=[0.3], progress=False)[0.3]
    b = snow_sweep(ds, tmp_path / "b", ps=[0.3], progress=False)[0.3]
    assert sorted(p.read_bytes() for p in (a / "images").iterdir()) != \
        sorted(p.read_bytes() for p in (b / "images").iterdir())                  # secret seeds: two different draws


def test_vs_snow_takes_a_loaded_segmenter_as_its_path(phantoms: Path):
    """``checkpoint=`` takes a loaded LearnedSegmenter (threshold and size come with it); a bare network, which
    lacks them, is refused before any work."""
    import medanon
    from medanon.segment.learned import LearnedSegmenter

    path = Path(__file__).resolve().parents[1] / "checkpoints" / "unet-vessels64.pt"
    ds = open_dataset(phantoms, DataConfig(size=32))
    loaded = LearnedSegmenter.from_checkpoint(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # seeded (testing only) and resized masks
        by_object = medanon.anonymize.vs_snow(ds, p=0.5, seed=1, checkpoint=loaded)
        by_path = medanon.anonymize.vs_snow(ds, p=0.5, seed=1, checkpoint=path)
        released = [sorted(x.numpy().tobytes() for x in r.images()) for r in (by_object, by_path)]
    assert released[0] == released[1]                    # the same images (a release's order is random)
    with pytest.raises(ConfigError, match="bare FullResUNet"):
        medanon.anonymize.vs_snow(ds, p=0.5, checkpoint=loaded.model)


def test_a_vs_snow_resume_notices_edited_vessel_masks(tmp_path, interrupted_after):
    """The resume fingerprint covered the images only: after a mask file was edited, the interrupted release went
    on and kept records computed from the old masks beside new ones."""
    import medanon

    root = generate(PhantomConfig(patients=4, per_patient=2, size=16, workers=1), tmp_path / "ph", progress=False)

    def release():
        return medanon.anonymize.vs_snow(medanon.open_dataset(root, size=16), p=0.3, vessels="dataset", seed=1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with interrupted_after(3), pytest.raises(KeyboardInterrupt):
            release().save(tmp_path / "rel", progress=False)
        mask = sorted((root / "masks").iterdir())[-1]
        from PIL import Image
        Image.fromarray(255 - np.asarray(Image.open(mask))).save(mask)
        with pytest.raises(ConfigError, match=r"interrupted release of other sources.*vessel masks"):
            release().save(tmp_path / "rel", progress=False)


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5, float("nan")])
def test_the_mechanism_refuses_a_fraction_outside_0_1(p):
    """p = 0 would release every image unchanged under a Snow statement: the mechanism refuses it itself, whatever
    called it (the API and the CLI check p too)."""
    from medanon.anonymize.snow_mechanism import check_p
    from medanon.errors import ConfigError

    with pytest.raises(ConfigError, match=r"must be in \(0, 1\]"):
        check_p(p)
    check_p(1.0)


def test_every_vessel_mask_file_is_read_before_the_first_image_is_released(tmp_path: Path, phantoms: Path):
    """vs-snow --vessels files: an empty mask file and one of the wrong size, late in the dataset, are named together
    before anything is written (they used to fail the batch that reached them, after the images before it were
    released). A layout's own mask that cannot be read is a data error naming it, not a failed write."""
    import shutil

    from PIL import Image

    masks = tmp_path / "masks"
    shutil.copytree(phantoms / "masks", masks)
    files = sorted(masks.iterdir())
    files[-1].write_bytes(b"")                                                 # the last image's mask: empty
    Image.new("L", (20, 20), 255).save(files[-2])                            # the one before: the wrong size
    runner = CliRunner()
    r = runner.invoke(cli, ["anonymize", "vs-snow", str(phantoms), "--size", "32", "--p", "0.3", "--seed", "0",
                            "--batch", "2", "--vessels", "files", "--masks", str(masks), "--out", str(tmp_path / "v")])
    assert r.exit_code == 1 and "2 of the 12 vessel mask(s)" in r.output, r.output
    assert files[-1].name in r.output and files[-2].name in r.output and "20x20" in r.output
    assert "could not write" not in r.output and "Traceback" not in r.output
    assert not (tmp_path / "v").exists() and not (tmp_path / "v.partial").exists()

    layout = tmp_path / "layout"
    shutil.copytree(phantoms, layout)
    sorted((layout / "masks").iterdir())[-1].write_bytes(b"\x89PNG\r\n")      # a truncated layout mask
    r = runner.invoke(cli, ["anonymize", "vs-snow", str(layout), "--size", "32", "--p", "0.3", "--seed", "0",
                            "--vessels", "dataset", "--out", str(tmp_path / "d")])
    assert r.exit_code == 1 and "could not write" not in r.output and "operating system" not in r.output, r.output
    assert "mask" in r.output and sorted((layout / "masks").iterdir())[-1].name in r.output
    assert not (tmp_path / "d").exists() and not (tmp_path / "d.partial").exists()


def test_a_p_that_replaces_no_pixel_is_refused_and_a_release_of_copies_fails_the_audit(tmp_path: Path,
                                                                                         phantoms: Path):
    """Snow at p < 1/(2*H*W) would replace round(p*H*W) = 0 pixels: the "release" would be the images as read. It is
    refused before anything is written. VS-Snow's count depends on each image's vessels: images none of whose vessel
    pixels p reaches are named in a warning, and an audit of a release whose every image is its source fails."""
    runner = CliRunner()
    r = runner.invoke(cli, ["--device", "cpu", "anonymize", "snow", str(phantoms), "--size", "32", "--p",
                            "0.1,0.0001", "--out", str(tmp_path / "s-{p}")])
    said = " ".join(r.output.split())
    assert r.exit_code == 1 and "--p 0.0001 replaces round(p*H*W) = 0 of the 1024 pixels of a 32 px image" in said
    assert "use p of at least 0.000977 (one pixel)" in said and not list(tmp_path.iterdir())
    ds = open_dataset(phantoms, DataConfig(size=32))
    with pytest.raises(ConfigError, match=r"p=0.0004 replaces round\(p\*H\*W\) = 0"):
        snow_sweep(ds, tmp_path / "lib", ps=[0.0004], progress=False)
    assert not (tmp_path / "lib").exists()
    import medanon

    with pytest.raises(ConfigError, match=r"p=0.0004 replaces round\(p\*H\*W\) = 0"):     # when it is asked for
        medanon.anonymize.snow(ds, p=0.0004)
    medanon.anonymize.snow(ds, p=0.0005)                 # round(0.512) = 1 pixel
    r = runner.invoke(cli, ["--device", "cpu", "anonymize", "vs-snow", str(phantoms), "--size", "32", "--p", "0.001",
                            "--vessels", "frangi", "--out", str(tmp_path / "v"), "--mapping", str(tmp_path / "v.json")])
    said = " ".join(r.output.split())
    assert r.exit_code == 0 and "12 image(s) have fewer than 500 vessel pixels" in said, said
    report = medanon.audit(tmp_path / "v", source=phantoms, mapping=tmp_path / "v.json")
    check = next(c for c in report.checks if c.name.startswith("no released image is a copy of one of its own"))
    assert not report.passed and not check.passed
    assert check.detail.startswith("12 are, e.g.") and "(every image compared: the release is its sources)" in \
        check.detail


def test_vessel_mask_files_are_read_once(tmp_path: Path, phantoms: Path, monkeypatch):
    """The check before release reads and aligns every mask file; the release uses what it read (it read every
    file twice, the image too), and gives the masks the batches would have read themselves."""
    from medanon.segment import mask_files, vessels

    reads = []
    real = mask_files.read_mask
    monkeypatch.setattr(mask_files, "read_mask", lambda p: reads.append(p) or real(p))
    ds = open_dataset(phantoms, DataConfig(size=32))
    source = VesselSource("files", masks_dir=phantoms / "masks")
    source.bind(ds.records)
    source.check(ds.records, size=32, crop=ds.crop)
    assert len(reads) == len(ds.records)
    images = torch.stack([ds.load(i)["image"] for i in range(len(ds))])
    fov = torch.ones(len(ds), 1, 32, 32, dtype=torch.bool)
    got = source.masks(images, fov, records=ds.records, layout_masks=None, size=32, crop=ds.crop)
    assert len(reads) == len(ds.records)                        # none read again
    fresh = VesselSource("files", masks_dir=phantoms / "masks")
    fresh.bind(ds.records)
    again = fresh.masks(images, fov, records=ds.records, layout_masks=None, size=32, crop=ds.crop)
    assert torch.equal(got, again) and len(reads) == 2 * len(ds.records)
    monkeypatch.setattr(vessels, "ALIGNED_BUDGET", 0)            # nothing kept: every batch reads its own
    small = VesselSource("files", masks_dir=phantoms / "masks")
    small.bind(ds.records)
    small.check(ds.records, size=32, crop=ds.crop)
    assert torch.equal(small.masks(images, fov, records=ds.records, layout_masks=None, size=32, crop=ds.crop), got)


def test_snow_statements_speak_of_both_modalities_not_of_fundus_alone():
    """An X-ray release's statement said the evaluation measures "the DR classifier's F1"; it measures the data's
    task (pneumonia for chest X-rays), and what survives in an X-ray is its anatomy, not vessels."""
    from medanon.anonymize.snow_statement import snow_privacy, vs_snow_privacy

    for statement in (snow_privacy(0.3, 32, 32), snow_privacy(0.0, 32, 32), vs_snow_privacy(0.3, {})):
        assert "pneumonia" in statement["attack_measured"]
    survives = " ".join(snow_privacy(0.3, 32, 32)["not_protected"])
    assert "chest X-ray's ribs" in survives
