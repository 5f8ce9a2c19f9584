"""The one picture type in infer: what the decoder (craftai_infer.pictures) makes for every feature,
what the routes and the pipelines take.

(H, W, 3) RGB, or (H, W, 4) RGBA with straight alpha where the file has transparency, uint8,
oriented as shown. A picture a route's GPU decoded (craftai_infer.engines.nvjpeg) also keeps its
pixels there, and the route uses them rather than uploading the host copy again (`device_pixels`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

Picture = npt.NDArray[np.uint8]


def device_pixels(picture: np.ndarray, device: torch.device) -> torch.Tensor | None:
    """The pixels of `picture` already on `device`, where it was decoded there (a GPU route's JPEG:
    craftai_infer.engines.nvjpeg's `DevicePicture`); else None (`cuda` and `cuda:N` of the current
    GPU are the same device)."""
    on_device = getattr(picture, "on_device", None)
    if on_device is None or on_device.device.type != device.type:
        return None
    if device.type == "cuda":
        import torch  # only a picture decoded on a GPU gets here

        here = on_device.device.index
        if (device.index if device.index is not None else torch.cuda.current_device()) != here:
            return None
    tensor: torch.Tensor = on_device
    return tensor
