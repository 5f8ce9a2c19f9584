"""What the prepare service answers when the store's disk fills up, downloading or converting.

Both steps write under tmp/ and publish by renaming, so a full disk leaves nothing partial
visible; the user is told which disk and what was being written, in the same words either way.
"""

from __future__ import annotations

import grpc

from craftai_common.errors import ServiceError
from craftai_common.store import Store
from craftai_wire.vocabulary import Reason


def no_space(store: Store, doing: str, **metadata: str) -> ServiceError:
    """RESOURCE_EXHAUSTED (NO_SPACE), naming the store's folder and `doing` ("writing u2netp.onnx ...")."""
    return ServiceError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        Reason.NO_SPACE,
        f"no space left on the store's disk ({store.root}) while {doing}; "
        "nothing partial was kept; free some space and run the setup again",
        metadata=metadata,
    )
