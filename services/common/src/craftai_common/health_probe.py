"""Exit 0 when a server's grpc.health.v1 reports SERVING (container and Kubernetes probes).

python -m craftai_common.health_probe [--address 127.0.0.1:50051] [--service NAME]
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gRPC health probe")
    default = f"127.0.0.1:{os.environ.get('CRAFTAI_PORT', '50051')}"
    parser.add_argument("--address", default=default)
    parser.add_argument("--service", default="", help="service name; empty for the whole server")
    parser.add_argument("--timeout", type=float, default=3.0)
    options = parser.parse_args(argv)
    try:
        with grpc.insecure_channel(options.address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=options.service), timeout=options.timeout
            )
    except grpc.RpcError as exc:
        print(f"unhealthy: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(status)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    raise SystemExit(main())
