"""The job a Setup runs, once per route however many callers join it: under the store's
cross-process lock for the route, place the files the caller brought (SetupFrom), fetch and check
every other file, then prepare the route where it needs it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from craftai_common.catalogue_client import pins_of
from craftai_common.errors import ServiceError
from craftai_common.store import Store, prepared_key
from craftai_prepare import ownership
from craftai_prepare.brought import Received
from craftai_prepare.conversion import ensure_prepared
from craftai_prepare.downloads import FetchOutcome, ensure_file, forget_archives, place
from craftai_prepare.locks import route_lock
from craftai_prepare.offline import from_command, with_offline_help
from craftai_prepare.reporter import Reporter
from craftai_prepare.sources import Timeouts, sources_of
from craftai_wire.v1 import catalogue_pb2, prepare_pb2
from craftai_wire.vocabulary import Reason


def run_setup(  # noqa: PLR0917 - the job's inputs, passed from one place
    store: Store,
    resolved: catalogue_pb2.ResolveRouteResponse,
    reporter: Reporter,
    timeouts: Timeouts,
    lock_wait: float,
    stopping: threading.Event | None = None,
    brought: Sequence[Received] = (),
    *,
    memory_limit_bytes: int = 0,
) -> prepare_pb2.SetupResult:
    """The job: under the store's cross-process lock for this route, place the files the caller
    brought, then fetch and check every other file, then prepare (within `memory_limit_bytes`, 0:
    the cgroup's or the machine's memory)."""
    store.ensure()
    route = resolved.route
    key = f"{route.feature}/{route.recipe}/{route.engine}"
    try:
        with route_lock(store, key, reporter, lock_wait, stopping):
            outcomes = _files(store, resolved, reporter, timeouts, stopping, brought)
            prepared_now = (
                ensure_prepared(store, resolved, reporter, memory_limit_bytes=memory_limit_bytes)
                if resolved.chosen.needs_preparation
                else None
            )
    except PermissionError as exc:  # a file or folder placed by hand with another owner or mode
        where = Path(exc.filename) if exc.filename else store.root
        raise ownership.refusal(store, where, "read or write", bring=from_command(route)) from exc
    return prepare_pb2.SetupResult(
        route=route,
        files=[
            prepare_pb2.FileOutcome(
                folder=o.pin.folder,
                name=o.pin.name,
                size=o.pin.size,
                sha256=o.pin.sha256,
                downloaded=o.downloaded,
                source=o.source,
            )
            for o in outcomes
        ],
        revision=prepared_key(resolved.chosen.revision, pins_of(resolved.recipe))
        if resolved.chosen.needs_preparation
        else "",
        prepared_now=prepared_now is not None,
        already_done=prepared_now is None and not any(o.downloaded for o in outcomes),
    )


def _files(  # noqa: PLR0917 - run_setup's inputs
    store: Store,
    resolved: catalogue_pb2.ResolveRouteResponse,
    reporter: Reporter,
    timeouts: Timeouts,
    stopping: threading.Event | None,
    brought: Sequence[Received],
) -> list[FetchOutcome]:
    """Every file of the route in place: those brought placed, the others fetched or checked. A
    file no source could give fails naming every file still lacking and how to bring them."""
    placed = {r.pin: place(store, r.pin, r.path, r.origin) for r in brought}
    pins = pins_of(resolved.recipe)
    sources = [sources_of(spec) for spec in resolved.recipe.files]
    outcomes = []
    for index, (pin, own) in enumerate(zip(pins, sources, strict=True)):
        if pin in placed:
            outcomes.append(placed[pin])
            continue
        try:
            outcomes.append(ensure_file(store, pin, own, reporter, timeouts, stopping))
        except ServiceError as error:
            if error.reason == Reason.SOURCES_FAILED:
                raise with_offline_help(error, store, resolved, pins[index:]) from error
            raise
    forget_archives(store, [source for own in sources for source in own])  # every file is in place
    return outcomes
