"""Small files written whole: the one way the services and the clients replace a file that
another process may read at any moment (a ready file, a key file, a manifest)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def replace_text(path: Path, text: str, *, mode: int = 0o600) -> None:
    """`path` replaced by `text`: a reader sees the old content or the new, never a part, and a
    crash leaves no partial file under the name. The new file has `mode` from its creation (before
    a byte is written), and its content is on disk before the rename makes it visible."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
