"""Which replica of the infer service keeps a session, and how a client reaches that one: the
decisions, written once (`ReplicaTable`), and the two thin layers that make its calls, blocking
(`Replicas`) and awaited (`AsyncReplicas`).

A segment session lives on the replica that opened it, and its id names that replica
(`<token>.<replica>`: `replica_of`), so a session known by its id alone (a web gateway's) is routed
as well as one this client opened. The transport's infer channel lets gRPC spread calls over every
address its target resolves to (round robin over the replicas that report SERVING:
craftai_wire.channels), but a call cannot choose its replica there. So for the calls of a session
the client keeps one channel pinned to each address, and asks each one (GetRuntime) which replica
answers there. Pinning is only needed, and only done, when the target resolves to several
addresses: one address (a single server, a Service's virtual IP, `craftai serve`) is reached
through the infer channel itself, one connection to one server.

Targets are read by gRPC's rules (craftai_wire.targets). The pinned channels are made as the
infer channel is (its credentials, the pinned local certificate), presenting the target's own
name as their authority, so TLS checks the same certificate name as for the infer channel.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import grpc
import grpc.aio

from craftai.errors import CraftAiError
from craftai.policy import unanswered
from craftai_wire.targets import parse_target, resolve
from craftai_wire.v1 import infer_pb2, infer_pb2_grpc
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.replicas")

SEPARATOR = "."  # between a session id's token (URL-safe base64: no dot) and its replica's name
Metadata = tuple[tuple[str, str], ...]
ChannelT = TypeVar("ChannelT")
# (pinned target, authority, how the infer channel is made now) -> a channel to that one address
OpenChannel = Callable[[str, str, Any], ChannelT]
Stub = Any  # the generated infer stub on a pinned channel: InferServiceStub, or its grpc.aio form


def replica_of(session_id: str) -> str:
    """The replica a session id names ("" for an id without one: a server that does not say)."""
    return session_id.partition(SEPARATOR)[2]


def pinned_options(options: Iterable[tuple[str, int | str]], authority: str) -> list[tuple[str, int | str]]:
    """The options of a channel pinned to one replica's address: the infer channel's, presenting
    the service's name (TLS checks it), with gRPC's default policy instead of round robin: it
    connects when called (an idle one to a replica gone costs nothing), and a draining replica
    answers its sessions' calls SHUTTING_DOWN itself."""
    pinned = [o for o in options if o[0] != "grpc.service_config"]
    if authority:
        pinned.append(("grpc.default_authority", authority))
    return pinned


class ReplicaLostError(CraftAiError):
    """A session's call could not reach the replica that keeps it (gone, draining, or no longer
    reachable): its sessions are lost with it, and are opened again on another replica."""

    def as_forgotten(self) -> CraftAiError:
        """What an app that cannot open the session again (it has the id alone) is told: the
        server no longer has the session (SESSION_NOT_FOUND, as after an eviction)."""
        return CraftAiError(
            grpc.StatusCode.NOT_FOUND,
            f"session not found: {self.message}",
            Reason.SESSION_NOT_FOUND,
            request_id=self.request_id,
        )


@dataclass
class _Pinned(Generic[ChannelT]):
    channel: ChannelT
    stub: Stub
    replica: str = ""  # the name it answered with; "" until asked (or after it was lost)


class ReplicaTable(Generic[ChannelT]):
    """The infer service's replicas behind one target, as this client reaches them: a channel
    pinned to each address and the replica name each answered with. Every decision lives here
    (which stub serves a replica, when to look again, which channels to retire, what a lost
    replica means); the subclasses only resolve, ask and close, blocking or awaited.

    A name not known resolves the target again and asks the addresses not asked yet (at once for a
    name never looked up, such as a session's new replica; then at most once every
    `refresh_seconds` for that name). The channel of an address no longer resolved is closed
    `retire_seconds` later, so that a call still running on it (a replica draining) is not cut;
    so are all of them when how the infer channel is made changed (`way`: the local server made
    its certificate since)."""

    def __init__(
        self,
        target: str,
        open_channel: OpenChannel[ChannelT],
        *,
        key: Callable[[Any], Hashable] = lambda way: way,
        timeout: float = 5.0,
        refresh_seconds: float = 5.0,
        retire_seconds: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = parse_target(target)
        self._open = open_channel
        self._key = key  # what tells one way of making the channels from another (Security.pinned)
        self.timeout = timeout
        self.refresh_seconds = refresh_seconds
        self.retire_seconds = retire_seconds
        self._clock = clock
        self._pinned: dict[str, _Pinned[ChannelT]] = {}
        self._by_name: dict[str, str] = {}
        self._missed: dict[str, float] = {}  # names not found behind the target, and when
        self._retired: list[tuple[float, ChannelT]] = []  # channels of vanished addresses, since when
        self._way: Hashable = None  # the key of how the pinned channels were made

    def known(self, replica: str, way: Any) -> Stub | None:
        """The stub pinned to `replica` when it is known already (no lock needed: the common case);
        `way`: how the infer channel is made now (the transport's Security)."""
        if not replica or self.target.kind == "other" or self._key(way) != self._way:
            return None
        known = self._pinned.get(self._by_name.get(replica, ""))
        return known.stub if known is not None and known.replica == replica else None

    def wants_lookup(self, replica: str, way: Any) -> bool:
        """Whether to resolve and ask again for `replica` now (under the subclass's lock)."""
        if not replica or self.target.kind == "other" or self.known(replica, way) is not None:
            return False
        return self._key(way) != self._way or self._clock() - self._missed.get(replica, -1e9) >= self.refresh_seconds

    def update(self, addresses: list[str] | None, way: Any) -> tuple[dict[str, Stub], list[ChannelT]]:
        """The target resolved again (`addresses`; None: it could not be, keep those known): open
        channels to new addresses, retire those of vanished ones. Returns the stubs to ask for
        their replica's name, by address, and the channels to close now."""
        now = self._clock()
        if self._key(way) != self._way:  # made another way now: every pinned channel is made again
            self._retired += [(now, pinned.channel) for pinned in self._pinned.values()]
            self._pinned, self._by_name, self._way = {}, {}, self._key(way)
        if addresses is None:
            addresses = list(self._pinned)
        if len(addresses) <= 1:
            addresses = []  # one endpoint: the infer channel is the one connection to it
        for gone in set(self._pinned) - set(addresses):
            self._retired.append((now, self._pinned.pop(gone).channel))
        closing = []
        while self._retired and now - self._retired[0][0] >= self.retire_seconds:
            closing.append(self._retired.pop(0)[1])
        for address in addresses:
            if address not in self._pinned:
                channel = self._open(address, self.target.authority, way)
                self._pinned[address] = _Pinned(channel, infer_pb2_grpc.InferServiceStub(cast(Any, channel)))
        asking = {address: pinned.stub for address, pinned in self._pinned.items() if not pinned.replica}
        return asking, closing

    def named(self, replica: str, answers: dict[str, str]) -> Stub | None:
        """The names the asked addresses answered with (address -> name); then the stub of
        `replica`, the one looked for (None, and noted as missed, when no address answered it)."""
        for address, name in answers.items():
            if address in self._pinned:
                self._pinned[address].replica = name
        self._by_name = {p.replica: address for address, p in self._pinned.items() if p.replica}
        found = self._pinned.get(self._by_name.get(replica, ""))
        if found is None:
            if len(self._missed) > 1000:
                self._missed.clear()
            self._missed[replica] = self._clock()
            return None
        return found.stub

    def lost(self, replica: str, error: CraftAiError) -> ReplicaLostError:
        """The replica did not answer a call of one of its sessions (`error`): forget its name (its
        address, if still resolved, is asked again later and may answer as a new process), and
        say so. The replica is taken as gone, its sessions with it, rather than waited for, while
        the other replicas serve."""
        address = self._by_name.pop(replica, None)
        if address is not None and address in self._pinned:
            self._pinned[address].replica = ""
        return ReplicaLostError(
            error.code,
            f"the infer replica {replica} that keeps this session did not answer: {error.message}",
            error.reason,
            retry_after=error.retry_after,
            request_id=error.request_id,
        )

    def check(self, replica: str, pinned: bool, error: CraftAiError) -> None:
        """After a call on `replica`'s own channel (`pinned`) failed with `error`: raise
        ReplicaLostError when the call went unanswered (it is not tried elsewhere: the session
        opens itself again instead); else return, and the transport's retries decide."""
        if pinned and unanswered(error):
            raise self.lost(replica, error) from None

    def _channels(self) -> list[ChannelT]:
        """Every channel, forgotten: what `close` closes."""
        channels = [p.channel for p in self._pinned.values()] + [c for _, c in self._retired]
        self._pinned, self._by_name, self._retired = {}, {}, []
        return channels

    def _noted(self, address: str, exc: BaseException) -> None:
        error = CraftAiError.from_rpc(exc) if isinstance(exc, grpc.RpcError) else exc
        log.info("the infer replica at %s did not say its name (%s)", address, error)

    def _resolved(self) -> list[str] | None:
        try:
            return resolve(self.target)
        except (OSError, UnicodeError) as exc:
            log.info("could not resolve %s again (%s); keeping the addresses known", self.target.host, exc)
            return None


class Replicas(ReplicaTable[grpc.Channel]):
    """The table's calls, blocking (Transport): thread-safe; owns the pinned channels (`close`)."""

    def __init__(self, target: str, open_channel: OpenChannel[grpc.Channel], **kwargs: Any) -> None:
        super().__init__(target, open_channel, **kwargs)
        self._lock = threading.Lock()

    def stub(self, replica: str, way: Any, metadata: Callable[[], Metadata]) -> Stub | None:
        """The stub pinned to `replica`; None when the target is one endpoint (the infer channel
        reaches it) or the replica is not (or no longer) found behind the target. `metadata`: what
        the question to each replica carries (the caller's identity)."""
        known = self.known(replica, way)
        if known is not None or not replica:
            return known
        with self._lock:
            if not self.wants_lookup(replica, way):
                return self.known(replica, way)
            asking, closing = self.update(self._resolved(), way)
            for channel in closing:
                channel.close()
            futures = {
                address: stub.GetRuntime.future(
                    infer_pb2.GetRuntimeRequest(), timeout=self.timeout, metadata=metadata()
                )
                for address, stub in asking.items()
            }
            answers = {}
            for address, future in futures.items():
                try:
                    answers[address] = future.result().replica
                except grpc.RpcError as exc:
                    self._noted(address, exc)
            return self.named(replica, answers)

    def lost(self, replica: str, error: CraftAiError) -> ReplicaLostError:
        with self._lock:
            return super().lost(replica, error)

    def close(self) -> None:
        with self._lock:
            for channel in self._channels():
                channel.close()


class AsyncReplicas(ReplicaTable[grpc.aio.Channel]):
    """The table's calls, awaited (AsyncTransport): one event loop; owns the pinned channels."""

    def __init__(self, target: str, open_channel: OpenChannel[grpc.aio.Channel], **kwargs: Any) -> None:
        super().__init__(target, open_channel, **kwargs)
        self._lock: asyncio.Lock | None = None  # made in the loop that uses it

    async def stub(self, replica: str, way: Any, metadata: Callable[[], Metadata]) -> Stub | None:
        """Replicas.stub, awaited: the name resolved off the loop, the replicas asked at once."""
        known = self.known(replica, way)
        if known is not None or not replica:
            return known
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if not self.wants_lookup(replica, way):
                return self.known(replica, way)
            asking, closing = self.update(await asyncio.to_thread(self._resolved), way)
            for channel in closing:
                await channel.close()
            asked: list[Awaitable[infer_pb2.Runtime]] = [  # the grpc.aio stub's calls are awaitables
                stub.GetRuntime(infer_pb2.GetRuntimeRequest(), timeout=self.timeout, metadata=metadata())
                for stub in asking.values()
            ]
            answers = {}
            for address, answer in zip(asking, await asyncio.gather(*asked, return_exceptions=True), strict=True):
                if isinstance(answer, BaseException):
                    self._noted(address, answer)
                else:
                    answers[address] = answer.replica
            return self.named(replica, answers)

    async def close(self) -> None:
        for channel in self._channels():
            await channel.close()
