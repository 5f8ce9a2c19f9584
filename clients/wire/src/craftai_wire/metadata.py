r"""The request metadata every RPC carries, named once for the services and the SDK.

`craftai-app-id` (required) names the calling app, `craftai-app-key` proves it (docs/SECURITY.md),
and `x-request-id` (optional) names the request in the server's logs and is echoed in trailers.

The patterns end with `\Z`, not `$` (which also matches before a final newline: "app\n" would pass
as a second app, and a request id with a newline would be echoed into trailers gRPC refuses).
"""

from __future__ import annotations

import re

APP_ID_KEY = "craftai-app-id"
APP_KEY_KEY = "craftai-app-key"
REQUEST_ID_KEY = "x-request-id"
APP_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # use with .match: the whole value
REQUEST_ID_PATTERN = re.compile(r"[\x21-\x7e]{1,128}\Z")  # printable ASCII, no spaces, at most 128
# RPCs that infrastructure calls without an app id.
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
