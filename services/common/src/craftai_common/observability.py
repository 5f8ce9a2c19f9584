"""Structured logs and Prometheus metrics shared by the services (docs/OBSERVABILITY.md).

Logs: one JSON object per line (CRAFTAI_LOG_FORMAT=json, the default) with time, level, service,
logger and message, plus the request id, app id and RPC of the request being served (context
variables set by the gateway interceptor, so every log line written while serving a request
carries them), and for the one line per finished RPC its status code and duration.

Metrics: the process-wide registry of prometheus_client, served on CRAFTAI_METRICS_PORT. The
request metrics are defined here; each service adds collectors for its own state (sessions,
loaded routes, preparation jobs) when it starts and removes them when it stops.
"""

from __future__ import annotations

import collections
import contextvars
import datetime
import json
import logging
import threading
from collections.abc import Iterable
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.registry import Collector

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("craftai_request_id", default="")
app_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("craftai_app_id", default="")
rpc_var: contextvars.ContextVar[str] = contextvars.ContextVar("craftai_rpc", default="")

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
# Extra fields a log call may pass (`extra={...}`) that the JSON line carries as they are.
EXTRA_FIELDS = ("code", "duration_ms", "peer", "reason", "metrics_address", "keys_file")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; the request's ids come from the context variables."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, var in (("request_id", request_id_var), ("app_id", app_id_var), ("rpc", rpc_var)):
            value = getattr(record, key, None) or var.get()
            if value:
                entry[key] = value
        for key in EXTRA_FIELDS:
            if key in record.__dict__:
                entry[key] = record.__dict__[key]
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class _ContextText(logging.Formatter):
    """Text lines for people, with the request id when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request = getattr(record, "request_id", None) or request_id_var.get()
        return f"{line} [request {request}]" if request else line


class OncePerRequest(logging.Filter):
    """Lets through the first record of each request and drops the others (a damaged picture can
    make a library warn thousands of times); records outside a request all pass."""

    def __init__(self, remembered: int = 4096) -> None:
        super().__init__()
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remembered = remembered
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request_id", None) or request_id_var.get()
        if not request:
            return True
        with self._lock:
            if request in self._seen:
                return False
            self._seen[request] = None
            if len(self._seen) > self._remembered:
                self._seen.popitem(last=False)
        return True


def configure_logging(level: str, log_format: str = "json", service: str = "craftai") -> None:
    """Root logging for a service process: JSON lines (default) or text, on stderr. Python warnings
    (Pillow's, numpy's, ...) are logged too, as lines like every other (logger `py.warnings`), at
    most one per request, instead of being printed raw on stderr."""
    handler = logging.StreamHandler()
    if log_format == "text":
        handler.setFormatter(_ContextText("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    logging.captureWarnings(True)
    warned = logging.getLogger("py.warnings")
    if not any(isinstance(f, OncePerRequest) for f in warned.filters):
        warned.addFilter(OncePerRequest())


# -- metrics -------------------------------------------------------------------------------------

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
MAX_APP_LABELS = 200  # beyond this many distinct app ids, the rest are counted as "other"

REQUESTS = Counter(
    "craftai_requests",
    "RPCs finished, by service, method, app id and status code",
    ["service", "method", "app", "code"],
)
LATENCY = Histogram(
    "craftai_request_duration_seconds",
    "RPC duration from arrival to the last message, by service, method and app id",
    ["service", "method", "app"],
    buckets=LATENCY_BUCKETS,
)
IN_FLIGHT = Gauge("craftai_requests_in_flight", "RPCs in progress, by service and method", ["service", "method"])
REFUSED = Counter(
    "craftai_requests_refused",
    "RPCs refused before reaching the service, by reason (keys, limits, shutting down)",
    ["service", "method", "reason"],
)

ENDED = Counter(
    "craftai_requests_ended",
    "RPCs the server ended itself, by why: max_duration (CRAFTAI_MAX_CALL_SECONDS) or "
    "stalled_write (the client stopped reading: CRAFTAI_STALLED_WRITE_SECONDS)",
    ["service", "method", "why"],
)
UNAUTHENTICATED_LABEL = "-"  # the app label of calls refused before their app was known (no id, bad id or key)

_app_labels: set[str] = set()
_app_labels_lock = threading.Lock()


def app_label(app_id: str) -> str:
    """The app id as a metric label, capped in number so that labels stay bounded."""
    with _app_labels_lock:
        if app_id in _app_labels:
            return app_id
        if len(_app_labels) < MAX_APP_LABELS:
            _app_labels.add(app_id)
            return app_id
    return "other"


def split_method(full: str) -> tuple[str, str]:
    """'/craftai.v1.InferService/Matte' -> ('craftai.v1.InferService', 'Matte')."""
    service, _, method = full.lstrip("/").partition("/")
    return service, method


class MetricsServer:
    """The /metrics HTTP endpoint of one process (owned by the Server; `close` stops it)."""

    def __init__(self, host: str, port: int) -> None:
        server, thread = start_http_server(port, addr=host)
        self._server: WSGIServer = server
        self._thread = thread
        bound = server.server_address[1]
        shown = host if host not in ("0.0.0.0", "::", "[::]", "") else "127.0.0.1"
        self.address = f"{shown}:{bound}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class Collectors:
    """Collectors a service registers while it runs (unregistered on stop: tests start many)."""

    def __init__(self) -> None:
        self._registered: list[Collector] = []

    def add(self, collectors: Iterable[Collector]) -> None:
        for collector in collectors:
            REGISTRY.register(collector)
            self._registered.append(collector)

    def close(self) -> None:
        for collector in self._registered:
            REGISTRY.unregister(collector)
        self._registered.clear()
