"""craft-ai services: the Python SDK.

from craftai import AiClient          # blocking
from craftai import AsyncAiClient     # asyncio (grpc.aio)
"""

from craftai.client import AiClient, AsyncAiClient
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
from craftai.session import AsyncSegmentSession, SegmentSession

__all__ = [
    "AiClient",
    "AsyncAiClient",
    "AsyncSegmentSession",
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
