"""Run every ``medanon`` command on one device at small size: the first thing to run on a GPU machine.

Prints one JSON line per command: ``{"check", "ok", "seconds", "peak_gpu_mb", "device", "command", "error"}``,
then a summary line (``"check": "summary"``, how many passed, the device's name). Exits 1 if any failed.

The commands are the real CLI (``medanon --device DEV ...``), called in this process so that one CUDA context
serves them all and the peak GPU memory of each can be read (``torch.cuda.max_memory_allocated``); torchrun
runs as a subprocess. What runs: the phantoms and a split; the ten anonymisation methods (k-SALSA and GMIA on
the shipped 64 px models); the seven trainers for a few steps; ``generate``; ``evaluate`` (fast preset, no
Inception weights needed; the tiny preset with ``--tiny``) on the GPU and, for comparison on the same data, on the
CPU; the demo at small size; ``torchrun --nproc_per_node 1 ... train gan`` (NCCL on CUDA, gloo on the CPU).

    python benchmarks/gpu_check.py                    # on a GPU machine (the project + checkpoints: < 60 MB)
    python benchmarks/gpu_check.py --device cpu --tiny   # the CI form: the same commands, fewer images

Each command's output goes to ``WORK/logs/NAME.log``; a command running past ``--stall`` seconds gets its
Python stacks dumped into that log every ``--stall`` seconds (to find where it spends the time).
``--profile NAME`` runs that check under cProfile and writes the 40 most expensive calls to its log.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import faulthandler
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from _scratch import fresh_work  # benchmarks/_scratch.py

ROOT = Path(__file__).resolve().parents[1]
CK = ROOT / "checkpoints"


def checks(w: Path, dev: str, tiny: bool) -> list[tuple[str, list[str]]]:
    """(name, argv after ``medanon --device DEV``) of every command, in the order they run."""
    fd, xr, rel, tr = w / "fundus", w / "xray", w / "releases", w / "train"
    n = "10" if tiny else "24"
    out = [
        ("phantom-fundus", ["phantom", "--modality", "fundus", "--patients", n, "--per-patient", "2", "--size", "64",
                            "--out", str(fd)]),
        ("phantom-xray", ["phantom", "--modality", "xray", "--patients", n, "--per-patient", "2", "--size", "64",
                          "--out", str(xr)]),
        ("data-split", ["data", "split", str(fd), "--out", str(w / "splits.csv"), "--val", "0.3", "--test", "0.3"]),
    ]
    ks = [("kpixel", []), ("kpca", []), ("kcentroid", ["--model", str(CK / "restyle-map-fundus64.pt")]),
          ("ksalsa", ["--model", str(CK / "restyle-map-fundus64.pt"), "--steps", "3", "--map-init", "synthetic",
                      "--map-samples", "64"])]
    # the evaluated releases are of the split's training patients, with their mappings (beside them, where evaluate
    # looks): a release of every patient holds the evaluation's controls and is refused
    out += [(f"anonymize-{m}", ["anonymize", m, "--data", str(fd), "--k", "2", *extra, "--split", "train", "--splits",
                                str(w / "splits.csv"), "--mapping", str(rel / f"{m}.mapping.json"),
                                "--out", str(rel / m)])
            for m, extra in ks]
    out += [
        ("anonymize-inverted", ["anonymize", "inverted", "--data", str(fd), "--model",
                                str(CK / "restyle-map-fundus64.pt"), "--out", str(rel / "inverted")]),
        ("anonymize-gmia", ["anonymize", "gmia", "--data", str(fd), "--model", str(CK / "cotrained-map-fundus64.pt"),
                            "--identity", str(CK / "identity-fundus64.pt"), "--utility",
                            str(CK / "classifier-grade-fundus64.pt"), "--steps", "2", "--out", str(rel / "gmia")]),
        ("anonymize-snow", ["anonymize", "snow", "--data", str(fd), "--p", "0.3", "--out", str(rel / "snow")]),
        ("anonymize-vs-snow", ["anonymize", "vs-snow", "--data", str(fd), "--p", "0.3", "--checkpoint",
                               str(CK / "unet-vessels64.pt"), "--out", str(rel / "vs-snow")]),
        ("anonymize-dpglow", ["anonymize", "dpglow", "--data", str(xr), "--epsilon", "1e2", "--per-element", "--flow",
                              str(CK / "glow-xray64.pt"), "--out", str(rel / "dpglow")]),
        ("anonymize-ldp-image", ["anonymize", "ldp-image", "--data", str(xr), "--epsilon", "1e2", "--per-element",
                                 "--out", str(rel / "ldp-image")]),
        ("generate", ["generate", "--model", str(CK / "stylegan2-fundus64-wide.pt"), "--n", "8",
                      "--out", str(w / "generated")]),
        ("train-gan", ["train", "gan", "--data", str(fd), "--config", str(ROOT / "configs/stylegan/cpu64.yaml"),
                       "--set", "batch=4", "--steps", "2", "--out", str(tr / "gan")]),
        ("train-gan-bf16", ["train", "gan", "--data", str(fd), "--config", str(ROOT / "configs/stylegan/cpu64.yaml"),
                            "--set", "batch=4", "--set", "precision=bf16", "--steps", "2",
                            "--out", str(tr / "gan-bf16")]),
        ("train-encoder", ["train", "encoder", "--data", str(fd), "--config", str(ROOT / "configs/encoder/cpu64.yaml"),
                           "--generator", str(CK / "stylegan2-fundus64.pt"), "--set", "batch=4", "--steps", "2",
                           "--out", str(tr / "encoder")]),
        ("train-autoencoder", ["train", "autoencoder", "--data", str(fd), "--config",
                               str(ROOT / "configs/autoencoder/cpu64.yaml"), "--set", "batch=4", "--steps", "2",
                               "--out", str(tr / "autoencoder")]),
        ("train-flow", ["train", "flow", "--data", str(xr), "--config", str(ROOT / "configs/glow/cpu64.yaml"),
                        "--steps", "2", "--batch", "4", "--out", str(tr / "flow")]),
        ("train-classifier", ["train", "classifier", "--data", str(fd), "--label", "grade", "--steps", "2",
                              "--out", str(tr / "classifier.pt")]),
        ("train-identity", ["train", "identity", "--data", str(fd), "--steps", "2", "--out", str(tr / "identity.pt")]),
        ("train-segmenter", ["train", "segmenter", "--data", str(fd), "--epochs", "1", "--batch", "4",
                             "--out", str(tr / "segmenter")]),
    ]
    ev = ["evaluate", "--real", str(fd), "--splits", str(w / "splits.csv"), "--release", str(rel / "kpixel"),
          "--release", str(rel / "ksalsa"), "--preset", "tiny" if tiny else "fast", "--no-inception"]
    out += [("evaluate", [*ev, "--out", str(w / "report")])]
    if dev != "cpu":
        out += [("evaluate-on-cpu", ["--device", "cpu", *ev, "--out", str(w / "report-cpu")])]
    out += [("demo", ["demo", "--out", str(w / "demo"), "--patients", "20" if tiny else "40",
                      "--per-patient", "1" if tiny else "2",
                      "--ksalsa-steps", "2", "--gmia-steps", "2",
                      *(["--skip-evaluation"] if tiny else ["--no-inception"])])]
    return out


def torchrun_argv(w: Path, dev: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "medanon",
            "-q", "--device", dev, "train", "gan", "--data", str(w / "fundus"), "--config",
            str(ROOT / "configs/stylegan/cpu64.yaml"), "--set", "batch=4", "--steps", "2", "--out",
            str(w / "train" / "gan-torchrun")]


def run_one(name: str, argv: list[str], dev: str, log: Path, stall: float, profile: bool) -> dict:
    import click
    import torch

    from medanon.cli import cli

    cuda = dev.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    if argv[:1] != ["--device"]:
        argv = ["--device", dev, *argv]
    argv = ["-q", *argv]
    err = None
    t0 = time.perf_counter()
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print("$ medanon " + " ".join(argv), flush=True)
        faulthandler.dump_traceback_later(stall, repeat=True, file=f)
        prof = cProfile.Profile() if profile else None
        try:
            if prof:
                prof.enable()
            rc = cli.main(args=argv, prog_name="medanon", standalone_mode=False)
            if isinstance(rc, int) and rc != 0:
                err = f"exit status {rc}"
        except click.exceptions.Exit as e:
            err = None if e.exit_code == 0 else f"exit status {e.exit_code}"
        except click.ClickException as e:
            err = f"{type(e).__name__}: {e.format_message()}"
        except Exception as e:                   # every failure is reported; the next command still runs
            traceback.print_exc()
            err = f"{type(e).__name__}: {e}"
        finally:
            if prof:
                prof.disable()
            faulthandler.cancel_dump_traceback_later()
            if cuda:
                torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        if prof:
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(40)
            print(s.getvalue())
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    if err is not None:                          # the last lines of the log say more than the exception alone
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        err = err if not tail else err + " | " + " / ".join(tail)
    return {"check": name, "ok": err is None, "seconds": round(seconds, 2),
            "peak_gpu_mb": None if peak is None else round(peak, 1), "device": argv[2], "error": err,
            "command": "medanon " + " ".join(argv)}


def run_torchrun(w: Path, dev: str, log: Path, timeout: float) -> dict:
    argv = torchrun_argv(w, dev)
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        with open(log, "w") as f:
            p = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env)
        err = None if p.returncode == 0 else f"exit status {p.returncode}"
    except subprocess.TimeoutExpired:
        err = f"timed out after {timeout:.0f} s"
    if err:
        err += " | " + " / ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
    return {"check": "torchrun-train-gan", "ok": err is None, "seconds": round(time.perf_counter() - t0, 2),
            "peak_gpu_mb": None, "device": dev, "error": err, "command": " ".join(argv[1:])}


def device_name(dev: str) -> str:
    import torch

    if dev.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(dev))
    return "cpu"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    ap.add_argument("--tiny", action="store_true",
                    help="fewer images, the tiny evaluation preset and no evaluation in the demo (CI)")
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one, removed at the end)")
    ap.add_argument("--only", help="comma-separated check names (phantoms and the split always run)")
    ap.add_argument("--profile", default="", help="comma-separated check names to run under cProfile")
    ap.add_argument("--stall", type=float, default=60.0, help="seconds after which a command's stacks are dumped")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds allowed for the torchrun check")
    ap.add_argument("--jsonl", type=Path, help="also append the JSON lines to this file")
    args = ap.parse_args()

    import torch

    dev = args.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    keep = args.work is not None
    work = args.work or Path(tempfile.mkdtemp(prefix="medanon-gpu-check-"))
    if keep:
        fresh_work(work)
    (work / "logs").mkdir(parents=True)
    only = set(filter(None, (args.only or "").split(",")))
    profile = set(filter(None, args.profile.split(",")))
    results = []

    def emit(r: dict) -> None:
        results.append(r)
        line = json.dumps(r)
        print(line, flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(line + "\n")

    t_all = time.perf_counter()
    try:
        for name, argv in checks(work, dev, args.tiny):
            if only and name not in only and not name.startswith(("phantom", "data-")):
                continue
            emit(run_one(name, argv, dev, work / "logs" / f"{name}.log", args.stall, name in profile))
        if not only or "torchrun-train-gan" in only:
            emit(run_torchrun(work, dev, work / "logs" / "torchrun-train-gan.log", args.timeout))
    finally:
        failed = [r["check"] for r in results if not r["ok"]]
        emit({"check": "summary", "ok": not failed, "passed": len(results) - len(failed), "failed": failed,
              "seconds": round(time.perf_counter() - t_all, 1), "device": dev, "device_name": device_name(dev),
              "torch": torch.__version__, "tiny": args.tiny})
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
