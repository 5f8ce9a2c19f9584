"""How the SDK reaches the services: where each one is and what every call carries (`Connection`,
shared with any transport), and the blocking transport (`Transport`): one channel per address,
deadlines, the retry loop that waits for a server to come back, the unary caller and the one
reader of server streams.

Each address is a gRPC target; a balanced one (`dns:///host:port`, several addresses:
craftai_wire.targets) spreads calls over the replicas that report SERVING (craftai_wire.channels);
a session's calls go to the replica that keeps it (craftai.replicas). docs/DEPLOY.md, Scaling.

Credentials: the app's key is `app_key`, else CRAFTAI_APP_KEY, else the local key that `craftai
serve` generated (craftai_wire.keys), which goes only over TLS to a loopback server that proves to
be the local server: its certificate, made at its first start, is pinned (craftai_wire.local_tls).
A program that took the port while the server was down gets a failed handshake and no key. Both
the local key and the certificate are read at each call, so a client made before the server's
first start works once the server is up. TLS: `root_certificates` (or CRAFTAI_TLS_CA), and for
mutual TLS `certificate_chain` and `private_key` (or CRAFTAI_TLS_CLIENT_CERT and
CRAFTAI_TLS_CLIENT_KEY), each PEM bytes or a file path.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import grpc
import grpc.experimental
from google.protobuf.message import Message

from craftai.calls import ServiceName, Stream, Unary
from craftai.errors import CraftAiError
from craftai.local_server import DEFAULT_PORT, answering, autostart_allowed, local_address, no_server, one_address
from craftai.local_server import ensure as ensure_server
from craftai.policy import Deadlines, Retries, Retrying, RetryPlan
from craftai.replicas import Replicas, pinned_options
from craftai_wire import local_tls
from craftai_wire.channels import client_options, target_options
from craftai_wire.keys import is_loopback, local_key_file, read_key_file
from craftai_wire.metadata import APP_ID_KEY, APP_KEY_KEY, REQUEST_ID_KEY
from craftai_wire.v1 import catalogue_pb2_grpc, common_pb2, infer_pb2_grpc, prepare_pb2_grpc
from craftai_wire.vocabulary import Reason

DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"  # the local server's, unless CRAFTAI_PORT moves it
MiB = 1 << 20
Pem = bytes | str | os.PathLike[str]
ProgressCallback = Callable[[common_pb2.Progress], None]
RequestT = TypeVar("RequestT", bound=Message)
AnswerT = TypeVar("AnswerT", bound=Message)
StreamEvent = common_pb2.Progress | common_pb2.Notice | Retrying
Requests = Callable[[], Iterator[RequestT]]  # a call's stream of requests, made anew for each try


def say_started(line: str) -> None:
    """The one line a client says when it started the shared local server (a warning: it shows
    where logging is not set up; the `craftai` command prints it)."""
    logging.getLogger("craftai.local_server").warning(line)


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
class Security:
    """How a call to one address goes: the channel's credentials and options, the key it carries,
    and the pinned local certificate (None when the channel is not the local server's)."""

    credentials: grpc.ChannelCredentials | None
    options: tuple[tuple[str, int | str], ...]
    app_key: str | None
    pinned: bytes | None = None


@dataclass(frozen=True)
class Connection:
    """Where each service is and what every call carries: the app id, its key, TLS. Made once from
    the client's arguments and the environment; no channel is opened here, and what a local
    server made (its key, its certificate) is read when a call needs it (`security`)."""

    app_id: str
    addresses: Mapping[ServiceName, str]
    credentials: grpc.ChannelCredentials | None  # TLS given on purpose
    app_key: str | None  # a key given on purpose (app_key=, CRAFTAI_APP_KEY)
    options: list[tuple[str, int]]
    # the calls a gateway makes for a caller (`Transport.for_app`): over the channel the gateway's
    # own client makes, with the caller's key or none (a 1-tuple), never the gateway's or the local key
    callers_key: tuple[str | None] | None = None
    # no address was given anywhere: a call that finds no server at the local address starts the
    # shared one (craftai.local_server), unless start_server=False or CRAFTAI_AUTOSTART=off
    starts_server: bool = False
    # the roots given are the local server's certificate: its name is checked whichever loopback
    # address is dialled, as with the pinned certificate (an address list names no one host)
    local_roots: bool = False

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
        start_server: bool = True,
    ) -> Connection:
        """AiClient's arguments, with the defaults its docstring names (CRAFTAI_ADDRESS, the
        per-service addresses unless `target` is given, the key and TLS variables); with no address
        anywhere, the local server's (which a call starts when none answers, unless told not to)."""
        if not app_id:
            raise ValueError("app_id is required: it names your app to the services")
        variables = ("CRAFTAI_ADDRESS", "CRAFTAI_CATALOGUE_ADDRESS", "CRAFTAI_PREPARE_ADDRESS", "CRAFTAI_INFER_ADDRESS")
        given = any((target, catalogue, prepare, infer)) or any(os.environ.get(v) for v in variables)
        starts = start_server and not given and autostart_allowed()
        base = target or os.environ.get("CRAFTAI_ADDRESS") or local_address()
        roots = None
        if credentials is None:
            roots = _pem(root_certificates, "CRAFTAI_TLS_CA")
            chain = _pem(certificate_chain, "CRAFTAI_TLS_CLIENT_CERT")
            key = _pem(private_key, "CRAFTAI_TLS_CLIENT_KEY")
            if (chain is None) != (key is None):
                raise ValueError("a client certificate needs its private key (and the key its certificate)")
            if roots is not None or chain is not None:
                credentials = grpc.ssl_channel_credentials(roots, key, chain)
        env = os.environ.get
        addresses: dict[ServiceName, str] = {
            "catalogue": catalogue or (None if target else env("CRAFTAI_CATALOGUE_ADDRESS")) or base,
            "prepare": prepare or (None if target else env("CRAFTAI_PREPARE_ADDRESS")) or base,
            "infer": infer or (None if target else env("CRAFTAI_INFER_ADDRESS")) or base,
        }
        given_key = app_key or env("CRAFTAI_APP_KEY") or None
        local = roots is not None and local_tls.certificate_of(roots) == local_tls.pinned_certificate()
        return cls(
            app_id,
            addresses,
            credentials,
            given_key,
            client_options(max_message_bytes),
            starts_server=starts,
            local_roots=local,
        )

    def security(self, address: str) -> Security:
        """How to call `address` now. TLS or a key given on purpose are used as given; otherwise a
        loopback address whose server proves to be the local server (the certificate a local server
        made, pinned) gets the local key, read now; any other gets no key."""
        security = self._security(address)
        if self.callers_key is not None:
            return dataclasses.replace(security, app_key=self.callers_key[0])
        return security

    def for_caller(self, app_id: str, app_key: str | None) -> Connection:
        """The calls a gateway makes for a caller: the same addresses and TLS (so the same channels),
        with exactly the caller's key, or none: never the local key."""
        return dataclasses.replace(self, app_id=app_id, callers_key=(app_key,))

    def _security(self, address: str) -> Security:
        options: tuple[tuple[str, int | str], ...] = tuple(self.options)
        if self.credentials is not None or self.app_key is not None or not is_loopback(address):
            if self.local_roots and is_loopback(address):
                options = (*options, ("grpc.ssl_target_name_override", local_tls.SERVER_NAME))
            return Security(self.credentials, options, self.app_key)
        certificate = local_tls.pinned_certificate()
        if certificate is None:
            return Security(None, options, None)
        credentials, extra = local_tls.pinned(certificate)
        return Security(credentials, (*options, *extra), read_key_file(local_key_file()), certificate)

    def metadata(self, request_id: str | None = None, app_key: str | None = None) -> tuple[tuple[str, str], ...]:
        """The app id, its key when there is one, and the request id the server logs."""
        items = [(APP_ID_KEY, self.app_id)]
        if app_key:
            items.append((APP_KEY_KEY, app_key))
        if request_id:
            items.append((REQUEST_ID_KEY, request_id))
        return tuple(items)

    def explain(self, error: CraftAiError, address: str, security: Security) -> CraftAiError:
        """`error`, with what to do about it when the client can tell: no server at the address,
        a server whose TLS the client could not check (naming the certificate it looked for), or
        what it did with the local key."""
        if error.reason == Reason.MISSING_APP_KEY and security.app_key is None and self.callers_key is None:
            if security.pinned is None:
                why = (
                    f"no local server's certificate at {local_tls.certificate_file()} (no local `craftai serve` "
                    "has started with this config folder, or CRAFTAI_LOCAL_TLS=off), so the local key was not sent"
                )
            else:
                why = f"no local key at {local_key_file()}"
            error.message = f"{error.message} (this client: {why})"
        elif error.code == grpc.StatusCode.UNAVAILABLE and not error.reason:
            error.message = self._unanswered(error.message, address, security)
        error.args = (error.message,)
        return error

    def _unanswered(self, message: str, address: str, security: Security) -> str:
        """UNAVAILABLE from the channel: nothing listens there, or the TLS handshake failed."""
        detail = message.removeprefix("the service did not answer (UNAVAILABLE): ")
        plain = one_address(address)
        if plain is not None and not answering(plain):
            return f"{no_server(address)} ({detail})"
        if security.pinned is not None:
            return (
                f"the server at {address} did not prove to be the local server: this client pins the certificate "
                f"{local_tls.certificate_file()} (the local server's, made by the first `craftai serve` of this "
                "config folder) to send it the local key, and the server does not hold it. A server started with "
                "another config folder (HOME, XDG_CONFIG_HOME or CRAFTAI_CONFIG_DIR) than this client's has its own: "
                "run the client with that server's CRAFTAI_CONFIG_DIR; another program on this port, a server "
                f"speaking plain text, or one beyond loopback is sent nothing ({detail})"
            )
        if self.credentials is None and is_loopback(address) and local_tls.enabled():
            certificate = local_tls.certificate_file()
            if local_tls.pinned_certificate() is None:
                looked = f"it looked for the local server's certificate at {certificate}, which is not there"
                fix = (
                    "the server was started with another config folder (HOME, XDG_CONFIG_HOME or "
                    "CRAFTAI_CONFIG_DIR) than this client's: run the client with that server's CRAFTAI_CONFIG_DIR, "
                    "or pass root_certificates=<that folder>/local-tls.crt (CRAFTAI_TLS_CA)"
                )
            else:
                looked = "a client with a key of its own does not pin the local certificate by itself"
                fix = f"pass root_certificates={certificate} (CRAFTAI_TLS_CA) with your key"
            return (
                f"the server at {address} speaks TLS (a local `craftai serve` does, with a certificate of its own) "
                f"and this client had no certificate to check it with: {looked}; {fix} ({detail})"
            )
        return message


STUBS: dict[ServiceName, Any] = {
    "catalogue": catalogue_pb2_grpc.CatalogueServiceStub,
    "prepare": prepare_pb2_grpc.PrepareServiceStub,
    "infer": infer_pb2_grpc.InferServiceStub,
}


def stream_item(rpc: Stream[RequestT, AnswerT], event: Any) -> common_pb2.Progress | common_pb2.Notice | AnswerT | None:
    """What one event of an RPC's stream gives the reader: progress, a notice or the result."""
    kind = event.WhichOneof("event")
    if kind == "progress":
        return event.progress  # type: ignore[no-any-return]
    if kind == "notice":
        return event.notice  # type: ignore[no-any-return]
    if kind == "result":
        assert isinstance(event.result, rpc.answer)
        return event.result
    return None


class StreamTry(Generic[AnswerT]):
    """One try at reading a server stream: what both transports' readers (blocking and asyncio)
    decide from, with no I/O of its own. Whether the try delivered anything and answered, and the
    error it ends with when it gave no result: the stream's own (explained) or "ended without a
    result"; an error after the result is the call's end, not a failure."""

    def __init__(self, rpc: Stream[Any, AnswerT], request_id: str, what: str) -> None:
        self.rpc = rpc
        self.answered = False
        self.delivered = False
        self.started = time.monotonic()
        self.error = CraftAiError(grpc.StatusCode.INTERNAL, f"{what} ended without a result", request_id=request_id)

    def take(self, event: Any) -> common_pb2.Progress | common_pb2.Notice | AnswerT | None:
        """One event of the stream: what the reader yields (None: nothing)."""
        self.delivered = True
        item = stream_item(self.rpc, event)
        self.answered = self.answered or isinstance(item, self.rpc.answer)
        return item

    def failed(self, error: CraftAiError) -> None:
        if not self.answered:
            self.error = error

    def renewed(self, wait_seconds: float) -> bool:
        """A long try that delivered events before it failed (a setup whose connection the server
        renewed after CRAFTAI_MAX_CONNECTION_AGE_SECONDS): it uses up no tries."""
        return self.delivered and time.monotonic() - self.started > wait_seconds


class Reading(Generic[AnswerT]):
    """A stream read to its one result, whatever the transport: progress to the callback, notices
    collected (those of the try that answered only), the result kept."""

    def __init__(self, rpc: Stream[Any, AnswerT], on_progress: ProgressCallback | None, notices: list[str]) -> None:
        self.rpc = rpc
        self.on_progress = on_progress
        self.notices = notices
        self._answer: AnswerT | None = None

    def take(self, event: StreamEvent | AnswerT) -> None:
        if isinstance(event, Retrying):
            del self.notices[:]  # a retry starts the answer again
        elif isinstance(event, common_pb2.Progress):
            if self.on_progress is not None:
                self.on_progress(event)
        elif isinstance(event, common_pb2.Notice):
            self.notices.append(event.message)
        else:
            self._answer = event

    def answer(self) -> AnswerT:
        assert self._answer is not None  # a reader returns only after a result, or raises
        return self._answer


def pinned_key(security: Security) -> bytes | None:
    """What tells two ways of reaching an address apart: the pinned local certificate (credentials
    given on purpose never change)."""
    return security.pinned


# The blocking transport reads each server stream to its end on the caller's own thread. gRPC's
# default reader instead waits for each message on the channel's polling thread, a thread hand-off
# per message, which is most of a short call's cost on a busy machine (docs/PERFORMANCE.md: a
# click through gRPC); this option reads the call's messages on the thread that iterates it.
READ_ON_CALLERS_THREAD = (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)


def open_channel(address: str, security: Security, options: Sequence[tuple[str, int | str]]) -> grpc.Channel:
    """A blocking channel to `address`, made as `security` says, with `options` (and server streams
    read on the caller's thread)."""
    every = [*options, READ_ON_CALLERS_THREAD]
    if security.credentials is None:
        return grpc.insecure_channel(address, options=every)
    return grpc.secure_channel(address, security.credentials, options=every)


class Watched(Generic[RequestT]):
    """A call's requests as the app's code makes them, its own error kept apart from the call's:
    raised to the app as itself, not as the call's end."""

    def __init__(self, requests: Iterator[RequestT]) -> None:
        self._requests = requests
        self.failed: BaseException | None = None

    def __iter__(self) -> Iterator[RequestT]:
        try:
            yield from self._requests
        except Exception as error:  # ends the call; raised to the app as itself
            self.failed = error
            raise


class Transport:
    """Blocking calls to the three services: one channel per address (shared when services share
    one; spread over the replicas behind it; made again when how to reach it changed, e.g. the
    local server made its certificate since), a deadline on every call, and calls the server could
    not answer tried again under `retries` once the server is reachable again. A session's calls
    (`replica=`) go to the replica that keeps the session, and are not tried elsewhere: the session
    opens itself again instead (ReplicaLostError)."""

    def __init__(self, connection: Connection, deadlines: Deadlines, retries: Retries) -> None:
        self.connection = connection
        self.deadlines = deadlines
        self.retries = retries
        self._channels: dict[str, tuple[grpc.Channel, Security]] = {}
        self._retired: list[grpc.Channel] = []
        self._lock = threading.Lock()  # one client may be shared by threads
        self._reached: set[str] = set()  # addresses whose channel was READY once, or that answered
        self.replicas = Replicas(connection.addresses["infer"], self._pinned_channel, key=pinned_key)

    def for_app(self, app_id: str, app_key: str | None) -> Transport:
        """The same channels, calls made as another app with exactly this key, or none: never the
        local key (a gateway's callers prove who they are themselves)."""
        clone = copy.copy(self)
        clone.connection = self.connection.for_caller(app_id, app_key)
        return clone

    @property
    def catalogue(self) -> catalogue_pb2_grpc.CatalogueServiceStub:
        return catalogue_pb2_grpc.CatalogueServiceStub(self._channel(self.connection.addresses["catalogue"])[0])

    @property
    def prepare(self) -> prepare_pb2_grpc.PrepareServiceStub:
        return prepare_pb2_grpc.PrepareServiceStub(self._channel(self.connection.addresses["prepare"])[0])

    @property
    def infer(self) -> infer_pb2_grpc.InferServiceStub:
        return infer_pb2_grpc.InferServiceStub(self._channel(self.connection.addresses["infer"])[0])

    def _channel(self, address: str) -> tuple[grpc.Channel, Security]:
        """The channel to `address` as it should be now, and how it was made."""
        security = self.connection.security(address)
        with self._lock:
            kept = self._channels.get(address)
            if kept is not None and kept[1].pinned == security.pinned:
                return kept[0], security  # the same way there (credentials given on purpose never change)
            if kept is not None:
                self._retired.append(kept[0])  # calls in flight on it finish there; closed with the transport
            channel = open_channel(address, security, target_options(security.options, address))

            def seen(state: grpc.ChannelConnectivity, address: str = address) -> None:
                if state == grpc.ChannelConnectivity.READY:
                    self._reached.add(address)

            channel.subscribe(seen)
            self._channels[address] = (channel, security)
            return channel, security

    @staticmethod
    def _pinned_channel(address: str, authority: str, security: Security) -> grpc.Channel:
        """A channel to one replica's address, made as the infer channel is (craftai.replicas)."""
        return open_channel(address, security, pinned_options(security.options, authority))

    def _call(self, service: ServiceName, name: str, replica: str = "") -> tuple[Any, Security, bool]:
        """The method `name` of `service` on its channel as it should be now, how it goes, and
        whether it is pinned to `replica` (a session's replica, on a channel of its own where the
        infer target has several)."""
        channel, security = self._channel(self.connection.addresses[service])
        if service == "infer" and replica:
            ask = lambda: self.connection.metadata(new_request_id(), security.app_key)  # noqa: E731
            pinned = self.replicas.stub(replica, security, ask)
            if pinned is not None:
                return getattr(pinned, name), security, True
        return getattr(STUBS[service](channel), name), security, False

    def _wait_again(self, address: str, error: CraftAiError, plan: RetryPlan) -> None:
        """Before another try: when no address was given and nothing answers, start the shared
        local server and try at once; else raise `error` when the plan says it is not worth
        another try, or sleep its pause and wait (within what is left of `wait_seconds`) for the
        server to be reachable."""
        if plan.start_server(error, self.connection.starts_server):
            ensure_server(address, say_started)  # started now, or by another command meanwhile
            with self._lock:  # a fresh channel: the old one backs off after its failed connection
                kept = self._channels.pop(address, None)
                if kept is not None:
                    self._retired.append(kept[0])
            return
        pause = plan.pause(error, address in self._reached)
        if pause is None:
            raise error
        started = time.monotonic()
        time.sleep(pause)
        ready = grpc.channel_ready_future(self._channel(address)[0])
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
        address = self.connection.addresses[rpc.service]
        request_id = request_id or new_request_id()
        plan = self.retries.plan()
        while True:
            call, security, pinned = self._call(rpc.service, rpc.name, replica)
            metadata = self.connection.metadata(request_id, security.app_key)
            try:
                answer = call(request, timeout=self.deadlines.unary, metadata=metadata)
            except grpc.RpcError as exc:
                error = self.connection.explain(CraftAiError.from_rpc(exc), address, security)
                self.replicas.check(replica, pinned, error)
                self._wait_again(address, error, plan)
                continue
            assert isinstance(answer, rpc.answer)
            self._reached.add(address)  # the READY notice comes on gRPC's own thread, maybe later
            return answer

    def stream(
        self,
        rpc: Stream[RequestT, AnswerT],
        request: RequestT | Requests[RequestT],
        request_id: str,
        *,
        what: str = "the stream",
        replica: str = "",
    ) -> Generator[StreamEvent | AnswerT, None, None]:
        """The one reader of server streams: progress and notices as they come, the result last.

        Each stream is read to its end (so that the server sees the call finish) and cancelled when
        the reader stops early: that stops an inference, never a preparation (its job runs on and
        the next caller joins it). A stream that fails before its result is tried again under
        `retries`, after a `Retrying` event: what it gave before is void and progress starts again.
        A long try that delivered events before it failed (a setup whose connection the server
        renewed after CRAFTAI_MAX_CONNECTION_AGE_SECONDS) does not use up the tries. A session's
        stream (`replica`) on its replica's own channel raises ReplicaLostError instead. A stream of
        requests (SetupFrom) is given as `Requests`: each try sends a new one from its start."""
        address = self.connection.addresses[rpc.service]
        plan = self.retries.plan()
        while True:
            call, security, pinned = self._call(rpc.service, rpc.name, replica)
            metadata = self.connection.metadata(request_id, security.app_key)
            sent = request() if callable(request) else request
            events = call(sent, timeout=getattr(self.deadlines, rpc.deadline), metadata=metadata)
            attempt = StreamTry(rpc, request_id, what)
            try:
                for event in events:  # read to the end: the result is the last message, then the status
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
            self._wait_again(address, attempt.error, plan)
            yield Retrying(attempt.error)

    def frames(
        self, rpc: Stream[RequestT, AnswerT], requests: Requests[RequestT], request_id: str
    ) -> Generator[Any, None, None]:
        """A stream both ways whose requests an app's code makes as answers come (frames): every
        event as it comes. Tried again under `retries` only while the server has answered nothing
        (it was not there yet), with new requests from `requests()`: the caller makes sure a try
        that got no answer took nothing it cannot give again. After an answer a failure is raised."""
        address = self.connection.addresses[rpc.service]
        plan = self.retries.plan()
        while True:
            call, security, _pinned = self._call(rpc.service, rpc.name)
            metadata = self.connection.metadata(request_id, security.app_key)
            sent = Watched(requests())
            events = call(iter(sent), timeout=getattr(self.deadlines, rpc.deadline), metadata=metadata)
            answered = False
            try:
                for event in events:
                    answered = True
                    yield event
                return
            except grpc.RpcError as exc:
                error = self.connection.explain(CraftAiError.from_rpc(exc), address, security)
            finally:
                events.cancel()
            if sent.failed is not None:
                raise sent.failed  # the app's own iterable raised: not the server's doing
            if answered:
                raise error
            self._wait_again(address, error, plan)

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
        reading = Reading(rpc, on_progress, notices)
        for event in self.stream(rpc, request, request_id, replica=replica):
            reading.take(event)
        return reading.answer()

    def close(self) -> None:
        self.replicas.close()
        with self._lock:
            for channel in [*(kept for kept, _ in self._channels.values()), *self._retired]:
                channel.close()
            self._channels.clear()
            self._retired.clear()
