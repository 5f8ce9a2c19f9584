"""TLS for the servers, and how one service calls another (docs/SECURITY.md).

A server with CRAFTAI_TLS_CERT and CRAFTAI_TLS_KEY listens with TLS only; with CRAFTAI_TLS_CLIENT_CA
as well, every client must present a certificate signed by that CA (mutual TLS). A service with TLS
on calls the other services with TLS too, verifying them against CRAFTAI_TLS_CA (else the system's
roots) and presenting its own certificate, which then serves as its client certificate (so it
needs the clientAuth usage, or no extended key usage at all, where mutual TLS is on).

A server on a loopback address with no TLS configured speaks TLS with the local server's own
certificate (local_tls.py), unless CRAFTAI_LOCAL_TLS=off; such a service calls the others on
loopback addresses with that certificate pinned, so the service key goes only to them.

Calls between services carry the app id `craftai-internal` and the service key (auth.service_key).
"""

from __future__ import annotations

from pathlib import Path

import grpc

from craftai_common import local_tls
from craftai_common.auth import INTERNAL_APP_ID, service_key
from craftai_common.observability import request_id_var
from craftai_common.settings import ServerSettings
from craftai_wire import local_tls as pin
from craftai_wire.channels import client_options, target_options
from craftai_wire.keys import is_loopback
from craftai_wire.metadata import APP_ID_KEY, APP_KEY_KEY, REQUEST_ID_KEY


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


def _local(settings: ServerSettings) -> bool:
    return settings.local_tls == "auto" and local_tls.applies(settings.host, settings.tls_cert is not None)


def server_credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    """TLS (or mutual TLS) credentials of a server, the local certificate's on loopback, or None
    for plain text."""
    if settings.tls_cert is None or settings.tls_key is None:
        if _local(settings):
            return grpc.ssl_server_credentials([local_tls.identity()])
        return None
    client_ca = _read(settings.tls_client_ca)
    return grpc.ssl_server_credentials(
        [(settings.tls_key.read_bytes(), settings.tls_cert.read_bytes())],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


class Peers:
    """Channels from this service to the others: TLS as this server has it, the service key."""

    def __init__(self, settings: ServerSettings) -> None:
        self._credentials: grpc.ChannelCredentials | None = None
        if settings.tls_cert is not None and settings.tls_key is not None:
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(settings.tls_ca),
                private_key=settings.tls_key.read_bytes(),
                certificate_chain=settings.tls_cert.read_bytes(),
            )
        self._local = _local(settings)
        self._options: list[tuple[str, int | str]] = [*client_options(settings.max_message_bytes)]

    def channel(self, address: str) -> grpc.aio.Channel:
        options = target_options(self._options, address)  # a replicated peer: calls balanced over it
        if self._credentials is None and self._local and is_loopback(address):
            credentials, extra = pin.pinned(local_tls.identity()[1])  # made by now: this server listens with it
            return grpc.aio.secure_channel(address, credentials, options=[*options, *extra])
        if self._credentials is None:
            return grpc.aio.insecure_channel(address, options=options)
        return grpc.aio.secure_channel(address, self._credentials, options=options)

    @staticmethod
    def metadata() -> tuple[tuple[str, str], ...]:
        """The service's identity, read at each call (the local key may be generated after this
        object was made), and the request id of the request being served, so that the logs of
        both services carry the same id."""
        items = [(APP_ID_KEY, INTERNAL_APP_ID), (APP_KEY_KEY, service_key())]
        request_id = request_id_var.get()
        if request_id:
            items.append((REQUEST_ID_KEY, request_id))
        return tuple(items)
