"""Evaluation speed: the utility classifiers, which dominate `medanon evaluate` on a CPU. Prints one JSON line.

Times, in one run and alternating rounds, the evaluation's two utility seeds of the "small" ResNet
(`EvalConfig.fast()`: 150 steps of 32 images at 64 px, 560 random images) trained one after the other
with all torch threads, and side by side with one thread each (`map_in_parallel`, what the harness
does on a CPU); and one classifier fed channels-first vs channels-last input (the ResNet converts
to channels-last itself, so "channels-first" here forces the old layout inside the network); and the FID
Inception-v3 on 50 images of 64 px: the shipped eager network (batch norms folded, channels-last) against the
TorchScript file's own code with channels-last and channels-first weights and input, with the largest feature
differences (``--inception-only`` runs just that part).

    python benchmarks/evaluation.py [--rounds 2] [--threads 2] [--inception-only]
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
from medanon.models.features.inception import _BODY as BODY
from medanon.runtime import map_in_parallel
from medanon.train.classifier import train_classifier


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


def inception_layouts(rounds: int) -> dict:
    """CPU seconds of the FID Inception on 50 images: the shipped eager body (batch norms folded, channels-last)
    against the TorchScript file's own code with channels-last and with channels-first weights and input, and the
    largest difference of each from the file's channels-first 2048-d features."""
    from medanon.models.features import get_feature_network

    net = get_feature_network("inception", device="cpu")
    x = torch.rand(50, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    first = torch.jit.load(net.describe()["weights_file"], map_location="cpu").eval()   # as loaded: channels-first
    last = torch.jit.load(net.describe()["weights_file"], map_location="cpu").eval()
    last = last.to(memory_format=torch.channels_last)

    def file_code(module: torch.nn.Module, layout: torch.memory_format):
        def run(images: torch.Tensor) -> torch.Tensor:
            z = net.preprocess(images).contiguous(memory_format=layout)
            for name in BODY:
                z = getattr(module.net.layers, name)(z)
            return module.net.layers.pool2(z).flatten(1)
        return run

    runs = {"eager": net.embed, "file_channels_last": file_code(last, torch.channels_last),
            "file_channels_first": file_code(first, torch.contiguous_format)}
    cpu: dict[str, list[float]] = {f"{k}_cpu_s": [] for k in runs}
    feats = {}
    with torch.no_grad():
        for fn in runs.values():
            fn(x[:2])                                   # warm-up
        for _ in range(rounds):
            for name, fn in runs.items():
                c = time.process_time()
                feats[name] = torch.cat([fn(x[i:i + 32]) for i in range(0, len(x), 32)])
                cpu[f"{name}_cpu_s"].append(time.process_time() - c)
    med = {k: float(np.median(v)) for k, v in cpu.items()}
    ref = feats["file_channels_first"]
    return {**{k: [round(t, 2) for t in v] for k, v in cpu.items()},
            "eager_speedup_vs_file_channels_last": round(med["file_channels_last_cpu_s"] / med["eager_cpu_s"], 2),
            "eager_speedup_vs_file_channels_first": round(med["file_channels_first_cpu_s"] / med["eager_cpu_s"], 2),
            "max_abs_feature_diff": {k: float((feats[k] - ref).abs().max()) for k in ("eager", "file_channels_last")}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--inception-only", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    inception = inception_layouts(args.rounds)
    if args.inception_only:
        result = {"benchmark": "evaluation", "threads": args.threads, "rounds": args.rounds, "inception": inception}
        print(json.dumps(result))
        return result
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
                                             / med["one_classifier_channels_last_s"], 2),
              "inception": inception}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
