"""JPEG pictures decoded on the GPU (nvJPEG, through torchvision.io on a CUDA build of torch), for
routes on a GPU.

A large photo's decode on the CPU is one core's work (libjpeg-turbo: a baseline JPEG is one
sequential Huffman stream, so more cores do not help one picture); a GPU decodes it several times
faster (tools/gpu/jpeg_decode.py; docs/PERFORMANCE.md, "JPEGs decoded on the GPU"). The picture
is turned on the device as its EXIF orientation says, then copied once into page-locked host
memory: every feature still gets the one `Picture` type (host pixels), a `DevicePicture` that also
carries its pixels on the device, which a route there uses rather than uploading them again
(craftai_infer.pipelines.picture.device_pixels).

The decode, the turn and the copy run on a stream of the decoding thread's own, so that a picture
waits for its decode alone, not for the model work queued on the device meanwhile (the first
version synchronised the default stream: under 32 concurrent SAM pictures each decode waited for
the encoder batches in flight).

The pixels are nvJPEG's: its inverse DCT and chroma upsampling are not libjpeg-turbo's, so they
differ from the CPU route's by a few levels (mean 0.1-0.4, at most ~30 on sharp colour edges of
4:2:0 pictures). Where the GPU cannot decode a picture (another colour space, a variant nvJPEG
refuses, torchvision without nvJPEG), the CPU decodes it, strictly, as everywhere else. nvJPEG
refuses a JPEG it cannot parse, but not the lesser damage that libjpeg only warns about (the CPU
path refuses that as BAD_PICTURE): CRAFTAI_GPU_JPEG=off keeps every picture on the CPU path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

log = logging.getLogger("craftai.infer.nvjpeg")

# EXIF orientation (1..8) -> how the decoded (H, W, 3) pixels are turned to be shown as apps show
# them: the same turns as craftai_infer.pictures' on the host (Pillow's exif_transpose).
_TURNS: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {
    2: lambda t: t.flip(1),  # mirrored left-right
    3: lambda t: t.flip(0, 1),  # rotated 180°
    4: lambda t: t.flip(0),  # mirrored top-bottom
    5: lambda t: t.permute(1, 0, 2),  # transposed
    6: lambda t: t.permute(1, 0, 2).flip(1),  # rotated 90° clockwise to show
    7: lambda t: t.flip(0, 1).permute(1, 0, 2),  # transversed
    8: lambda t: t.permute(1, 0, 2).flip(0),  # rotated 90° counter-clockwise to show
}
_warned = threading.Event()
_streams = threading.local()  # each decoding thread's own CUDA stream


class DevicePicture(np.ndarray):
    """A picture of the one type (host pixels in page-locked memory) whose pixels are also on a
    GPU (`on_device`, (H, W, 3) uint8, the same values): decoded there. A view or copy of it has no
    pixels on the device (numpy keeps the class, not the attribute), so only the picture itself is
    ever taken for them (craftai_infer.pipelines.picture.device_pixels)."""

    on_device: torch.Tensor


def decoder(device: str) -> Callable[[bytes, int], np.ndarray | None] | None:
    """The GPU decoder for pictures of a route on `device` (a CUDA device), or None where there is
    none: not a CUDA device, no GPU answering, or torchvision without nvJPEG's decoder."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except Exception as exc:  # torchvision missing, or a build that does not import beside this torch
        log.info("JPEG pictures are decoded on the CPU: torchvision.io does not import (%s)", exc)
        return None
    target = torch.device(device)

    def decode(data: bytes, orientation: int) -> np.ndarray | None:
        """A plain JPEG (8-bit, RGB or grey, complete: craftai_infer.pictures checked) decoded on
        the device and turned as `orientation` says, or None when nvJPEG refuses it."""
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        stream = _own_stream(target)
        with torch.cuda.stream(stream):
            try:
                chw: torch.Tensor = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=target)
            except RuntimeError as exc:  # nvJPEG's refusal: the CPU decodes it (and refuses it if damaged)
                if not _warned.is_set():
                    _warned.set()
                    log.info("nvJPEG did not decode a picture (%s); such pictures are decoded on the CPU", exc)
                return None
            turn = _TURNS.get(orientation)
            hwc = chw.permute(1, 2, 0)
            pixels = (turn(hwc) if turn is not None else hwc).contiguous()
            host = torch.empty(pixels.shape, dtype=torch.uint8, pin_memory=True)
            host.copy_(pixels, non_blocking=True)
        stream.synchronize()
        # the model's worker reads the pixels on its stream (the device's default): their block is
        # not reused before what that stream has queued when they are freed has run
        pixels.record_stream(torch.cuda.default_stream(pixels.device))
        picture: Any = host.numpy().view(DevicePicture)  # its base keeps the page-locked block
        picture.on_device = pixels
        return picture  # type: ignore[no-any-return]

    return decode


def _own_stream(device: torch.device) -> torch.cuda.Stream:
    """This thread's CUDA stream for decoding (made on its first picture)."""
    stream: torch.cuda.Stream | None = getattr(_streams, "stream", None)
    if stream is None:
        stream = _streams.stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    return stream
