"""What reading a short server stream costs the blocking SDK, by gRPC's reader: its default (each
message handed over from the channel's polling thread) against reading on the caller's own thread
(`craftai.transport.READ_ON_CALLERS_THREAD`, the SDK's since 2026-12-07).

    .venv/bin/python -m tools.bench.stream_reading [--out DIR] [--rounds 7] [--calls 500] [--tiny]

A click's answer is such a stream: two progress messages and a result (Segment, SegmentOnce). The
server here is a gRPC asyncio server in a process of its own that answers every call with three
messages (two of 64 bytes, one of 2 kB) at once: what is timed is the transport, not a model. The
channels are the SDK's (craftai_wire.channels.client_options), on loopback without TLS. Interleaved
rounds (harness.interleaved), so that a machine whose load drifts biases neither reader.

Writes stream_reading.json and stream_reading.md into --out; prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from tools.bench import harness

METHOD = "/bench.Stream/Three"
MESSAGES = (b"p" * 64, b"p" * 64, b"r" * 2048)  # two progress events, then the result


def _serve(ports: Any) -> None:
    """The answering server (a process of its own, as the service is)."""

    async def three(_request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
        for message in MESSAGES:
            yield message

    async def main() -> None:
        server = grpc.aio.server()
        handler: Any = grpc.unary_stream_rpc_method_handler(three)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Stream", {"Three": handler}),))
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def measure(rounds: int, calls: int) -> dict[str, Any]:
    from craftai.transport import READ_ON_CALLERS_THREAD
    from craftai_wire.channels import client_options

    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    server = context.Process(target=_serve, args=(ports,), daemon=True)
    server.start()
    try:
        address = f"127.0.0.1:{ports.get(timeout=60)}"
        options = client_options(4 << 20)
        channels = {
            "default reader": grpc.insecure_channel(address, options=options),
            "caller's thread": grpc.insecure_channel(address, options=[*options, READ_ON_CALLERS_THREAD]),
        }
        try:

            def reader(channel: grpc.Channel) -> Callable[[int], Callable[[], object]]:
                call: Any = channel.unary_stream(METHOD)

                def one() -> object:
                    events = call(b"", timeout=10)
                    answered = list(events)
                    events.cancel()
                    assert answered == list(MESSAGES)
                    return answered

                return lambda _i: one

            run = harness.interleaved(
                {name: reader(channel) for name, channel in channels.items()},
                "default reader",
                rounds=rounds,
                calls=calls,
            )
        finally:
            for channel in channels.values():
                channel.close()
    finally:
        server.kill()
        server.join(30)
    return {
        "rounds": rounds,
        "calls_a_round": calls,
        "messages_a_call": len(MESSAGES),
        "us_a_call": {name: round(1e6 / run.median_rate(name), 1) for name in channels},
        "us_a_call_by_round": {name: [round(1e6 / r, 1) for r in run.rates[name]] for name in channels},
        "callers_thread_speed_over_default": round(run.median_ratio("caller's thread"), 3),
        "spread_of_ratios": [
            round(min(run.ratios("caller's thread")), 3),
            round(max(run.ratios("caller's thread")), 3),
        ],
        "cpu_count": multiprocessing.cpu_count(),
    }


def report(results: dict[str, Any]) -> str:
    us = results["us_a_call"]
    low, high = results["spread_of_ratios"]
    lines = [
        f"A server stream of {results['messages_a_call']} messages on loopback, read by the blocking client "
        f"({results['rounds']} interleaved rounds of {results['calls_a_round']} calls, {results['cpu_count']} CPUs)",
        "",
        "| reader | µs a call (median of rounds) |",
        "|---|---|",
        *[f"| {name} | {value:,.1f} |" for name, value in us.items()],
        "",
        f"The caller's thread: {results['callers_thread_speed_over_default']:.2f}x the default reader's calls a "
        f"second (rounds {low:.2f}-{high:.2f}x).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=500, help="calls a round and reader")
    parser.add_argument("--tiny", action="store_true", help="2 rounds of 20 calls: every part, no figure")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    rounds, calls = (2, 20) if options.tiny else (options.rounds, options.calls)
    results = measure(rounds, calls)
    harness.write_report(options.out, "stream_reading", results, report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
