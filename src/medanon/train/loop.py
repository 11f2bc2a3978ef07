"""The step loop every resumable training run shares: progress bar, metrics, samples, checkpoints, time limit."""

from __future__ import annotations

import hashlib
import io
import math
import re
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import torch
from PIL import Image
from tqdm.auto import tqdm

from medanon.config import differences
from medanon.errors import ConfigError, user_stacklevel
from medanon.fsutil import atomic_write_bytes
from medanon.runtime import RunDir
from medanon.train.distributed import Dist

CHECKPOINT = "checkpoint.pt"
GRID_COLS = 8                                   # images per row of a sample grid


def check_run_state(out: Path, *, resume: bool, state: str = CHECKPOINT, finished: tuple[str, ...] = ()) -> Path:
    """``out/state`` (``checkpoint.pt``), checked against ``resume`` before any work: a new run never starts over a
    run's state (or a finished run's ``finished`` files), and a resume needs the state."""
    from medanon.errors import ConfigError

    path = Path(out) / state
    held = [n for n in (state, *finished) if (Path(out) / n).exists()]
    if not resume and held:
        raise ConfigError(f"{out} already holds a training run ({held[0]})",
                          fix="pass resume=True to continue it, or choose another out folder")
    if resume and not path.is_file():
        raise ConfigError(f"{out} holds no training run to resume ({state} is missing)",
                          fix="start a new run there (without resume=True), or name the folder of the run to continue")
    return path


def recheck_run_state(out: Path, resume_step: int | None, *, state: str = CHECKPOINT,
                      finished: tuple[str, ...] = ()) -> Callable[[], None]:
    """:func:`check_run_state` again, for :class:`~medanon.runtime.RunDir`'s ``recheck`` once the run holds its
    folder's lock: a new run (``resume_step`` None) that another one started or finished there meanwhile is refused
    (it would clear that run's logs and overwrite its checkpoint), and a resumed run's state must still be at the
    ``resume_step`` it read."""
    def recheck() -> None:
        path = check_run_state(out, resume=resume_step is not None, state=state, finished=finished)
        if resume_step is not None:
            from medanon.checkpoint import load_checkpoint

            now = int(load_checkpoint(path)["step"])
            if now != int(resume_step):
                raise ConfigError(f"{path} is at step {now}, not the step {resume_step} this run read: another run "
                                  "went on "
                                  "with it meanwhile", fix="resume again, from its new state")
    return recheck


def training_images_digest(images: torch.Tensor) -> dict[str, Any]:
    """Count and SHA-256 of a run's 8-bit training images (N, C, H, W), as its checkpoints and manifest record them."""
    return {"count": len(images), "sha256_uint8": hashlib.sha256(images.contiguous().numpy().data).hexdigest()}


def to_uint8_images(images: torch.Tensor) -> torch.Tensor:
    """Images (N, C, H, W) in [-1, 1] as the 8-bit values a run trains on and records."""
    return ((images.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


_HEX = re.compile(r"[0-9a-f]{17,}")


def data_changes(saved: dict[str, Any], now: dict[str, Any], keys: Iterable[str]) -> str:
    """What changed in a run's data record, for a refused resume: ``crop 'fov' -> 'center'``, digests shortened.

    >>> data_changes({"crop": "fov", "n": 3}, {"crop": "center", "n": 3}, ["crop"])
    "crop 'fov' -> 'center'"
    """
    def short(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: short(x) for k, x in v.items()}
        return f"{v[:12]}..." if isinstance(v, str) and _HEX.fullmatch(v) else v
    keys = list(keys)
    return differences({k: short(saved.get(k)) for k in keys}, {k: short(now.get(k)) for k in keys})


def refuse_other_data(ckpt: Path, saved: dict[str, Any] | None, now: dict[str, Any], *, fix: str) -> None:
    """Refuse to resume the run of ``ckpt`` on other data: its checkpoint's data record ``saved`` differs from
    ``now`` in a key both hold (keys a run predates are not compared), and the error says what changed."""
    saved = saved or {}
    changed = [k for k, v in now.items() if k in saved and saved[k] != v]
    if changed:
        raise ConfigError(f"{ckpt} was trained on other data (changed since: {data_changes(saved, now, changed)})",
                          fix=fix)


def record_modality(training_images: dict[str, Any], modality: str | None, blob: dict[str, Any] | None,
                    people: dict[str, Any] | None = None) -> None:
    """Record the data's ``modality`` with a trainer's training images (its checkpoints then say it, and
    :func:`medanon.codecs.stylegan.trained_on` reads it); not given, a resumed run's ``blob`` keeps the one it
    recorded. Called before :func:`training_images_change`, which refuses a resume on another modality.

    ``people``: the training people's record (:func:`medanon.data.training_people.training_people`), kept in the
    list ``people`` with those a resumed run recorded (a run retuned on other images depends on both sets)."""
    saved = (((blob or {}).get("extra") or {}).get("training_images") or {})
    known = saved.get("modality")
    if modality or known:
        training_images["modality"] = modality or known
    recorded = [p for p in saved.get("people") or [] if isinstance(p, dict)]
    merged = [*recorded, people] if people and people not in recorded else recorded
    if merged:
        training_images["people"] = merged


def training_images_change(blob: dict[str, Any], digest: dict[str, Any], *,
                           retune: bool | None = None) -> list[dict[str, Any]]:
    """Refuse to resume a run on other training images than its checkpoint's, unless ``retune`` (for trainers that
    accept it; None: they do not): then the change is returned as a ``config_changes`` record. Images of another
    modality than the checkpoint's (where both are recorded) are refused even then. A checkpoint from before images
    were recorded cannot be checked: it is accepted with a warning, and the switch to these images is returned as a
    ``config_changes`` record, and ``digest`` (the trainer's record, updated in place) keeps ``earlier_steps`` and
    ``since_step`` over later resumes, so the checkpoint never says it was trained on these images alone."""
    saved = blob["extra"].get("training_images")
    if saved is None:
        before = blob["extra"].get("images")
        unknown = ("not recorded (the checkpoint predates the record" + (f"; it says {before} images" if before else "")
                   + ")")
        warnings.warn(f"checkpoint {blob['path']} does not record the images it was trained on, so they cannot be "
                      f"compared with these; from step {int(blob['step'])} on it trains on these {digest['count']} "
                      "images, and its record says so (training_images.earlier_steps)", UserWarning,
                      stacklevel=user_stacklevel())
        digest.update(earlier_steps=unknown, since_step=int(blob["step"]))
        return [{"step": int(blob["step"]), "field": "training_images", "from": unknown,
                 "to": {k: digest[k] for k in ("count", "sha256_uint8")}}]
    digest.update({k: saved[k] for k in ("earlier_steps", "since_step") if k in saved})
    was, now = saved.get("modality"), digest.get("modality")
    if was and now and was != now:                  # even with retune: another modality is another model
        raise ConfigError(f"checkpoint {blob['path']} was trained on {was} images; these are {now} images",
                          fix=f"train a {now} model in a new run (another out folder)")
    if all(saved.get(k) == digest.get(k) for k in ("count", "sha256_uint8")):
        return []
    what = (f"checkpoint {blob['path']} was trained on other images ({saved['count']} images, sha256 "
            f"{saved['sha256_uint8'][:12]}...) than these ({digest['count']} images, {digest['sha256_uint8'][:12]}...)")
    if not retune:
        fix = "resume with the run's own dataset (same folder, filter and size; its manifest.json records them)"
        fix += (", or start a new run" if retune is None else
                ", or pass retune=True to continue on these images from this step on (recorded in the checkpoint)")
        raise ConfigError(what, fix=fix)
    warnings.warn(f"{what}: retune continues on these images from step {int(blob['step'])} on (recorded in the "
                  "checkpoint's config_changes); a model trained on both sets of people depends on both",
                  UserWarning, stacklevel=user_stacklevel())
    return [{"step": int(blob["step"]), "field": "training_images", "from": saved, "to": digest}]


def save_image_grid(images: torch.Tensor, path: str | Path, *, cols: int = GRID_COLS) -> Path:
    """Tile images (N, C, H, W) in [-1, 1] into one PNG, ``cols`` per row."""
    x = ((images.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    n, c, h, w = x.shape
    rows = math.ceil(n / cols)
    grid = torch.zeros(rows * cols, c, h, w, dtype=torch.uint8)
    grid[:n] = x
    grid = grid.reshape(rows, cols, c, h, w).permute(0, 3, 1, 4, 2).reshape(rows * h, cols * w, c).numpy()
    im = Image.fromarray(grid[:, :, 0] if c == 1 else grid, mode="L" if c == 1 else "RGB")
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


class Trainable(Protocol):
    """What :func:`run_loop` needs from a trainer."""

    step_count: int                             # steps done so far (restored on resume)
    seconds: float                              # wall-clock training time so far, over resumes
    nimg: int                                   # images seen so far, over resumes

    def step(self) -> dict[str, float]: ...     # one update; returns the numbers to log

    def sample_grid(self) -> torch.Tensor: ...  # images (N, C, H, W) in [-1, 1] for the sample PNG

    def save(self, path: Path) -> Path: ...     # write the full training state


def run_loop(trainer: Trainable, run: RunDir | None, out: Path, *, steps: int, checkpoint_every: int,
             sample_every: int, log_every: int, progress: bool, desc: str,
             show: Callable[[dict[str, float]], dict[str, str]], max_seconds: float | None = None,
             dist: Dist | None = None) -> Path:
    """Step ``trainer`` until ``steps`` (or, with ``max_seconds``, until the step that reaches that much
    wall-clock time): metrics every ``log_every`` steps (means since the last line, and images/s), sample
    grids every ``sample_every`` and the checkpoint every ``checkpoint_every`` steps and at the end.
    ``show(means)`` gives the progress bar's postfix. Returns the checkpoint path.

    With several ranks (``dist``) every rank runs the loop and calls ``trainer.save`` (which gathers and
    writes on rank 0); metrics, samples and the manifest are rank 0's alone (``run`` is None elsewhere),
    and rank 0's clock decides when ``max_seconds`` is reached."""
    dist = dist or Dist()
    main = dist.is_main
    ckpt_path = out / CHECKPOINT
    if trainer.step_count >= steps and trainer.step_count > 0 and main:
        import warnings

        from medanon.errors import user_stacklevel

        warnings.warn(f"the run in {out} has done {trainer.step_count} steps already, as many as asked for "
                      f"({steps}): nothing was trained. To train on, ask for more than {trainer.step_count} steps "
                      "(the count includes the steps done)", UserWarning, stacklevel=user_stacklevel())
    bar = tqdm(total=steps, initial=trainer.step_count, desc=desc, unit="step", disable=not (progress and main),
               dynamic_ncols=True)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    t_start = t_last = time.perf_counter()
    n_last, seconds_before = trainer.nimg, trainer.seconds
    while trainer.step_count < steps:
        losses = trainer.step()                 # with several ranks: already means over all ranks
        step = trainer.step_count
        elapsed = time.perf_counter() - t_start
        trainer.seconds = seconds_before + elapsed
        last = step == steps or (max_seconds is not None and dist.any(main and elapsed >= max_seconds))
        for k, v in losses.items():
            sums[k] = sums.get(k, 0.0) + v
            counts[k] = counts.get(k, 0) + 1
        bar.update(1)
        if main and (step % log_every == 0 or last):
            now = time.perf_counter()
            rate = (trainer.nimg - n_last) / max(now - t_last, 1e-9)
            means = {k: v / counts[k] for k, v in sums.items()}
            run.log_metrics(step=step, kimg=trainer.nimg / 1000, **means, img_per_s=rate)
            bar.set_postfix(**show(means), ips=f"{rate:.1f}")
            sums, counts, t_last, n_last = {}, {}, now, trainer.nimg
        if main and (step % sample_every == 0 or last):
            save_image_grid(trainer.sample_grid(), out / "samples" / f"step-{step:07d}.png")
        if step % checkpoint_every == 0 or last:
            trainer.save(ckpt_path)
        if last:
            break
    bar.close()
    if dist.any(main and not ckpt_path.exists()):  # steps=0: an untrained model, still a valid checkpoint
        trainer.save(ckpt_path)
    if main:
        run.update(steps=trainer.step_count, kimg=trainer.nimg / 1000,
                   train_seconds=round(trainer.seconds, 1))
        run.finish()
    dist.barrier()                              # the checkpoint is complete when any rank returns
    return ckpt_path

