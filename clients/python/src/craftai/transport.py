"""How the SDK reaches the services: where each one is and what every call carries (`Connection`,
shared with any transport), and the blocking transport (`Transport`): one channel per address,
deadlines, the retry loop that waits for a server to come back, the unary caller and the one
reader of server streams.

Each address is a gRPC target; a balanced one (`dns:///host:port`, several addresses:
craftai_wire.targets) spreads calls over the replicas that report SERVING (craftai_wire.channels);
a session's calls go to the replica that keeps it (craftai.replicas). docs/DEPLOY.md, Scaling.

Credentials: the app's key is `app_key`, else CRAFTAI_APP_KEY, else (for loopback addresses only)
the local key that `craftai serve` generated (craftai_wire.keys). TLS: `root_certificates` (or
CRAFTAI_TLS_CA), and for mutual TLS `certificate_chain` and `private_key` (or
CRAFTAI_TLS_CLIENT_CERT and CRAFTAI_TLS_CLIENT_KEY), each PEM bytes or a file path.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from craftai.calls import ServiceName, Stream, Unary
from craftai.errors import CraftAiError
from craftai.policy import Deadlines, Retries, Retrying, RetryPlan, unanswered
from craftai.replicas import Replicas, pinned_options
from craftai_wire.channels import ChannelOptions, client_options, target_options
from craftai_wire.keys import is_loopback, local_key_file, read_key_file
from craftai_wire.metadata import APP_ID_KEY, APP_KEY_KEY, REQUEST_ID_KEY
from craftai_wire.v1 import catalogue_pb2_grpc, common_pb2, infer_pb2_grpc, prepare_pb2_grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"
MiB = 1 << 20
Pem = bytes | str | os.PathLike[str]
ProgressCallback = Callable[[common_pb2.Progress], None]
RequestT = TypeVar("RequestT", bound=Message)
AnswerT = TypeVar("AnswerT", bound=Message)
StreamEvent = common_pb2.Progress | common_pb2.Notice | Retrying


def new_request_id() -> str:
    return uuid.uuid4().hex


def _pem(value: Pem | None, variable: str) -> bytes | None:
    """PEM bytes as given, or read from a path (the argument, else the environment variable)."""
    if value is None:
        value = os.environ.get(variable) or None
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


@dataclass(frozen=True)
class Connection:
    """Where each service is and what every call carries: the app id, its key, TLS. Made once from
    the client's arguments and the environment; no channel is opened here."""

    app_id: str
    addresses: Mapping[ServiceName, str]
    credentials: grpc.ChannelCredentials | None
    app_key: str | None
    options: ChannelOptions

    @classmethod
    def from_arguments(
        cls,
        app_id: str,
        target: str | None = None,
        *,
        catalogue: str | None = None,
        prepare: str | None = None,
        infer: str | None = None,
        max_message_bytes: int = 64 * MiB,
        credentials: grpc.ChannelCredentials | None = None,
        app_key: str | None = None,
        root_certificates: Pem | None = None,
        certificate_chain: Pem | None = None,
        private_key: Pem | None = None,
    ) -> Connection:
        """AiClient's arguments, with the defaults its docstring names (CRAFTAI_ADDRESS, the
        per-service addresses unless `target` is given, the key and TLS variables)."""
        if not app_id:
            raise ValueError("app_id is required: it names your app to the services")
        base = target or os.environ.get("CRAFTAI_ADDRESS") or DEFAULT_ADDRESS
        if credentials is None:
            roots = _pem(root_certificates, "CRAFTAI_TLS_CA")
            chain = _pem(certificate_chain, "CRAFTAI_TLS_CLIENT_CERT")
            key = _pem(private_key, "CRAFTAI_TLS_CLIENT_KEY")
            if (chain is None) != (key is None):
                raise ValueError("a client certificate needs its private key (and the key its certificate)")
            if roots is not None or chain is not None:
                credentials = grpc.ssl_channel_credentials(roots, key, chain)
        found_key = app_key or os.environ.get("CRAFTAI_APP_KEY") or None
        if found_key is None and all(is_loopback(a or base) for a in (catalogue, prepare, infer)):
            found_key = read_key_file(local_key_file())
        env = os.environ.get
        addresses: dict[ServiceName, str] = {
            "catalogue": catalogue or (None if target else env("CRAFTAI_CATALOGUE_ADDRESS")) or base,
            "prepare": prepare or (None if target else env("CRAFTAI_PREPARE_ADDRESS")) or base,
            "infer": infer or (None if target else env("CRAFTAI_INFER_ADDRESS")) or base,
        }
        return cls(app_id, addresses, credentials, found_key, client_options(max_message_bytes))

    def metadata(self, request_id: str | None = None) -> tuple[tuple[str, str], ...]:
        """The app id, its key when there is one, and the request id the server logs."""
        items = [(APP_ID_KEY, self.app_id)]
        if self.app_key:
            items.append((APP_KEY_KEY, self.app_key))
        if request_id:
            items.append((REQUEST_ID_KEY, request_id))
        return tuple(items)


class Transport:
    """Blocking calls to the three services: one channel per address (shared when services share
    one; spread over the replicas behind it), a deadline on every call, and calls the server could
    not answer tried again under `retries` once the server is reachable again. A session's calls
    (`replica=`) go to the replica that keeps the session, and are not tried elsewhere: the session
    opens itself again instead (ReplicaLostError)."""

    def __init__(self, connection: Connection, deadlines: Deadlines, retries: Retries) -> None:
        self.connection = connection
        self.deadlines = deadlines
        self.retries = retries
        self._channels: dict[str, grpc.Channel] = {}
        self._reached: set[str] = set()  # addresses whose channel was READY once
        at = connection.addresses
        self.catalogue = catalogue_pb2_grpc.CatalogueServiceStub(self._channel(at["catalogue"]))
        self.prepare = prepare_pb2_grpc.PrepareServiceStub(self._channel(at["prepare"]))
        self.infer = infer_pb2_grpc.InferServiceStub(self._channel(at["infer"]))
        self.replicas = Replicas(at["infer"], self._pinned_channel, lambda: connection.metadata(new_request_id()))

    def _open(self, target: str, options: ChannelOptions) -> grpc.Channel:
        if self.connection.credentials is None:
            return grpc.insecure_channel(target, options=options)
        return grpc.secure_channel(target, self.connection.credentials, options=options)

    def _pinned_channel(self, target: str, authority: str) -> grpc.Channel:
        """A channel to one replica's address (craftai.replicas)."""
        return self._open(target, pinned_options(self.connection.options, authority))

    def _channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            channel = self._open(address, target_options(self.connection.options, address))

            def seen(state: grpc.ChannelConnectivity, address: str = address) -> None:
                if state == grpc.ChannelConnectivity.READY:
                    self._reached.add(address)

            channel.subscribe(seen)
            self._channels[address] = channel
        return self._channels[address]

    def _method(self, service: ServiceName, name: str, replica: str = "") -> tuple[Any, bool]:
        """The stub's method, and whether it is pinned to `replica` (a session's replica, reached
        on a channel of its own where the infer target has several)."""
        pinned = self.replicas.stub(replica) if service == "infer" else None
        if pinned is not None:
            return getattr(pinned, name), True
        stubs = {"catalogue": self.catalogue, "prepare": self.prepare, "infer": self.infer}
        return getattr(stubs[service], name), False

    def _wait_again(self, address: str, error: CraftAiError, plan: RetryPlan) -> None:
        """Before another try: raise `error` when the plan says it is not worth one; else sleep its
        pause and wait (within what is left of `wait_seconds`) for the server to be reachable."""
        pause = plan.pause(error, address in self._reached)
        if pause is None:
            raise error
        started = time.monotonic()
        time.sleep(pause)
        ready = grpc.channel_ready_future(self._channels[address])
        try:
            ready.result(timeout=plan.wait_left(time.monotonic() - started))
        except grpc.FutureTimeoutError:
            ready.cancel()
            raise error from None
        plan.tried(time.monotonic() - started)

    def unary(
        self, rpc: Unary[RequestT, AnswerT], request: RequestT, request_id: str | None = None, *, replica: str = ""
    ) -> AnswerT:
        """One unary call to its answer, tried again after UNAVAILABLE (Retries); on `replica`'s
        own channel when it has one (then ReplicaLostError instead of another try)."""
        call, pinned = self._method(rpc.service, rpc.name, replica)
        metadata = self.connection.metadata(request_id or new_request_id())
        plan = self.retries.plan()
        while True:
            try:
                answer = call(request, timeout=self.deadlines.unary, metadata=metadata)
            except grpc.RpcError as exc:
                error = CraftAiError.from_rpc(exc)
                if pinned and unanswered(error):
                    raise self.replicas.lost(replica, error) from None
                self._wait_again(self.connection.addresses[rpc.service], error, plan)
                continue
            assert isinstance(answer, rpc.answer)
            return answer

    def stream(
        self,
        rpc: Stream[RequestT, AnswerT],
        request: RequestT,
        request_id: str,
        *,
        what: str = "the stream",
        replica: str = "",
    ) -> Generator[StreamEvent | AnswerT, None, None]:
        """The one reader of server streams: progress and notices as they come, the result last.

        Each stream is read to its end (so that the server sees the call finish) and cancelled when
        the reader stops early: that stops an inference, never a preparation (its job runs on and
        the next caller joins it). A stream that fails before its result is tried again under
        `retries`, after a `Retrying` event: what it gave before is void and progress starts again;
        a session's stream (`replica`) on its replica's own channel raises ReplicaLostError instead."""
        call, pinned = self._method(rpc.service, rpc.name, replica)
        metadata = self.connection.metadata(request_id)
        plan = self.retries.plan()
        while True:
            events = call(request, timeout=getattr(self.deadlines, rpc.deadline), metadata=metadata)
            answered = False
            error = CraftAiError(grpc.StatusCode.INTERNAL, f"{what} ended without a result", request_id=request_id)
            try:
                for event in events:  # read to the end: the result is the last message, then the status
                    kind = event.WhichOneof("event")
                    if kind == "progress":
                        yield event.progress
                    elif kind == "notice":
                        yield event.notice
                    elif kind == "result":
                        answered = True
                        assert isinstance(event.result, rpc.answer)
                        yield event.result
            except grpc.RpcError as exc:
                if not answered:
                    error = CraftAiError.from_rpc(exc)
            finally:
                events.cancel()  # a no-op once the stream ended; stops the server's work otherwise
            if answered:
                return
            if pinned and unanswered(error):
                raise self.replicas.lost(replica, error)
            self._wait_again(self.connection.addresses[rpc.service], error, plan)
            yield Retrying(error)

    def result(
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
        answer: AnswerT | None = None
        for event in self.stream(rpc, request, request_id, replica=replica):
            if isinstance(event, Retrying):
                del notices[:]  # a retry starts the answer again
            elif isinstance(event, common_pb2.Progress):
                if on_progress is not None:
                    on_progress(event)
            elif isinstance(event, common_pb2.Notice):
                notices.append(event.message)
            else:
                answer = event
        assert answer is not None  # the reader returns only after a result, or raises
        return answer

    def close(self) -> None:
        self.replicas.close()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
