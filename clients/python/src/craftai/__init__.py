"""craft-ai services: the Python SDK.

from craftai import AiClient
"""

from craftai.client import (
    AiClient,
    Deadlines,
    LowResMask,
    MaskOutput,
    MatteOutput,
    Point,
    Retries,
    SegmentOutput,
    SegmentSession,
)
from craftai.errors import CraftAiError

__all__ = [
    "AiClient",
    "CraftAiError",
    "Deadlines",
    "LowResMask",
    "MaskOutput",
    "MatteOutput",
    "Point",
    "Retries",
    "SegmentOutput",
    "SegmentSession",
]
