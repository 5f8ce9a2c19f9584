"""The `craftai` command: serve, status, setup, remove-background, segment.

craftai serve                                  # all three services on 127.0.0.1:50051
craftai setup image.matte --recipe u2netp      # download and verify (progress bars)
craftai remove-background a.jpg b.png -o out/  # mattes and cutouts, with timings
craftai segment photo.jpg --point 310,200 --point 40,40:bg -o mask.png   # a mask from clicks and/or a box
craftai keys add my-editor                     # a new key for an app: its hash into the keys file
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from tqdm import tqdm

from craftai.client import AiClient, Point
from craftai.errors import CraftAiError
from craftai_wire import keys
from craftai_wire.metadata import APP_ID_PATTERN
from craftai_wire.v1 import catalogue_pb2, common_pb2, prepare_pb2

STATE_WORDS = {
    catalogue_pb2.ROUTE_STATE_UNAVAILABLE: "unavailable",
    catalogue_pb2.ROUTE_STATE_MISSING: "missing",
    catalogue_pb2.ROUTE_STATE_DOWNLOADED: "downloaded",
    catalogue_pb2.ROUTE_STATE_PREPARED: "prepared",
    catalogue_pb2.ROUTE_STATE_READY: "ready",
}


def _client(options: argparse.Namespace) -> AiClient:
    return AiClient(app_id=options.app_id, target=options.address)


def cmd_serve(options: argparse.Namespace) -> int:
    from craftai import serve

    return serve.run(options.host, options.port, options.store)


def cmd_status(options: argparse.Namespace) -> int:
    with _client(options) as ai:
        runtime = ai.runtime()
        gpu = f"GPU: {runtime.gpu_name}" if runtime.gpu_available else "no GPU"
        print(f"infer device: {runtime.device} ({gpu}); engines: {', '.join(runtime.engines)}")
        rows = [
            (f"{r.route.feature}", r.route.recipe, r.route.engine, STATE_WORDS.get(r.state, "?"), r.detail)
            for r in ai.status(options.feature or "")
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)] if rows else [0] * 4
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
    return 0


def cmd_setup(options: argparse.Namespace) -> int:
    bars: dict[str, tqdm] = {}  # type: ignore[type-arg]
    result: prepare_pb2.SetupResult | None = None
    started = time.perf_counter()
    with _client(options) as ai:
        try:
            for event in ai.setup(options.feature, options.recipe, options.engine):
                if isinstance(event, common_pb2.Progress):
                    bar = bars.get(event.stage)
                    if bar is None:
                        unit_scale = event.unit == "bytes"
                        bar = tqdm(
                            total=event.total or None,
                            unit="B" if unit_scale else "it",
                            unit_scale=unit_scale,
                            unit_divisor=1024,
                            desc=event.stage,
                            leave=True,
                            disable=options.quiet,
                        )
                        bars[event.stage] = bar
                    if event.total and bar.total != event.total:
                        bar.reset(total=event.total)
                    bar.n = event.done
                    bar.set_postfix_str(event.message[-60:], refresh=True)
                elif isinstance(event, common_pb2.Notice):
                    tqdm.write(f"note: {event.message}")
                else:
                    result = event
        finally:
            for bar in bars.values():
                bar.close()
    assert result is not None
    r = result.route
    what = "already set up (files checked)" if result.already_done else "set up"
    if result.revision:
        what += f", prepared revision {result.revision}" + (" (prepared now)" if result.prepared_now else "")
    print(f"{r.feature} {r.recipe} ({r.engine}): {what} in {time.perf_counter() - started:.1f} s")
    for f in result.files:
        print(f"  {f.folder}/{f.name}  {f.size:,} bytes  sha256 {f.sha256[:16]}…  from {f.source}")
    return 0


def cmd_remove_background(options: argparse.Namespace) -> int:
    inputs = [Path(p) for p in options.inputs]
    out = Path(options.output)
    single_file = len(inputs) == 1 and out.suffix.lower() == ".png"
    if not single_file:
        out.mkdir(parents=True, exist_ok=True)
    total = 0.0
    with _client(options) as ai:
        for path in tqdm(inputs, desc="pictures", unit="pic", disable=options.quiet or len(inputs) < 2, leave=False):
            started = time.perf_counter()
            result = ai.remove_background(path, cutout=options.cutout, recipe=options.recipe, engine=options.engine)
            round_trip = (time.perf_counter() - started) * 1000
            total += round_trip
            matte_path = out if single_file else out / f"{path.stem}.matte.png"
            matte_path.write_bytes(result.matte_png)
            written = [matte_path]
            if options.cutout:
                cutout_path = matte_path.with_name(matte_path.stem.removesuffix(".matte") + ".cutout.png")
                cutout_path.write_bytes(result.cutout_png)
                written.append(cutout_path)
            stages = ", ".join(f"{k} {v:.0f}" for k, v in result.timing_ms.items())
            tqdm.write(
                f"{path.name}: {result.width}x{result.height} {result.recipe}/{result.engine} on {result.device}: "
                f"{round_trip:.0f} ms round trip (server {result.server_ms:.0f} ms: {stages}) -> "
                + ", ".join(str(p) for p in written)
            )
            for notice in result.notices:
                tqdm.write(f"  note: {notice}")
    print(f"{len(inputs)} picture(s) in {total / 1000:.2f} s")
    return 0


def _point(text: str) -> Point:
    """`x,y` (foreground), `x,y:fg` or `x,y:bg`, in picture pixels."""
    where, _, kind = text.partition(":")
    kind = kind.strip().lower() or "fg"
    if kind not in ("fg", "bg"):
        raise argparse.ArgumentTypeError(f"{text!r}: a point is x,y or x,y:fg or x,y:bg")
    try:
        x, y = (float(v) for v in where.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a point is x,y or x,y:fg or x,y:bg (numbers)") from None
    return Point(x, y, foreground=kind == "fg")


def _box(text: str) -> tuple[float, float, float, float]:
    try:
        x0, y0, x1, y1 = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a box is x0,y0,x1,y1 (top-left, bottom-right)") from None
    return (x0, y0, x1, y1)


def cmd_segment(options: argparse.Namespace) -> int:
    if not options.point and options.box is None:
        print("craftai: give at least one --point or a --box", file=sys.stderr)
        return 2
    out = Path(options.output)
    bars: dict[str, tqdm] = {}  # type: ignore[type-arg]

    def progress(event: common_pb2.Progress) -> None:
        bar = bars.get("steps")
        if bar is None:
            bar = bars["steps"] = tqdm(total=event.total or None, desc="segment", leave=False, disable=options.quiet)
        if event.total and bar.total != event.total:
            bar.reset(total=event.total)
        bar.n = event.done
        bar.set_postfix_str(f"{event.stage}: {event.message}"[-70:], refresh=True)

    started = time.perf_counter()
    with _client(options) as ai:
        try:
            result = ai.segment_once(
                Path(options.input),
                points=options.point,
                box=options.box,
                all_masks=options.all_masks,
                recipe=options.recipe,
                engine=options.engine,
                on_progress=progress,
            )
        finally:
            for bar in bars.values():
                bar.close()
    round_trip = (time.perf_counter() - started) * 1000
    if options.all_masks:
        stem, suffix = out.stem, out.suffix or ".png"
        paths = [out.with_name(f"{stem}-{k}{suffix}") for k in range(len(result.masks))]
    else:
        paths = [out]
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    for path, mask in zip(paths, result.masks, strict=True):
        path.write_bytes(mask.png)
        what = "empty (nothing selected)" if mask.empty else f"{mask.selected_fraction:.1%} of the picture"
        print(f"{path}: predicted IoU {mask.predicted_iou:.3f}, {what}")
    stages = ", ".join(f"{k} {v:.0f}" for k, v in result.timing_ms.items())
    print(
        f"{Path(options.input).name}: {result.width}x{result.height} {result.recipe}/{result.engine} on "
        f"{result.device}: {round_trip:.0f} ms round trip (server {result.server_ms:.0f} ms: {stages})"
    )
    for notice in result.notices:
        print(f"  note: {notice}")
    return 0


def cmd_keys_add(options: argparse.Namespace) -> int:
    """A new key for an app: its hash is added to the keys file, the key is printed once."""
    if options.app != keys.WILDCARD and not APP_ID_PATTERN.match(options.app):
        print(
            "craftai: an app id is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            file=sys.stderr,
        )
        return 2
    chosen = options.keys_file or os.environ.get("CRAFTAI_KEYS_FILE")
    path = Path(chosen) if chosen else keys.default_keys_file()
    key = keys.new_key()
    keys.add_key_line(path, keys.key_line(options.app, key))  # whole, atomically; servers re-read it within 1 s
    print(key)
    print(
        f"added a key for {options.app} to {path} (only its hash is kept there); give the key above to the app "
        "(CRAFTAI_APP_KEY or AiClient(app_key=...)): it is not shown again",
        file=sys.stderr,
    )
    return 0


def cmd_keys_hash(options: argparse.Namespace) -> int:
    """The keys-file line for a key read on standard input (for secrets made elsewhere)."""
    key = sys.stdin.readline().strip()
    if not key:
        print("craftai: give the key on standard input", file=sys.stderr)
        return 2
    print(keys.key_line(options.app, key), end="")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="craftai", description="craft-ai services: local AI image features")
    p.add_argument(
        "--address",
        default=os.environ.get("CRAFTAI_ADDRESS"),
        help="server address (default: CRAFTAI_ADDRESS or 127.0.0.1:50051)",
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
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("status", help="the infer device and the state of every route")
    s.add_argument("feature", nargs="?", default="")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("setup", help="download, verify and prepare a feature's route")
    s.add_argument("feature", help="image.matte or image.segment")
    s.add_argument("--recipe", default=None)
    s.add_argument("--engine", default=None, choices=["onnxruntime", "torch"])
    s.set_defaults(func=cmd_setup)

    s = sub.add_parser("remove-background", help="write the matte (and cutout) of each picture")
    s.add_argument("inputs", nargs="+", metavar="IN", help="PNG, JPEG or WebP pictures")
    s.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="a folder (or a .png file for a single picture)"
    )
    s.add_argument(
        "--cutout",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also write the RGBA cutout (default: yes)",
    )
    s.add_argument("--recipe", default=None)
    s.add_argument("--engine", default=None, choices=["onnxruntime", "torch"])
    s.set_defaults(func=cmd_remove_background)

    s = sub.add_parser("segment", help="write the mask selected by clicks and/or a box (image.segment)")
    s.add_argument("input", metavar="IN", help="a PNG, JPEG or WebP picture")
    s.add_argument(
        "--point",
        action="append",
        type=_point,
        default=[],
        metavar="X,Y[:fg|:bg]",
        help="a click in picture pixels (origin top-left); foreground unless :bg; repeat for more",
    )
    s.add_argument("--box", type=_box, default=None, metavar="X0,Y0,X1,Y1", help="a box: top-left, bottom-right")
    s.add_argument("-o", "--output", required=True, metavar="OUT.png", help="the mask PNG (1-bit grayscale) to write")
    s.add_argument(
        "--all-masks", action="store_true", help="write the three candidates, best first: OUT-0.png, OUT-1.png, ..."
    )
    s.add_argument("--recipe", default=None)
    s.add_argument("--engine", default=None, choices=["onnxruntime", "torch"])
    s.set_defaults(func=cmd_segment)

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


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    try:
        return int(options.func(options))
    except CraftAiError as exc:
        print(f"craftai: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
