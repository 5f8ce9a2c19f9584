"""What one server lets its callers hold at once, and for how long (CRAFTAI_MAX_* settings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

RETRY_AFTER_SECONDS = 1.0  # the google.rpc.RetryInfo of a refusal that a retry may pass


@dataclass(frozen=True)
class Limits:
    """What one server lets its callers hold at once, and for how long (0 turns a count off)."""

    per_app: int = 16  # calls in progress per app id
    wildcard: int = 32  # calls in progress of every app id a `*` key admits (or keys off), together
    per_service: int = 64  # calls in progress from apps, per service
    internal: int = 64  # calls in progress between the services
    open_streams: int = 64  # health Watch and reflection streams
    max_call_seconds: float = 900.0
    long_calls: Mapping[str, float] = field(default_factory=dict)  # full method name -> its own time limit
    stalled_write_seconds: float = 30.0

    def seconds_for(self, method: str) -> float:
        return self.long_calls.get(method, self.max_call_seconds)
