"""The local server's identity: how a client knows that a loopback port is the local `craftai serve`.

Any local user can listen on a free loopback port (while the server is down, restarting, or before
it started), so a loopback address proves nothing. A local server therefore speaks TLS with a
certificate it made at its first start (`<config>/local-tls.pem`: its private key and certificate,
mode 0600 in the 0700 config folder; `<config>/local-tls.crt`: the certificate alone). A client
pins that certificate: the handshake succeeds only with the process that holds the private key,
which other users cannot read. The SDK sends the local key only over such a pinned channel.

CRAFTAI_LOCAL_TLS=off turns this off on both sides: loopback servers speak plain text, and the SDK
then never sends the local key by itself (give keys on purpose).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import grpc

from craftai_wire.keys import config_dir, is_loopback

SERVER_NAME = "localhost"  # the name the certificate carries (with 127.0.0.1 and ::1); clients check it
_BEGIN, _END = b"-----BEGIN CERTIFICATE-----", b"-----END CERTIFICATE-----"


def enabled() -> bool:
    """CRAFTAI_LOCAL_TLS is not "off"."""
    return os.environ.get("CRAFTAI_LOCAL_TLS", "auto").strip().lower() != "off"


def identity_file() -> Path:
    """The local server's private key and certificate (PEM, 0600): read by local servers only."""
    return config_dir() / "local-tls.pem"


def certificate_file() -> Path:
    """The local server's certificate alone (PEM): what clients pin."""
    return config_dir() / "local-tls.crt"


def certificate_of(pem: bytes) -> bytes:
    """The first certificate block of a PEM text (b"" when there is none)."""
    start = pem.find(_BEGIN)
    end = pem.find(_END, start)
    return pem[start : end + len(_END)] + b"\n" if start >= 0 and end > start else b""


def pinned_certificate() -> bytes | None:
    """The local server's certificate, when local TLS is on and a local server has made one."""
    if not enabled():
        return None
    try:
        found = certificate_of(certificate_file().read_bytes())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    return found or None


def pinned(certificate: bytes) -> tuple[grpc.ChannelCredentials, list[tuple[str, str]]]:
    """Credentials trusting `certificate` alone, and the option that makes the handshake check the
    name it carries whichever loopback address is dialled."""
    return grpc.ssl_channel_credentials(root_certificates=certificate), [("grpc.ssl_target_name_override", SERVER_NAME)]


def loopback_channel(address: str, options: Sequence[tuple[str, int | str]] = ()) -> grpc.Channel:
    """A blocking channel to a craft-ai server on this machine: pinned TLS when the local server's
    certificate exists (and `address` is loopback), else plain text (tools, tests, probes)."""
    certificate = pinned_certificate() if is_loopback(address) else None
    if certificate is None:
        return grpc.insecure_channel(address, options=list(options))
    credentials, extra = pinned(certificate)
    return grpc.secure_channel(address, credentials, options=[*options, *extra])
