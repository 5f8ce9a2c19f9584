"""`craftai remove-background clip.mp4 -o out.webm`: a video through one frame stream (MatteFrames).

The video's frames are read as they are answered (craftai.video decodes them, the SDK sends them
as raw pixels, the server batches them and answers raw pixels), each frame's one output is written
into the new video in order, with the input's sound where the output can carry it, and the file is put in place only
when every frame is written (a damaged input or a failure leaves no broken file, and says at which
frame it stopped). The output holds one of the outputs: the cutout (with transparency: .webm,
.mov, a folder of PNG frames), the composite (any), the matte or the mask (as grey video).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from craftai.cli.progress import Bar
from craftai.client import AiClient
from craftai.errors import CraftAiError
from craftai.frames import FrameOutput
from craftai.video_kinds import VideoError, is_video, output_kind
from craftai_wire.vocabulary import Output

if TYPE_CHECKING:  # numpy comes with the `video` extra: the command imports this module without it
    import numpy as np
    import numpy.typing as npt

DEFAULT_OUTPUT: dict[str, Output] = {"webm": Output.CUTOUT, "mov": Output.CUTOUT, "png": Output.CUTOUT}


def is_video_run(options: argparse.Namespace) -> bool:
    """One input that is a video file (by its suffix): the command makes a video of it. A video
    among other inputs is refused (ValueError): each video is its own run."""
    videos = [name for name in options.inputs if name != "-" and is_video(name)]
    if videos:
        try:
            import craftai.video  # noqa: F401  (PyAV, with the `video` extra)
        except ImportError as error:
            raise ValueError(f"videos need PyAV ({error.name} is missing): pip install 'craftai[video]'") from error
    if videos and len(options.inputs) > 1:
        raise ValueError(f"{videos[0]} is a video: give a video alone (one run each), pictures and folders together")
    return bool(videos)


def output_of(options: argparse.Namespace) -> Output:
    """The one output a video holds: --outputs (one name), else the cutout where the file keeps
    transparency and the composite where it does not (.mp4)."""
    if options.outputs is not None:
        names = [n.strip() for n in options.outputs.split(",") if n.strip()]
        if len(names) != 1:
            raise ValueError(
                f"a video holds one output and --outputs names {len(names)}: ask for cutout, composite, matte or mask"
            )
        return Output(names[0])
    if options.bg_color or options.bg_blur or options.bg_image:
        return Output.COMPOSITE
    return DEFAULT_OUTPUT.get(output_kind(options.output), Output.COMPOSITE)


def planned(options: argparse.Namespace, asked: dict[str, Any]) -> tuple[Output, bool]:
    """The output the video holds and whether it keeps transparency, checked against the file asked
    for before any work (ValueError in plain words)."""
    name = output_of(options)
    alpha = name == Output.CUTOUT or (name == Output.COMPOSITE and _translucent(asked))
    try:
        output_kind(options.output, alpha=alpha)
    except VideoError as error:
        raise ValueError(str(error)) from error
    return name, alpha


def cmd_video(ai: AiClient, options: argparse.Namespace, asked: dict[str, Any], name: Output, alpha: bool) -> int:
    """The video of options.inputs[0] into options.output (`name`, with transparency when `alpha`);
    0 when written, 1 when it failed."""
    from craftai.video import VideoReader, VideoWriter

    source = Path(options.inputs[0])
    target = Path(options.output)
    started = time.perf_counter()
    try:
        with VideoReader(source) as reader:
            info = reader.info
            kind = output_kind(target, alpha=alpha, size=(info.width, info.height))
            if target.exists() and kind != "png" and not options.overwrite:
                print(f"craftai: {target} exists; --overwrite to replace it", file=sys.stderr)
                return 1
            total = info.frames or 0
            print(
                f"{source.name}: {info.width}x{info.height}, {float(info.fps):.3g} frames/s, "
                f"{'about ' if not info.frames_exact else ''}{total or '?'} frames"
                f"{', with sound' if info.has_audio else ''} -> {target} ({kind}, {name})",
                file=sys.stderr,
            )
            bar = Bar("frames", quiet=options.quiet)
            frames = 0
            first: FrameOutput | None = None
            try:
                with VideoWriter(target, info, alpha=alpha, audio_from=source if info.has_audio else None) as writer:
                    answers = ai.remove_background_frames(
                        reader.frames(),
                        outputs=[name],
                        format="raw",  # the pixels as made: no PNG made per frame there nor decoded here
                        in_flight=options.in_flight,
                        stabilize=options.stabilize,
                        **asked,
                    )
                    for frame in answers:
                        first = first or frame
                        writer.write(_pixels(frame, name, alpha))
                        frames += 1
                        rate = frames / max(time.perf_counter() - started, 1e-9)
                        left = f", {(total - frames) / rate:.0f} s left" if total > frames else ""
                        bar.show(frames, max(total, frames), f"{rate:.1f} frames/s{left}")
            finally:
                bar.close()
    except (VideoError, ValueError, OSError) as error:
        print(f"craftai: {source}: {error}", file=sys.stderr)
        return 1
    except CraftAiError as error:
        print(f"craftai: {source}: {error.message} (no video written)", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - started
    route = f" {first.output.recipe}/{first.output.engine} on {first.output.device}" if first else ""
    print(f"{source.name}: {frames} frames in {elapsed:.2f} s ({frames / elapsed:.1f} frames/s){route} -> {target}")
    return 0


def _translucent(asked: dict[str, Any]) -> bool:
    """A composite over a colour with alpha below 255 keeps transparency."""
    colour = asked.get("bg_color")
    if colour is None:
        return False
    from craftai.calls import colour as parsed

    return parsed(colour)[3] < 255


def _pixels(frame: FrameOutput, name: Output, alpha: bool) -> npt.NDArray[np.uint8]:
    """The frame's output as the writer takes it: RGBA with transparency, else RGB (a matte or a
    mask as grey; alpha dropped, or made opaque, as Pillow converts)."""
    import numpy as np

    pixels = frame.output.images[name].array()
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[:, :, None], 3, axis=2)
    if not alpha:
        return np.ascontiguousarray(pixels[:, :, :3])
    if pixels.shape[2] == 4:
        return pixels
    return np.dstack([pixels, np.full(pixels.shape[:2], 255, np.uint8)])
