"""gRPC targets (grpc/doc/naming.md) as far as reaching each replica of a service goes: what a
target names, the addresses it resolves to now, and whether calls on it are balanced.

`host:port` and `dns:[//server/]host[:port]` are resolved with getaddrinfo (the system's resolver,
as the service's DNS name is: a Kubernetes headless Service, a compose service's replicas),
`ipv4:`/`ipv6:` address lists are taken as listed, and any other scheme (unix:, xds:, ...) counts
as one endpoint.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

DEFAULT_PORT = 443  # gRPC's default port for dns:, ipv4: and ipv6: targets without one
SCHEMES = frozenset({"dns", "ipv4", "ipv6", "unix", "unix-abstract", "vsock", "xds", "google-c2p", "passthrough"})


@dataclass(frozen=True)
class Target:
    """A gRPC target as far as pinning goes: a DNS name to resolve, a list of addresses, or
    something this client cannot look into (`kind` "other": one endpoint)."""

    kind: str  # "dns", "list" or "other"
    host: str = ""  # dns: the name
    port: int = DEFAULT_PORT
    listed: tuple[str, ...] = ()  # list: pinned targets, as given
    authority: str = ""  # dns: what pinned channels present (host:port as written)


def _host_port(text: str) -> tuple[str, int]:
    """'name:50051', '1.2.3.4', '[::1]:50051' -> (host, port)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else DEFAULT_PORT
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, int(port)
    return text, DEFAULT_PORT


def _pinned(host: str, port: int) -> str:
    """The gRPC target of one address: ipv4:1.2.3.4:50051 or ipv6:[::1]:50051."""
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


def parse_target(target: str) -> Target:
    """What a gRPC target names, by gRPC's own rules: a scheme it knows, else `dns:///target`."""
    scheme, colon, rest = target.partition(":")
    if not colon or scheme not in SCHEMES:
        scheme, rest = "dns", target
    try:
        if scheme == "dns":
            if rest.startswith("//"):  # dns://server/host:port (the server is not ours to pick: the system's)
                rest = rest[2:].partition("/")[2]
            host, port = _host_port(rest)
            return Target("dns", host=host, port=port, authority=rest)
        if scheme in ("ipv4", "ipv6"):
            listed = tuple(_pinned(*_host_port(item)) for item in rest.split(",") if item)
            return Target("list", listed=listed)
    except ValueError:  # a port that is not a number: gRPC will say so; nothing to pin here
        pass
    return Target("other")


def resolve(target: Target) -> list[str]:
    """The pinned targets of every address the target names now, in the resolver's order."""
    if target.kind == "list":
        return list(target.listed)
    if target.kind != "dns":
        return []
    found: list[str] = []
    for family, _, _, _, address in socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM):
        if family in (socket.AF_INET, socket.AF_INET6):
            pinned = _pinned(str(address[0]), target.port)
            if pinned not in found:
                found.append(pinned)
    return found


def balanced(target: str) -> bool:
    """Whether a channel to `target` spreads calls over its replicas (channels.BALANCING): written
    `dns:///name` (the explicit choice of gRPC's DNS resolver, however many replicas there are
    now), a list of several addresses, or a name that resolves to several addresses now. Anything
    else (one server, a Service's virtual IP, `craftai serve`, unix:) is one connection, as before:
    a draining server then answers SHUTTING_DOWN itself."""
    if target.startswith("dns:"):
        return True
    parsed = parse_target(target)
    if parsed.kind == "list":
        return len(parsed.listed) > 1
    try:
        return parsed.kind == "dns" and len(resolve(parsed)) > 1
    except (OSError, UnicodeError):
        return False
