"""Who is calling (docs/SECURITY.md): the app id (metadata `craftai-app-id`) present and well
formed, and the app's key (metadata `craftai-app-key`) one of its keys (auth.KeyRing, compared in
constant time); else UNAUTHENTICATED, a wrong or missing key logged with the app id and the peer,
never the key. `craftai-internal` (the services calling each other) needs the service key.

Once the key is checked, the call's app and the caller's tenant (craftai_common.metadata) are set.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from craftai_common import observability as obs
from craftai_common.auth import INTERNAL_APP_ID, KeyRing
from craftai_common.errors import ServiceError
from craftai_common.interceptors.base import Interceptor, refuse
from craftai_common.interceptors.call import Call, Context, metadata
from craftai_common.metadata import WILDCARD_TENANT, tenant_var
from craftai_wire.keys import local_key_file
from craftai_wire.metadata import APP_ID_KEY, APP_ID_PATTERN, APP_KEY_KEY
from craftai_wire.vocabulary import Reason

log = logging.getLogger("craftai.gateway")


class Authentication(Interceptor):
    def __init__(self, keys: KeyRing) -> None:
        self.keys = keys

    @contextlib.asynccontextmanager
    async def around(self, call: Call, context: Context, request: Any) -> AsyncIterator[None]:
        app = metadata(context, APP_ID_KEY)
        if not app:
            await refuse(
                call,
                context,
                ServiceError(
                    grpc.StatusCode.UNAUTHENTICATED,
                    Reason.MISSING_APP_ID,
                    f"every request must carry the app id in the metadata key '{APP_ID_KEY}'",
                ),
            )
        if not APP_ID_PATTERN.match(app):
            await refuse(
                call,
                context,
                ServiceError(
                    grpc.StatusCode.UNAUTHENTICATED,
                    Reason.BAD_APP_ID,
                    "the app id must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
                ),
            )
        obs.app_id_var.set(app)
        verdict = self.keys.check(app, metadata(context, APP_KEY_KEY))
        if not verdict.ok:
            await refuse(call, context, _key_refusal(call, app, missing=verdict.problem == "missing"))
        call.app, call.internal, call.wildcard = app, app == INTERNAL_APP_ID, verdict.wildcard
        tenant_var.set(WILDCARD_TENANT if verdict.wildcard else app)
        yield


def _key_refusal(call: Call, app: str, *, missing: bool) -> ServiceError:
    reason = Reason.MISSING_APP_KEY if missing else Reason.BAD_APP_KEY
    log.warning(
        "refused %s from app %s: %s app key",
        call.method,
        app,
        "no" if missing else "a wrong",
        extra={"peer": call.peer, "reason": reason},
    )
    if missing:
        message = (
            f"app '{app}' sent no key (metadata '{APP_KEY_KEY}'): give the app's key to the SDK "
            f"(app_key=, or CRAFTAI_APP_KEY); a local `craftai serve` keeps its key in {local_key_file()}"
        )
    else:
        message = f"the key sent for app '{app}' is not one of its keys here: check the app's key"
    return ServiceError(grpc.StatusCode.UNAUTHENTICATED, reason, message, metadata={"app": app})
