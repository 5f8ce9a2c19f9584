"""`craftai status [FEATURE]`: the server (the shared one a command started, when it is that), the
infer service's device and engines, and every route's state: a route whose engine the infer
service does not have is said to be unusable there, whatever its files' state."""

from __future__ import annotations

import argparse

from craftai.cli.connection import connect
from craftai.cli.progress import size_text
from craftai.cli.tables import aligned
from craftai.local_server import local_address, shared
from craftai_wire import advice
from craftai_wire.vocabulary import Feature


def _server_line(options: argparse.Namespace) -> str:
    found = shared()
    address = options.address or local_address()
    if found is None or found.address != address:
        return f"server: {address}"
    idle = f"stops after {found.idle_minutes:g} idle minutes" if found.idle_minutes else "runs until stopped"
    return (
        f"server: {address}, the shared server a command started (pid {found.pid}; it {idle}; log: {found.log}; "
        "stop it with: craftai serve --stop)"
    )


def cmd_status(options: argparse.Namespace) -> int:
    print(_server_line(options))
    with connect(options, start_server=False) as ai:  # looking starts nothing
        runtime = ai.runtime()
        gpu = f"GPU: {runtime.gpu_name}" if runtime.gpu_available else "no GPU"
        print(f"infer device: {runtime.device} ({gpu}); engines: {', '.join(runtime.engines)}")
        models = [f"{r.route.recipe} ({r.route.engine}, {size_text(r.resident_bytes)})" for r in runtime.loaded]
        used = size_text(sum(r.resident_bytes for r in runtime.loaded))
        budget = size_text(runtime.limits.models_budget_bytes)
        print(
            f"loaded models: {', '.join(models) or 'none'}; {used} of the {budget} for models "
            "(idle ones are unloaded beyond it: CRAFTAI_MODELS_BUDGET_BYTES)"
        )
        rows = []
        for r in ai.status(options.feature or ""):
            detail = r.detail
            if r.route.engine not in runtime.engines:
                detail = (
                    f"the infer service cannot run it: its {r.route.engine} engine is not installed there "
                    f"(it runs {', '.join(runtime.engines) or 'none'}); files: {detail}"
                )
            rows.append((f"{r.route.feature}", r.route.recipe, r.route.engine, r.state or "?", detail))
    for line in aligned(rows):
        print(line)
    if options.feature in ("", Feature.MATTE):
        device = "GPU" if runtime.gpu_available else "CPU"
        print(f"image.matte --recipe {advice.AUTO} (by --subject and the picture's longer side; here: {device}):")
        for line in advice.table():
            print(f"  {line}")
    return 0
