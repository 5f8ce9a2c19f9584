"""The local server's TLS identity, made at the first start of a loopback server (docs/SECURITY.md).

A server that listens on a loopback address with no TLS configured (no CRAFTAI_TLS_CERT) speaks
TLS with a self-signed certificate of its own, unless CRAFTAI_LOCAL_TLS=off: clients on this
machine pin it (craftai_wire.local_tls), so a program that takes the port while the server is down
cannot pose as the server and receive the local key. The key and certificate are made once (EC
P-256, valid 10 years, named localhost, 127.0.0.1 and ::1), atomically and only if absent, so the
services of one user, started at once or one after the other, share one identity.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging

from craftai_wire import local_tls
from craftai_wire.keys import is_loopback, write_private

log = logging.getLogger("craftai.local_tls")
VALID_DAYS = 3650


def applies(host: str, tls_configured: bool) -> bool:
    """Whether a server on `host` speaks local TLS (CRAFTAI_LOCAL_TLS=auto, its settings' default)."""
    bare = host.strip("[]")
    return not tls_configured and is_loopback(f"[{bare}]:0" if ":" in bare else f"{bare}:0")


def _new_identity() -> bytes:
    """A new private key and self-signed certificate, PEM, key first."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "craft-ai local server")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName(local_tls.SERVER_NAME),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return private + certificate.public_bytes(serialization.Encoding.PEM)


def identity() -> tuple[bytes, bytes]:
    """(private key, certificate) of the local server, made now when no process made them yet."""
    path = local_tls.identity_file()
    try:
        pem = path.read_bytes()
    except FileNotFoundError:
        if write_private(path, _new_identity().decode()):
            log.info("made the local server's TLS certificate %s (clients on this machine pin it)", path)
        pem = path.read_bytes()
    certificate = local_tls.certificate_of(pem)
    private = pem[: pem.find(b"-----BEGIN CERTIFICATE-----")]
    if not certificate or b"PRIVATE KEY" not in private:
        raise ValueError(f"{path} is not a private key followed by its certificate: remove it to make a new one")
    write_private(local_tls.certificate_file(), certificate.decode())  # the same bytes whoever writes it
    if local_tls.certificate_file().read_bytes() != certificate:
        raise ValueError(
            f"{local_tls.certificate_file()} is not the certificate of {path}: remove both to make a new identity"
        )
    return private, certificate
