"""Clusters per batch: the device's default, and batches halved when a device runs out of memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import medanon
from medanon.anonymize import ksame
from medanon.anonymize.averaging import CPU_CLUSTER_BATCH, GPU_CLUSTER_BATCH, batches_within_memory, resolve_batch
from medanon.config import PhantomConfig
from medanon.phantoms.generate import generate


def test_the_default_batch_follows_the_device_and_the_image_size():
    assert resolve_batch(0, "cpu") == resolve_batch(0, "cpu", 64) == CPU_CLUSTER_BATCH == 32
    assert [resolve_batch(0, "cpu", s) for s in (32, 128, 256, 512, 1024)] == [128, 8, 2, 1, 1]
    assert resolve_batch(0, torch.device("cuda"), 512) == GPU_CLUSTER_BATCH == 64   # a device object: no GPU needed
    assert resolve_batch(3, torch.device("cuda")) == resolve_batch(3, "cpu", 512) == 3   # a batch given is kept


def test_items_are_shared_evenly_between_the_fewest_batches():
    def sizes(n: int, batch: int) -> list[int]:
        got = list(batches_within_memory(list(range(n)), batch, len, what="ksalsa"))
        assert [i for chunk, _, _ in got for i in chunk] == list(range(n))     # every item once, in order
        return [r for _, r, _ in got]

    assert sizes(70, 32) == [24, 24, 22]
    assert sizes(64, 32) == [32, 32] and sizes(5, 32) == [5] and sizes(1, 1) == [1] and sizes(0, 8) == []
    assert sizes(9, 8) == [5, 4]


def test_a_batch_out_of_memory_is_halved_and_every_item_runs_once():
    sizes = []

    def run(chunk):
        sizes.append(len(chunk))
        if len(chunk) > 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return sum(chunk)

    with pytest.warns(RuntimeWarning) as seen:
        got = list(batches_within_memory(list(range(9)), 8, run, what="ksalsa"))
    assert [str(w.message) for w in seen] == ["ksalsa: out of device memory with 5 per batch; continuing with 2",
                                              "ksalsa: out of device memory with 2 per batch; continuing with 1"]
    assert [c for c, _, _ in got] == [[i] for i in range(9)]
    assert [r for _, r, _ in got] == list(range(9)) and {b for _, _, b in got} == {1}
    assert sizes == [5, 2] + [1] * 9

    def never(chunk):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    with pytest.raises(torch.OutOfMemoryError), pytest.warns(RuntimeWarning):
        list(batches_within_memory([1, 2], 2, never, what="ksalsa"))           # one item that does not fit: raised


def test_a_release_that_runs_out_of_memory_finishes_with_the_same_images(tmp_path: Path, monkeypatch):
    data = generate(PhantomConfig(patients=13, per_patient=2, size=32, workers=1, seed=3), tmp_path / "fundus",
                    progress=False)
    ds = medanon.open_dataset(data, size=32)
    medanon.anonymize.kpixel(ds, k=2, batch=2).save(tmp_path / "b2", mapping=tmp_path / "b2.json")
    real = ksame.ClusterAverager.__call__

    def small_memory(self, clusters, weights, keys):
        if len(clusters) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, clusters, weights, keys)

    monkeypatch.setattr(ksame.ClusterAverager, "__call__", small_memory)
    rel = medanon.anonymize.kpixel(ds, k=2, batch=8)
    with pytest.warns(RuntimeWarning, match="out of device memory with 6 per batch; continuing with 3"):
        rel.save(tmp_path / "b8", mapping=tmp_path / "b8.json")
    assert rel.summary["clusters_per_batch"] == 1 and rel.summary["clusters"] == 6
    def images(folder: Path) -> list[bytes]:                    # record names are random: compare the images
        return sorted(np.asarray(Image.open(p)).tobytes() for p in folder.rglob("*.png"))

    assert len(images(tmp_path / "b2")) == 6 and images(tmp_path / "b2") == images(tmp_path / "b8")
