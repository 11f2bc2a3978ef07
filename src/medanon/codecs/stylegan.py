"""StyleGAN inversion codecs: an encoder maps images to ``ws`` (N, num_ws, w_dim), the generator maps back.

Two kinds of checkpoint give a :class:`StyleGANCodec` (both written by :mod:`medanon.train`):

* ``restyle`` (kind ``"restyle-encoder"``, the k-SALSA choice): a frozen, separately trained
  generator and an iterative encoder. Starting from ``w_0 = w_avg`` and ``y_0 = G(w_avg)``, each
  iteration predicts a residual update ``w_{t+1} = w_t + E(concat(x, y_t))`` and re-renders
  ``y_{t+1} = G(w_{t+1})``. More iterations cost one encoder and one generator pass each.
* ``cotrained`` (kind ``"cotrained-autoencoder"``, GMIA §2.1): an encoder and a generator trained
  together as an autoencoder-GAN; one pass, ``w = w_avg + E(x)``.

A co-trained codec may also carry a **spatial latent map** (``generator.map_rows > 0``; see
:mod:`medanon.models.stylegan.synthesis`): its latents are then (N, num_ws + map_rows, w_dim), the styles
followed by the map's values, and ``latent_space`` is ``"ws+map"``. The map starts at 0 (``w_avg`` for the
styles). Every latent method (averaging, k-SALSA, GMIA, augmentation) works on the whole tensor.

Decoding renders with the generator's *constant* per-layer noise (``noise_mode="const"``), so
``decode`` is deterministic and the same latent always gives the same image; the encoders are
trained against that same rendering. Decoded images are clamped to [-1, 1].

Example (an untrained tiny model, shapes only):
    >>> from medanon.models.stylegan import Generator
    >>> from medanon.models.encoder import Encoder
    >>> G = Generator(z_dim=32, w_dim=32, img_resolution=16, img_channels=1, channel_base=256, channel_max=32)
    >>> E = Encoder(16, 1, G.num_ws, G.w_dim, iterative=True, channel_base=256, channel_max=32, head_dim=32)
    >>> codec = StyleGANCodec(G, E, iterations=2)
    >>> ws = codec.encode(torch.zeros(3, 1, 16, 16))
    >>> ws.shape, codec.decode(ws).shape
    (torch.Size([3, 6, 32]), torch.Size([3, 1, 16, 16]))
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from torch import nn

from medanon.checkpoint import load_checkpoint, load_weights
from medanon.config import from_dict
from medanon.errors import ConfigError
from medanon.models.encoder import Encoder
from medanon.models.stylegan import Generator, StyleGANConfig

KIND_RESTYLE = "restyle-encoder"
KIND_COTRAINED = "cotrained-autoencoder"
CODEC_NAMES = {KIND_RESTYLE: "restyle", KIND_COTRAINED: "cotrained"}
NOISE_MODE = "const"                            # how the codec renders: fixed per-layer noise, deterministic
AMP = {"bf16": torch.bfloat16, "fp16": torch.float16}   # mixed precision of the forward passes (autocast)


def check_amp(amp: str | None, device: torch.device | str) -> str | None:
    """``amp`` (``None``/``"off"``, ``"bf16"`` or ``"fp16"``) as the codec keeps it; fp16 only on CUDA.

    bf16 autocast runs on CPUs and GPUs; fp16 autocast is refused on the CPU (PyTorch's CPU fp16 kernels
    are slow and partial, and fp16's narrow range needs loss scaling that the CPU path has no reason for).
    """
    if amp in (None, "off", "fp32"):
        return None
    if amp not in AMP:
        raise ConfigError(f"amp={amp!r} is not one of off, bf16, fp16")
    if amp == "fp16" and torch.device(device).type != "cuda":
        raise ConfigError(f"amp='fp16' runs on CUDA GPUs only; the codec is on {torch.device(device)}",
                          fix="use amp='bf16' on the CPU (or no amp)")
    return amp


class StyleGANCodec(nn.Module):
    """A :class:`~medanon.codecs.base.LatentCodec` over a StyleGAN2 generator and an inversion encoder.

    ``encoder.iterative`` selects the scheme (see the module docstring). Images go to the device of
    the models; latents and images come back on that device. ``encode`` and ``decode`` run without
    gradients and never change a weight; training code uses :meth:`start` and :meth:`refine` with
    gradients enabled.
    """

    latent_space = "ws"

    def __init__(self,
        generator: Generator,                   # StyleGAN2 generator (mapping + synthesis; only synthesis is used)
        encoder: Encoder,                       # inversion encoder built for this generator
        iterations: int = 1,                    # refinement steps (ReStyle); must be 1 for a one-pass encoder
        *,
        name: str | None = None,                # "restyle" | "cotrained" | ...; default from encoder.iterative
        provenance: dict[str, Any] | None = None,  # what describe() reports about where the weights came from
        batch_size: int = 64,                   # images per forward pass in encode / decode
        amp: str | None = None,                 # bf16 | fp16 (CUDA only): autocast of the encoder and generator
    ):
        super().__init__()
        if (encoder.img_resolution, encoder.img_channels) != (generator.img_resolution, generator.img_channels):
            raise ConfigError(
                f"the encoder is built for {encoder.img_channels}x{encoder.img_resolution}px images, the generator "
                f"renders {generator.img_channels}x{generator.img_resolution}px",
                fix="pair an encoder with its generator")
        e_rows, g_rows = encoder.num_ws + encoder.map_rows, generator.num_rows
        if (encoder.num_ws, e_rows, encoder.w_dim) != (generator.num_ws, g_rows, generator.w_dim):
            raise ConfigError(f"the encoder predicts ({e_rows}, {encoder.w_dim}) latent rows, the generator takes "
                              f"({g_rows}, {generator.w_dim})", fix="pair an encoder with its generator")
        if iterations < 1:
            raise ConfigError(f"iterations={iterations} must be at least 1")
        if not encoder.iterative and iterations != 1:
            raise ConfigError(f"iterations={iterations}: a one-pass (co-trained) encoder does not refine",
                              fix="use iterations=1, or a ReStyle encoder for iterative refinement")
        if batch_size < 1:
            raise ConfigError(f"batch_size={batch_size} must be at least 1")
        self.generator = generator.eval()
        self.encoder = encoder.eval()
        self.iterations = int(iterations)
        self.name = name or ("restyle" if encoder.iterative else "cotrained")
        self.provenance = dict(provenance or {})
        self.batch_size = batch_size
        self._start_cache: tuple[tuple[Any, ...], torch.Tensor] | None = None
        self.amp = check_amp(amp, self.device)
        self.latent_space = "ws+map" if generator.map_rows else "ws"

    # -- the LatentCodec interface -----------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.generator.w_avg.device

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Images (N, C, R, R) in [-1, 1] -> ``ws`` (N, num_rows, w_dim), float32 on the models' device
        (``num_rows = num_ws`` without a spatial map)."""
        self._check_images(images)
        out = []
        with torch.no_grad():
            for chunk in images.split(self.batch_size):
                x = chunk.to(self.device, torch.float32)
                ws, recon = self.start(x.shape[0])
                for t in range(self.iterations):
                    ws = self.refine(x, ws, recon)
                    if t + 1 < self.iterations:
                        recon = self.render(ws)
                out.append(ws)
        return torch.cat(out) if out else self._empty_ws()

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """``ws`` (N, num_rows, w_dim) -> images (N, C, R, R) clamped to [-1, 1]."""
        g = self.generator
        if latents.ndim != 3 or latents.shape[1:] != (g.num_rows, g.w_dim):
            raise ValueError(f"latents must be ws of shape (N, {g.num_rows}, {g.w_dim}), got {tuple(latents.shape)}")
        with torch.no_grad():
            out = [self.render(ws.to(self.device, torch.float32)).clamp(-1, 1) for ws in latents.split(self.batch_size)]
        if not out:
            return torch.empty(0, g.img_channels, g.img_resolution, g.img_resolution, device=self.device)
        return torch.cat(out)

    def reconstruct(self, images: torch.Tensor) -> torch.Tensor:
        """``decode(encode(images))``."""
        return self.decode(self.encode(images))

    def describe(self) -> dict[str, Any]:
        g = self.generator
        return {"name": self.name, "latent_space": self.latent_space, "iterations": self.iterations,
                "num_ws": g.num_ws, "w_dim": g.w_dim, "resolution": g.img_resolution, "channels": g.img_channels,
                "noise_mode": NOISE_MODE, **({"amp": self.amp} if self.amp else {}),
                **({"map": {"resolution": g.synthesis.map_resolution, "channels": g.synthesis.map_channels,
                            "rows": g.map_rows}} if g.map_rows else {}), **self.provenance}

    # -- the steps, for training code (gradients follow the caller's mode) -------------------------

    def start(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Initial latent and reconstruction of a batch of ``n``: ``(w_avg, G(w_avg))`` broadcast (a map starts at 0).

        For a one-pass encoder the reconstruction is not used (an empty tensor). The rendering of
        ``w_avg`` is cached while the generator's weights stay those it was computed with.
        """
        g = self.generator
        ws0 = g.w_avg.detach()[None, None, :].expand(n, g.num_ws, -1)
        if g.map_rows:
            ws0 = torch.cat([ws0, ws0.new_zeros(n, g.map_rows, g.w_dim)], dim=1)
        if not self.encoder.iterative:
            return ws0, ws0.new_empty(0)
        key = self._weights_key()
        if self._start_cache is None or self._start_cache[0] != key:
            with torch.no_grad():
                self._start_cache = (key, self.render(ws0[:1]))
        y0 = self._start_cache[1]
        return ws0, y0.expand(n, -1, -1, -1)

    def refine(self, images: torch.Tensor, ws: torch.Tensor, recon: torch.Tensor) -> torch.Tensor:
        """One step: ``ws + E(concat(images, recon))`` (iterative) or ``ws + E(images)`` (one pass)."""
        x = torch.cat([images, recon.to(images.dtype)], dim=1) if self.encoder.iterative else images
        with self._autocast():
            return ws + self.encoder(x).float()

    def render(self, ws: torch.Tensor, noise_mode: str = NOISE_MODE) -> torch.Tensor:
        """``G.synthesis(ws)`` with the codec's constant noise (not clamped; differentiable; float32 out); training
        code may ask for another ``noise_mode`` (``"none"``, ``"random"``).

        With ``amp`` the synthesis runs under ``torch.autocast`` (its convolutions and matmuls in bf16/fp16,
        reductions and normalisations as autocast keeps them in float32); gradients flow back to ``ws`` in
        float32. The optimisations built on it (k-SALSA, GMIA) use no loss scaling: bf16 has float32's range.
        """
        with self._autocast():
            return self.generator.synthesis(ws, noise_mode=noise_mode).float()

    # -- helpers -----------------------------------------------------------------------------------

    def _autocast(self):
        dev = self.device
        if self.amp is None:
            return torch.autocast(dev.type, enabled=False)
        return torch.autocast(dev.type, dtype=AMP[check_amp(self.amp, dev)])

    def _weights_key(self) -> tuple[Any, ...]:
        """Changes whenever the generator's weights may have: trained in place, reloaded or moved."""
        p = self.generator.synthesis.blocks[0].const
        return (p.data_ptr(), p._version, p.device, p.dtype, self.generator.w_avg._version)

    def _check_images(self, images: torch.Tensor) -> None:
        g = self.generator
        want = (g.img_channels, g.img_resolution, g.img_resolution)
        if not isinstance(images, torch.Tensor) or images.ndim != 4 or tuple(images.shape[1:]) != want:
            shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise ValueError(f"{self.name} codec expects images of shape (N, {want[0]}, {want[1]}, {want[2]}) in "
                             f"[-1, 1], got {shape}; open the dataset with size={g.img_resolution}")

    def _empty_ws(self) -> torch.Tensor:
        return torch.empty(0, self.generator.num_rows, self.generator.w_dim, device=self.device)


def build_generator(config: dict[str, Any], state: dict[str, Any] | None = None, path=None) -> Generator:
    """A generator from a plain :class:`StyleGANConfig` dict (and a ``state_dict`` if given, from ``path``)."""
    cfg = from_dict(StyleGANConfig, dict(config), where="generator config")
    g = Generator.from_config(cfg)
    if state is not None:
        load_weights(g, state, path)
    return g


def build_encoder(kwargs: dict[str, Any], state: dict[str, Any] | None = None, path=None) -> Encoder:
    """An encoder from the ``Encoder.kwargs`` dict stored in a checkpoint (and a ``state_dict`` if given, from
    ``path``)."""
    e = Encoder(**kwargs)
    if state is not None:
        load_weights(e, state, path)
    return e


def codec_from_blob(blob: dict[str, Any], *, iterations: int | None = None, batch_size: int = 64) -> StyleGANCodec:
    """A codec from a loaded checkpoint dict (see :func:`load_codec`), its weights frozen."""
    from medanon.checkpoint import state_entry

    cfg = blob["config"]
    generator = build_generator(cfg["generator"], state_entry(blob, "G"), blob.get("path")).requires_grad_(False)
    encoder = build_encoder(cfg["encoder"], state_entry(blob, "E"), blob.get("path")).requires_grad_(False)
    n = iterations if iterations is not None else int(cfg["codec"]["iterations"])
    provenance = {"checkpoint": {"path": blob.get("path"), "sha256": blob.get("sha256"), "step": blob.get("step")}}
    for key in ("generator_checkpoint", "losses"):
        if key in blob.get("extra", {}):
            provenance[key] = copy.deepcopy(blob["extra"][key])
    provenance["trained_on"] = trained_on(blob, generator.img_channels, generator.img_resolution)
    from medanon.data.training_people import model_people

    people = model_people(blob)                         # digests: whether an evaluation's controls trained it
    if people:                                          # (none recorded: the settings of releases stay as they were)
        provenance["trained_people"] = people
    return StyleGANCodec(generator, encoder, n, name=CODEC_NAMES.get(blob["kind"]), provenance=provenance,
                         batch_size=batch_size)


def trained_on(blob: dict[str, Any], channels: int, resolution: int) -> dict[str, Any]:
    """What a model checkpoint was trained on: modality (recorded in ``extra.data.modality`` or, by the GAN and
    co-training runs, ``extra.training_images.modality`` when the trainer wrote it, else implied by the channel count:
    colour fundus photographs have 3, chest X-rays 1), channels, size."""
    extra = blob.get("extra", {})
    recorded = (extra.get("data") or {}).get("modality") or (extra.get("training_images") or {}).get("modality")
    modality = recorded or {3: "fundus", 1: "xray"}.get(int(channels))
    return {"modality": modality, "modality_recorded": bool(recorded), "channels": int(channels),
            "resolution": int(resolution)}


def check_model_fits(model: str | Path | None, trained: dict[str, Any], dataset: Any) -> None:
    """Refuse a model on images of another modality, channel count or size than it was trained on.

    ``trained`` is :func:`trained_on`'s dict; ``dataset`` an opened dataset (its ``modality`` comes from its
    layout, its ``channels``/``size`` from how it was opened). Converting chest X-rays to 3 channels to fit a
    fundus codec would write RGB fundus blobs labelled with X-ray findings: the error says so instead.
    """
    given = {"modality": getattr(dataset, "modality", None), "channels": getattr(dataset, "channels", None),
             "resolution": getattr(dataset, "size", None)}
    from medanon.data.inputs import data_name

    name = f"model {model}" if model is not None else "the model"
    in_memory = getattr(dataset, "root", None) is None
    if given["modality"] and trained["modality"] and given["modality"] != trained["modality"]:
        how = "as recorded in it" if trained.get("modality_recorded") else f"{trained['channels']}-channel images"
        own = (f"; if they are {trained['modality']} images, pass them with {trained['channels']} channel(s) (images "
               "in memory are read as fundus with 3 channels, as X-rays with 1, unless modality= says otherwise)"
               if in_memory else "")
        raise ConfigError(f"{name} was trained on {trained['modality']} images ({how}); "
                          f"the data given ({data_name(dataset)}) are {given['modality']} images",
                          fix=f"use a model trained on {given['modality']} images (`medanon train` on such data){own}")
    for key in ("channels", "resolution"):
        if given[key] is not None and given[key] != trained[key]:
            side, c = trained["resolution"], trained["channels"]
            if not in_memory:
                fix = f"open the dataset with size={side} and channels={c}, or use a model trained at that size"
            elif key == "resolution":
                fix = (f"resize the images to {side}x{side} px first (e.g. torch.nn.functional.interpolate(x, "
                       f"size={side}, mode='bilinear', antialias=True)), or use a model trained at their size")
            else:
                how = ("x.expand(-1, 3, -1, -1) repeats a grey channel" if c == 3 else
                       "x.mean(1, keepdim=True) gives one grey channel")
                fix = f"give the images {c} channel(s) ({how}), or use a model trained on their kind"
            raise ConfigError(f"{name} was trained on {c}x{side}px images; "
                              + (f"the images held in memory are {given['channels']}x{given['resolution']}px"
                                 if in_memory else
                                 f"the dataset was opened at {given['channels']}x{given['resolution']}px"), fix=fix)


def load_codec(ckpt: str | Path, *, iterations: int | None = None, map_location: str | torch.device = "cpu",
               batch_size: int = 64, amp: str | None = None) -> StyleGANCodec:
    """Load a ReStyle or co-trained codec from a checkpoint written by ``medanon train encoder|autoencoder``.

    ``iterations`` overrides the number of ReStyle refinement steps stored in the checkpoint; ``amp``
    (``bf16``, or ``fp16`` on CUDA) runs the encoder and generator under autocast (docs/distributed.md).
    """
    blob = load_checkpoint(ckpt, kind=(KIND_RESTYLE, KIND_COTRAINED), map_location="cpu")
    # the modules are built on the CPU and take the weights by copy: move them, or a GPU run renders on the CPU
    codec = codec_from_blob(blob, iterations=iterations, batch_size=batch_size).to(map_location)
    codec.amp = check_amp(amp, codec.device)
    return codec
