"""The Host header checked (DNS rebinding).

A page of another site cannot read the gateway's answers (CORS is off), unless its name is made to
resolve to the gateway's address (DNS rebinding): the browser then takes the gateway for that site.
Its requests still carry that site's name in Host, so the gateway answers only the names it is
known by: the loopback names (localhost, 127.0.0.0/8, ::1), the address it listens on, and
CRAFTAI_WEB_ALLOWED_HOSTS (`*`: any, for a gateway behind a proxy that checks). Any other name is
answered 400. /healthz answers whatever the name (probes use an address).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from craftai.web.errors import error_response, gateway_error
from craftai_wire.keys import is_loopback
from craftai_wire.vocabulary import GatewayReason

ANY_ADDRESS = ("", "0.0.0.0", "::", "[::]")


def host_name(header: str) -> str:
    """The name of a Host header: without its port, brackets, final dot; lower case."""
    name = header.strip().lower()
    if name.startswith("["):
        name = name[1:].split("]", 1)[0]
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name.rstrip(".")


class HostCheck:
    """ASGI middleware: requests for names the gateway is not known by are refused."""

    def __init__(self, app: ASGIApp, listening: str, allowed: str, exempt: frozenset[str]) -> None:
        self.app = app
        names = {host_name(n) for n in allowed.split(",") if n.strip()}
        if listening not in ANY_ADDRESS:
            names.add(host_name(listening))
        self.any = "*" in names
        self.names = names
        self.exempt = exempt

    def allows(self, header: str | None) -> bool:
        if header is None or self.any:
            return True  # HTTP/1.0 without a Host: no browser sends one
        name = host_name(header)
        return name in self.names or is_loopback(name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self.exempt:
            header = Headers(scope=scope).get("host")
            if not self.allows(header):
                refused = gateway_error(
                    GatewayReason.HOST_NOT_ALLOWED,
                    f"this gateway does not answer for the name {header!r}: use its address or a loopback name, "
                    "or add the name to CRAFTAI_WEB_ALLOWED_HOSTS",
                )
                await error_response(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)
