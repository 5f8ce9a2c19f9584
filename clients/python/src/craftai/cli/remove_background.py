"""`craftai remove-background IN... -o OUT`: pictures at once (sized to the server), each picture's
missing outputs in one request, a failed picture never stopping the others; a failure no picture
can escape (the server, the route, the key) stops the run. Where outputs go: craftai.cli.batch."""

from __future__ import annotations

import argparse
import io
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from tqdm import tqdm

from craftai.calls import default_outputs, matte_options
from craftai.cli.batch import FORMAT_OF_SUFFIX, STDIO, Picture, plan, write_output
from craftai.cli.connection import connect
from craftai.cli.progress import on_terminal
from craftai.cli.video import cmd_video, is_video_run, planned
from craftai.client import AiClient
from craftai.errors import CraftAiError
from craftai.outputs import CutoutPrompt, EncodedImage, MatteOutput
from craftai_wire import advice
from craftai_wire.vocabulary import CutoutAction, ImageFormat, Output, Reason

# The per-app limit and the decode memory budget answer RESOURCE_EXHAUSTED with RetryInfo: wait, try again.
TOO_MANY_REQUESTS_TRIES = 20
BUSY_REASONS = (Reason.TOO_MANY_REQUESTS, Reason.MEMORY_BUDGET)


@dataclass
class Done:
    picture: Picture
    written: list[Path | None] = field(default_factory=list)
    line: str = ""
    notices: list[str] = field(default_factory=list)
    error: str = ""


@dataclass(frozen=True)
class Fix:
    """A --keep or --remove: SAM's region of a point (x, y) or of a box (x0, y0, x1, y1), in picture pixels."""

    action: CutoutAction
    numbers: tuple[float, ...]

    def region(self) -> dict[str, Any]:
        """keep's or remove's arguments."""
        return {"points": [self.numbers]} if len(self.numbers) == 2 else {"box": self.numbers}


def region_arg(text: str) -> tuple[float, ...]:
    """`x,y` (a point) or `x0,y0,x1,y1` (a box), in picture pixels."""
    try:
        numbers = tuple(float(v) for v in text.split(","))
    except ValueError:
        numbers = ()
    if len(numbers) not in (2, 4):
        raise argparse.ArgumentTypeError(f"{text!r}: a region is a point x,y or a box x0,y0,x1,y1 (numbers)")
    return numbers


class FixArgument(argparse.Action):
    """--keep and --remove, kept in the order given (each prompt applies after the ones before)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        fixes = list(getattr(namespace, self.dest, None) or [])
        fixes.append(Fix(self.const, values))
        setattr(namespace, self.dest, fixes)


class RunError(Exception):
    """A failure no other picture can escape (the server, the route, the app's key): the run stops."""


def _run_error(error: CraftAiError) -> bool:
    """Errors that no other picture would escape: stop the run rather than fail every picture."""
    if error.code == grpc.StatusCode.INVALID_ARGUMENT:
        return any(f.startswith("background") for f, _ in error.violations)
    return error.code not in (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
    )


def _one(ai: AiClient, picture: Picture, asked: dict[str, Any], stdin: bytes, overwrite: bool) -> Done:
    """One picture: the outputs not written yet asked in one request, then written."""
    done = Done(picture)
    missing = [n for n, t in picture.targets.items() if overwrite or t is None or not t.exists()]
    if not missing:
        return done  # skipped: every output is there
    options = dict(asked)
    auto = options.pop("auto", None)
    fixes: list[Fix] = options.pop("fixes", None) or []
    if Output.COMPOSITE not in missing:
        options.update(bg_color=None, bg_blur=None, bg_image=None)
    if Output.MASK not in missing:
        options["threshold"] = None
    started = time.perf_counter()
    try:
        data = stdin if picture.source is None else picture.source.read_bytes()
        if auto is not None:
            options["recipe"], chose = _advised(data, *auto)
        for attempt in range(TOO_MANY_REQUESTS_TRIES):
            try:
                result = (
                    _fixed(ai, data, missing, options, fixes)
                    if fixes
                    else ai.remove_background(data, outputs=missing, **options)
                )
                break
            except CraftAiError as error:
                if error.reason not in BUSY_REASONS or attempt == TOO_MANY_REQUESTS_TRIES - 1:
                    raise
                time.sleep(error.retry_after or 1.0)
    except OSError as error:
        done.error = f"cannot read it ({error.strerror or error})"
        return done
    except CraftAiError as error:
        if _run_error(error):
            raise RunError(error.message) from error
        done.error = error.message
        return done
    round_trip = (time.perf_counter() - started) * 1000
    images = result.images
    for name in missing:
        write_output(picture.targets[name], images[Output(name)].data)
        done.written.append(picture.targets[name])
    stages = ", ".join(f"{k} {v:.0f}" for k, v in result.timing_ms.items())
    where = ", ".join(str(t) if t is not None else "standard output" for t in done.written)
    done.line = (
        f"{picture.source.name if picture.source else 'standard input'}: {result.width}x{result.height} "
        f"{result.recipe}/{result.engine} on {result.device}: {round_trip:.0f} ms round trip "
        f"(server {result.server_ms:.0f} ms: {stages}) -> {where}"
    )
    raw = [_raw_words(name, images[Output(name)]) for name in missing if images[Output(name)].format == ImageFormat.RAW]
    if raw:
        done.line += f" (raw pixels, rows top to bottom, no header: {'; '.join(raw)})"
    if auto is not None:
        done.line += f" [{advice.AUTO}: {chose}]"
    done.notices = result.notices
    return done


def _raw_words(name: str, image: EncodedImage) -> str:
    """A raw file's size and layout in words, which the file itself does not hold."""
    rows, width = image.shape[:2]
    layout = {1: "grey (0 or 255)" if name == Output.MASK else "grey", 3: "RGB", 4: "RGBA"}[image.channels]
    return f"{name} {width}x{rows} {layout}, {image.channels} byte{'s' if image.channels > 1 else ''} a pixel"


def _fixed(ai: AiClient, data: bytes, outputs: list[str], options: dict[str, Any], fixes: list[Fix]) -> MatteOutput:
    """The outputs of a cutout session after the --keep and --remove prompts, in order."""
    with ai.open_cutout(data, outputs=outputs, **options) as session:
        return session.refine([CutoutPrompt(fix.action, **fix.region()) for fix in fixes])


def _advised(data: bytes, subject: str, gpu: bool) -> tuple[str | None, str]:
    """The recipe --recipe auto gives this picture (its size read from its header), and why; the
    catalogue's default where the picture cannot be read (the server then says what is wrong)."""
    from PIL import Image  # checked when the command started

    try:
        with Image.open(io.BytesIO(data)) as opened:
            side = max(opened.size)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None, "not a picture the advice could read: the default recipe"
    row = advice.advise(subject, side, gpu=gpu)
    device = "GPU" if gpu else "CPU"
    return row.recipe, f"{row.recipe} for {subject} pictures of {side} px on a {device}: {row.why}"


def default_jobs(ai: AiClient) -> int:
    """Pictures in flight at once, sized to the server: a GPU batches up to 8 pictures per forward
    (CRAFTAI_MAX_BATCH) while the CPU pool decodes and encodes others; on a CPU the matte routes run
    two at a time, and one more picture is decoded or encoded meanwhile."""
    try:
        runtime = ai.runtime()
    except CraftAiError:
        return 2
    return 8 if runtime.gpu_available else 3


def _names(options: argparse.Namespace) -> list[Output]:
    """The outputs asked: --outputs, else the SDK's and HTTP's defaults (calls.default_outputs)."""
    if options.outputs is not None:
        return [Output(name) for name in matte_options(outputs=options.outputs, cutout=options.cutout).outputs]
    background = bool(options.bg_color or options.bg_blur or options.bg_image)
    return default_outputs(cutout=options.cutout, background=background, threshold=options.threshold is not None)


def _server_has_gpu(ai: AiClient) -> bool:
    try:
        return ai.runtime().gpu_available
    except CraftAiError:
        return False  # the advice for a CPU: the pictures' own requests will say what is wrong


def _video(options: argparse.Namespace, asked: dict[str, Any], fixes: list[Fix]) -> int:
    """A video input: checked here (what pictures allow and a video does not), run by cli.video."""
    if fixes:
        raise ValueError("--keep and --remove fix one picture, not a video")
    if options.recipe == advice.AUTO:
        raise ValueError(f"--recipe {advice.AUTO} chooses by picture; for a video, name the recipe (or leave it out)")
    if options.output == STDIO:
        raise ValueError("a video is written to a file or a folder: -o out.webm, out.mov, out.mp4 or a folder")
    try:
        import PIL  # noqa: F401

        import craftai.video  # noqa: F401
    except ImportError as error:
        raise ValueError(
            f"videos need PyAV and Pillow ({error.name} is missing): pip install 'craftai[video]'"
        ) from error
    del asked["format"]  # each frame comes back as a PNG, the video's codec is the file's
    name, alpha = planned(options, asked)
    with connect(options) as ai:
        return cmd_video(ai, options, asked, name, alpha)


def cmd_remove_background(options: argparse.Namespace) -> int:
    started = time.perf_counter()
    to_stdout = options.output == STDIO
    say = sys.stderr if to_stdout else sys.stdout
    try:
        names = _names(options)
        fmt = options.format
        if fmt is None and not to_stdout:
            fmt = FORMAT_OF_SUFFIX.get(Path(options.output).suffix.lower())
        if (
            fmt == ImageFormat.JPEG
            and names[0] != Output.COMPOSITE
            and Path(options.output).suffix.lower() in (".jpg", ".jpeg")
        ):
            raise ValueError(f"{options.output} is a JPEG file, which can hold only the composite: --outputs composite")
        bg_image = Path(options.bg_image).read_bytes() if options.bg_image else None
        asked = {
            "naive": options.naive,
            "bg_color": options.bg_color,
            "bg_blur": options.bg_blur,
            "bg_image": bg_image,
            "threshold": options.threshold,
            "format": fmt,
            "png_level": options.png_level,
            "jpeg_quality": options.jpeg_quality,
            "part": options.part,
            "recipe": options.recipe,
            "engine": options.engine,
        }
        fixes = options.fixes or []
        if is_video_run(options):
            return _video(options, asked, fixes)
        if options.in_flight is not None or options.stabilize is not None:
            raise ValueError("--in-flight and --stabilize are for a video (one .mp4, .mov, .webm, .mkv, .avi or .m4v)")
        checked = matte_options(outputs=names, **{k: v for k, v in asked.items() if k not in ("recipe", "engine")})
        if options.recipe == advice.AUTO:
            try:
                import PIL  # noqa: F401  (each picture's size, read from its header)
            except ImportError as error:
                raise ValueError(
                    f"--recipe {advice.AUTO} reads each picture's size with Pillow: pip install 'craftai[arrays]'"
                ) from error
        pictures = plan(options.inputs, options.output, names, checked.formats)
        if fixes and len(pictures) != 1:
            raise ValueError(
                f"--keep and --remove fix one picture (their places are its pixels); {len(pictures)} given"
            )
        if fixes:
            asked["fixes"] = fixes
    except (ValueError, OSError) as error:
        print(f"craftai: {error}", file=sys.stderr)
        return 2
    stdin = sys.stdin.buffer.read() if any(p.source is None for p in pictures) else b""
    results: list[Done] = []
    stopped = ""
    with connect(options) as ai:
        if options.recipe == advice.AUTO:
            asked.update(recipe=None, auto=(options.subject, _server_has_gpu(ai)))
        jobs = max(1, min(options.jobs or default_jobs(ai), len(pictures) or 1))
        bar = tqdm(
            total=len(pictures),
            desc="pictures",
            unit="pic",
            disable=options.quiet or len(pictures) < 2 or not on_terminal(),  # each picture has its line anyway
            leave=False,
        )
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="picture") as pool:
            running = {pool.submit(_one, ai, p, asked, stdin, options.overwrite): p for p in pictures}
            try:
                for future in as_completed(running):
                    try:
                        done = future.result()
                    except RunError as error:
                        stopped = str(error)
                        for other in running:
                            other.cancel()
                        break
                    results.append(done)
                    bar.update(1)
                    if done.line:
                        tqdm.write(done.line, file=say)
                    for notice in done.notices:
                        tqdm.write(f"  note: {notice}", file=say)
            except KeyboardInterrupt:
                for other in running:
                    other.cancel()
                raise
            finally:
                bar.close()
    order = {p.label: i for i, p in enumerate(pictures)}
    failed = sorted((d for d in results if d.error), key=lambda d: order[d.picture.label])
    written = sum(1 for d in results if d.written)
    skipped = sum(1 for d in results if not d.written and not d.error)
    elapsed = time.perf_counter() - started
    print(
        f"{len(pictures)} picture(s) in {elapsed:.2f} s: {written} done, {skipped} skipped "
        f"(their outputs exist; --overwrite to redo them), {len(failed)} failed",
        file=say,
    )
    for d in failed:
        print(f"craftai: {d.picture.label}: {d.error}", file=sys.stderr)
    if stopped:
        left = len(pictures) - len(results)
        print(f"craftai: {stopped} (stopped with {left} picture(s) not done)", file=sys.stderr)
    return 1 if failed or stopped else 0
