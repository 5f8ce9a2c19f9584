"""craft-ai services: the Python SDK.

from craftai import AiClient
"""

from craftai.client import AiClient, Deadlines, MatteOutput
from craftai.errors import CraftAiError

__all__ = ["AiClient", "CraftAiError", "Deadlines", "MatteOutput"]
