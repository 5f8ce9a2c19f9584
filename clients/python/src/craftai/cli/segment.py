"""`craftai segment IN` (the masks of clicks and boxes, one call) and `craftai segment-all IN`
(every object, Meta's automatic mask generator), written as PNGs or COCO-style JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from craftai.cli.connection import connect
from craftai.cli.progress import Bar
from craftai.installation import Progress
from craftai.outputs import MaskFormat, MaskOutput, Point, Prompt
from craftai_wire import vocabulary


def point_arg(text: str) -> Point:
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


def box_arg(text: str) -> tuple[float, float, float, float]:
    try:
        x0, y0, x1, y1 = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a box is x0,y0,x1,y1 (top-left, bottom-right)") from None
    return (x0, y0, x1, y1)


class _Bar:
    """One progress bar for a segmentation call: its stages, then the decoder's points."""

    def __init__(self, desc: str, quiet: bool) -> None:
        self.bar = Bar(desc, quiet=quiet, leave=False)

    def __call__(self, event: Progress) -> None:
        self.bar.show(event.done, event.total, f"{event.stage}: {event.message}")

    def close(self) -> None:
        self.bar.close()


def _record(mask: MaskOutput, *, everything: bool = False) -> dict[str, object]:
    """A mask as a COCO / SA-1B style annotation: COCO RLE (or polygons), area, bbox [x, y, w, h]."""
    x0, y0, x1, y1 = mask.box
    record: dict[str, object] = {
        "area": mask.area,
        "bbox": [x0, y0, x1 - x0, y1 - y0],
        "predicted_iou": round(mask.predicted_iou, 6),
    }
    if mask.rle is not None:
        record["segmentation"] = mask.rle.to_coco()
    if mask.polygons:
        rings = [[v for xy in p.outer for v in xy] for p in mask.polygons]
        record.setdefault("segmentation", rings)
        record["polygons"] = [
            {"outer": [v for xy in p.outer for v in xy], "holes": [[v for xy in h for v in xy] for h in p.holes]}
            for p in mask.polygons
        ]
    if everything:
        record["stability_score"] = round(mask.stability_score, 6)
        if mask.point is not None:
            record["point_coords"] = [[mask.point.x, mask.point.y]]
    else:
        record["prompt"] = mask.prompt_index
    return record


def _write_json(out: Path, picture: Path, width: int, height: int, records: list[dict[str, object]]) -> None:
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    document = {"image": {"file_name": picture.name, "width": width, "height": height}, "annotations": records}
    out.write_text(json.dumps(document, indent=1) + "\n")


def cmd_segment(options: argparse.Namespace) -> int:
    if not options.point and not options.box:
        print("craftai: give at least one --point or a --box", file=sys.stderr)
        return 2
    if len(options.box) > 1 and options.point:
        print(
            "craftai: several --box are several objects, one box each; clicks go with a single --box",
            file=sys.stderr,
        )
        return 2
    several = [Prompt(box=b) for b in options.box] if len(options.box) > 1 else None
    out = Path(options.output)
    bar = _Bar("segment", options.quiet)
    started = time.perf_counter()
    with connect(options) as ai:
        try:
            result = ai.segment_once(
                Path(options.input),
                points=[] if several else options.point,
                box=None if several else (options.box[0] if options.box else None),
                all_masks=options.all_masks,
                prompts=several,
                formats=options.format,
                polygon_tolerance=options.polygon_tolerance,
                single_mask_like_meta=options.like_meta,
                recipe=options.recipe,
                engine=options.engine,
                on_progress=bar,
            )
        finally:
            bar.close()
    round_trip = (time.perf_counter() - started) * 1000
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    if options.format == vocabulary.MaskFormat.PNG:
        objects = result.objects
        stem, suffix = out.stem, out.suffix or ".png"
        for index, masks in enumerate(objects):
            for k, mask in enumerate(masks):
                name = stem + (f"-{index}" if len(objects) > 1 else "") + (f"-{k}" if options.all_masks else "")
                path = out.with_name(name + suffix) if len(result.masks) > 1 else out
                path.write_bytes(mask.png)
                what = "empty (nothing selected)" if mask.empty else f"{mask.selected_fraction:.1%} of the picture"
                print(f"{path}: predicted IoU {mask.predicted_iou:.3f}, {what}")
    else:
        _write_json(out, Path(options.input), result.width, result.height, [_record(m) for m in result.masks])
        print(f"{out}: {len(result.masks)} mask(s) as {options.format}")
    stages = ", ".join(f"{k} {v:.0f}" for k, v in result.timing_ms.items())
    print(
        f"{Path(options.input).name}: {result.width}x{result.height} {result.recipe}/{result.engine} on "
        f"{result.device}: {round_trip:.0f} ms round trip (server {result.server_ms:.0f} ms: {stages})"
    )
    for notice in result.notices:
        print(f"  note: {notice}")
    return 0


EVERYTHING_FLAGS = (
    ("points_per_side", int),
    ("points_per_batch", int),
    ("pred_iou_thresh", float),
    ("stability_score_thresh", float),
    ("stability_score_offset", float),
    ("box_nms_thresh", float),
    ("min_mask_region_area", int),
)


def cmd_segment_all(options: argparse.Namespace) -> int:
    out = Path(options.output)
    picture = Path(options.input)
    chosen: dict[str, Any] = {
        name: getattr(options, name) for name, _ in EVERYTHING_FLAGS if getattr(options, name) is not None
    }
    if options.single_mask:
        chosen["multimask_output"] = False
    png = options.format == vocabulary.MaskFormat.PNG
    formats: list[MaskFormat] = [vocabulary.MaskFormat.RLE, vocabulary.MaskFormat.PNG] if png else [options.format]
    bar = _Bar("segment-all", options.quiet)
    started = time.perf_counter()
    with connect(options) as ai:
        try:
            with ai.open_session(picture, options.recipe, options.engine, on_progress=bar) as session:
                result = session.segment_everything(
                    formats=formats, polygon_tolerance=options.polygon_tolerance, on_progress=bar, **chosen
                )
        finally:
            bar.close()
    round_trip = (time.perf_counter() - started) * 1000
    records = [_record(m, everything=True) for m in result.masks]
    if options.format == vocabulary.MaskFormat.PNG:
        for k, (mask, record) in enumerate(zip(result.masks, records, strict=True)):
            path = out.with_name(f"{out.stem}-{k:03d}.png")
            if out.parent != Path(""):
                out.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(mask.png)
            record["png"] = path.name
    _write_json(out, picture, result.width, result.height, records)
    stages = ", ".join(f"{k} {v:.0f}" for k, v in result.timing_ms.items())
    print(
        f"{out}: {len(result.masks)} masks from {result.points} points ({result.candidates} passed the filters); "
        f"{picture.name} {result.width}x{result.height} {result.recipe}/{result.engine} on {result.device}: "
        f"{round_trip / 1000:.1f} s round trip (server {result.server_ms:.0f} ms: {stages})"
    )
    for notice in result.notices:
        print(f"  note: {notice}")
    return 0
