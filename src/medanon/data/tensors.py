"""Image batches as tensors: ``(N, C, H, W)`` float in ``[-1, 1]`` (docs/design.md §3).

:mod:`medanon.data.transforms` prepares one decoded image with NumPy; this module works on batches that
are already tensors, wherever they are (it follows its input's device).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def resize_to(images: torch.Tensor, size: int) -> torch.Tensor:
    """Area-resize (downsampling) or bilinear-resize (upsampling) ``(N, C, H, W)`` images to ``size``.

    Example:
        >>> import torch
        >>> from medanon.data.tensors import resize_to
        >>> x = torch.arange(16.0).reshape(1, 1, 4, 4)
        >>> resize_to(x, 2)[0, 0]
        tensor([[ 2.5000,  4.5000],
                [10.5000, 12.5000]])
        >>> resize_to(x, 4) is x
        True
    """
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    if images.shape[-1] > size:
        return F.interpolate(images, size=(size, size), mode="area")
    return F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
