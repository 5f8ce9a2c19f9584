"""craft-ai services: the Python SDK.

from craftai import AiClient
"""

from craftai.client import AiClient
from craftai.errors import CraftAiError
from craftai.outputs import EncodedImage, LowResMask, MaskOutput, MatteOutput, Point, SegmentOutput
from craftai.policy import Deadlines, Retries
from craftai.session import SegmentSession

__all__ = [
    "AiClient",
    "CraftAiError",
    "Deadlines",
    "EncodedImage",
    "LowResMask",
    "MaskOutput",
    "MatteOutput",
    "Point",
    "Retries",
    "SegmentOutput",
    "SegmentSession",
]
