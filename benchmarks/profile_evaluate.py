"""Profile the evaluation on one device: where its time goes (cProfile), run once or several times in one process.

Builds a 64 px fundus phantom (24 patients x 2), splits it, makes a k-Same-Pixel and a k-Same-PCA release at k = 2,
then runs ``medanon evaluate`` (fast preset, no Inception weights) once per ``--run`` and writes each profile
(sorted by cumulative and by own time) to ``OUT/prof-<run>.txt``; prints one JSON line per run. A run is ``cpu``,
``gpu`` (the device as medanon configures it) or ``gpu-nobench`` (the same with cuDNN's per-shape algorithm search
forced off, whatever ``MEDANON_CUDNN_BENCHMARK`` says)::

    python benchmarks/profile_evaluate.py --out prof --run gpu --run gpu-nobench

On one H200 (torch 2.11.0+cu130), before ``cudnn.benchmark`` was turned off by default: ``--run gpu --run
gpu-nobench`` gave 55.5 s (conv2d 18.0 s own time, backward 15.0 s) then 18.0 s (0.7 s, 3.3 s); the first run also
paid about 10 s of first-use imports.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def cli(argv: list[str]) -> None:
    from medanon.cli import cli as main

    code = main.main(args=["-q", *argv], prog_name="medanon", standalone_mode=False)
    if isinstance(code, int) and code:           # a refused command: stop, never profile the refusal
        raise SystemExit(f"medanon {' '.join(argv)} exited {code}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the profiles (created)")
    ap.add_argument("--run", action="append", choices=("cpu", "gpu", "gpu-nobench"), required=True)
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    args = ap.parse_args()
    import torch

    gpu = "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    w = args.work or Path(tempfile.mkdtemp(prefix="medanon-profile-"))
    data = w / "fundus"
    if not data.exists():
        cli(["--device", gpu, "phantom", "--modality", "fundus", "--patients", "24", "--per-patient", "2", "--size",
             "64", "--out", str(data)])
        cli(["data", "split", str(data), "--out", str(w / "splits.csv"), "--val", "0.3", "--test", "0.3"])
        for m in ("kpixel", "kpca"):
            cli(["--device", gpu, "anonymize", m, "--data", str(data), "--k", "2", "--split", "train", "--splits",
                 str(w / "splits.csv"), "--out", str(w / "rel" / m), "--mapping", str(w / "rel" / f"{m}.mapping.json")])
    for i, run in enumerate(args.run):
        dev = "cpu" if run == "cpu" else gpu
        if run == "gpu-nobench":
            from medanon import runtime

            configure = runtime.configure_cuda

            def without_search(configure=configure) -> None:
                configure()
                torch.backends.cudnn.benchmark = False
            runtime.configure_cuda = without_search
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        cli(["--device", dev, "evaluate", "--real", str(data), "--splits", str(w / "splits.csv"), "--release",
             str(w / "rel" / "kpixel"), "--release", str(w / "rel" / "kpca"), "--mapping",
             f"kpixel={w / 'rel' / 'kpixel.mapping.json'}", "--mapping", f"kpca={w / 'rel' / 'kpca.mapping.json'}",
             "--preset", "fast", "--no-inception",
             "--out", str(w / f"report-{i}-{run}")])
        if dev == "cuda":
            torch.cuda.synchronize()
        prof.disable()
        seconds = time.perf_counter() - t0
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("cumulative").print_stats(70)
        stats.sort_stats("tottime").print_stats(40)
        (args.out / f"prof-{i}-{run}.txt").write_text(text.getvalue())
        print(json.dumps({"measure": "evaluate", "run": run, "device": dev, "seconds": round(seconds, 2),
                          "cudnn_benchmark": bool(torch.backends.cudnn.benchmark), "torch": torch.__version__,
                          "device_name": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}), flush=True)


if __name__ == "__main__":
    main()
