"""image.matte on u2netp through the real services: rembg's algorithm, cutouts, errors, serving on."""

from __future__ import annotations

import io
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort
import pytest
from numpy.typing import NDArray
from PIL import Image, ImageOps

from craftai import AiClient, CraftAiError
from craftai_dev import servers
from craftai_dev.masks import iou as _iou


def rembg_reference(path: Path, model: Path) -> NDArray[np.uint8]:
    """The matte rembg's published steps give for u2netp (rembg `remove(only_mask=True)`):
    orientation fixed from EXIF, RGB, Lanczos to 320x320, divided by the picture's max, ImageNet
    mean/std per channel, the first output min-max normalised, 8-bit, Lanczos back to size."""
    image = ImageOps.exif_transpose(Image.open(path))
    small = np.array(image.convert("RGB").resize((320, 320), Image.Resampling.LANCZOS))
    small = small / max(np.max(small), 1e-6)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    x = np.zeros((320, 320, 3))
    for c in range(3):
        x[:, :, c] = (small[:, :, c] - mean[c]) / std[c]
    x = np.expand_dims(x.transpose((2, 0, 1)), 0).astype(np.float32)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    pred = session.run(None, {session.get_inputs()[0].name: x})[0][:, 0, :, :]
    pred = np.squeeze((pred - np.min(pred)) / (np.max(pred) - np.min(pred)))
    mask = Image.fromarray((pred * 255).astype("uint8"), mode="L").resize(image.size, Image.Resampling.LANCZOS)
    return np.asarray(mask)


@pytest.fixture(scope="module")
def ai(matte_server: servers.Process) -> AiClient:
    return AiClient(app_id="tests", target=matte_server.address)


def test_mattes_equal_rembgs_algorithm_on_real_photos(ai: AiClient, photos: dict[str, Path], u2netp_file: Path) -> None:
    for name, path in photos.items():
        result = ai.remove_background(path, outputs="matte,cutout")
        matte = np.asarray(Image.open(io.BytesIO(result.matte_png)))
        reference = rembg_reference(path, u2netp_file)
        assert matte.shape == reference.shape == (result.height, result.width), name
        iou = _iou(matte > 127, reference > 127)
        mean_abs = np.abs(matte.astype(int) - reference).mean()
        # Documented in docs/API.md: identical on these photos (mean absolute difference 0).
        assert iou >= 0.99 and mean_abs <= 0.5, (name, iou, mean_abs)
        cutout = Image.open(io.BytesIO(result.cutout_png))
        assert cutout.mode == "RGBA" and cutout.size == (result.width, result.height)
        np.testing.assert_array_equal(np.asarray(cutout)[:, :, 3], matte)
        assert (result.recipe, result.engine, result.device) == ("u2netp", "onnxruntime", "cpu")
        # every stage timed apart, the network's and each output's within the model's (docs/API.md)
        assert list(result.timing_ms) == ["decode", "model", "network", "cutout", "encode"]  # the server's order
        assert result.timing_ms["network"] + result.timing_ms["cutout"] <= result.timing_ms["model"]


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP"])
def test_jpeg_and_webp_in(ai: AiClient, photos: dict[str, Path], fmt: str) -> None:
    out = io.BytesIO()
    Image.open(photos["chelsea.png"]).convert("RGB").save(out, format=fmt, quality=90)
    result = ai.remove_background(out.getvalue(), outputs="matte")
    assert Image.open(io.BytesIO(result.matte_png)).size == (451, 300)
    assert result.cutout_png == b""


def test_exif_rotated_portrait_gets_a_matte_of_its_displayed_size(ai: AiClient, photos: dict[str, Path]) -> None:
    exif = Image.Exif()
    exif[0x0112] = 8  # displayed rotated 90° counter-clockwise
    out = io.BytesIO()
    Image.open(photos["coffee.png"]).convert("RGB").save(out, format="JPEG", exif=exif)
    result = ai.remove_background(out.getvalue(), outputs="matte")
    assert (result.width, result.height) == (400, 600)


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (b"", "EMPTY_PICTURE", "empty"),
        (b"GIF89a not really", "BAD_PICTURE", "not a PNG, JPEG or WebP"),
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "BAD_PICTURE", ""),
    ],
)
def test_bad_pictures_are_refused_and_the_server_keeps_serving(
    ai: AiClient, photos: dict[str, Path], data: bytes, reason: str, words: str
) -> None:
    with pytest.raises(CraftAiError) as caught:
        ai.remove_background(data, outputs="matte")
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT and caught.value.reason == reason
    assert words in caught.value.message
    assert ai.remove_background(photos["chelsea.png"], outputs="matte").width == 451


def test_a_picture_over_the_size_limit_is_refused(ai: AiClient) -> None:
    out = io.BytesIO()
    Image.new("L", (20000, 40)).save(out, format="PNG")
    with pytest.raises(CraftAiError) as caught:
        ai.remove_background(out.getvalue(), outputs="matte")
    assert caught.value.reason == "PICTURE_TOO_LARGE" and "20000x40 pixels" in caught.value.message


def test_a_route_not_set_up_says_which_command_sets_it_up(tmp_path: Path, photos: dict[str, Path]) -> None:
    with (
        servers.running(servers.embedded(tmp_path / "store", tmp_path)) as server,
        AiClient(app_id="tests", target=server.address) as fresh,
        pytest.raises(CraftAiError) as caught,
    ):
        fresh.remove_background(photos["chelsea.png"], outputs="matte")
    error = caught.value
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and error.reason == "ROUTE_NOT_SET_UP"
    assert "set up image.matte first" in error.message
    assert "craftai setup image.matte --recipe u2netp" in error.message
