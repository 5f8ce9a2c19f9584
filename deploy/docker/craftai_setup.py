#!/opt/craftai/bin/python
"""craftai-setup: set routes up through separately deployed services (the one-time preparation Job).

    craftai-setup image.matte:u2netp [image.segment ...]        FEATURE[:RECIPE[:ENGINE]]

`craftai setup` talks to one address (the embedded `craftai serve`); under compose or Kubernetes each
service has its own, read here from CRAFTAI_CATALOGUE_ADDRESS, CRAFTAI_PREPARE_ADDRESS and
CRAFTAI_INFER_ADDRESS. The command first waits (CRAFTAI_SETUP_WAIT_SECONDS, default 600) until the three
services report SERVING, since a Job usually starts beside them, then sets each route up in turn and
prints progress as log lines. When a service goes away mid-way (a restart, a rescheduled pod) it asks
again once they serve (CRAFTAI_SETUP_ATTEMPTS, default 5). Running it twice is harmless: a route
already set up is only checked, a second caller joins the running job, and the store's lock makes a
second prepare process wait for the first one's result. Exit status: 0 when every route is set up.
"""

from __future__ import annotations

import os
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from craftai import AiClient, CraftAiError, SetupOutput
from craftai_wire.v1 import common_pb2

SERVICES = ("catalogue", "prepare", "infer")


def _addresses() -> dict[str, str]:
    found = {name: os.environ.get(f"CRAFTAI_{name.upper()}_ADDRESS", "") for name in SERVICES}
    missing = [f"CRAFTAI_{name.upper()}_ADDRESS" for name, address in found.items() if not address]
    if missing:
        raise SystemExit(f"craftai-setup: set {', '.join(missing)} (host:port of each service)")
    return found


def _serving(address: str) -> bool:
    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
    except grpc.RpcError:
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def wait_for(addresses: dict[str, str], seconds: float) -> None:
    """Wait until every service answers SERVING; a Job often starts before the services are ready."""
    deadline = time.monotonic() + seconds
    waiting = dict(addresses)
    while waiting:
        waiting = {name: address for name, address in waiting.items() if not _serving(address)}
        if not waiting:
            break
        if time.monotonic() > deadline:
            names = ", ".join(f"{name} ({address})" for name, address in waiting.items())
            raise SystemExit(f"craftai-setup: not serving after {seconds:.0f} s: {names}")
        time.sleep(2)
    print("craftai-setup: catalogue, prepare and infer are serving", flush=True)


def setup(ai: AiClient, spec: str) -> None:
    feature, recipe, engine = ([*spec.split(":"), "", ""])[:3]
    last_step = -1
    for event in ai.setup(feature, recipe or None, engine or None):
        if isinstance(event, common_pb2.Progress):
            step = event.done * 10 // event.total if event.total else 0
            if step != last_step or event.stage != "download":
                last_step = step
                print(f"  {event.stage}: {event.done:,}/{event.total:,} {event.unit} {event.message}", flush=True)
        elif isinstance(event, common_pb2.Notice):
            print(f"  note: {event.message}", flush=True)
        elif isinstance(event, SetupOutput):
            r = event.proto.route
            what = "already set up (files checked)" if event.already_done else "set up"
            print(f"craftai-setup: {r.feature} {r.recipe} ({r.engine}): {what}", flush=True)
            for f in event.proto.files:
                print(f"  {f.folder}/{f.name} {f.size:,} bytes sha256 {f.sha256} from {f.source}", flush=True)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    addresses = _addresses()
    wait_seconds = float(os.environ.get("CRAFTAI_SETUP_WAIT_SECONDS", "600"))
    attempts = int(os.environ.get("CRAFTAI_SETUP_ATTEMPTS", "5"))
    app_id = os.environ.get("CRAFTAI_APP_ID", "craftai-setup")
    wait_for(addresses, wait_seconds)
    for spec in argv:
        for attempt in range(1, attempts + 1):
            # A fresh channel per attempt: one that lost its server may still be backing off.
            with AiClient(app_id, **addresses) as ai:
                try:
                    setup(ai, spec)
                    break
                except CraftAiError as exc:
                    # The channel failed (no reason from a service): a service restarted or moved.
                    # Preparation is never cut short by a caller, so asking again joins or redoes it.
                    if exc.code == grpc.StatusCode.UNAVAILABLE and not exc.reason and attempt < attempts:
                        print(f"craftai-setup: {spec}: {exc}; asking again once the services serve", flush=True)
                        wait_for(addresses, wait_seconds)
                        continue
                    print(f"craftai-setup: {spec}: {exc}", file=sys.stderr, flush=True)
                    return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
