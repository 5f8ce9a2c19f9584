"""The `craftai` command: serve, status, setup, remove-background, segment, keys.

craftai serve                                  # all three services on 127.0.0.1:50051
craftai setup image.matte --recipe u2netp      # download and verify (progress bars); a server started if none
craftai setup image.segment --from sam.zip     # offline: the files brought by hand, streamed to the server
craftai serve --stop                           # the shared server a command started, stopped
craftai models image.matte                     # every recipe: what it is for, download, engines, licence
craftai remove-background a.jpg photos/ -o out/ --outputs cutout,composite --bg-color '#2a6df4'   # files, folders, -
craftai segment photo.jpg --point 310,200 --point 40,40:bg -o mask.png   # a mask from clicks and/or a box
craftai segment photo.jpg --box 10,10,200,150 --box 220,40,400,300 -o masks.json --format rle  # two objects
craftai segment-all photo.jpg -o masks.json    # every object (Meta's automatic mask generator), COCO RLE
craftai keys add my-editor                     # a new key for an app: its hash into the keys file
craftai serve --web                            # the services, and the page and HTTP API on 127.0.0.1:8080
craftai serve --gpus all                       # one infer replica per GPU, on :50051, :50052, ...
craftai web --address 10.0.0.7:50051           # the page and HTTP API in front of services elsewhere

One module a command family (serve, status, models, setup, remove_background, segment, keys); the batch
planner of remove-background (batch), the parser (parser), the client a command talks through
(connection), the progress bars, plain lines when not on a terminal (progress), and the aligned
columns of the listings (tables), apart.
"""

from __future__ import annotations

import logging
import sys

from craftai.cli.parser import parser
from craftai.errors import CraftAiError


def _say_server_started() -> None:
    """The one line a command says when it started the shared server, on standard error."""
    said = logging.getLogger("craftai.local_server")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("craftai: %(message)s"))
    said.addHandler(handler)
    said.propagate = False


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    _say_server_started()
    try:
        return int(options.func(options))
    except CraftAiError as exc:
        print(f"craftai: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:  # a file the command was given (an input, a background): named
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"craftai: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
