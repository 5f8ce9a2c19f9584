"""The caller's key verified before its request's body is read.

The gateway holds no keys (the services own them): it asks the services, with one cheap
authenticated call as the caller's app (the catalogue's ListFeatures), and keeps the verdict for
CRAFTAI_WEB_KEY_CACHE_SECONDS by a hash of the app id and key (never the key itself). So an
unauthenticated upload costs no more than its headers (and the little the server buffers ahead),
and a flood of requests with one key costs one call per cache period. Concurrent requests with the
same key share one check; distinct keys are checked a few at a time. The services still check the
key on every call: a key revoked there is refused by the calls at once, by this pre-check within
the cache period.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass

import grpc
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from craftai.client import AsyncAiClient
from craftai.errors import CraftAiError
from craftai.web.callers import credentials
from craftai.web.errors import error_response

CHECKS_AT_ONCE = 8  # distinct keys checked at once (a flood of made-up keys waits its turn)
KEPT_VERDICTS = 4096
VERDICTS = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})


@dataclass(frozen=True)
class _Verdict:
    refused: CraftAiError | None
    until: float


class Verifier:
    """The services' verdict on an app id and key, asked once and kept briefly."""

    def __init__(self, keep_seconds: float) -> None:
        self.keep_seconds = keep_seconds
        self.client: AsyncAiClient | None = None  # the gateway's root client, set when it starts
        self._verdicts: dict[str, _Verdict] = {}
        self._checking: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(CHECKS_AT_ONCE)

    async def check(self, app_id: str, key: str | None) -> None:
        """Return when the services accept `key` for `app_id`; raise their refusal (or the error that
        kept them from answering, not kept) otherwise."""
        digest = hashlib.sha256(f"{app_id}\0{key or ''}".encode()).hexdigest()
        known = self._verdicts.get(digest)
        if known is not None and known.until > time.monotonic():
            if known.refused is not None:
                raise known.refused
            return
        task = self._checking.get(digest)
        if task is None:
            task = asyncio.ensure_future(self._ask(digest, app_id, key))
            self._checking[digest] = task
            task.add_done_callback(lambda _: self._checking.pop(digest, None))
        await asyncio.shield(task)  # one caller leaving does not cancel the others' check

    async def _ask(self, digest: str, app_id: str, key: str | None) -> None:
        assert self.client is not None, "the verifier is used before the gateway started"
        async with self._slots:
            try:
                await self.client.for_app(app_id, key).features()
            except CraftAiError as exc:
                if exc.code in VERDICTS:
                    self._keep(digest, exc)
                raise
        self._keep(digest, None)

    def _keep(self, digest: str, refused: CraftAiError | None) -> None:
        now = time.monotonic()
        if len(self._verdicts) >= KEPT_VERDICTS:
            self._verdicts = {d: v for d, v in self._verdicts.items() if v.until > now}
            while len(self._verdicts) >= KEPT_VERDICTS:
                del self._verdicts[next(iter(self._verdicts))]  # the oldest
        self._verdicts[digest] = _Verdict(refused, now + self.keep_seconds)


class KeyCheck:
    """ASGI middleware: a request to the API (`prefix`, but its schema) is answered 401/403 (or the
    services' error) before the app reads any of its body, unless the services accept its key."""

    def __init__(
        self, app: ASGIApp, verifier: Verifier, default_app_id: str, prefix: str, open_paths: set[str]
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.default_app_id = default_app_id
        self.prefix = prefix
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith(self.prefix)
            and scope["path"] not in self.open_paths
            and scope["method"] != "OPTIONS"
        ):
            try:
                await self.verifier.check(*credentials(Headers(scope=scope), self.default_app_id))
            except CraftAiError as exc:
                await error_response(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)
