"""Anonymisation sharded over processes (``torchrun``; ``medanon.release.sharded``) on CPU with gloo.

Two processes are forked and join a gloo group through the environment torchrun sets; each saves the
same releases through the library (each process computes a disjoint share, rank 0 writes the one
release). The one-process references are saved in the test process. test_api's 32 px phantom (12
patients, 24 images) and tiny random models.
"""

from __future__ import annotations

import json
import os
import socket
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from PIL import Image
from test_api import SIZE, world  # noqa: F401 (the fixture: a 32 px phantom and tiny models of every kind)

import medanon
from medanon.errors import ConfigError
from medanon.release import ReleaseWriter, read_release
from medanon.release.sharded import ShardWriter
from medanon.train.distributed import Dist

METHODS = ("ksalsa", "kcentroid", "inverted", "gmia", "dpglow")


def plan(method: str, d: Path):
    """The release of ``method`` on the phantom in ``d`` (the same plan in every process)."""
    ds, a = medanon.open_dataset(d / "fundus", size=SIZE), medanon.anonymize
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # k < 5, inverted, seeded noise: asserted elsewhere
        return {"ksalsa": lambda: a.ksalsa(ds, k=3, codec=d / "restyle.pt", steps=2, batch=2),
                "kcentroid": lambda: a.kcentroid(ds, k=3, codec=d / "restyle.pt", views=2),
                "inverted": lambda: a.inverted(ds, codec=d / "restyle.pt"),
                "gmia": lambda: a.gmia(ds, model=d / "restyle.pt", identity=d / "identity.pt", utility=d / "grade.pt",
                                       steps=2, batch=8),
                "dpglow": lambda: a.dpglow(ds, epsilon=500.0, flow=d / "flow.pt", noise_seed=7)}[method]()


def _save(method: str, d: Path, out: Path):
    rel = plan(method, d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel.save(out, mapping=out.with_suffix(".json"), progress=False)
    return rel


class _Stop(Exception):
    pass


def _worker(rank: int, nprocs: int, port: int, root: str) -> None:
    d = Path(root)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(nprocs), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(nprocs),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    summaries = {m: _save(m, d, d / "two" / m).summary for m in METHODS}
    real_add = ShardWriter.add

    def stop_after_one(self, key, image, sources):          # every process stops after its first record
        if self.written:
            raise _Stop
        return real_add(self, key, image, sources)

    ShardWriter.add = stop_after_one
    try:
        _save("inverted", d, d / "two" / "stopped")
    except _Stop:
        pass
    if rank == 0:
        (d / "two" / "summaries.json").write_text(json.dumps(summaries))


def _records(out: Path) -> dict[tuple[str, ...], list[np.ndarray]]:
    """sources -> the record images (0..255) standing for them, from the private mapping."""
    recs: dict[tuple[str, ...], list[np.ndarray]] = {}
    for name, r in json.loads(out.with_suffix(".json").read_text())["records"].items():
        recs.setdefault(tuple(sorted(r["sources"])), []).append(np.asarray(Image.open(out / name), np.int16))
    return recs


@pytest.fixture(scope="module")
def two(world) -> Path:  # noqa: F811 (test_api's fixture)
    """test_api's phantom and tiny models; the releases two forked processes saved from them."""
    d = world["dir"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_worker, args=(2, port, str(d)), nprocs=2, join=True, start_method="fork")
    return d


@pytest.mark.parametrize("method", METHODS)
def test_two_processes_write_the_one_process_release(two: Path, tmp_path: Path, method: str):
    d, two, one = two, two / "two" / method, tmp_path / method
    _save(method, d, one)
    a, b = _records(one), _records(two)
    assert a.keys() == b.keys()                  # the same records: each stands for the same sources
    assert sorted(map(len, a.values())) == sorted(map(len, b.values()))
    if method != "kcentroid":                    # kcentroid's second view is secret noise: differs by design
        diff = max(int(np.abs(x[0] - y[0]).max()) for x, y in zip(a.values(), (b[k] for k in a), strict=True))
        assert diff <= 1                         # float summation order (batches of other sizes), then rounding
    m1, m2 = read_release(one)[0], read_release(two)[0]
    assert m1["counts"] == m2["counts"] and m1["params"] == m2["params"]
    assert {k: v for k, v in m1["privacy"].items() if k != "optimisation_outcome"} == \
           {k: v for k, v in m2["privacy"].items() if k != "optimisation_outcome"}
    if method == "gmia":                         # the outcome covers every process's images
        assert m2["privacy"]["optimisation_outcome"]["images"] == len(a)
    summary = json.loads((d / "two" / "summaries.json").read_text())[method]
    if method != "gmia":                         # gmia saves through its module; the others through Release.save
        written = [p["written"] for p in summary["per_process"]]
        assert summary["processes"] == 2 and sum(written) == m2["counts"]["records"] and min(written) > 0
    left = sorted(p.name for p in two.iterdir())                 # no journal left
    assert left == [".medanon-output.json", "images", "labels.csv", "manifest.json"]
    assert medanon.audit(two, source=medanon.open_dataset(d / "fundus", size=SIZE),
                         mapping=two.with_suffix(".json")).passed


def test_an_interrupted_job_resumes_in_one_process(two: Path, tmp_path: Path):
    d, stopped = two, two / "two" / "stopped"
    partial = stopped.with_name("stopped.partial")
    assert not stopped.exists() and (partial / ".journal.rank1.jsonl").is_file()
    rel = _save("inverted", d, stopped)      # one process takes both processes' records in, computes the rest
    assert rel.summary["resumed_records"] == 2 and not partial.exists()
    ref = _save("inverted", d, tmp_path / "ref")
    a, b = _records(tmp_path / "ref"), _records(stopped)
    assert a.keys() == b.keys() and len(b) == ref.summary["records"]
    assert max(int(np.abs(a[k][0] - b[k][0]).max()) for k in a) <= 1


def test_shares_are_disjoint_and_keep_a_clusters_views_together(tmp_path: Path):
    keys = ["ca/0", "ca/1", "cb/0", "cb/1", "r1", "r2", "r3"]
    owners = []
    for rank in range(2):
        w = ShardWriter(Dist(rank=rank, world_size=2), partial=tmp_path, settings={"labels": []}, privacy={},
                        resumed={"r3": {}}, head_line="{}\n")
        owners.append([k for k in keys if not w.done(k)])
    assert owners == [["ca/0", "ca/1", "r1"], ["cb/0", "cb/1", "r2"]]    # r3 is in the release already


def test_a_release_written_from_one_process_only_refuses_torchrun(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match="one process only"):
        ReleaseWriter(tmp_path / "rel", method="snow", params={}, privacy={}, labels=[])
    assert not (tmp_path / "rel.partial").exists()
