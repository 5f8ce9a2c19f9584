"""The asyncio transport (`AsyncTransport`, on grpc.aio): what craftai.transport's `Transport`
does, awaited. The same `Connection` (addresses, TLS, keys, metadata), the same retry decisions
(craftai.policy's RetryPlan), the same reading of a stream's events (`stream_item`, `Reading`);
only the sleeping, the waiting for a server and the channels are asyncio's. A session's calls go
to its replica as on the blocking transport: the same decisions (craftai.replicas' ReplicaTable),
awaited (AsyncReplicas).

Channels are made on first use, inside the event loop that uses them: one AsyncTransport (one
AsyncAiClient) belongs to one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import grpc
import grpc.aio

from craftai.calls import ServiceName, Stream, Unary
from craftai.errors import CraftAiError
from craftai.local_server import ensure as ensure_server
from craftai.policy import Deadlines, Retries, Retrying, RetryPlan
from craftai.replicas import AsyncReplicas, pinned_options
from craftai.transport import (
    STUBS,
    AnswerT,
    Connection,
    ProgressCallback,
    Reading,
    Requests,
    RequestT,
    Security,
    StreamEvent,
    StreamTry,
    new_request_id,
    pinned_key,
    say_started,
)
from craftai_wire.channels import balancing_options
from craftai_wire.targets import balanced


async def _off_the_loop(requests: Iterator[RequestT]) -> AsyncIterator[RequestT]:
    """A stream of requests made by blocking code (files read as they are sent), each taken on a
    worker thread so that the event loop never waits on a disk."""
    done = object()
    while (item := await asyncio.to_thread(next, requests, done)) is not done:
        yield item  # type: ignore[misc]


class AsyncWatched:
    """Transport's Watched for an asyncio call: the app's own error kept apart from the call's."""

    def __init__(self, requests: AsyncIterator[Any]) -> None:
        self._requests = requests
        self.failed: BaseException | None = None

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            async for request in self._requests:
                yield request
        except Exception as error:  # ends the call; raised to the app as itself
            self.failed = error
            raise


def open_channel(address: str, security: Security, options: Sequence[tuple[str, int | str]]) -> grpc.aio.Channel:
    """A grpc.aio channel to `address`, made as `security` says, with `options`."""
    if security.credentials is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(address, security.credentials, options=list(options))


class AsyncTransport:
    """Awaited calls to the three services: one grpc.aio channel per address (shared when services
    share one; spread over the replicas behind it), a deadline on every call, and calls the server
    could not answer tried again under `retries` once the server is reachable again. A session's
    calls (`replica=`) go to its replica, as Transport's."""

    def __init__(self, connection: Connection, deadlines: Deadlines, retries: Retries) -> None:
        self.connection = connection
        self.deadlines = deadlines
        self.retries = retries
        self._channels: dict[str, tuple[grpc.aio.Channel, Security]] = {}
        self._spread: dict[str, bool] = {}  # address -> craftai_wire.targets.balanced, looked up once
        self._retired: list[grpc.aio.Channel] = []
        self._watchers: list[asyncio.Task[None]] = []
        self._reached: set[str] = set()  # addresses whose channel was READY once, or that answered
        self.replicas = AsyncReplicas(connection.addresses["infer"], self._pinned_channel, key=pinned_key)

    def for_app(self, app_id: str, app_key: str | None) -> AsyncTransport:
        """The same channels, calls made as another app with exactly this key, or none: never the
        local key (a gateway's callers prove who they are themselves)."""
        clone = copy.copy(self)
        clone.connection = self.connection.for_caller(app_id, app_key)
        return clone

    def _channel(self, address: str) -> tuple[grpc.aio.Channel, Security]:
        """The channel to `address` as it should be now (Connection.security, as Transport's), and
        how it was made. One event loop owns the transport: no lock."""
        security = self.connection.security(address)
        kept = self._channels.get(address)
        if kept is not None and kept[1].pinned == security.pinned:
            return kept[0], security
        if kept is not None:
            self._retired.append(kept[0])  # calls in flight on it finish there; closed with the transport
        spread = self._spread.get(address)
        if spread is None:  # not asked through _method first (it looks the name up off the loop)
            spread = self._spread[address] = balanced(address)
        channel = open_channel(address, security, balancing_options(security.options, spread))
        self._channels[address] = (channel, security)
        self._watchers.append(asyncio.get_running_loop().create_task(self._watch(address, channel)))
        return channel, security

    async def _watch(self, address: str, channel: grpc.aio.Channel) -> None:
        """Note when the channel is READY the first time (grpc.aio has no subscribe)."""
        state = channel.get_state(try_to_connect=False)
        while state != grpc.ChannelConnectivity.READY:
            if state == grpc.ChannelConnectivity.SHUTDOWN:
                return
            await channel.wait_for_state_change(state)
            state = channel.get_state(try_to_connect=False)
        self._reached.add(address)

    @staticmethod
    def _pinned_channel(address: str, authority: str, security: Security) -> grpc.aio.Channel:
        """A channel to one replica's address, made as the infer channel is (craftai.replicas)."""
        return open_channel(address, security, pinned_options(security.options, authority))

    async def _method(self, service: ServiceName, name: str, replica: str = "") -> tuple[Any, Security, bool]:
        """Transport._call, awaited: the method, how it goes, whether pinned to `replica`."""
        address = self.connection.addresses[service]
        if address not in self._spread:  # whether calls spread over its replicas: a DNS lookup, off the loop
            self._spread[address] = await asyncio.to_thread(balanced, address)
        channel, security = self._channel(address)
        if service == "infer" and replica:
            ask = lambda: self.connection.metadata(new_request_id(), security.app_key)  # noqa: E731
            pinned = await self.replicas.stub(replica, security, ask)
            if pinned is not None:
                return getattr(pinned, name), security, True
        return getattr(STUBS[service](channel), name), security, False

    async def _wait_again(self, address: str, error: CraftAiError, plan: RetryPlan) -> None:
        """Transport._wait_again, awaited (the shared local server started on a worker thread)."""
        if plan.start_server(error, self.connection.starts_server):
            await asyncio.to_thread(ensure_server, address, say_started)  # now, or by another command meanwhile
            kept = self._channels.pop(address, None)  # a fresh channel: the old one backs off
            if kept is not None:
                self._retired.append(kept[0])
            return
        await asyncio.sleep(0)  # let the READY watcher see a state it was told about
        pause = plan.pause(error, address in self._reached)
        if pause is None:
            raise error
        started = time.monotonic()
        await asyncio.sleep(pause)
        try:
            ready = self._channel(address)[0].channel_ready()
            await asyncio.wait_for(ready, plan.wait_left(time.monotonic() - started))
        except TimeoutError:
            raise error from None
        plan.tried(time.monotonic() - started)

    async def unary(
        self, rpc: Unary[RequestT, AnswerT], request: RequestT, request_id: str | None = None, *, replica: str = ""
    ) -> AnswerT:
        """One unary call to its answer, tried again after UNAVAILABLE (Retries); on `replica`'s
        own channel when it has one (then ReplicaLostError instead of another try)."""
        address = self.connection.addresses[rpc.service]
        request_id = request_id or new_request_id()
        plan = self.retries.plan()
        while True:
            call, security, pinned = await self._method(rpc.service, rpc.name, replica)
            metadata = self.connection.metadata(request_id, security.app_key)
            try:
                answer = await call(request, timeout=self.deadlines.unary, metadata=metadata)
            except grpc.RpcError as exc:
                error = self.connection.explain(CraftAiError.from_rpc(exc), address, security)
                self.replicas.check(replica, pinned, error)
                await self._wait_again(address, error, plan)
                continue
            assert isinstance(answer, rpc.answer)
            self._reached.add(address)  # the watcher task may not have seen READY yet
            return answer

    async def stream(
        self,
        rpc: Stream[RequestT, AnswerT],
        request: RequestT | Requests[RequestT],
        request_id: str,
        *,
        what: str = "the stream",
        replica: str = "",
    ) -> AsyncGenerator[StreamEvent | AnswerT, None]:
        """The one reader of server streams, as Transport.stream: progress and notices as they come,
        the result last; cancelled when the reader stops early (or its task is cancelled); tried
        again under `retries` after a `Retrying` event; a session's stream on its replica's own
        channel raises ReplicaLostError instead."""
        address = self.connection.addresses[rpc.service]
        plan = self.retries.plan()
        while True:
            call, security, pinned = await self._method(rpc.service, rpc.name, replica)
            metadata = self.connection.metadata(request_id, security.app_key)
            sent = _off_the_loop(request()) if callable(request) else request
            events = call(sent, timeout=getattr(self.deadlines, rpc.deadline), metadata=metadata)
            attempt = StreamTry(rpc, request_id, what)
            try:
                async for event in events:  # read to the end: the result is the last message, then the status
                    item = attempt.take(event)
                    if item is not None:
                        yield item
            except grpc.RpcError as exc:
                attempt.failed(self.connection.explain(CraftAiError.from_rpc(exc), address, security))
            finally:
                events.cancel()  # a no-op once the stream ended; stops the server's work otherwise
            if attempt.delivered:
                self._reached.add(address)
            if attempt.answered:
                return
            self.replicas.check(replica, pinned, attempt.error)
            if attempt.renewed(self.retries.wait_seconds):
                plan = self.retries.plan()
            await self._wait_again(address, attempt.error, plan)
            yield Retrying(attempt.error)

    async def frames(
        self,
        rpc: Stream[RequestT, AnswerT],
        requests: Callable[[], AsyncIterator[RequestT]] | AsyncIterator[RequestT],
        request_id: str,
    ) -> AsyncGenerator[Any, None]:
        """Transport.frames, awaited: every event as it comes; tried again, with new requests from
        `requests()`, only while the server has answered nothing (given requests themselves, never)."""
        address = self.connection.addresses[rpc.service]
        plan = self.retries.plan()
        while True:
            call, security, _pinned = await self._method(rpc.service, rpc.name, "")
            metadata = self.connection.metadata(request_id, security.app_key)
            sent = AsyncWatched(requests() if callable(requests) else requests)
            events = call(aiter(sent), timeout=getattr(self.deadlines, rpc.deadline), metadata=metadata)
            answered = False
            try:
                async for event in events:
                    answered = True
                    yield event
                return
            except grpc.RpcError as exc:
                error = self.connection.explain(CraftAiError.from_rpc(exc), address, security)
            finally:
                events.cancel()
            if sent.failed is not None:
                raise sent.failed
            if answered or not callable(requests):
                raise error
            await self._wait_again(address, error, plan)

    async def result(
        self,
        rpc: Stream[RequestT, AnswerT],
        request: RequestT,
        on_progress: ProgressCallback | None,
        notices: list[str],
        request_id: str,
        *,
        replica: str = "",
    ) -> AnswerT:
        """A stream run to its one result: progress to the callback, notices collected (those of
        the try that answered only)."""
        reading = Reading(rpc, on_progress, notices)
        events = self.stream(rpc, request, request_id, replica=replica)
        try:
            async for event in events:
                reading.take(event)
        finally:
            await events.aclose()
        return reading.answer()

    async def close(self) -> None:
        for task in self._watchers:
            task.cancel()
        for task in self._watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._watchers.clear()
        await self.replicas.close()
        for channel in [*(kept for kept, _ in self._channels.values()), *self._retired]:
            await channel.close()
        self._channels.clear()
        self._retired.clear()
