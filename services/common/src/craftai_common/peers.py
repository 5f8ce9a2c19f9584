"""TLS for the servers, and how one service calls another (docs/SECURITY.md).

A server with CRAFTAI_TLS_CERT and CRAFTAI_TLS_KEY listens with TLS only; with CRAFTAI_TLS_CLIENT_CA
as well, every client must present a certificate signed by that CA (mutual TLS). A service with TLS
on calls the other services with TLS too, verifying them against CRAFTAI_TLS_CA (else the system's
roots) and presenting its own certificate, which then serves as its client certificate (so it
needs the clientAuth usage, or no extended key usage at all, where mutual TLS is on).

Calls between services carry the app id `craftai-internal` and the service key (auth.service_key).
"""

from __future__ import annotations

from pathlib import Path

import grpc

from craftai_common.auth import INTERNAL_APP_ID, service_key
from craftai_common.observability import request_id_var
from craftai_common.settings import ServerSettings
from craftai_wire.channels import client_options, target_options
from craftai_wire.metadata import APP_ID_KEY, APP_KEY_KEY, REQUEST_ID_KEY


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


def server_credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    """TLS (or mutual TLS) credentials of a server, or None for plain text."""
    if settings.tls_cert is None or settings.tls_key is None:
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
        self._options = client_options(settings.max_message_bytes)

    def channel(self, address: str) -> grpc.aio.Channel:
        options = target_options(self._options, address)  # a replicated peer: calls balanced over it
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
