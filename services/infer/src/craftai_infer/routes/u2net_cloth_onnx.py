"""rembg's u2net_cloth_seg for image.matte on onnxruntime: the published ONNX run as published, fed as
rembg's U²-Net sessions feed theirs at 768² (craftai_infer.pipelines.matte_u2netp), its class
logits made into the mattes of the clothes' parts as rembg's cloth session makes them
(craftai_infer.pipelines.matte_u2net_cloth). The file's contract (one 768² picture in, the four
class logits first out) is checked when the route loads it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from craftai_infer.pipelines import matte_u2net_cloth
from craftai_infer.pipelines.picture import Picture
from craftai_infer.routes.isnet_onnx import IsnetOnnx
from craftai_wire.vocabulary import PARTS_OF, Recipe

# onnxruntime's working memory for one picture on the CPU, measured on the stand-in (the authors'
# U²-Net with four output channels) at 768² with tools/bench/working_memory.py (0.95 GB above the
# loaded session, the parts' mattes of a 1024x768 picture included: docs/API.md, "image.matte with
# u2net_cloth_seg"), rounded up.
NETWORK_BYTES = 1024 * 2**20
PARTS: tuple[str, ...] = tuple(PARTS_OF[Recipe.U2NET_CLOTH_SEG])
CLASS_OF = {part: index for index, part in enumerate(PARTS, start=1)}  # the network's class ids


class U2netClothOnnx(IsnetOnnx):
    """u2net_cloth_seg: each part's matte byte-identical to rembg's mask on the same file; one
    picture at a time on the CPU, its working memory given back after each (`working_bytes`)."""

    steps = matte_u2net_cloth.CLOTH
    maps = matte_u2net_cloth.CLASSES
    network_bytes = NETWORK_BYTES
    parts = PARTS

    def matte(self, pictures: Sequence[Picture]) -> list[npt.NDArray[np.uint8]]:
        """Every part's matte, stacked (rembg's answer when no part is asked)."""
        return self.matte_parts(pictures, [None] * len(pictures))

    def matte_parts(self, pictures: Sequence[Picture], parts: Sequence[str | None]) -> list[npt.NDArray[np.uint8]]:
        answers = []
        for picture, part in zip(pictures, parts, strict=True):
            height, width = picture.shape[:2]
            indices = [CLASS_OF[part]] if part is not None else list(CLASS_OF.values())
            answers.append(matte_u2net_cloth.mattes(self._first_output(picture), (width, height), indices))
        return answers

    def working_bytes(self, height: int, width: int) -> int:
        """The network's (IsnetOnnx) and, at the picture's size, the class map, a part's palette
        picture and its two conversions, and the mattes stacked."""
        return super().working_bytes(height, width) + height * width * (6 + 2 * len(self.parts))
