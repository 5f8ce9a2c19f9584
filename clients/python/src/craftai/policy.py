"""How long calls may take and when a failed call is tried again: the policy alone, without any
channel, so that the blocking client and an asyncio client decide alike and differ only in how
they sleep and wait for the server."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from craftai.errors import CraftAiError
from craftai_wire.vocabulary import Reason


@dataclass(frozen=True)
class Deadlines:
    """Seconds each kind of call may take before it is abandoned with DEADLINE_EXCEEDED."""

    unary: float = 30.0
    inference: float = 600.0
    setup: float = 6 * 3600.0
    frames: float = 24 * 3600.0  # a frame stream (a video, a camera) lasts as long as it sends


@dataclass(frozen=True)
class Retries:
    """How a call the server could not answer (UNAVAILABLE: the connection was lost, the server is
    restarting or shutting down) is tried again: up to `attempts` more times, each after `backoff`
    seconds (doubled each time, at most `max_backoff`; or the server's RetryInfo) and after the
    server is reachable again, waiting for that `wait_seconds` at most in all. A server this client
    never reached is not waited for: the error is raised at once (no server there)."""

    attempts: int = 3
    backoff: float = 0.25
    max_backoff: float = 5.0
    wait_seconds: float = 20.0

    def plan(self) -> RetryPlan:
        """The tries of one call under this policy."""
        return RetryPlan(self)


def unanswered(error: CraftAiError) -> bool:
    """UNAVAILABLE from the channel (connection lost, server down or restarting) or from a server
    that is shutting down: worth another try. An UNAVAILABLE the service answered with a reason
    (e.g. SOURCES_FAILED: every download source failed) is an answer, not retried."""
    return error.code == grpc.StatusCode.UNAVAILABLE and error.reason in ("", Reason.SHUTTING_DOWN)


@dataclass
class RetryPlan:
    """One call's tries: after each failure, whether to try again and after how long.

    The transport asks `pause` (None: raise the error), sleeps that long, waits for the server at
    most `wait_left` seconds (giving up when it is not reachable by then), and reports the time
    spent with `tried`."""

    policy: Retries
    attempt: int = 0
    waited: float = 0.0
    started_server: bool = False  # this call started the shared local server once (no more)

    def pause(self, error: CraftAiError, reached: bool) -> float | None:
        """Seconds to sleep before the next try; None when the error is an answer, no try is left,
        or the server was never `reached` (nothing there to wait for)."""
        policy = self.policy
        if not unanswered(error) or self.attempt >= policy.attempts or not reached:
            return None
        backoff = min(policy.backoff * 2**self.attempt, policy.max_backoff)
        return min(error.retry_after if error.retry_after is not None else backoff, policy.max_backoff)

    def start_server(self, error: CraftAiError, allowed: bool) -> bool:
        """Whether to look for the shared local server (and start it when none answers) before
        deciding on `error`: once a call, only where the client may (`allowed`: no address given),
        after the channel's own UNAVAILABLE (nothing answered)."""
        if not allowed or self.started_server or error.code != grpc.StatusCode.UNAVAILABLE or error.reason:
            return False
        self.started_server = True
        return True

    def wait_left(self, elapsed: float) -> float:
        """Seconds this try may still wait for the server, `elapsed` being spent on it already."""
        return max(self.policy.wait_seconds - self.waited - elapsed, 0.0)

    def tried(self, elapsed: float) -> None:
        """Another try is about to start, after `elapsed` seconds of pause and waiting."""
        self.waited += elapsed
        self.attempt += 1


@dataclass(frozen=True)
class Retrying:
    """A stream event: the stream failed before its result and is tried again (after `error`);
    what it gave so far is void and its progress starts again."""

    error: CraftAiError
