"""The library speaks in parameters, the command line in flags (docs/design.md §3, issue 16.3).

The same mistake made through ``medanon.anonymize.<method>(...)`` and through ``medanon anonymize
<method>`` gives the same error, named ``k=`` in Python and ``--k`` at the command line
(:func:`medanon.cli.library.translate`); and no error or warning raised by the library's
anonymisation and segmentation modules names a command-line flag.
"""

import ast
import re
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import medanon
from medanon.cli import cli
from medanon.cli.library import translate
from medanon.errors import ConfigError, DataError, MedanonError

SIZE = 32
SRC = Path(medanon.__file__).parent
FLAG = re.compile(r"(?<![\w-])--[a-z]")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = medanon.make_phantom(tmp_path_factory.mktemp("words") / "fundus", patients=6, per_patient=2, size=SIZE,
                                seed=3)
    return root, medanon.open_dataset(root, size=SIZE)


def _library_error(call) -> MedanonError:
    with warnings.catch_warnings(), pytest.raises(MedanonError) as e:
        warnings.simplefilter("ignore")
        call()
    assert not FLAG.search(str(e.value)), f"a library error names a flag: {e.value}"
    return e.value


def _cli_error(args: list[str]) -> str:
    r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", *args])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    return " ".join(r.output.split())


def test_ksame_names_k_in_python_and_the_flag_at_the_command_line(tmp_path, data):
    root, ds = data
    e = _library_error(lambda: medanon.anonymize.kpixel(ds, k=50).save(tmp_path / "py", progress=False))
    assert isinstance(e, DataError) and "k=50" in str(e) and "lower k= or add data" in str(e)
    out = _cli_error(["kpixel", str(root), "--size", str(SIZE), "--k", "50", "--out", str(tmp_path / "cli")])
    assert "--k 50" in out and "lower --k or add data" in out and "k=" not in out
    e = _library_error(lambda: medanon.anonymize.kpixel(ds, k=5, stratify="sex").save(tmp_path / "py2",
                                                                                   progress=False))
    assert "pass drop_remainder=True" in str(e) and "without stratify=" in str(e)
    out = _cli_error(["kpixel", str(root), "--size", str(SIZE), "--k", "5", "--stratify", "sex", "--out",
                      str(tmp_path / "cli2")])
    assert "pass --drop-remainder to leave them out, lower --k, or cluster without --stratify" in out


def test_snow_names_fill_and_masks_dir_in_python_and_the_flags_at_the_command_line(tmp_path, data):
    root, ds = data
    e = _library_error(lambda: medanon.anonymize.snow(ds, p=0.2, fill="value:1,2"))
    assert isinstance(e, ConfigError) and "fill='value:1,2'" in str(e) and "fill='value:128,64,32'" in str(e)
    out = _cli_error(["snow", str(root), "--size", str(SIZE), "--p", "0.2", "--fill", "value:1,2", "--out",
                      str(tmp_path / "s")])
    assert "--fill 'value:1,2'" in out and "e.g. --fill 'value:128,64,32'" in out and "fill=" not in out
    e = _library_error(lambda: medanon.anonymize.vs_snow(ds, p=0.2, vessels="files"))
    assert "masks_dir= goes with vessels='files'" in str(e)
    out = _cli_error(["vs-snow", str(root), "--size", str(SIZE), "--p", "0.2", "--vessels", "files", "--out",
                      str(tmp_path / "v")])
    assert "--masks goes with --vessels 'files'" in out and "masks_dir" not in out
    out = _cli_error(["snow", str(root), "--size", str(SIZE), "--out", str(tmp_path / "n")])   # p is required
    assert "no p given" in out and "give --p, e.g. --p 0.1" in out


def test_dp_names_clip_and_epsilon_in_python_and_the_flags_at_the_command_line(tmp_path, data):
    root, ds = data
    e = _library_error(lambda: medanon.anonymize.ldp_image(ds, epsilon=10.0, clip=False))
    assert "clip=False is only allowed with epsilon=inf" in str(e)
    out = _cli_error(["ldp-image", str(root), "--size", str(SIZE), "--epsilon", "10", "--no-clip", "--out",
                      str(tmp_path / "d")])
    assert "--no-clip is only allowed with --epsilon inf" in out and "clip=" not in out


def test_gmia_names_margin_in_python_and_the_flag_at_the_command_line(tmp_path, data):
    root, ds = data
    e = _library_error(lambda: medanon.anonymize.gmia(ds, model="unused.pt", margin=1.5))
    assert "margin=1.5" in str(e) and "e.g. margin=0" in str(e)
    (tmp_path / "model.pt").write_bytes(b"")                 # the config is checked before any network is loaded
    out = _cli_error(["gmia", "--data", str(root), "--size", str(SIZE), "--model", str(tmp_path / "model.pt"),
                      "--margin", "1.5", "--out", str(tmp_path / "g")])
    assert "--margin 1.5" in out and "e.g. --margin 0" in out


def test_translate_names_a_bare_parameter_as_its_flag():
    flags = {"give p=": "give --p", "p=": "--p ", "masks_dir=": "--masks ", "k=": "--k "}
    assert translate("p=1.5 must be in (0, 1]; give p=, e.g. p=0.1", flags) == \
        "--p 1.5 must be in (0, 1]; give --p, e.g. --p 0.1"
    assert translate("pass masks_dir=, or lower k= (or drop=3, ok=1)", flags) == \
        "pass --masks, or lower --k (or drop=3, ok=1)"


def _raised_strings(path: Path) -> list[tuple[int, str]]:
    """The string parts of every ``raise X(...)`` and ``warnings.warn(...)`` in a module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        call = node.exc if isinstance(node, ast.Raise) else node
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                                           and node.func.attr == "warn"):
            for sub in ast.walk(call) if call is not None else ():
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    out.append((sub.lineno, sub.value))
    return out


# Options of other programs a message may name: pip's and torchrun's, not medanon's.
OTHER_PROGRAMS = re.compile(r"pip install|torchrun")
LIBRARY = ["anonymize", "segment", "release", "evaluate", "data", "train", "codecs", "models", "phantoms", "api", "."]


@pytest.mark.parametrize("package", LIBRARY)
def test_library_errors_and_warnings_name_no_flags(package):
    """Every raise and warning outside medanon.cli, in every package of the library and its top-level modules."""
    files = sorted((SRC / package).glob("*.py")) if package == "." else sorted((SRC / package).rglob("*.py"))
    found = [f"{p.relative_to(SRC)}:{line}: {text!r}" for p in files
             for line, text in _raised_strings(p) if FLAG.search(text) and not OTHER_PROGRAMS.search(text)]
    assert not found, "\n".join(found)


def test_an_epsilon_beyond_a_floats_range_is_refused_not_read_as_no_noise(tmp_path, data):
    root, _ = data
    for text, said in (("1e400", "'1e400' is beyond a float's range"), ("ten", "'ten' is not a number")):
        r = CliRunner().invoke(cli, ["--device", "cpu", "anonymize", "ldp-image", str(root), "--size", str(SIZE),
                                     "--epsilon", text, "--out", str(tmp_path / "d")])
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "Traceback" not in out and said in out and "--epsilon" in out, out
        assert not (tmp_path / "d").exists()
