"""Images a labels CSV names outside the dataset folder are inputs too: no command writes into the folder that
holds them, whichever way the data is given (a generic layout whose CSV lies beside the images; the CLI and the
library). Every refusal comes before any work and leaves the image folder as it was."""

import csv
import shutil
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import medanon
from medanon.cli import cli
from medanon.config import PhantomConfig
from medanon.outputs import UnsafeOutputError
from medanon.phantoms.generate import generate

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    """An empty dataset folder ``ds`` whose labels CSV, in ``meta/``, names images in ``meta/imgs``; a k = 2
    release of it with its mapping."""
    root = tmp_path_factory.mktemp("elsewhere")
    phantom = generate(PhantomConfig(patients=6, per_patient=2, size=32, workers=1), root / "phantom", progress=False)
    imgs = root / "meta" / "imgs"
    shutil.copytree(phantom / "images", imgs)
    (root / "ds").mkdir()
    with open(root / "meta" / "labels.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "patient", "grade"])
        for i, p in enumerate(sorted(imgs.iterdir())):
            w.writerow([f"imgs/{p.name}", p.name.split("_")[0], i % 3])
    layout = ["--layout", "generic", "--labels", root / "meta" / "labels.csv", "--image-col", "file",
              "--patient-col", "patient", "--label-cols", "grade"]
    r = _run("anonymize", "kpixel", root / "ds", *layout, "--k", "2", "--size", "32", "--split", "train",
             "--out", root / "rel", "--mapping", root / "rel.json")
    assert r.exit_code == 0, r.output
    return root, imgs, layout


def _run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), f"traceback: {r.exception!r}\n{r.output}"
    return r


@pytest.mark.parametrize("command", [
    ["data", "split", "{ds}", "{layout}", "--out", "{imgs}/splits.csv"],
    ["train", "classifier", "{ds}", "{layout}", "--size", "16", "--label", "grade", "--steps", "1",
     "--out", "{imgs}/clf.pt"],
    ["train", "flow", "{ds}", "{layout}", "--size", "32", "--config", str(CONFIGS / "glow" / "tiny32.yaml"),
     "--steps", "1", "--batch", "4", "--out", "{imgs}/flow-run"],
    ["evaluate", "--real", "{ds}", "{layout}", "--release", "{root}/rel", "--mapping", "rel={root}/rel.json",
     "--preset", "tiny", "--size", "32", "--out", "{imgs}/report"],
])
def test_no_command_writes_into_the_folder_of_images_named_from_outside(elsewhere, command):
    root, imgs, layout = elsewhere
    before = sorted(p.name for p in imgs.iterdir())
    args = []
    for a in command:
        args += layout if a == "{layout}" else [a.format(ds=root / "ds", imgs=imgs, root=root)]
    r = _run(*args)
    assert r.exit_code != 0 and "is inside the input" in r.output and str(imgs) in r.output, r.output
    assert sorted(p.name for p in imgs.iterdir()) == before


def test_the_library_evaluation_refuses_it_too(elsewhere, tmp_path):
    root, imgs, _ = elsewhere
    from medanon.data.dataset import reading
    from medanon.data.layouts import GenericOptions
    from medanon.evaluate.config import EvalConfig
    from medanon.evaluate.harness import ReleaseSpec
    from medanon.evaluate.harness import evaluate as run_evaluation

    generic = GenericOptions(labels_csv=root / "meta" / "labels.csv", image_col="file", label_cols=("grade",),
                             patient_col="patient")
    ds = medanon.open_dataset(root / "ds", size=32, labels_csv=generic.labels_csv, image_col="file",
                              label_cols="grade", patient_col="patient")
    before = sorted(p.name for p in imgs.iterdir())
    with warnings.catch_warnings(), pytest.raises(UnsafeOutputError, match="is inside the input"):
        warnings.simplefilter("ignore")
        medanon.evaluate(real=ds, releases=[root / "rel"], mappings={"rel": root / "rel.json"}, preset="tiny",
                         out=imgs / "report")
    # the harness (given the folder, read the generic way) checks against the opened dataset before decoding
    with reading(root / "ds", **vars(ds.read_options)), pytest.raises(UnsafeOutputError, match="is inside the input"):
        run_evaluation(root / "ds", [ReleaseSpec(root / "rel", mapping=root / "rel.json")], imgs / "report2",
                       config=EvalConfig.tiny(size=32))
    assert sorted(p.name for p in imgs.iterdir()) == before
