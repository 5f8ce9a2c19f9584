"""The `craftai` command's arguments: the global options, and each command's with its function.

Longer than an edge unit should be, on purpose: it holds argparse's declarations and nothing else
(every command's logic is in its own module), so that `craftai --help` and each command's help are
read and kept in one place; splitting it by command would scatter the shared options.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

from craftai.cli.keys import cmd_keys_add, cmd_keys_hash
from craftai.cli.models import cmd_models
from craftai.cli.remove_background import FixArgument, cmd_remove_background, region_arg
from craftai.cli.segment import EVERYTHING_FLAGS, box_arg, cmd_segment, cmd_segment_all, point_arg
from craftai.cli.serve import cmd_serve, cmd_web
from craftai.cli.setup import cmd_setup
from craftai.cli.status import cmd_status
from craftai_wire import advice, vocabulary
from craftai_wire.advice import Subject
from craftai_wire.vocabulary import PARTS_OF, RECIPES_OF, CutoutAction, Engine, Feature, ImageFormat, Part

# --engine's choices: the engines the wire knows (a recipe offers some of them, and the services
# answer UNKNOWN_ENGINE for one it does not).
ENGINES = tuple(Engine)
FEATURES = tuple(str(feature) for feature in Feature)
# --recipe's names, listed in its help rather than enforced: a catalogue of one's own may add recipes.
RECIPES_HELP = "; ".join(f"{feature}: {', '.join(names)}" for feature, names in RECIPES_OF.items())


def _recipe_flags(s: argparse.ArgumentParser, feature: str = "") -> None:
    names = ", ".join(RECIPES_OF[Feature(feature)]) if feature else RECIPES_HELP
    auto = ""
    if feature == Feature.MATTE:
        names += f"; {advice.AUTO}: chosen per picture from --subject, its size and the server's device"
        auto = ", the rule `craftai status` prints"
    s.add_argument(
        "--recipe",
        default=None,
        metavar="RECIPE",
        help=f"the recipe ({names}; default: the catalogue's advice for the infer service's machine; "
        f"`craftai status` lists each with its state{auto})",
    )
    if feature == Feature.MATTE:
        s.add_argument(
            "--subject",
            default=Subject.GENERAL,
            choices=list(Subject),
            help=f"what the pictures show, for --recipe {advice.AUTO} (default: general)",
        )
    s.add_argument(
        "--engine",
        default=None,
        choices=ENGINES,
        help="the engine that runs it (default: the catalogue's advice; a recipe offers some of them)",
    )


def version() -> str:
    try:
        return f"craftai {metadata.version('craftai')}"
    except metadata.PackageNotFoundError:
        return "craftai (version unknown: not installed as a package)"


def _format_flags(s: argparse.ArgumentParser, default: str) -> None:
    s.add_argument(
        "--format",
        choices=list(vocabulary.MaskFormat),
        default=default,
        help=f"how the masks are written (default {default}); rle: COCO run-length encoding",
    )
    s.add_argument(
        "--polygon-tolerance",
        type=float,
        default=None,
        metavar="PIXELS",
        help="polygons: simplification (default 0: exactly the mask)",
    )


def _web_flags(s: argparse.ArgumentParser) -> None:
    s.add_argument("--web-host", default=None, help="the gateway's address (default CRAFTAI_WEB_HOST or 127.0.0.1)")
    s.add_argument("--web-port", type=int, default=None, help="its port (default CRAFTAI_WEB_PORT or 8080)")


class _Help(argparse.HelpFormatter):
    """Lines wrapped at spaces only: a name with a hyphen (isnet-general-use) is never split, so the
    help can be copied from."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="craftai",
        description="craft-ai services: local AI image features. With no --address (nor CRAFTAI_ADDRESS), a "
        "command that finds no server at the local address starts one in the background and says so "
        "(CRAFTAI_AUTOSTART=off: never; craftai serve --stop stops it).",
    )
    p.add_argument("--version", action="version", version=version())
    p.add_argument(
        "--address",
        default=os.environ.get("CRAFTAI_ADDRESS"),
        help="server address (default: CRAFTAI_ADDRESS, else the local server at 127.0.0.1:CRAFTAI_PORT or "
        "127.0.0.1:50051, started when none answers); an address given never starts one",
    )
    p.add_argument(
        "--app-id",
        default=os.environ.get("CRAFTAI_APP_ID", "craftai-cli"),
        help="the app id sent with every request (default: CRAFTAI_APP_ID or craftai-cli)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the three services on one port (the embedded default)")
    s.add_argument("--host", default=None, help="address to listen on (default CRAFTAI_HOST or 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="port (default CRAFTAI_PORT or 50051)")
    s.add_argument("--store", type=Path, default=None, help="model store folder (default CRAFTAI_STORE)")
    s.add_argument("--web", action="store_true", help="also serve the HTTP API and the page (craftai[web])")
    _web_flags(s)
    s.add_argument(
        "--idle-minutes",
        type=float,
        default=None,
        metavar="M",
        help="stop after M minutes without a call (default: never; the shared server a command starts: "
        "CRAFTAI_SHARED_IDLE_MINUTES, 30)",
    )
    s.add_argument(
        "--gpus",
        default=None,
        metavar="all|0,1,...",
        help="one infer replica per GPU (ports P, P+1, ...; clients reach them all at ipv4:HOST:P,HOST:P+1,...): "
        "'all' the visible ones (none: one replica on the CPU) or a list of indices or UUIDs",
    )
    s.add_argument(
        "--replicas-per-gpu",
        type=int,
        default=1,
        metavar="N",
        help="with --gpus: N infer replicas on each GPU, processes of their own sharing it (ports P, P+1, ...)",
    )
    s.add_argument(
        "--stop", action="store_true", help="stop the shared server a command started (craftai status shows it)"
    )
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("web", help="the HTTP API and the page, in front of the services at --address")
    _web_flags(s)
    s.set_defaults(func=cmd_web)

    s = sub.add_parser("status", help="the server, the infer device and the state of every route (starts no server)")
    s.add_argument(
        "feature", nargs="?", default="", metavar="FEATURE", help=f"one feature's routes only: {' or '.join(FEATURES)}"
    )
    s.set_defaults(func=cmd_status)

    s = sub.add_parser(
        "models", help="every recipe: what it is for, its download, its engines and its licence (starts no server)"
    )
    s.add_argument(
        "feature", nargs="?", default="", metavar="FEATURE", help=f"one feature's recipes only: {' or '.join(FEATURES)}"
    )
    s.set_defaults(func=cmd_models)

    s = sub.add_parser(
        "setup",
        help="download (or take from --from), verify and prepare a feature's route",
        description="Set a route up: its pinned files downloaded and checked byte for byte, then its one-time "
        "preparation. Offline, --from PATH takes the files from PATH instead (a file, a folder, a zip archive such "
        "as the publisher's), streamed to the server, which checks every byte.",
    )
    s.add_argument("feature", metavar="FEATURE", help=" or ".join(FEATURES))
    _recipe_flags(s)
    s.add_argument(
        "--from",
        dest="from_path",
        type=Path,
        default=None,
        metavar="PATH",
        help="the route's files brought by hand: a file, a folder or a zip archive (found by size and SHA-256; "
        "a failed download names them)",
    )
    s.set_defaults(func=cmd_setup)

    s = sub.add_parser(
        "remove-background",
        help="write the matte, cutout, composite and/or mask of pictures (files, folders, -) or of a video",
        description="Remove the background of pictures: files, folders (recursively, the same tree under OUT) "
        "and - (standard input). Pictures whose outputs exist are skipped unless --overwrite; a failed picture "
        "never stops the others, and the exit code is 1 when any failed. One video (.mp4, .mov, .webm, .mkv, "
        ".avi, .m4v) becomes a video of one output: .webm (VP9) or .mov (ProRes 4444) keep transparency, .mp4 "
        "(H.264) holds a composite, a folder gets PNG frames; the sound is kept (docs/VIDEO.md).",
    )
    s.add_argument(
        "inputs",
        nargs="+",
        metavar="IN",
        help="PNG, JPEG, WebP or binary PPM pictures, folders of them, or -; or one video file",
    )
    s.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="a folder; or a file (.png, .webp, .jpg) for one picture: the first output there, the others beside it; "
        "or - (standard output) for one picture and one output; for a video: .webm, .mov, .mp4 or a folder",
    )
    s.add_argument(
        "--outputs",
        default=None,
        metavar="LIST",
        help="any of matte,cutout,composite,mask (default: the cutout; the composite instead with a background, "
        "the mask with a threshold: docs/API.md, 'The default outputs')",
    )
    s.add_argument(
        "--cutout",
        action="store_true",
        help="the cutout too, beside the composite or the mask",
    )
    s.add_argument(
        "--naive",
        action="store_true",
        help="cutout and composite keep the picture's own colours (no foreground colour estimation)",
    )
    bg = s.add_mutually_exclusive_group()
    bg.add_argument(
        "--bg-color", default=None, metavar="COLOR", help="composite over a colour: #rrggbb[aa] or r,g,b[,a]"
    )
    bg.add_argument(
        "--bg-blur", type=float, default=None, metavar="RADIUS", help="composite over the picture blurred (pixels)"
    )
    bg.add_argument("--bg-image", default=None, metavar="FILE", help="composite over another picture (scaled to cover)")
    s.add_argument(
        "--threshold", type=float, default=None, metavar="T", help="the mask: alpha > T, in [0, 1] (default 0.5)"
    )
    s.add_argument(
        "--format",
        choices=list(ImageFormat),
        default=None,
        help="png (default), webp (lossless), jpeg (the composite only; the others stay PNG) or raw (.raw files "
        "of the pixels alone, no header: each picture's line gives their size and bytes a pixel); "
        "default from OUT's suffix when OUT is a file",
    )
    s.add_argument(
        "--png-level", type=int, default=None, metavar="0-9", help="zlib level of PNGs (server default: 1, fast)"
    )
    s.add_argument("--jpeg-quality", type=int, default=None, metavar="1-100", help="JPEG quality (default 90)")
    s.add_argument(
        "--part",
        choices=list(Part),
        default=None,
        help=f"a recipe with parts ({', '.join(PARTS_OF)}): that part's matte alone (default: every part's, "
        "stacked top to bottom, as rembg answers)",
    )
    for flag, action, what in (
        ("--keep", CutoutAction.KEEP, "keep a region the matte missed"),
        ("--remove", CutoutAction.REMOVE, "remove a region the matte kept"),
    ):
        s.add_argument(
            flag,
            action=FixArgument,
            const=action,
            type=region_arg,
            dest="fixes",
            metavar="X,Y|X0,Y0,X1,Y1",
            help=f"{what}: SAM's region of a point or a box, in picture pixels (one picture; repeat it; "
            "--keep and --remove apply in the order given: docs/MATTE.md, 'Fixing a cutout')",
        )
    s.add_argument("--overwrite", action="store_true", help="redo pictures whose outputs exist")
    s.add_argument(
        "--jobs", type=int, default=None, metavar="N", help="pictures at once (default: 8 on a GPU server, 3 on a CPU)"
    )
    s.add_argument(
        "--in-flight",
        type=int,
        default=None,
        metavar="N",
        help="a video: frames the server works on at once (default: the server's, CRAFTAI_FRAMES_IN_FLIGHT)",
    )
    s.add_argument(
        "--stabilize",
        type=float,
        default=None,
        metavar="W",
        help="a video: keep the matte steady where the picture is still, the previous matte weighing W in [0, 1) "
        "(e.g. 0.8: a still background stops flickering; default: off, each frame's own matte)",
    )
    _recipe_flags(s, Feature.MATTE)
    s.set_defaults(func=cmd_remove_background)

    s = sub.add_parser("segment", help="write the mask(s) selected by clicks and/or boxes (image.segment)")
    s.add_argument("input", metavar="IN", help="a PNG, JPEG or WebP picture")
    s.add_argument(
        "--point",
        action="append",
        type=point_arg,
        default=[],
        metavar="X,Y[:fg|:bg]",
        help="a click in picture pixels (origin top-left); foreground unless :bg; repeat for more",
    )
    s.add_argument(
        "--box",
        action="append",
        type=box_arg,
        default=[],
        metavar="X0,Y0,X1,Y1",
        help="a box: top-left, bottom-right; repeat for several objects (one call, one mask each)",
    )
    s.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="png: the mask PNG (1-bit grayscale; OUT-1.png, ... for several); rle, polygons: a JSON file",
    )
    s.add_argument(
        "--all-masks", action="store_true", help="write the three candidates, best first: OUT-0.png, OUT-1.png, ..."
    )
    _format_flags(s, vocabulary.MaskFormat.PNG)
    s.add_argument(
        "--like-meta",
        action="store_true",
        help="the one mask Meta's predictor answers (multimask_output=False)",
    )
    _recipe_flags(s, Feature.SEGMENT)
    s.set_defaults(func=cmd_segment)

    s = sub.add_parser(
        "segment-all", help="every object of a picture as COCO annotations (Meta's automatic mask generator)"
    )
    s.add_argument("input", metavar="IN", help="a PNG, JPEG or WebP picture")
    s.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT.json",
        help="the masks as JSON ({image, annotations}: COCO RLE, area, bbox, predicted_iou, ...)",
    )
    for name, kind in EVERYTHING_FLAGS:
        s.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, help="Meta's parameter (docs/API.md)")
    s.add_argument(
        "--single-mask",
        action="store_true",
        help="one mask per point, Meta's single-mask answer (multimask_output=False)",
    )
    _format_flags(s, vocabulary.MaskFormat.RLE)
    _recipe_flags(s, Feature.SEGMENT)
    s.set_defaults(func=cmd_segment_all)

    k = sub.add_parser("keys", help="app keys (only their hashes are kept by the servers)")
    ksub = k.add_subparsers(dest="keys_command", required=True)
    s = ksub.add_parser("add", help="make a key for an app, add its hash to the keys file, print the key once")
    s.add_argument("app", help="the app id ('*' for any app id without a key of its own)")
    s.add_argument("--keys-file", default=None, help="default: CRAFTAI_KEYS_FILE or ~/.config/craftai/keys")
    s.set_defaults(func=cmd_keys_add)
    s = ksub.add_parser("hash", help="print the keys-file line for a key given on standard input")
    s.add_argument("app", help="the app id the key is for")
    s.set_defaults(func=cmd_keys_hash)
    return p
