"""Per-image releases: every record of a dataset privatised on its own and handed to the release writer.

One released record per source image, resumable (records already in the writer are skipped). The
ε-LDP mechanisms (DP-GLOW, image LDP) release through :func:`release_dataset`, and so does GMIA.
"""

from __future__ import annotations

import hashlib
import warnings

import torch

from medanon.anonymize.ldp_statement import SEEDED, seeded_privacy
from medanon.anonymize.privacy import NoFormalGuarantee
from medanon.errors import user_stacklevel
from medanon.runtime import map_in_parallel


def record_generator(seed: int, record_id: str) -> torch.Generator:
    """A generator for one record's noise, derived from (seed, record id): the same with any batching or resume."""
    digest = hashlib.sha256(f"medanon-ldp-noise:{seed}:{record_id}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def decode_before_release(dataset, indices, *, progress: bool = False, writer=None) -> None:
    """Decode every image a run is about to release before it releases the first: a file whose header reads but
    whose pixels do not (a truncated download) is named now, with nothing written, instead of after the run has
    released the images before it. The decoded tensors stay in the dataset's cache (within its budget), so the run
    does not decode them again. Under torchrun (``writer`` a
    :class:`~medanon.release.sharded.ShardWriter`) each process decodes its own share and the findings of all are
    gathered, so that no process releases while another's file is bad, and every process names all of them."""
    from medanon.data.dataset import raise_for_problems, verify_decoding

    bad = verify_decoding(dataset, indices=indices, progress=progress) if len(indices) else []
    gather = getattr(writer, "gather", None)
    if gather is not None:
        bad = [p for share in gather(bad) for p in share]
    if bad:
        raise_for_problems(bad, root=getattr(dataset, "root", None))


def release_dataset(dataset, privatise, writer, *, batch: int = 32, device: torch.device | str = "cpu",
                    noise_seed: int | None = None, progress: bool = True, side_by_side: int = 1) -> int:
    """Privatise every record of ``dataset`` not yet in ``writer`` (resumable); returns the number written.

    ``privatise(images, generator=...)`` maps (N, C, H, W) images to released images, or to ``(images, facts)``
    with one dict per image of how it was computed (e.g. ``{"diverged": True}``), which the writer keeps with
    its record and totals in the manifest (:meth:`~medanon.release.writer.ReleaseWriter.add`). Each record
    stands for itself (LDP releases one image per input image). ``noise_seed`` (experiments only)
    gives every record its own seeded generator; without it the noise is secret. With a seed the
    noise can be regenerated and subtracted by whoever knows or guesses it: the writer's privacy
    statement is replaced by "no formal guarantee (reproducible noise, testing only)" and
    :class:`~medanon.anonymize.privacy.NoFormalGuarantee` is warned.

    ``side_by_side`` batches are privatised at once on a CPU, one torch thread each
    (:func:`medanon.runtime.map_in_parallel`); only for a ``privatise`` that is deterministic per image and
    safe to call from two threads (GMIA's optimisation). Records are written in dataset order either way.
    """
    from tqdm.auto import tqdm

    if noise_seed is not None and writer.privacy.get("guarantee") == "epsilon-LDP":
        warnings.warn(f"noise seed {noise_seed}: the noise is reproducible, so the release states '{SEEDED}'. "
                      "Leave the seed out for a release", NoFormalGuarantee, stacklevel=user_stacklevel())
        seeded = seeded_privacy(writer.privacy)          # it moves some numbers: replace, not merge
        writer.privacy.clear()
        writer.privacy.update(seeded)
    todo = [i for i, r in enumerate(dataset.records) if not writer.done(r.record_id)]
    decode_before_release(dataset, todo, progress=progress, writer=writer)
    chunks = [todo[start:start + batch] for start in range(0, len(todo), batch)]

    def run(chunk: list[int]) -> tuple[torch.Tensor, list[dict] | None]:
        recs = [dataset.records[i] for i in chunk]
        images = torch.stack([dataset.load(i)["image"] for i in chunk]).to(device)
        gens = None if noise_seed is None else [record_generator(noise_seed, r.record_id) for r in recs]
        out = privatise(images, generator=gens)
        return out if isinstance(out, tuple) else (out, None)

    side = max(1, int(side_by_side))
    with tqdm(total=len(chunks), desc=f"releasing ({writer.settings['method']})", unit="batch",
              disable=not progress) as bar:
        for start in range(0, len(chunks), side):
            group = chunks[start:start + side]
            for chunk, (out, facts) in zip(group, map_in_parallel(run, group, device=device), strict=True):
                for j, (i, img) in enumerate(zip(chunk, out, strict=True)):
                    kw = {} if facts is None else {"quality": facts[j]}
                    writer.add(dataset.records[i].record_id, img.cpu(), [dataset.records[i]], **kw)
                bar.update(1)
    return len(todo)
