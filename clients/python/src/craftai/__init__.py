"""craft-ai services: the Python SDK.

from craftai import AiClient
"""

from craftai.client import AiClient
from craftai.errors import CraftAiError
from craftai.outputs import (
    EncodedImage,
    EverythingOutput,
    LowResMask,
    MaskOutput,
    MatteOutput,
    Point,
    Polygon,
    Prompt,
    Rle,
    SegmentOutput,
)
from craftai.policy import Deadlines, Retries
from craftai.session import SegmentSession

__all__ = [
    "AiClient",
    "CraftAiError",
    "Deadlines",
    "EncodedImage",
    "EverythingOutput",
    "LowResMask",
    "MaskOutput",
    "MatteOutput",
    "Point",
    "Polygon",
    "Prompt",
    "Retries",
    "Rle",
    "SegmentOutput",
    "SegmentSession",
]
