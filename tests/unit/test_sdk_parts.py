"""The SDK's transport-free parts: the retry policy's decisions, request building and result
parsing (what an asyncio client will share with the blocking one)."""

from __future__ import annotations

import re
from typing import Any, TypeVar, cast

import grpc
import pytest
from google.protobuf.message import Message

from craftai import LowResMask, Point, Progress, Retries, RouteState, SetupOutput, calls, installation, methods
from craftai.calls import prompt, resolve_request, setup_request
from craftai.errors import CraftAiError
from craftai.installation import Route
from craftai.outputs import matte_output, segment_output
from craftai.policy import RetryPlan
from craftai_wire.v1 import catalogue_pb2, common_pb2, infer_pb2, prepare_pb2
from craftai_wire.vocabulary import Feature

T = TypeVar("T")
LOST = CraftAiError(grpc.StatusCode.UNAVAILABLE, "the service did not answer (UNAVAILABLE): connection reset")


def test_a_lost_connection_is_tried_again_with_a_doubling_backoff_up_to_its_cap() -> None:
    plan = RetryPlan(Retries(attempts=5, backoff=1.0, max_backoff=3.0))
    pauses = []
    for _ in range(5):
        pauses.append(plan.pause(LOST, reached=True))
        plan.tried(0.0)
    assert pauses == [1.0, 2.0, 3.0, 3.0, 3.0]
    assert plan.pause(LOST, reached=True) is None  # no try left


def test_the_servers_retry_info_is_the_pause_within_the_cap() -> None:
    stopping = CraftAiError(grpc.StatusCode.UNAVAILABLE, "shutting down", "SHUTTING_DOWN", retry_after=1.0)
    assert Retries(backoff=0.25).plan().pause(stopping, reached=True) == 1.0
    slow = CraftAiError(grpc.StatusCode.UNAVAILABLE, "shutting down", "SHUTTING_DOWN", retry_after=60.0)
    assert Retries(max_backoff=5.0).plan().pause(slow, reached=True) == 5.0


@pytest.mark.parametrize(
    "error",
    [
        CraftAiError(grpc.StatusCode.UNAVAILABLE, "every source failed", "SOURCES_FAILED"),  # an answer
        CraftAiError(grpc.StatusCode.NOT_FOUND, "no such session", "SESSION_NOT_FOUND"),
        CraftAiError(grpc.StatusCode.DEADLINE_EXCEEDED, "too slow"),
        CraftAiError(grpc.StatusCode.INTERNAL, "the stream ended without a result"),
    ],
)
def test_answers_are_never_tried_again(error: CraftAiError) -> None:
    assert Retries().plan().pause(error, reached=True) is None


def test_a_server_never_reached_is_not_waited_for() -> None:
    assert Retries().plan().pause(LOST, reached=False) is None


def test_the_wait_for_the_server_shares_one_budget_across_tries() -> None:
    plan = Retries(wait_seconds=20.0).plan()
    assert plan.wait_left(0.5) == 19.5
    plan.tried(15.0)
    assert plan.wait_left(1.0) == 4.0
    plan.tried(10.0)
    assert plan.wait_left(0.0) == 0.0


def test_a_prompt_from_points_tuples_a_box_and_a_previous_answer() -> None:
    low = LowResMask(b"\0" * 16, 2, 2)
    built = prompt([(1, 2), (3, 4, False), Point(5, 6)], (0, 0, 10, 10), low, all_masks=True)
    assert [(p.x, p.y, p.label) for p in built.points] == [
        (1, 2, infer_pb2.POINT_LABEL_FOREGROUND),
        (3, 4, infer_pb2.POINT_LABEL_BACKGROUND),
        (5, 6, infer_pb2.POINT_LABEL_FOREGROUND),
    ]
    assert (built.box.x1, built.box.y1, built.all_masks) == (10, 10, True)
    assert (built.mask_input.width, built.mask_input.height, len(built.mask_input.logits)) == (2, 2, 16)
    assert prompt([], None, b"\1" * 8, False).mask_input.width == 256  # raw logits: the 256x256 default
    with pytest.raises(ValueError, match="four numbers"):
        prompt([], (1, 2, 3), None, False)


def test_setup_and_resolve_carry_no_machine_info() -> None:
    """Engine advice is the catalogue's: it asks the infer service itself."""
    assert not setup_request("image.matte").HasField("gpu_available")
    request = resolve_request("image.matte", "u2netp")
    assert not request.HasField("machine") and (request.route.recipe, request.route.engine) == ("u2netp", "")


def test_a_segment_result_becomes_masks_best_first() -> None:
    result = infer_pb2.SegmentResult(
        masks=[
            infer_pb2.Mask(png=b"best", predicted_iou=0.9, selected_fraction=0.25, low_res=infer_pb2.LowResMask()),
            infer_pb2.Mask(png=b"next", predicted_iou=0.5, empty=True),
        ],
        width=4,
        height=3,
        route=common_pb2.RouteRef(feature="image.segment", recipe="sam2-hiera-tiny", engine="onnxruntime"),
        device="cpu",
        session_id="s1",
        timing=common_pb2.Timing(stages_ms={"model": 2.0}, total_ms=3.0),
    )
    output = segment_output(result, ["a notice"], reopened=True, request_id="r1")
    assert output.best.png == b"best" and output.masks[1].empty
    assert (output.width, output.height, output.recipe, output.session_id) == (4, 3, "sam2-hiera-tiny", "s1")
    assert (output.timing_ms, output.server_ms, output.notices) == ({"model": 2.0}, 3.0, ["a notice"])
    assert output.reopened and output.request_id == "r1"


@pytest.mark.parametrize(
    ("given", "rgba"),
    [
        ("#2060f0", (32, 96, 240, 255)),
        ("2060F0", (32, 96, 240, 255)),
        ("#f80", (255, 136, 0, 255)),
        ("#ff880080", (255, 136, 0, 128)),
        ("255, 136, 0", (255, 136, 0, 255)),
        ("255,136,0,128", (255, 136, 0, 128)),
        ((1, 2, 3), (1, 2, 3, 255)),
        ([1, 2, 3, 4], (1, 2, 3, 4)),
    ],
)
def test_background_colours_from_hex_or_numbers(given: calls.Colour, rgba: tuple[int, int, int, int]) -> None:
    assert calls.colour(given) == rgba


@pytest.mark.parametrize("given", ["#12", "red", "1,2", "1,2,3,4,5", (256, 0, 0), (1, 2), "-1,0,0"])
def test_what_is_not_a_colour_is_said_so(given: calls.Colour) -> None:
    with pytest.raises(ValueError, match="colour"):
        calls.colour(given)


def test_matte_options_default_to_what_the_other_options_imply() -> None:
    assert calls.matte_options().outputs == ("cutout",)
    assert calls.matte_options(cutout=True).outputs == ("cutout",)
    assert calls.matte_options(bg_color="#fff").outputs == ("composite",)  # the picture over that background
    assert calls.matte_options(threshold=0.3).outputs == ("mask",)
    assert calls.matte_options(bg_blur=4.0, threshold=0.3).outputs == ("composite", "mask")
    assert calls.matte_options(bg_image=b"picture", cutout=True).outputs == ("cutout", "composite")
    assert calls.matte_options(outputs="cutout, composite", bg_color="#fff").outputs == ("cutout", "composite")
    assert calls.matte_options(outputs=["mask"], cutout=True).outputs == ("mask", "cutout")
    jpeg = calls.matte_options(outputs="matte,composite", format="jpg")
    assert jpeg.formats == {"composite": "jpeg"}  # JPEG is for the composite; the rest stays PNG
    assert calls.matte_options(outputs="matte,mask", format="webp").formats == {"matte": "webp", "mask": "webp"}
    assert calls.matte_options(outputs="matte,composite", format={"composite": "jpeg", "matte": "webp"}).formats == {
        "composite": "jpeg",
        "matte": "webp",
    }


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"outputs": "matte,halo"}, "'halo' is not an output"),
        ({"outputs": "matte,matte"}, "each output once"),
        ({"outputs": ""}, "at least one output"),
        ({"outputs": "matte", "bg_color": "#000"}, "add composite"),
        ({"outputs": "matte", "threshold": 0.5}, "add mask"),
        ({"bg_color": "#000", "bg_blur": 3.0}, "one background"),
        ({"threshold": 1.5}, "in [0, 1]"),
        ({"bg_blur": -1.0}, "more than 0"),
        ({"outputs": "matte", "format": "jpeg"}, "JPEG is for the composite"),
        ({"outputs": "matte", "format": {"matte": "jpeg"}}, "JPEG is for the composite"),
        ({"format": "gif"}, "not a format"),
        ({"png_level": 10}, "0 (none) to 9"),
        ({"jpeg_quality": 101}, "1 to 100"),
        ({"part": "hat"}, "'hat' is not a part: upper, lower or full (of a recipe with parts: u2net_cloth_seg)"),
    ],
)
def test_matte_options_that_cannot_work_are_refused_before_sending(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError) as caught:
        calls.matte_options(**kwargs)
    assert words in str(caught.value)


def test_a_matte_request_carries_every_option() -> None:
    options = calls.matte_options(
        outputs="cutout,composite,mask", naive=True, bg_color="#10203080", threshold=0.25, format="webp", png_level=6
    )
    request = calls.matte_request(b"picture", options, "u2netp")
    assert [(o.kind, o.format) for o in request.outputs] == [
        (infer_pb2.MATTE_OUTPUT_KIND_CUTOUT, infer_pb2.MATTE_FORMAT_WEBP),
        (infer_pb2.MATTE_OUTPUT_KIND_COMPOSITE, infer_pb2.MATTE_FORMAT_WEBP),
        (infer_pb2.MATTE_OUTPUT_KIND_MASK, infer_pb2.MATTE_FORMAT_WEBP),
    ]
    colour = request.background.color
    assert (colour.r, colour.g, colour.b, colour.a, request.naive) == (16, 32, 48, 128, True)
    assert (request.mask_threshold, request.png_compress_level, request.route.recipe) == (0.25, 6, "u2netp")
    assert not request.HasField("jpeg_quality") and not request.want_cutout
    blur = calls.matte_request(b"p", calls.matte_options(bg_blur=2.5))
    assert blur.background.WhichOneof("kind") == "blur_radius" and blur.background.blur_radius == 2.5
    assert calls.matte_request(b"p", calls.matte_options(bg_image=b"bg")).background.picture.data == b"bg"
    assert calls.matte_request(b"p", calls.matte_options(part=" Lower")).part == "lower"
    assert calls.matte_request(b"p", calls.matte_options()).part == ""  # no part: every part's, stacked
    legacy = calls.matte_request(b"p", True)  # the form before the outputs: the matte and the cutout
    assert [o.kind for o in legacy.outputs] == [infer_pb2.MATTE_OUTPUT_KIND_MATTE, infer_pb2.MATTE_OUTPUT_KIND_CUTOUT]


def test_a_matte_result_becomes_typed_outputs_and_the_png_fields() -> None:
    route = common_pb2.RouteRef(feature="image.matte", recipe="u2netp", engine="onnxruntime")
    result = infer_pb2.MatteResult(
        route=route,
        width=4,
        height=3,
        device="cpu",
        matte=infer_pb2.MatteImage(data=b"m", format=infer_pb2.MATTE_FORMAT_PNG),
        composite=infer_pb2.MatteImage(data=b"c", format=infer_pb2.MATTE_FORMAT_JPEG),
        cutout=infer_pb2.MatteImage(data=b"w", format=infer_pb2.MATTE_FORMAT_WEBP, has_alpha=True),
    )
    output = matte_output(result, [], "r1")
    assert output.matte_png == b"m" and output.cutout_png == b""  # the cutout is a WebP
    assert output.composite is not None and (output.composite.format, output.composite.suffix) == ("jpeg", ".jpg")
    assert output.cutout is not None and output.cutout.has_alpha and output.cutout.media_type == "image/webp"
    assert output.mask is None and set(output.images) == {"matte", "cutout", "composite"}
    older = matte_output(infer_pb2.MatteResult(route=route, matte_png=b"m", cutout_png=b"c"), [], "r2")
    assert (older.matte_png, older.cutout_png) == (b"m", b"c")  # a server before the outputs
    assert older.cutout is not None and older.cutout.has_alpha and older.composite is None


def test_an_array_is_sent_as_the_server_reads_it() -> None:
    """The SDK's bytes for an array are a picture the server's decoder gives back pixel for pixel."""
    import numpy as np

    from craftai.pictures import read_picture
    from craftai_infer import pictures

    limits = pictures.Limits(max_pixels=1_000_000, max_side=1000)
    rgb = np.random.default_rng(2).integers(0, 256, (21, 34, 3), dtype=np.uint8)
    sent = read_picture(rgb[:, ::-1])  # a view, not contiguous: its pixels, not its memory
    assert sent.startswith(b"P6\n34 21\n255\n") and len(sent) == 13 + rgb.size
    np.testing.assert_array_equal(pictures.decode(sent, limits), rgb[:, ::-1])
    grey = read_picture(rgb[:, :, 1:2])
    assert grey.startswith(b"P5")
    np.testing.assert_array_equal(pictures.decode(grey, limits), np.repeat(rgb[:, :, 1:2], 3, axis=2))
    rgba = np.dstack([rgb, np.full((21, 34), 128, np.uint8)])
    sent = read_picture(rgba)
    assert sent.startswith(b"\x89PNG")
    np.testing.assert_array_equal(pictures.decode(sent, limits), rgba)


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("float", "uint8"),
        ("2 channels", "(height, width, 3) RGB"),
        ("empty", "no pixels (0x5)"),
        ("a list", "not list"),
    ],
)
def test_what_is_not_a_picture_is_refused_before_sending(given: str, words: str) -> None:
    import numpy as np

    from craftai.pictures import read_picture

    pictures: dict[str, Any] = {
        "float": np.zeros((4, 4, 3), np.float32),
        "2 channels": np.zeros((4, 4, 2), np.uint8),
        "empty": np.zeros((5, 0, 3), np.uint8),
        "a list": [[0, 0, 0]],
    }
    with pytest.raises((ValueError, TypeError), match=re.escape(words)):
        read_picture(pictures[given])


def test_a_pillow_image_is_sent_as_the_pixels_it_means() -> None:
    """As its file would be read: a palette's colours, CMYK converted, 16-bit greys scaled (not clipped)."""
    import io

    import numpy as np
    from PIL import Image

    from craftai.pictures import read_picture
    from craftai_infer import pictures

    limits = pictures.Limits(max_pixels=1_000_000, max_side=1000)
    rgb = Image.fromarray(np.random.default_rng(3).integers(0, 256, (9, 14, 3), dtype=np.uint8))
    assert read_picture(rgb).startswith(b"P6\n14 9\n255\n")

    def as_file(image: Image.Image) -> np.ndarray:
        out = io.BytesIO()
        image.save(out, format="PNG")
        return pictures.decode(out.getvalue(), limits)

    palette = rgb.quantize(16)  # mode P: its array alone would be palette indices
    np.testing.assert_array_equal(pictures.decode(read_picture(palette), limits), as_file(palette))
    cmyk = rgb.convert("CMYK")  # four channels that are not RGBA
    np.testing.assert_array_equal(pictures.decode(read_picture(cmyk), limits), np.asarray(cmyk.convert("RGB")))
    with_alpha = rgb.convert("LA")
    np.testing.assert_array_equal(pictures.decode(read_picture(with_alpha), limits), as_file(with_alpha))
    deep = Image.fromarray(np.full((4, 5), 40000, np.uint16))  # 16-bit grey: 40000 / 257 = 155.6
    np.testing.assert_array_equal(pictures.decode(read_picture(deep), limits), np.full((4, 5, 3), 156, np.uint8))


def test_the_installations_answers_are_typed_and_keep_their_message() -> None:
    """status, runtime, resolve, features and setup answer dataclasses (the vocabulary's words for
    enums), each keeping the message it was made from as `proto` (what the web gateway forwards)."""
    ref = common_pb2.RouteRef(feature="image.matte", recipe="u2netp", engine="onnxruntime")
    states = catalogue_pb2.GetRouteStatesResponse(
        routes=[
            catalogue_pb2.RouteStatus(
                route=ref,
                state=catalogue_pb2.ROUTE_STATE_PREPARED,
                files=[catalogue_pb2.FileState(folder="u2netp", name="u2netp.onnx", present=True, verified=True)],
                detail="loads on first use",
            ),
            catalogue_pb2.RouteStatus(
                route=ref, state=cast(catalogue_pb2.RouteState.ValueType, 42)
            ),  # a newer server's
        ]
    )
    prepared, unknown = (installation.route_status(r) for r in states.routes)
    assert prepared.state == RouteState.PREPARED and prepared.route == Route(Feature.MATTE, "u2netp", "onnxruntime")
    assert prepared.files[0].verified and prepared.detail == "loads on first use" and prepared.proto is states.routes[0]
    assert unknown.state is None

    answer = infer_pb2.Runtime(
        device="cpu",
        engines=["onnxruntime", "torch"],
        loaded=[infer_pb2.LoadedRoute(route=ref, device="cpu", requests=3, batches=1)],
        limits=infer_pb2.Limits(max_points=64, session_idle_seconds=600.0),
        replica="r1",
    )
    runtime = installation.runtime_info(answer)
    assert (runtime.device, runtime.gpu_available, runtime.engines, runtime.replica) == (
        "cpu",
        False,
        ("onnxruntime", "torch"),
        "r1",
    )
    assert runtime.loaded == (installation.LoadedRoute(Route("image.matte", "u2netp", "onnxruntime"), "cpu", 3, 1),)
    assert (runtime.limits.max_points, runtime.limits.session_idle_seconds) == (64, 600.0)
    assert runtime.proto is answer

    recipe = catalogue_pb2.Recipe(
        name="u2netp",
        feature="image.matte",
        files=[
            catalogue_pb2.PinnedFile(
                folder="u2netp",
                name="u2netp.onnx",
                size=4,
                sha256="ab",
                engines=["onnxruntime"],
                sources=[
                    catalogue_pb2.Source(url="https://example.org/u2netp.onnx"),
                    catalogue_pb2.Source(wheel_member=catalogue_pb2.WheelMember(requirement="r==1", member="m.onnx")),
                    catalogue_pb2.Source(archive_member=catalogue_pb2.ArchiveMember(url="https://a/z.zip", member="x")),
                ],
            )
        ],
        routes=[catalogue_pb2.Route(engine="onnxruntime", quick_on_cpu=True, download_bytes=4)],
        available=True,
    )
    resolved = installation.resolved_route(
        catalogue_pb2.ResolveRouteResponse(route=ref, recipe=recipe, chosen=recipe.routes[0], reason="no GPU")
    )
    assert resolved.route.recipe == "u2netp" and resolved.chosen.quick_on_cpu and resolved.reason == "no GPU"
    assert resolved.chosen.download_bytes == 4 and resolved.recipe.routes == (resolved.chosen,)
    assert resolved.recipe.files[0].sources == (
        installation.Source("url", "https://example.org/u2netp.onnx"),
        installation.Source("wheel", "r==1", "m.onnx"),
        installation.Source("archive", "https://a/z.zip", "x"),
    )
    (feature,) = (
        installation.feature_info(f)
        for f in catalogue_pb2.ListFeaturesResponse(
            features=[catalogue_pb2.Feature(name="image.matte", default_recipe="u2netp", recipes=[recipe])]
        ).features
    )
    assert feature.recipes[0].files[0].engines == ("onnxruntime",) and feature.proto.name == "image.matte"

    progress = common_pb2.Progress(stage="download", done=1, total=4, unit="bytes")
    result = prepare_pb2.SetupResult(
        route=ref, files=[prepare_pb2.FileOutcome(name="u2netp.onnx", downloaded=True, source="https://x")]
    )
    events = [installation.setup_event(e) for e in (progress, result)]
    assert events[0] is progress and isinstance(events[0], Progress)
    done = events[1]
    assert isinstance(done, SetupOutput) and done.files[0].downloaded and done.proto is result
    assert done.route.engine == "onnxruntime" and not done.already_done


def _answered(op: methods.Op[T], answer: Message) -> T:
    """An op's value once its one call is answered with `answer` (no transport: the ops are sans-I/O)."""
    call = next(op)
    assert isinstance(call, methods.UnaryCall) and isinstance(answer, call.rpc.answer)
    with pytest.raises(StopIteration) as done:
        op.send(answer)
    return cast(T, done.value.value)


def test_the_clients_methods_answer_the_typed_outputs() -> None:
    ref = common_pb2.RouteRef(feature="image.matte", recipe="u2netp", engine="onnxruntime")
    runtime = _answered(methods.runtime(), infer_pb2.Runtime(device="cpu"))
    assert isinstance(runtime, installation.Runtime) and runtime.device == "cpu"
    states = catalogue_pb2.GetRouteStatesResponse(
        routes=[catalogue_pb2.RouteStatus(route=ref, state=catalogue_pb2.ROUTE_STATE_READY)]
    )
    assert [s.state for s in _answered(methods.status(), states)] == [RouteState.READY]
    resolved = _answered(methods.resolve("image.matte"), catalogue_pb2.ResolveRouteResponse(route=ref))
    assert isinstance(resolved, installation.ResolvedRoute) and resolved.route.engine == "onnxruntime"
    listed = catalogue_pb2.ListFeaturesResponse(features=[catalogue_pb2.Feature(name="image.segment")])
    assert [(type(f), f.name) for f in _answered(methods.features(), listed)] == [
        (installation.FeatureInfo, "image.segment")
    ]
