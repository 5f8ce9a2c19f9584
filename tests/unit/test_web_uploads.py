"""The body's time allowance (craftai.web.uploads.BodyLimit) bounds the body only: once the body is
whole, an answer streamed for longer than the allowance (segment everything's events, a setup's)
still hears its client leave instead of being cut by a 408 raised from the wait for a disconnect.
A body that is still coming after its allowance is refused as before."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from craftai.web.uploads import BodyLimit, BodyRules, BodyTooSlow

ALLOWANCE = 0.2  # seconds, and 1000 bytes a second: the 10-byte bodies below get ~0.21 s
LATE = 0.6  # the client's next message comes after the allowance


def _scope() -> Scope:
    return {"type": "http", "method": "POST", "path": "/", "headers": [(b"content-length", b"10")]}


def _client(*messages: tuple[float, Message]) -> Receive:
    """The client's messages, each after its wait."""
    queue = list(messages)

    async def receive() -> Message:
        wait, message = queue.pop(0)
        await asyncio.sleep(wait)
        return message

    return receive


async def _nothing_sent(message: Message) -> None:
    raise AssertionError(f"nothing is answered in this test: {message['type']}")


def _serve(receive: Receive) -> list[Message]:
    """An app that reads the body, then waits for the client to leave, as a streamed answer does."""
    seen: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] == "http.disconnect" or (
                message["type"] == "http.request" and len(seen) > 1 and not message.get("more_body")
            ):
                return

    limit = BodyLimit(app, BodyRules(1000, 10_000, ALLOWANCE, 1000))
    asyncio.run(limit(_scope(), receive, _nothing_sent))
    return seen


def test_waiting_for_the_client_to_leave_after_the_whole_body_is_not_timed() -> None:
    seen = _serve(
        _client(
            (0.0, {"type": "http.request", "body": b"0123456789", "more_body": False}),
            (LATE, {"type": "http.disconnect"}),
        )
    )
    assert [m["type"] for m in seen] == ["http.request", "http.disconnect"]


def test_a_body_still_coming_after_its_allowance_is_refused() -> None:
    with pytest.raises(BodyTooSlow):
        _serve(
            _client(
                (0.0, {"type": "http.request", "body": b"01234", "more_body": True}),
                (LATE, {"type": "http.request", "body": b"56789", "more_body": False}),
            )
        )
