"""``medanon generate``: samples of a trained generator as PNGs (issue 12)."""

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from PIL import Image

from medanon.cli import cli

CKPT = Path(__file__).resolve().parents[1] / "checkpoints"


def _run(*args):
    return CliRunner().invoke(cli, ["generate", *map(str, args)])


def test_generate_writes_n_reproducible_samples_and_a_grid(tmp_path):
    r = _run("--model", CKPT / "stylegan2-fundus64.pt", "--n", 5, "--out", tmp_path / "a", "--seed", 3)
    assert r.exit_code == 0, r.output
    files = sorted((tmp_path / "a" / "images").iterdir())
    assert len(files) == 5 and Image.open(files[0]).size == (64, 64) and Image.open(files[0]).mode == "RGB"
    assert Image.open(tmp_path / "a" / "grid.png").size == (3 * 64, 2 * 64)
    man = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert man["seed"] == 3 and man["n"] == 5 and len(man["model_sha256"]) == 64
    r = _run("--model", CKPT / "stylegan2-fundus64.pt", "--n", 5, "--out", tmp_path / "b", "--seed", 3)
    assert r.exit_code == 0, r.output
    again = sorted((tmp_path / "b" / "images").iterdir())
    for x, y in zip(files, again, strict=True):
        assert np.array_equal(np.asarray(Image.open(x)), np.asarray(Image.open(y)))
    first = [np.asarray(Image.open(f), np.int16) for f in files]
    assert max(np.abs(first[0] - f).max() for f in first[1:]) > 10          # different latents, different images


def test_a_model_is_given_by_name_as_everywhere(tmp_path):
    """`medanon models` says a model is given by name or path: generate takes its name too (the same images)."""
    r = _run("--model", "stylegan2-fundus64", "--n", 2, "--out", tmp_path / "byname", "--seed", 3)
    assert r.exit_code == 0, r.output
    r = _run("--model", CKPT / "stylegan2-fundus64.pt", "--n", 2, "--out", tmp_path / "bypath", "--seed", 3)
    for name in ("000000.png", "000001.png"):
        a, b = (np.asarray(Image.open(tmp_path / d / "images" / name)) for d in ("byname", "bypath"))
        assert np.array_equal(a, b)
    r = _run("--model", "no-such-model", "--n", 2, "--out", tmp_path / "none")
    assert r.exit_code == 2 and "neither a file nor a model on the search path" in r.output


def test_truncation_zero_gives_the_average_image_every_time(tmp_path):
    r = _run("--model", CKPT / "cotrained-fundus64.pt", "--n", 3, "--out", tmp_path / "t", "--truncation", 0,
             "--noise", "const")                                       # random noise differs per image
    assert r.exit_code == 0, r.output
    imgs = [np.asarray(Image.open(f), np.int16) for f in sorted((tmp_path / "t" / "images").iterdir())]
    assert all(np.array_equal(imgs[0], im) for im in imgs[1:])


def test_generate_refuses_existing_output_and_wrong_checkpoints(tmp_path, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "x.txt").write_text("keep")
    r = _run("--model", CKPT / "stylegan2-fundus64.pt", "--n", 2, "--out", tmp_path / "mine", "--overwrite")
    assert r.exit_code != 0 and "not written by medanon" in r.output
    assert (tmp_path / "mine" / "x.txt").read_text() == "keep"
    (tmp_path / "rel").mkdir()                                  # another kind of medanon output: refused at once
    from medanon.output_inventory import write_marker

    write_marker(tmp_path / "rel", "release")
    import medanon.sampling

    def never(*a, **k):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(medanon.sampling, "load_any_generator", never)
    r = _run("--model", CKPT / "stylegan2-fundus64.pt", "--n", 2, "--out", tmp_path / "rel", "--overwrite")
    assert r.exit_code != 0 and "is a medanon release folder, not a samples folder" in r.output, r.output
    monkeypatch.undo()
    r = _run("--model", CKPT / "identity-fundus64.pt", "--n", 2, "--out", tmp_path / "id")
    assert r.exit_code != 0 and "identity" in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert not (tmp_path / "id").exists()


def test_more_samples_than_memory_holds_are_refused_before_any_is_drawn(tmp_path, monkeypatch):
    """All samples are held until written: a huge n ended in an allocator traceback asking for 512 GB."""
    import medanon.runtime as runtime

    monkeypatch.setattr(runtime, "physical_memory", lambda: 2**20)          # a 1 MiB machine
    r = _run("--model", CKPT / "stylegan2-fundus64.pt", "--n", 100, "--out", tmp_path / "g")
    assert r.exit_code == 1 and "held in memory until they are written" in r.output and "ask for at most" in r.output
    assert not (tmp_path / "g").exists()
