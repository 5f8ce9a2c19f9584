"""Files and folders of the store placed by hand (`docker cp`, `kubectl cp`, a copy as another
user): adopted when this service can make them its own, else refused with the command that fixes
them.

A file copied into a container's volume keeps the owner and mode it had (root, 0600, say), and the
services run as another user (10001 in the images): reading it fails with a PermissionError, which
without this module reached the caller as "internal error (PermissionError)". A readable file of
another owner is adopted: copied to a file of the service's own (hashed in the same pass) and
renamed over it, so that every later check, replacement and load works. What cannot be read or
written is refused (FAILED_PRECONDITION / STORE_PERMISSIONS), naming the path, its owner and mode,
the service's user, and the commands that fix it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc

from craftai_common.errors import ServiceError
from craftai_common.store import Store
from craftai_wire.vocabulary import Reason


def _nearest(path: Path) -> tuple[Path, os.stat_result | None]:
    """`path`, or its nearest parent that can be looked at, with what lstat says of it."""
    for candidate in (path, *path.parents):
        try:
            return candidate, candidate.lstat()
        except PermissionError:
            continue
        except OSError:
            continue
    return path, None


def _described(path: Path, found: os.stat_result | None) -> str:
    if found is None:
        return str(path)
    kind = "folder" if stat.S_ISDIR(found.st_mode) else "file"
    return f"the {kind} {path} (owner uid {found.st_uid}, group {found.st_gid}, mode {stat.S_IMODE(found.st_mode):04o})"


def refusal(store: Store, path: Path, doing: str, bring: str = "") -> ServiceError:
    """FAILED_PRECONDITION / STORE_PERMISSIONS: this service cannot `doing` (read or write) `path`;
    the message names who owns what, and the commands that fix it (`bring`: the setup command that
    streams the files to the service instead, when there is one)."""
    where, found = _nearest(path)
    uid, gid = os.geteuid(), os.getegid()
    target = store.models if where.is_relative_to(store.models) else where
    fix = f"chown -R {uid}:{gid} {target}"
    message = (
        f"this service (uid {uid}, group {gid}) cannot {doing} {path}: {_described(where, found)}. "
        f"Fix it as that file's owner or root: `{fix}` (under Docker Compose: `docker compose exec -u 0 prepare "
        f"{fix}`; Kubernetes: the same in a pod that mounts the store as root, or fsGroup {gid} on the store)"
    )
    if bring:
        message += f"; or bring the files with `{bring}`, which streams them to the service"
    return ServiceError(
        grpc.StatusCode.FAILED_PRECONDITION, Reason.STORE_PERMISSIONS, message, metadata={"path": str(path)}
    )


def foreign(path: Path) -> os.stat_result | None:
    """What lstat says of a regular file at `path` that another user owns (None: ours, or none)."""
    try:
        found = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(found.st_mode) or found.st_uid == os.geteuid():
        return None
    return found
