"""This process among the infer service's replicas: its name, and the check that no other replica
answers to it.

The SDK sends a session's calls to the replica its id names (docs/DEPLOY.md, Scaling), so two
replicas under one name would each answer "session not found" for the other's sessions, silently.
Names made here are unique (the host name and a per-process suffix); a name given by hand
(CRAFTAI_REPLICA) is checked at start when CRAFTAI_REPLICAS_TARGET names the replicas (the
service's one name, or their addresses): every replica that answers is asked its name, and a
process whose name another process answers to refuses to start.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket

import grpc

from craftai_common.peers import Peers
from craftai_common.server import StartRefusedError
from craftai_wire.targets import parse_target, resolve
from craftai_wire.v1 import infer_pb2, infer_pb2_grpc

log = logging.getLogger("craftai.infer.replica")
ASK_SECONDS = 5.0  # how long each replica has to say its name


def replica_name(configured: str) -> str:
    """CRAFTAI_REPLICA, else the host name (a pod's name under Kubernetes, the container's id
    under compose) with a suffix of its own, so that two processes on one host, or a process
    restarted in place, are never taken for one another."""
    return configured or f"{socket.gethostname()}-{secrets.token_hex(3)}"


def new_instance() -> str:
    """A token of this process (Runtime.instance): new at each start."""
    return secrets.token_hex(8)


async def check_unique(target: str, replica: str, instance: str, peers: Peers) -> None:
    """StartRefusedError when another process among `target`'s replicas answers to `replica`
    (this process, found among them, answers with its own `instance`). Replicas that do not answer
    within ASK_SECONDS are passed over: starting, gone, or not yet serving."""
    addresses = await asyncio.to_thread(resolve, parse_target(target))
    answers = await asyncio.gather(*(_runtime(address, peers) for address in addresses))
    for address, runtime in zip(addresses, answers, strict=True):
        if runtime is not None and runtime.replica == replica and runtime.instance != instance:
            raise StartRefusedError(
                f"the replica name {replica!r} (CRAFTAI_REPLICA) is already answered by the replica at {address}: "
                "sessions would be sent to either; give each replica a name of its own, or leave CRAFTAI_REPLICA "
                "unset (the host name and a suffix)"
            )
    log.info("replica name %s checked against %d address(es) of %s", replica, len(addresses), target)


async def _runtime(address: str, peers: Peers) -> infer_pb2.Runtime | None:
    channel = peers.channel(address)
    try:
        stub = infer_pb2_grpc.InferServiceStub(channel)
        runtime: infer_pb2.Runtime = await stub.GetRuntime(
            infer_pb2.GetRuntimeRequest(), metadata=peers.metadata(), timeout=ASK_SECONDS
        )
        return runtime
    except grpc.aio.AioRpcError as exc:
        log.debug("replica at %s did not say its name: %s", address, exc.code().name)
        return None
    finally:
        await channel.close()
