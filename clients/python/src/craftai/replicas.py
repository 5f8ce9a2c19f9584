"""Which replica of the infer service keeps a session, and how this client reaches that one.

A segment session lives on the replica that opened it (OpenSessionResult.replica names it). The
transport's infer channel lets gRPC spread calls over every address its target resolves to (round
robin over the replicas that report SERVING: craftai_wire.channels), but a call cannot choose its
replica there. So for the calls of a session the client keeps one channel pinned to each address,
and asks each one (GetRuntime) which replica answers there. Pinning is only needed, and only done,
when the target resolves to several addresses: one address (a single server, a Service's virtual
IP, `craftai serve`) is reached through the infer channel itself, one connection to one server.

Targets are read by gRPC's rules (craftai_wire.targets). The pinned channels present the target's
own name as their authority, so TLS checks the same certificate name as for the infer channel.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from craftai.errors import CraftAiError
from craftai_wire.channels import ChannelOptions
from craftai_wire.targets import parse_target, resolve
from craftai_wire.v1 import infer_pb2, infer_pb2_grpc

log = logging.getLogger("craftai.replicas")

Metadata = tuple[tuple[str, str], ...]
OpenChannel = Callable[[str, str], grpc.Channel]  # (pinned target, authority) -> a channel


def pinned_options(options: ChannelOptions, authority: str) -> ChannelOptions:
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


@dataclass
class _Pinned:
    channel: grpc.Channel
    stub: infer_pb2_grpc.InferServiceStub
    replica: str = ""  # the name it answered with; "" until asked (or after it was lost)


class Replicas:
    """The infer service's replicas behind one target, as this client reaches them: a channel
    pinned to each address and the replica name each answered with. Thread-safe; owns the pinned
    channels (`close`).

    A name not known resolves the target again and asks the addresses not asked yet (at once for a
    name never looked up, such as a session's new replica; then at most once every
    `refresh_seconds` for that name). The channel of an address no longer resolved is closed
    `retire_seconds` later, so that a call still running on it (a replica draining) is not cut."""

    def __init__(
        self,
        target: str,
        open_channel: OpenChannel,
        metadata: Callable[[], Metadata],
        *,
        timeout: float = 5.0,
        refresh_seconds: float = 5.0,
        retire_seconds: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = parse_target(target)
        self._open = open_channel
        self._metadata = metadata
        self.timeout = timeout
        self.refresh_seconds = refresh_seconds
        self.retire_seconds = retire_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._pinned: dict[str, _Pinned] = {}
        self._by_name: dict[str, str] = {}
        self._missed: dict[str, float] = {}  # names not found behind the target, and when
        self._retired: list[tuple[float, grpc.Channel]] = []  # channels of vanished addresses, since when

    def stub(self, replica: str) -> infer_pb2_grpc.InferServiceStub | None:
        """The stub pinned to `replica`; None when the target is one endpoint (the infer channel
        reaches it) or the replica is not (or no longer) found behind the target."""
        if not replica or self.target.kind == "other":
            return None
        known = self._pinned.get(self._by_name.get(replica, ""))  # the common case, without the lock
        if known is not None and known.replica == replica:
            return known.stub
        with self._lock:
            address = self._by_name.get(replica)
            if address is None:
                now = self._clock()
                if now - self._missed.get(replica, -1e9) >= self.refresh_seconds:
                    self._refresh()
                    address = self._by_name.get(replica)
                    if address is None:
                        if len(self._missed) > 1000:
                            self._missed.clear()
                        self._missed[replica] = now
            return self._pinned[address].stub if address is not None else None

    def lost(self, replica: str, error: CraftAiError) -> ReplicaLostError:
        """The replica did not answer a call of one of its sessions (`error`): forget its name (its
        address, if still resolved, is asked again later and may answer as a new process), and
        say so. The replica is taken as gone, its sessions with it, rather than waited for, while
        the other replicas serve."""
        with self._lock:
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

    def _refresh(self) -> None:
        """Resolve again, open channels to new addresses, close those of vanished ones, and ask the
        addresses whose replica is not known (all at once, each within `timeout`)."""
        try:
            addresses = resolve(self.target)
        except (OSError, UnicodeError) as exc:
            log.info("could not resolve %s again (%s); keeping the addresses known", self.target.host, exc)
            addresses = list(self._pinned)
        if len(addresses) <= 1:
            addresses = []  # one endpoint: the infer channel is the one connection to it
        now = self._clock()
        for gone in set(self._pinned) - set(addresses):
            self._retired.append((now, self._pinned.pop(gone).channel))
        while self._retired and now - self._retired[0][0] >= self.retire_seconds:
            self._retired.pop(0)[1].close()
        for address in addresses:
            if address not in self._pinned:
                channel = self._open(address, self.target.authority)
                self._pinned[address] = _Pinned(channel, infer_pb2_grpc.InferServiceStub(channel))
        asking = {
            address: pinned.stub.GetRuntime.future(
                infer_pb2.GetRuntimeRequest(), timeout=self.timeout, metadata=self._metadata()
            )
            for address, pinned in self._pinned.items()
            if not pinned.replica
        }
        for address, future in asking.items():
            try:
                self._pinned[address].replica = future.result().replica
            except grpc.RpcError as exc:
                log.info("the infer replica at %s did not say its name (%s)", address, CraftAiError.from_rpc(exc))
        self._by_name = {p.replica: address for address, p in self._pinned.items() if p.replica}

    def close(self) -> None:
        with self._lock:
            for channel in [p.channel for p in self._pinned.values()] + [c for _, c in self._retired]:
                channel.close()
            self._pinned.clear()
            self._retired.clear()
            self._by_name = {}
