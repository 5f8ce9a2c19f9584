"""craft-ai services: the Python SDK.

from craftai import AiClient          # blocking
from craftai import AsyncAiClient     # asyncio (grpc.aio)
"""

from craftai.client import AiClient, AsyncAiClient
from craftai.cutout import AsyncCutoutSession, CutoutSession
from craftai.errors import CraftAiError
from craftai.frames import FrameOutput
from craftai.installation import FeatureInfo, Notice, Progress, ResolvedRoute, RouteStatus, Runtime, SetupOutput
from craftai.outputs import (
    CutoutPrompt,
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
from craftai_wire.vocabulary import RouteState

__all__ = [
    "AiClient",
    "AsyncAiClient",
    "AsyncCutoutSession",
    "AsyncSegmentSession",
    "CraftAiError",
    "CutoutPrompt",
    "CutoutSession",
    "Deadlines",
    "EncodedImage",
    "EverythingOutput",
    "FeatureInfo",
    "FrameOutput",
    "LowResMask",
    "MaskOutput",
    "MatteOutput",
    "Notice",
    "Point",
    "Polygon",
    "Progress",
    "Prompt",
    "ResolvedRoute",
    "Retries",
    "Rle",
    "RouteState",
    "RouteStatus",
    "Runtime",
    "SegmentOutput",
    "SegmentSession",
    "SetupOutput",
]
