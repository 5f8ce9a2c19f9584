"""The processes `craftai serve` starts beside its services (the web gateway, the infer replicas of
the other GPUs): each stopped the same way, within its grace."""

from __future__ import annotations

import asyncio
import logging
import signal

log = logging.getLogger("craftai.serve")


async def stop_within(child: asyncio.subprocess.Process, grace_seconds: float, what: str) -> None:
    """SIGTERM, then `grace_seconds` (+10 s) for `child` to finish its calls and end; killed
    after that, and said in the log. Nothing to do for one that ended already."""
    if child.returncode is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(child.wait(), grace_seconds + 10)
    except TimeoutError:
        log.error("%s did not stop within its grace: killed", what)
        child.kill()
        await child.wait()
