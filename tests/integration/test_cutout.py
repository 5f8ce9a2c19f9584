"""Cutout sessions on a real `craftai serve` (u2netp's real weights for the matte, the SAM fixture for
the regions on both engines, all on the CPU): the merge rule of docs/MATTE.md checked against SAM's own mask of
each prompt (asked of the same session with Segment), undo equal to never having clicked, the
session budget counting the picture, matte and colours beside the embedding, a forgotten session
opened again with the same prompts, and refusals in plain words.

The pictures are composed for the test: a subject the matte finds (the astronaut's photo) beside a
second subject pasted into its background, which the matte leaves out; the keep click is on it."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image
from scipy import ndimage  # type: ignore[import-untyped]

from craftai import AiClient, AsyncAiClient, CraftAiError, MatteOutput
from craftai_dev import servers, web
from craftai_dev.segment import SetUpStore, mask_of
from craftai_wire.vocabulary import Reason

pytestmark = pytest.mark.slow
RADIUS = 2  # cutout_merge.feather_radius of a picture of at most 640 pixels a side


BUDGET = 64 << 20  # the session budget: a 512x512 cutout and its 16 MiB embedding fit, a 3000x3000 picture does not


@pytest.fixture(scope="module")
def server(
    sam_torch_store: SetUpStore, model_files: servers.FileServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[servers.Process]:
    """`craftai serve` with u2netp and SAM on both engines (onnxruntime unless torch is asked)."""
    root = tmp_path_factory.mktemp("cutout")
    u2netp = f"{model_files.url}/good/u2netp.onnx"
    store, recipes = web.both_features_store(sam_torch_store.store, sam_torch_store.recipes, u2netp, root)
    env = {
        "CRAFTAI_RECIPES": str(recipes),
        "CRAFTAI_METRICS_PORT": str(servers.free_port()),
        "CRAFTAI_SESSION_BUDGET_BYTES": str(BUDGET),
    }
    with servers.running(servers.embedded(store, root, env)) as process:
        with AiClient(app_id="tests", target=process.address) as ai:
            list(ai.setup("image.matte", "u2netp"))
        yield process


def _composed(photos: dict[str, Path], name: str) -> bytes:
    """The photo with another photo's middle pasted into its lower right corner (a second subject)."""
    base = Image.open(photos[name]).convert("RGB")
    other = Image.open(photos["coffee.png" if name != "coffee.png" else "chelsea.png"]).convert("RGB")
    w, h = base.size
    patch = other.resize((w // 3, h // 3))
    base.paste(patch, (w - w // 3 - 8, h - h // 3 - 8))
    out = io.BytesIO()
    base.save(out, format="PNG")
    return out.getvalue()


def _alpha(result: MatteOutput) -> npt.NDArray[np.uint8]:
    assert result.matte is not None
    return np.asarray(Image.open(io.BytesIO(result.matte.data)))


def _rgba(result: MatteOutput) -> npt.NDArray[np.uint8]:
    assert result.cutout is not None
    return np.asarray(Image.open(io.BytesIO(result.cutout.data)))


def _bytes_kept(process: servers.Process) -> float:
    return process.metrics()["craftai_infer_session_bytes"]


def _region(ai: AiClient, session_id: str, point: tuple[float, float]) -> npt.NDArray[np.bool_]:
    """SAM's mask of a one-point prompt, asked of the cutout session as an image.segment session."""
    found = ai.resume_session(session_id).segment(points=[(*point, True)])
    return mask_of(found.masks[0].png) > 0


@pytest.mark.parametrize("name", ["astronaut.png", "chelsea.png"])
def test_keep_and_remove_follow_the_rule_and_undo_is_never_having_clicked(
    server: servers.Process, photos: dict[str, Path], name: str
) -> None:
    picture = _composed(photos, name)
    width, height = Image.open(io.BytesIO(picture)).size
    click = (width - width // 6 - 8.0, height - height // 6 - 8.0)  # on the pasted subject
    with AiClient(app_id="tests", target=server.address) as ai, ai.open_cutout(picture, outputs="matte,cutout") as c:
        opened = c.result
        assert opened is not None and c.prompts == [] and c.changed_pixels == 0
        before = _alpha(opened)
        region = _region(ai, c.session_id, click)
        assert 0.001 < region.mean() < 0.9, f"SAM's region is trivial ({region.mean():.4f} of the picture)"
        grown = ndimage.binary_dilation(region, iterations=2 * RADIUS, structure=np.ones((3, 3)))
        inner = ndimage.binary_erosion(region, iterations=2 * RADIUS, structure=np.ones((3, 3)))
        assert inner.any()

        kept = c.keep(points=[click])
        alpha = _alpha(kept)
        assert (alpha[~grown] == before[~grown]).all()  # outside the region's reach: the matte's own bytes
        assert (alpha[inner] == 255).all()  # inside: subject
        assert (alpha >= before).all()  # a keep never lowers alpha, along the seam too
        assert c.changed_pixels == int((alpha != before).sum()) > 0
        same = alpha == before
        assert (_rgba(kept)[same] == _rgba(opened)[same]).all()  # colours estimated again only where alpha changed

        removed = c.remove(points=[click])
        gone = _alpha(removed)
        assert (gone[inner] == 0).all() and (gone[~grown] == before[~grown]).all() and (gone <= alpha).all()
        assert len(c.prompts) == 2

        undone = c.undo()
        assert undone.matte == kept.matte and undone.cutout == kept.cutout  # the same bytes
        first = c.undo()
        assert first.matte == opened.matte and first.cutout == opened.cutout and c.changed_pixels == 0
        with pytest.raises(ValueError, match="no prompt to undo"):
            c.undo()


def test_the_torch_engine_of_sam_finds_the_regions_too(server: servers.Process, photos: dict[str, Path]) -> None:
    """The same rule with SAM's torch route (the prepared conversion) finding the region."""
    picture = _composed(photos, "chelsea.png")
    click = (380.0, 240.0)
    with (
        AiClient(app_id="tests", target=server.address) as ai,
        ai.open_cutout(picture, outputs="matte", segment_engine="torch") as c,
    ):
        assert c.segment_engine == "torch" and c.result is not None
        before = _alpha(c.result)
        region = _region(ai, c.session_id, click)
        assert 0.001 < region.mean() < 0.9, f"SAM's region is trivial ({region.mean():.4f} of the picture)"
        grown = ndimage.binary_dilation(region, iterations=2 * RADIUS, structure=np.ones((3, 3)))
        inner = ndimage.binary_erosion(region, iterations=2 * RADIUS, structure=np.ones((3, 3)))
        alpha = _alpha(c.keep(points=[click]))
    assert (alpha[~grown] == before[~grown]).all() and (alpha[inner] == 255).all() and (alpha >= before).all()


def test_the_session_budget_counts_the_picture_the_matte_and_the_colours(
    server: servers.Process, photos: dict[str, Path]
) -> None:
    picture = _composed(photos, "astronaut.png")
    width, height = Image.open(io.BytesIO(picture)).size
    with AiClient(app_id="budget", target=server.address) as ai:
        empty = _bytes_kept(server)
        with ai.open_session(picture):
            embedding = _bytes_kept(server) - empty
        with ai.open_cutout(picture, outputs="cutout"):
            assert _bytes_kept(server) - empty == embedding + width * height * (3 + 1 + 3)  # RGB, matte, colours
        with ai.open_cutout(picture, outputs="mask"):  # no output needs the colours: none kept
            assert _bytes_kept(server) - empty == embedding + width * height * (3 + 1)
        assert _bytes_kept(server) == empty


def test_a_forgotten_session_is_opened_again_with_its_prompts(server: servers.Process, photos: dict[str, Path]) -> None:
    picture = _composed(photos, "chelsea.png")
    with AiClient(app_id="tests", target=server.address) as ai, ai.open_cutout(picture, outputs="matte") as c:
        first = c.keep(box=(20, 20, 200, 150))
        gone = c.session_id
        ai.resume_session(gone).close()
        c.remove(points=[(100, 100)])
        assert c.reopened == 1 and c.session_id != gone
        assert c.undo().matte == first.matte


def test_the_asyncio_client_fixes_a_cutout_too(server: servers.Process, photos: dict[str, Path]) -> None:
    picture = _composed(photos, "astronaut.png")

    async def main() -> tuple[MatteOutput, MatteOutput, MatteOutput]:
        async with (
            AsyncAiClient(app_id="tests", target=server.address) as ai,
            await ai.open_cutout(picture, outputs="matte") as c,
        ):
            assert c.result is not None
            opened = c.result
            kept = await c.keep(points=[(300, 300)])
            return opened, kept, await c.undo()

    opened, kept, undone = asyncio.run(main())
    assert undone.matte == opened.matte and kept.matte != opened.matte


def test_refusals_say_what_to_do(server: servers.Process, photos: dict[str, Path]) -> None:
    picture = _composed(photos, "astronaut.png")
    with AiClient(app_id="tests", target=server.address) as ai:
        with pytest.raises(ValueError, match="needs points or a box"), ai.open_cutout(picture, outputs="matte") as c:
            c.keep()
        assert c.prompts == []
        with ai.open_cutout(picture, outputs="matte") as c, pytest.raises(CraftAiError) as outside:
            c.keep(points=[(5000, 10)])
        assert outside.value.code == grpc.StatusCode.INVALID_ARGUMENT and outside.value.reason == Reason.BAD_PROMPT
        assert "outside the 512x512 picture" in str(outside.value)
        assert c.prompts == []  # a refused prompt is not kept
        with ai.open_session(picture) as plain:
            from craftai.cutout import CutoutSession

            stranger = CutoutSession(ai.transport, c._request)
            stranger.session_id = plain.session_id
            with pytest.raises(CraftAiError) as wrong:
                stranger.keep(points=[(10, 10)])
        assert wrong.value.reason == Reason.BAD_OPTIONS and "open a cutout session" in str(wrong.value)
        large = io.BytesIO()
        Image.new("RGB", (3000, 3000), (90, 140, 60)).save(large, format="PNG")
        with pytest.raises(CraftAiError) as too_large:
            ai.open_cutout(large.getvalue(), outputs="cutout")
        assert too_large.value.reason == Reason.LIMIT_REACHED and "more than the whole session budget" in str(
            too_large.value
        )


def _craftai(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAFTAI_ADDRESS": address}
    command = [str(servers.BIN / "craftai"), "-q", *args]
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=300)


def test_the_command_fixes_one_picture_in_one_shot_as_the_sdk_does(
    server: servers.Process, photos: dict[str, Path], tmp_path: Path
) -> None:
    source = tmp_path / "photo.png"
    source.write_bytes(_composed(photos, "astronaut.png"))
    out = tmp_path / "fixed.png"
    run = _craftai(
        server.address, "remove-background", str(source), "-o", str(out), "--outputs", "matte",
        "--keep", "420,420", "--remove", "10,10,120,90",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    with AiClient(app_id="tests", target=server.address) as ai, ai.open_cutout(source, outputs="matte") as c:
        c.keep(points=[(420, 420)])
        expected = c.remove(box=(10, 10, 120, 90))
    assert expected.matte is not None and out.read_bytes() == expected.matte.data
    assert c.changed_pixels > 0

    other = tmp_path / "other.png"
    other.write_bytes(source.read_bytes())
    two = _craftai(
        server.address, "remove-background", str(source), str(other), "-o", str(tmp_path / "many"), "--keep", "1,1"
    )
    assert two.returncode == 2 and "--keep and --remove fix one picture" in two.stderr
    bad = _craftai(server.address, "remove-background", str(source), "-o", str(out), "--keep", "1,2,3")
    assert bad.returncode == 2 and "a region is a point x,y or a box x0,y0,x1,y1" in bad.stderr
