"""Evaluation speed: the utility classifiers, which dominate `medanon evaluate` on a CPU. Prints one JSON line.

Times, in one run and alternating rounds, the evaluation's two utility seeds of the "small" ResNet
(`EvalConfig.fast()`: 150 steps of 32 images at 64 px, 560 random images) trained one after the other
with all torch threads, and side by side with one thread each (`map_in_parallel`, what the harness
does on a CPU); and one classifier fed channels-first vs channels-last input (the ResNet converts
to channels-last itself, so "channels-first" here forces the old layout inside the network).

    python benchmarks/evaluation.py [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import torch

from medanon.evaluate.config import EvalConfig
from medanon.models import classifier as classifier_module
from medanon.train.classifier import map_in_parallel, train_classifier


@contextmanager
def channels_first():
    """Run the ResNet on channels-first tensors (the layout before the channels-last change)."""
    original = classifier_module.ResNet.features

    def features(self, x):
        return self.stages(self.stem(x.contiguous())).mean(dim=(2, 3))

    classifier_module.ResNet.features = features
    try:
        yield
    finally:
        classifier_module.ResNet.features = original


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = EvalConfig.fast(size=64).utility.classifier
    g = torch.Generator().manual_seed(0)
    x = torch.rand(560, 3, 64, 64, generator=g) * 2 - 1
    y = np.random.default_rng(0).integers(0, 5, 560)

    def train(seed: int):
        return train_classifier(x, y, num_classes=5, cfg=replace(cfg, seed=seed), device="cpu")

    times: dict[str, list[float]] = {"seeds_sequential_s": [], "seeds_side_by_side_s": [],
                                     "one_classifier_channels_first_s": [], "one_classifier_channels_last_s": []}
    for _ in range(args.rounds):
        t = time.perf_counter()
        for seed in (0, 1):
            train(seed)
        times["seeds_sequential_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        map_in_parallel(train, [0, 1])
        times["seeds_side_by_side_s"].append(time.perf_counter() - t)
        with channels_first():
            t = time.perf_counter()
            train(0)
            times["one_classifier_channels_first_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        train(0)
        times["one_classifier_channels_last_s"].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    result = {"benchmark": "evaluation", "threads": args.threads, "rounds": args.rounds,
              "classifier": {"steps": cfg.steps, "batch": cfg.batch, "image_size": cfg.image_size},
              **{k: [round(t, 2) for t in v] for k, v in times.items()},
              "side_by_side_speedup": round(med["seeds_sequential_s"] / med["seeds_side_by_side_s"], 2),
              "channels_last_speedup": round(med["one_classifier_channels_first_s"]
                                             / med["one_classifier_channels_last_s"], 2)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
