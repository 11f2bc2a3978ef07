"""The model search path: $MEDANON_MODELS before the source checkout, `medanon models` with sha256 and kind."""

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from medanon.checkpoint import save_checkpoint
from medanon.cli import cli
from medanon.demo import default_checkpoints
from medanon.errors import DataError
from medanon.fsutil import sha256_file
from medanon.models_registry import ENV, SOURCE_CHECKPOINTS, find_model, list_models, models_folder, search_path


def _entry(listing: str, name: str) -> str:
    """The lines `medanon models` prints for the file whose first lines hold ``name`` (to the next file's)."""
    blocks = re.split(r"\n(?=\S)", listing)
    return next(b for b in blocks if name in b)


def test_search_path_puts_the_environment_first(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv(ENV, f"{a}{os.pathsep}{b}")
    assert search_path() == [a, b, SOURCE_CHECKPOINTS]
    monkeypatch.delenv(ENV)
    assert search_path() == [SOURCE_CHECKPOINTS]


def test_find_and_list_models(tmp_path, monkeypatch):
    mine = tmp_path / "models"
    mine.mkdir()
    # shadows the shipped one
    path = save_checkpoint(mine / "glow-xray64.pt", kind="glow", config={}, state={"model": {}})
    (mine / "junk.pt").write_bytes(b"not a checkpoint")
    monkeypatch.setenv(ENV, str(mine))
    assert find_model("glow-xray64") == path == find_model("glow-xray64.pt") and find_model(path) == path
    assert models_folder() == mine and default_checkpoints() == mine
    with pytest.raises(DataError, match="not on medanon's model search path") as e:
        find_model("nothing-here")
    assert str(mine) in str(e.value) and ENV in str(e.value)
    for path_like in ("./glow-xray64.pt", "sub/glow-xray64.pt"):      # a path, however short: never a name
        with pytest.raises(DataError, match=f"model file {re.escape(path_like)} does not exist"):
            find_model(path_like)
    found = {(m.path.parent, m.name): m for m in list_models()}
    ours = found[(mine, "glow-xray64.pt")]
    assert ours.kind == "glow" and ours.sha256 == sha256_file(path) and not ours.shadowed
    assert found[(mine, "junk.pt")].kind == "not a medanon checkpoint"
    shipped = found.get((SOURCE_CHECKPOINTS, "glow-xray64.pt"))
    if shipped is not None:                                   # a source checkout: the shipped file comes second
        assert shipped.shadowed and shipped.kind == "glow"

    r = CliRunner().invoke(cli, ["models", "--json"])
    assert r.exit_code == 0, r.output
    listed = json.loads(r.output)
    assert listed["search_path"][0] == str(mine)
    ours = next(m for m in listed["models"] if m["path"] == str(path))
    assert {k: ours[k] for k in ("name", "bytes", "kind", "sha256", "shadowed")} == {
        "name": "glow-xray64.pt", "bytes": path.stat().st_size, "kind": "glow", "sha256": sha256_file(path),
        "shadowed": False}
    # the user's own file of a shipped name is the default by name, but the shipped file's card (trained on
    # phantoms only, its measured quality) is not its card
    assert ours["default_for"] == ["dpglow-flow (xray)"] and ours["card"] is None and ours["shipped"] is None
    r = CliRunner().invoke(cli, ["models"])
    assert r.exit_code == 0 and sha256_file(path) in r.output
    assert ("(shadowed)" in r.output) == (shipped is not None)
    assert "DEFAULT for dpglow-flow (xray)" in r.output
    mine_lines = _entry(r.output, str(path))
    assert "card: none (the card of the shipped glow-xray64.pt is not this file's" in mine_lines
    assert "never a real patient" not in mine_lines and "trained on:" not in mine_lines


def test_every_default_and_card_names_a_shipped_file():
    from medanon.models_registry import CARDS, DEFAULTS

    if not SOURCE_CHECKPOINTS.is_dir():
        pytest.skip("no source checkout")
    shipped = {p.name for p in SOURCE_CHECKPOINTS.glob("*.pt")}
    assert {n for by in DEFAULTS.values() for n in by.values()} <= shipped
    assert set(CARDS) == shipped                               # every shipped file has its card


def test_an_empty_search_path_says_what_to_do(tmp_path, monkeypatch):
    import medanon.models_registry as reg

    monkeypatch.setattr(reg, "SOURCE_CHECKPOINTS", tmp_path / "no-checkout")
    monkeypatch.setenv(ENV, str(tmp_path / "empty"))
    assert reg.models_folder() is None and reg.list_models() == []
    r = CliRunner().invoke(cli, ["models"])
    assert r.exit_code == 0 and "no checkpoints found" in r.output and ENV in r.output and "(missing)" in r.output


def test_an_installed_package_searches_only_the_environment(tmp_path, monkeypatch):
    import medanon.models_registry as reg

    monkeypatch.setattr(reg, "_ROOT", tmp_path / "site-packages-parent")       # no pyproject.toml: not a checkout
    monkeypatch.setenv(ENV, str(tmp_path / "models"))
    assert reg.search_path() == [tmp_path / "models"]
    monkeypatch.delenv(ENV)
    assert reg.search_path() == [] and reg.models_folder() is None


def test_gmia_and_vs_snow_manifests_name_the_default_files_they_used(tmp_path):
    import medanon
    from medanon.config import PhantomConfig
    from medanon.phantoms.generate import generate
    from medanon.release import read_release

    data = generate(PhantomConfig(patients=3, per_patient=1, size=64, workers=1), tmp_path / "d", progress=False)
    ds = medanon.open_dataset(data, size=64)
    rel = medanon.anonymize.gmia(ds, steps=1)
    rel.save(tmp_path / "g", progress=False)
    files = read_release(tmp_path / "g")[0]["params"]["model_files"]
    assert files["model"]["file"] == "cotrained-map-fundus64.pt" and files["model"]["chosen"] == "default for fundus"
    assert files["identity"]["file"] == "identity-fundus64.pt"
    medanon.anonymize.vs_snow(ds, p=0.3).save(tmp_path / "v", progress=False)
    files = read_release(tmp_path / "v")[0]["params"]["model_files"]
    assert [f["file"] for f in files.values()] == ["unet-vessels64.pt"]


def test_the_cli_records_the_model_files_it_used_as_the_api_does(tmp_path):
    """A release made by the command names its models in ``params.model_files`` with why each was used, as one made
    from Python does (before, k-Centroid, k-SALSA, GAN-Inverted and GMIA made by the command recorded none, and
    DP-GLOW called its default flow "given")."""
    from click.testing import CliRunner

    from medanon.cli import cli
    from medanon.config import PhantomConfig
    from medanon.phantoms.generate import generate
    from medanon.release import read_release

    fundus = generate(PhantomConfig(patients=6, per_patient=1, size=64, workers=1), tmp_path / "f", progress=False)
    xray = generate(PhantomConfig(modality="xray", patients=3, per_patient=1, size=64, workers=1, seed=7),
                    tmp_path / "x", progress=False)
    runs = {"kc": (["kcentroid", str(fundus), "--k", "3"],
                   {"codec": ("restyle-map-fundus64.pt", "default for fundus")}),
            "inv": (["inverted", str(fundus), "--model", "restyle-map-fundus64"],
                    {"codec": ("restyle-map-fundus64.pt", "given")}),
            "g": (["gmia", str(fundus), "--steps", "1", "--identity", "identity-fundus64"],
                  {"model": ("cotrained-map-fundus64.pt", "default for fundus"),
                   "identity": ("identity-fundus64.pt", "given"),
                   "utility": ("classifier-grade-fundus64.pt", "default for fundus")}),
            "dp": (["dpglow", str(xray), "--epsilon", "100"], {"flow": ("glow-xray64.pt", "default for xray")})}
    for out, (args, want) in runs.items():
        r = CliRunner().invoke(cli, ["anonymize", *args, "--out", str(tmp_path / out)])
        assert r.exit_code == 0, r.output
        files = read_release(tmp_path / out)[0]["params"]["model_files"]
        assert {k: (v["file"], v["chosen"]) for k, v in files.items()} == want, out


def test_the_shipped_table_is_the_checkpoints_folder_and_names_a_copy_anywhere(tmp_path, monkeypatch):
    """The digests of medanon's public checkpoints (medanon.models_shipped) are those of checkpoints/*.pt; a copy
    installed elsewhere under another name is recognised as the shipped one, an edited file is not."""
    import shutil

    from medanon.models_shipped import SHIPPED

    if not SOURCE_CHECKPOINTS.is_dir():
        pytest.skip("no source checkout")
    now = {p.name: sha256_file(p) for p in sorted(SOURCE_CHECKPOINTS.glob("*.pt"))}
    assert SHIPPED == now, "a checkpoint was retrained or added: update src/medanon/models_shipped.py to " + repr(now)
    from medanon.outputs import SHIPPED_MAX_BYTES  # the replace guard hashes files up to that size

    assert max(p.stat().st_size for p in SOURCE_CHECKPOINTS.glob("*.pt")) < SHIPPED_MAX_BYTES
    readme = (SOURCE_CHECKPOINTS / "README.md").read_text()
    table = dict(re.findall(r"^\| `([\w.-]+\.pt)` \| `([0-9a-f]{64})` \|$", readme, re.M))
    assert table == now, "update the checksum table of checkpoints/README.md"
    mine = tmp_path / "models"
    mine.mkdir()
    shutil.copy(SOURCE_CHECKPOINTS / "unet-vessels64.pt", mine / "my-segmenter.pt")
    edited = mine / "edited.pt"
    edited.write_bytes((SOURCE_CHECKPOINTS / "unet-vessels64.pt").read_bytes() + b"\0")
    monkeypatch.setenv(ENV, str(mine))
    found = {m.name: m for m in list_models() if m.path.parent == mine}
    assert found["my-segmenter.pt"].shipped == "unet-vessels64.pt" and found["edited.pt"].shipped is None
    r = CliRunner().invoke(cli, ["models"])
    assert r.exit_code == 0 and "shipped (public): unet-vessels64.pt" in r.output
    assert "not a shipped checkpoint" in r.output
    mine_card = _entry(r.output, "my-segmenter.pt")                 # the copy has the shipped file's card
    assert "trained on:" in mine_card and "quality:" in mine_card
    listed = {m["name"]: m for m in json.loads(CliRunner().invoke(cli, ["models", "--json"]).output)["models"]}
    assert listed["my-segmenter.pt"]["card"] is not None and listed["edited.pt"]["card"] is None

    # a dangling link among them is listed as such; the others are still listed
    (mine / "dangling.pt").symlink_to(tmp_path / "nowhere.pt")
    found = {m.name: m for m in list_models() if m.path.parent == mine}
    assert found["dangling.pt"].kind.startswith("unreadable: a link to") and found["dangling.pt"].shipped is None
    r = CliRunner().invoke(cli, ["models"])
    assert r.exit_code == 0 and "does not exist" in r.output and "my-segmenter.pt" in r.output


def test_a_default_found_by_name_is_called_shipped_only_when_it_is(tmp_path, monkeypatch, capsys):
    """A command that falls back to the modality's default says "the shipped ..." only for the public file, by
    digest: a user's retrained file under the shipped name is named by its path, as not the shipped one."""
    import shutil

    from medanon.cli.models import shipped_default

    if not SOURCE_CHECKPOINTS.is_dir():
        pytest.skip("no source checkout")
    mine = tmp_path / "models"
    mine.mkdir()
    monkeypatch.setenv(ENV, str(mine))
    shutil.copy(SOURCE_CHECKPOINTS / "restyle-map-fundus64.pt", mine / "restyle-map-fundus64.pt")
    assert shipped_default(tmp_path, {"modality": "fundus"}, "ksame-codec", flag="--model", method="inverted") \
        == mine / "restyle-map-fundus64.pt"
    assert "--model: restyle-map-fundus64.pt, the shipped" in capsys.readouterr().err
    with open(mine / "restyle-map-fundus64.pt", "ab") as f:               # the user's own file of that name
        f.write(b"\0")
    shipped_default(tmp_path, {"modality": "fundus"}, "ksame-codec", flag="--model", method="inverted")
    said = " ".join(capsys.readouterr().err.split())
    assert f"--model: {mine / 'restyle-map-fundus64.pt'}, the k-Same codec for fundus data by its name, but not " \
           "the shipped file" in said and "the shipped k-Same" not in said


def test_a_file_that_is_no_checkpoint_is_not_called_a_default(tmp_path, monkeypatch):
    """A junk file named like the shipped codec, first on the path, was listed as its role's DEFAULT; the methods
    refuse it, and the listing now says so."""
    (tmp_path / "restyle-map-fundus64.pt").write_text("junk\n")
    monkeypatch.setenv(ENV, str(tmp_path))
    r = CliRunner().invoke(cli, ["models"])
    entry = _entry(r.output, str(tmp_path / "restyle-map-fundus64.pt"))
    assert r.exit_code == 0
    assert "but it is not a medanon checkpoint: the methods refuse it" in entry
    assert not re.search(r"^\s+DEFAULT for", entry, re.M)


def test_loaders_take_a_models_name_and_a_loaded_model_is_recorded_as_loaded(tmp_path):
    """``load_codec("restyle-map-fundus64")`` finds the model as the methods do; a release made with a loaded codec
    names the file it was loaded from in ``params.model_files`` (chosen: loaded), as one made from its name does."""
    import torch

    import medanon
    from medanon.codecs.stylegan import load_codec
    from medanon.errors import DataError

    if not SOURCE_CHECKPOINTS.is_dir():
        pytest.skip("no source checkout")
    codec = load_codec("restyle-map-fundus64")
    assert Path(codec.provenance["checkpoint"]["path"]).name == "restyle-map-fundus64.pt"
    with pytest.raises(DataError, match="not on medanon's model search path"):
        load_codec("no-such-model")
    from medanon.errors import ConfigError

    with pytest.raises(ConfigError, match=r"checkpoint restyle-map-fundus64\.pt does not exist"):
        load_codec("restyle-map-fundus64.pt")     # a missing file here is never another folder's model
    x = torch.rand(4, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with pytest.warns(medanon.WeakSetting):
        rel = medanon.anonymize.kcentroid(x, k=2, patient_ids=[0, 0, 1, 1], value_range=(-1, 1), codec=codec)
    assert rel.params["model_files"] == {"codec": {"file": "restyle-map-fundus64.pt", "chosen": "loaded"}}


def test_a_search_path_entry_that_is_a_file_is_said_to_be_one(tmp_path, monkeypatch):
    """`MEDANON_MODELS=some.pt` (a file, where folders are searched) was listed as "(missing)"."""
    from click.testing import CliRunner

    from medanon.cli import cli

    (tmp_path / "one.pt").write_bytes(b"x")
    monkeypatch.setenv(ENV, str(tmp_path / "one.pt"))
    r = CliRunner().invoke(cli, ["models"])
    assert r.exit_code == 0 and "one.pt  (a file, not a folder: searched for nothing)" in r.output, r.output
