"""The page in a real browser (Debian's chromium, headless, driven by Playwright): the key taken
from the link (and kept in the page's memory only), a background removed and the shown cutout's
pixels checked against the service's, an object selected by clicks and a box with the overlay
checked against the service's masks, undo, the error shown for a file that is not a picture, and a
route set up from the page.

One browser and one page for the module; the gateway and the services are the web suite's."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from craftai import AiClient, CraftAiError, Point, SegmentSession
from craftai_dev import servers, web

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

PIXELS = """(id) => {
  const canvas = document.getElementById(id);
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let text = "";
  for (let i = 0; i < data.length; i += 0x8000) text += String.fromCharCode(...data.subarray(i, i + 0x8000));
  return [canvas.width, canvas.height, btoa(text)];
}"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = web.launch(
            playwright, tmp_path_factory.mktemp("chromium-profile"), viewport={"width": 1200, "height": 1000}
        )
        yield launched
        launched.close()


# What happened to the page besides the tests' own steps: navigations after the first, crashes,
# script errors and console errors. Under CI load a test once found the page back in its first
# state (its buttons disabled after a picture was chosen); `_choose` says what this log saw then.
PAGE_EVENTS: list[str] = []


@pytest.fixture(scope="module")
def page(browser: BrowserContext, gateway: servers.Process, key: str) -> Iterator[Page]:
    opened = browser.new_page()
    opened.on("framenavigated", lambda frame: PAGE_EVENTS.append(f"navigated to {frame.url}"))
    opened.on("crash", lambda _page: PAGE_EVENTS.append("the page crashed"))
    opened.on("pageerror", lambda error: PAGE_EVENTS.append(f"script error: {error}"))
    opened.on("console", lambda m: PAGE_EVENTS.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    opened.goto(f"{gateway.address}/#key={key}")
    opened.wait_for_selector("body[data-ready=true]")
    PAGE_EVENTS.clear()  # the first load is the fixture's own
    yield opened
    opened.close()


def _choose(page: Page, photo: Path, ready: str = "#remove:not([disabled])") -> None:
    """The picture chosen in the page's file input, and the page ready for it; when it is not, the
    failure says what the page showed and what happened to it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.set_input_files("#file", str(photo))
    try:
        page.wait_for_selector(ready, timeout=60_000)
    except PlaywrightTimeout:
        shown = page.evaluate(
            "() => ({file: document.getElementById('file-name').textContent, body: {...document.body.dataset},"
            " url: location.href})"
        )
        what = f"{ready} not found after choosing {photo.name}"
        raise AssertionError(f"{what}: page {shown}; events {PAGE_EVENTS}") from None


def _pixels(page: Page, canvas: str) -> npt.NDArray[np.uint8]:
    width, height, data = page.evaluate(PIXELS, canvas)
    return np.frombuffer(base64.b64decode(data), dtype=np.uint8).reshape(height, width, 4)


def _wait_masks(page: Page, count: int) -> None:
    page.wait_for_selector(f"body[data-masks='{count}']", timeout=60_000)


def _prompt(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(page.evaluate("() => JSON.stringify(window.craftaiPage.prompt)"))
    return found


def _as_page(sdk: AiClient, session_id: str) -> SegmentSession:
    """The page's own session, through the SDK as the page's app (the gateway's default app id)."""
    return sdk.for_app("craftai-web", servers.ensure_local_key()).resume_session(session_id)


def _expected(sdk: AiClient, session_id: str, prompt: dict[str, Any]) -> npt.NDArray[np.bool_]:
    """The mask the service answers for the page's own prompt (the same session)."""
    points = [Point(p["x"], p["y"], p["foreground"]) for p in prompt["points"]]
    answer = _as_page(sdk, session_id).segment(points=points, box=prompt["box"])
    return np.asarray(Image.open(io.BytesIO(answer.best.png)).convert("L")) > 0


def _screen(page: Page, x: float, y: float) -> tuple[float, float]:
    box = page.locator("#marks").bounding_box()
    size = page.evaluate("() => [document.getElementById('marks').width, document.getElementById('marks').height]")
    assert box is not None
    return box["x"] + x * box["width"] / size[0], box["y"] + y * box["height"] / size[1]


def test_the_key_comes_from_the_link_and_the_route_and_device_are_shown(page: Page, key: str) -> None:
    assert "#key" not in page.url  # taken into the page, out of the address bar
    stored = page.evaluate("() => JSON.stringify([{...localStorage}, {...sessionStorage}])")
    assert key not in stored and quote(key) not in stored  # in the page's memory only: nothing persisted
    assert "infer runs on cpu" in page.locator("#runtime").inner_text()
    matte = page.locator(".route[data-feature='image.matte']")
    assert matte.get_attribute("data-ready") == "true"
    assert "u2netp / onnxruntime" in matte.locator("select").inner_text()


def test_the_chosen_recipe_shows_what_it_is_its_download_and_its_licence(page: Page) -> None:
    card = page.locator(".route[data-feature='image.matte']")
    model = card.locator("p.model")
    assert model.inner_text().startswith("U²-Net portable: U²-Net portable (Qin et al.")
    assert "download 4.6 MB; licence: Apache-2.0" in model.inner_text()
    card.locator("select").select_option("u2net_human_seg/onnxruntime")
    assert "trained by its authors for people" in model.inner_text() and "download 176.0 MB" in model.inner_text()
    card.locator("select").select_option("silueta/onnxruntime")
    assert "download 44.2 MB; licence: not stated" in model.inner_text()
    card.locator("select").select_option("birefnet-portrait/torch")  # each engine's route fetches its own file
    assert "download 884.9 MB; licence: MIT" in model.inner_text()
    card.locator("select").select_option("birefnet-portrait/onnxruntime")
    assert "download 972.7 MB; licence: MIT" in model.inner_text()
    card.locator("select").select_option("u2netp/onnxruntime")
    assert "4.6 MB" in model.inner_text()


def test_the_advice_names_a_recipe_for_the_picture_which_one_click_takes(page: Page, photo: Path) -> None:
    """The rule of `--recipe auto` (craftai_wire.advice, served in /vocabulary.js), shown for the picture
    chosen: on this CPU server, u2netp for a general picture, u2net_human_seg for a portrait."""
    _choose(page, photo)
    width, height = Image.open(photo).size
    advice = page.locator("#advice")
    assert f"advised for this {width}x{height} picture on a CPU: u2netp" in advice.inner_text()
    assert page.locator("#use-advice").is_hidden()  # u2netp is the route chosen already
    page.select_option("#subject", "portrait")
    page.wait_for_selector("body[data-advice='u2net_human_seg']")
    assert "u2net_human_seg (U²-Net trained for people" in advice.inner_text()
    page.click("#use-advice")
    card = page.locator(".route[data-feature='image.matte']")
    assert card.locator("select").input_value() == "u2net_human_seg/onnxruntime"
    assert page.locator("#use-advice").is_hidden()
    card.locator("select").select_option("u2netp/onnxruntime")  # as the other tests expect it
    page.select_option("#subject", "general")


def test_a_recipe_of_parts_offers_them_and_the_part_chosen_goes_to_the_service(page: Page, photo: Path) -> None:
    """u2net_cloth_seg's parts (craftai_wire.vocabulary PARTS_OF, served in /vocabulary.js) appear
    for that recipe only; the part chosen is in the request (the route is not set up here: the
    service's refusal is shown)."""
    _choose(page, photo)
    card = page.locator(".route[data-feature='image.matte']")
    assert page.locator("#part-choice").is_hidden()
    card.locator("select").select_option("u2net_cloth_seg/onnxruntime")
    assert page.locator("#part-choice").is_visible()
    options = page.locator("#part option").all_inner_texts()
    assert options == ["every part, stacked", "upper", "lower", "full"]
    page.select_option("#part", "upper")
    with page.expect_request(lambda request: "/remove-background?" in request.url) as sent:
        page.click("#remove")
    assert "part=upper" in sent.value.url and "recipe=u2net_cloth_seg" in sent.value.url
    page.wait_for_function("() => !document.getElementById('remove').disabled")
    card.locator("select").select_option("u2netp/onnxruntime")  # as the other tests expect it
    assert page.locator("#part-choice").is_hidden()
    with page.expect_request(lambda request: "/remove-background?" in request.url) as sent:
        page.click("#remove")
    assert "part=" not in sent.value.url
    page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)


def test_remove_background_shows_the_cutout_over_a_checkerboard(page: Page, photo: Path, sdk: AiClient) -> None:
    _choose(page, photo)
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
    assert page.locator("#cutout").is_visible() and "checker" in (page.get_attribute("#cutout", "class") or "")
    shown = _pixels(page, "cutout")
    cutout = np.asarray(
        Image.open(io.BytesIO(sdk.remove_background(photo, outputs="matte,cutout", recipe="u2netp").cutout_png))
    )
    assert shown.shape == cutout.shape
    np.testing.assert_array_equal(shown[..., 3], cutout[..., 3])
    assert 0.05 < (cutout[..., 3] > 127).mean() < 0.95  # a real cutout: some subject, some background
    # A canvas keeps colours premultiplied by alpha: they come back exactly only where alpha is
    # full, within 255 / alpha elsewhere (checked where the subject is nearly opaque).
    solid = cutout[..., 3] >= 200
    assert solid.sum() > 1000
    difference = np.abs(shown[solid][:, :3].astype(int) - cutout[solid][:, :3].astype(int))
    assert difference.max() <= 2, difference.max()
    for link in ("#download-cutout", "#download-matte"):
        assert (page.get_attribute(link, "href") or "").startswith("blob:")
    assert "u2netp / onnxruntime on cpu" in page.locator("#cutout-caption").inner_text()


def test_the_matte_options_a_composite_over_a_colour(page: Page, photo: Path, sdk: AiClient) -> None:
    _choose(page, photo)  # its own picture, whatever the test before left
    page.select_option("#background", "color")
    page.fill("#bg-color", "#2a6df4")
    page.evaluate("() => { delete document.body.dataset.cutout; }")
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
    expected = sdk.remove_background(photo, outputs="composite", bg_color="#2a6df4", recipe="u2netp").composite
    assert expected is not None
    composite = np.asarray(Image.open(io.BytesIO(expected.data)).convert("RGB"))
    np.testing.assert_array_equal(_pixels(page, "composite")[..., :3], composite)  # opaque: exact
    assert (page.get_attribute("#download-composite", "download") or "").endswith(".composite.png")
    page.select_option("#background", "none")


# The page's own composites held back: recompose asks createImageBitmap for the last cutout with no
# options (draw() passes its options and goes through). `__release()` lets them finish and resolves
# once they have, a few turns of the event loop later.
HOLD_PAGE_COMPOSITES = """() => {
    const original = window.createImageBitmap.bind(window);
    const held = [];
    window.createImageBitmap = (source, ...options) => {
        if (options.length) return original(source, ...options);
        return new Promise((done, failed) => held.push(() => original(source).then(done, failed)));
    };
    window.__held = () => held.length;
    window.__release = async () => {
        window.createImageBitmap = original;
        for (const go of held.splice(0)) go();
        for (let turn = 0; turn < 5; turn++) await new Promise((next) => setTimeout(next, 0));
    };
}"""


def test_a_composite_the_page_was_still_making_does_not_cover_a_new_removals(
    page: Page, photo: Path, sdk: AiClient
) -> None:
    """A background chosen just before "Remove" starts the page composing the last cutout over it;
    the new removal's composite, the service's, is what stays shown, whichever finishes last."""
    _choose(page, photo)
    page.select_option("#background", "none")
    page.evaluate("() => { delete document.body.dataset.cutout; }")
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
    page.evaluate(HOLD_PAGE_COMPOSITES)
    page.select_option("#background", "color")  # the page composes the last cutout: held
    page.fill("#bg-color", "#2a6df4")
    page.wait_for_function("() => window.__held() >= 1")
    page.evaluate("() => { delete document.body.dataset.cutout; }")
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
    composed = _composed(page)
    page.evaluate("() => window.__release()")  # the page's composites finish after the removal's
    expected = sdk.remove_background(photo, outputs="composite", bg_color="#2a6df4", recipe="u2netp").composite
    assert expected is not None
    composite = np.asarray(Image.open(io.BytesIO(expected.data)).convert("RGB"))
    np.testing.assert_array_equal(_pixels(page, "composite")[..., :3], composite)  # opaque: exact
    assert _composed(page) == composed  # none of the held ones was drawn or linked
    page.select_option("#background", "none")


def _covering_click(session: SegmentSession) -> tuple[tuple[float, float], tuple[float, float]]:
    """A click whose mask (random-weight SAM fixture) covers it, and a background click that
    changes that mask: found on the service itself (the page's session), then clicked in the page."""
    for x, y in [(225.5, 150.5), (200.5, 120.5), (150.5, 200.5), (300.5, 100.5), (100.5, 100.5), (350.5, 250.5)]:
        first = session.segment(points=[(x, y, True)])
        covered = np.asarray(Image.open(io.BytesIO(first.best.png)).convert("L")) > 0
        if not covered[int(y), int(x)]:
            continue
        for bx, by in [(30.5, 30.5), (420.5, 270.5), (60.5, 250.5), (400.5, 40.5)]:
            second = session.segment(points=[(x, y, True), (bx, by, False)])
            if second.best.png != first.best.png:
                return (x, y), (bx, by)
    raise AssertionError("no click of the list is covered by its own mask on this fixture")


def test_select_by_clicks_and_a_box_with_undo(page: Page, photo: Path, sdk: AiClient) -> None:
    _choose(page, photo, "#select:not([disabled])")
    page.click("#select")
    page.wait_for_selector("#select[aria-pressed=true]", timeout=60_000)
    session = page.evaluate("() => document.body.dataset.session")
    (x, y), (bx, by) = _covering_click(_as_page(sdk, session))
    before = int(page.evaluate("() => Number(document.body.dataset.masks || 0)"))

    page.mouse.click(*_screen(page, x, y))
    _wait_masks(page, before + 1)
    overlay = _pixels(page, "overlay")[..., 3] > 0
    prompt = _prompt(page)
    assert prompt["points"][0]["foreground"] is True
    px, py = prompt["points"][0]["x"], prompt["points"][0]["y"]
    assert abs(px - x) < 1 and abs(py - y) < 1
    assert overlay[int(py), int(px)]  # the overlay covers the clicked point
    np.testing.assert_array_equal(overlay, _expected(sdk, session, prompt))
    first = overlay

    page.mouse.click(*_screen(page, bx, by), button="right")
    _wait_masks(page, before + 2)
    overlay = _pixels(page, "overlay")[..., 3] > 0
    prompt = _prompt(page)
    assert [p["foreground"] for p in prompt["points"]] == [True, False]
    assert not np.array_equal(overlay, first)  # the background click changed the selection
    np.testing.assert_array_equal(overlay, _expected(sdk, session, prompt))

    page.click("#undo")
    _wait_masks(page, before + 3)
    np.testing.assert_array_equal(_pixels(page, "overlay")[..., 3] > 0, first)

    page.mouse.move(*_screen(page, 60, 40))
    page.mouse.down()
    page.mouse.move(*_screen(page, 300, 200), steps=5)
    page.mouse.move(*_screen(page, 400, 280), steps=5)
    page.mouse.up()
    _wait_masks(page, before + 4)
    prompt = _prompt(page)
    assert prompt["box"] is not None and len(prompt["points"]) == 1
    np.testing.assert_array_equal(_pixels(page, "overlay")[..., 3] > 0, _expected(sdk, session, prompt))
    assert "predicted IoU" in page.locator("#mask-caption").inner_text()

    page.click("#clear")
    _wait_masks(page, before + 5)
    assert not (_pixels(page, "overlay")[..., 3] > 0).any()


def test_everything_colours_every_object_with_progress(page: Page, photo: Path, sdk: AiClient) -> None:
    """On the page's session of its own picture: the grid's progress shown, then the union of the
    service's masks for the same options drawn over the picture, each object in its colour."""
    _choose(page, photo, "#everything:not([disabled])")  # its own picture, whatever the test before left
    for field, value in (("#everything-side", "4"), ("#everything-iou", "0"), ("#everything-stability", "0")):
        page.fill(field, value)
    page.click("#everything")
    page.wait_for_selector("body[data-everything]", timeout=60_000)
    assert page.evaluate("() => document.body.dataset.everythingProgress") == "16/16"
    session = page.evaluate("() => document.body.dataset.session")
    expected = _as_page(sdk, session).segment_everything(
        points_per_side=4, pred_iou_thresh=0, stability_score_thresh=0, formats="png"
    )
    assert expected.masks and page.evaluate("() => document.body.dataset.everything") == str(len(expected.masks))
    union = np.zeros((expected.height, expected.width), dtype=bool)
    for mask in expected.masks:
        union |= np.asarray(Image.open(io.BytesIO(mask.png)).convert("L")) > 0
    overlay = _pixels(page, "overlay")
    np.testing.assert_array_equal(overlay[..., 3] > 0, union)
    smallest = min(expected.masks, key=lambda m: m.area)  # drawn last: its pixels have its colour
    x0, y0, x1, y1 = smallest.box
    inside = (np.asarray(Image.open(io.BytesIO(smallest.png)).convert("L")) > 0)[y0:y1, x0:x1]
    colours = {tuple(c) for c in overlay[y0:y1, x0:x1][inside][:, :3]}
    assert len(colours) == 1
    assert f"{len(expected.masks)} objects" in page.locator("#mask-caption").inner_text()


def test_a_file_that_is_not_a_picture_shows_the_services_words(page: Page, tmp_path: Path, sdk: AiClient) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list: milk, eggs\n")
    with pytest.raises(CraftAiError) as raised:
        sdk.remove_background(notes, outputs="matte", recipe="u2netp")
    page.set_input_files("#file", str(notes))
    page.click("#remove")
    page.wait_for_selector("#error:not([hidden])", timeout=60_000)
    assert page.locator("#error-message").inner_text() == raised.value.message
    assert page.evaluate("() => document.body.dataset.error") == "BAD_PICTURE"
    assert "PNG, JPEG or WebP" in page.locator("#error-fix").inner_text()  # what to do about it


def _blob(page: Page, link: str) -> bytes:
    """The bytes a download link of the page holds (its blob URL read in the page)."""
    data = page.evaluate(
        """async (id) => {
          const bytes = new Uint8Array(await (await fetch(document.getElementById(id).href)).arrayBuffer());
          let text = "";
          for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
          return btoa(text);
        }""",
        link,
    )
    return base64.b64decode(data)


def _solid_png(path: Path, colour: tuple[int, int, int]) -> Path:
    Image.new("RGB", (90, 60), colour).save(path)
    return path


def test_a_background_picture_jpeg_and_a_threshold_go_to_the_service(
    page: Page, photo: Path, sdk: AiClient, tmp_path: Path
) -> None:
    backdrop = _solid_png(tmp_path / "green.png", (20, 160, 60))
    _choose(page, photo)
    page.select_option("#background", "picture")
    page.set_input_files("#bg-file", str(backdrop))
    page.select_option("#format", "jpeg")
    page.fill("#threshold", "0.3")
    page.evaluate("() => { delete document.body.dataset.cutout; }")
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
    expected = sdk.remove_background(
        photo, outputs="composite,mask", bg_image=backdrop.read_bytes(), threshold=0.3, format="jpeg", recipe="u2netp"
    )
    assert expected.composite is not None and expected.mask is not None
    assert _blob(page, "download-composite") == expected.composite.data  # the service's JPEG, byte for byte
    assert (page.get_attribute("#download-composite", "download") or "").endswith(".composite.jpg")
    assert _blob(page, "download-mask") == expected.mask.data  # at the page's threshold
    page.select_option("#format", "png")
    page.fill("#threshold", "")
    page.select_option("#background", "none")


def _composed(page: Page) -> int:
    """How many composites the page has made itself (body[data-composed])."""
    return int(page.evaluate("() => Number(document.body.dataset.composed || 0)"))


def _wait_composed(page: Page, count: int) -> None:
    """Until the page has made `count` composites (at least: an input may send more than one event)."""
    page.wait_for_function("n => Number(document.body.dataset.composed || 0) >= n", arg=count, timeout=30_000)


def test_a_new_background_is_made_in_the_page_without_running_the_model(
    page: Page, photo: Path, sdk: AiClient, tmp_path: Path
) -> None:
    """After a run, a new colour, picture or blur is laid under the cutout by the page: no request
    is sent; where the cutout is clear the new background shows, where it is opaque the cutout."""
    # the page is the module's: an earlier test's background picture would still be chosen, and
    # choosing "picture" below would compose it, racing with the yellow one this test chooses
    page.set_input_files("#bg-file", [])
    _choose(page, photo)
    page.select_option("#background", "color")
    page.fill("#bg-color", "#2a6df4")
    page.evaluate("() => { delete document.body.dataset.cutout; }")
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
    cutout = np.asarray(Image.open(io.BytesIO(_blob(page, "download-cutout"))))
    clear, alpha = cutout[..., 3] == 0, cutout[..., 3:].astype(float) / 255
    assert clear.sum() > 1000 and (alpha > 0.9).sum() > 1000
    sent: list[str] = []
    page.on("request", lambda request: sent.append(request.url) if "/api/" in request.url else None)

    composed = _composed(page)
    page.fill("#bg-color", "#e0301e")  # an input event, as dragging the colour picker sends
    _wait_composed(page, composed + 1)
    shown = _pixels(page, "composite")[..., :3].astype(float)
    assert (shown[clear] == (0xE0, 0x30, 0x1E)).all()
    over = cutout[..., :3] * alpha + np.array([0xE0, 0x30, 0x1E]) * (1 - alpha)  # the cutout over the colour
    assert np.abs(shown - over).max() <= 2  # 8-bit premultiplied arithmetic in the canvas
    assert (page.get_attribute("#download-composite", "href") or "").startswith("blob:")

    # composes nothing until a picture is chosen, and no composite of the colour made before (one
    # of its input events still composing) is counted or shown after this change
    page.select_option("#background", "picture")
    composed = _composed(page)
    page.set_input_files("#bg-file", str(_solid_png(tmp_path / "yellow.png", (250, 210, 20))))
    _wait_composed(page, composed + 1)
    shown = _pixels(page, "composite")[clear][:, :3]
    assert (shown == (250, 210, 20)).all(), f"the clear pixels show {np.unique(shown, axis=0)[:4]}, not the yellow"
    composed = _composed(page)
    page.select_option("#background", "blur")
    _wait_composed(page, composed + 1)
    assert not sent, sent  # no model run, no upload: nothing went to the API
    page.select_option("#background", "none")
    assert page.locator("#composite").is_hidden()


def test_a_failed_setup_stays_shown_with_its_fix(page: Page) -> None:
    """The setup's error stays after the routes are refreshed (it used to be cleared at once)."""
    card = page.locator(".route[data-feature='image.matte']")
    card.locator("select").select_option("birefnet-lite/onnxruntime")
    statuses = int(page.evaluate("() => Number(document.body.dataset.statuses || 0)"))
    page.locator(".route[data-feature='image.matte'] button.setup").click()
    page.wait_for_selector(f"body[data-statuses='{statuses + 1}']", timeout=60_000)  # refreshed after the failure
    assert page.locator("#error").is_visible()
    assert page.evaluate("() => document.body.dataset.error") == "SOURCES_FAILED"
    assert page.locator("#error-message").inner_text()  # the services' words
    assert "bring them by hand" in page.locator("#error-fix").inner_text()
    page.locator(".route[data-feature='image.matte'] select").select_option("u2netp/onnxruntime")


def test_the_page_fits_a_390_px_screen(page: Page, photo: Path) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        _choose(page, photo)
        page.evaluate("() => { delete document.body.dataset.cutout; }")
        page.click("#remove")
        page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        # every visible control's box, taken at one instant in the page (a status button that goes
        # away between listing the controls and measuring one has no box)
        boxes = page.evaluate(
            """() => [...document.querySelectorAll("button, select, a, canvas")]
                .filter((e) => getComputedStyle(e).visibility !== "hidden")
                .map((e) => [e.id || e.tagName, e.getBoundingClientRect()])
                .filter(([, r]) => r.width > 0 && r.height > 0)
                .map(([name, r]) => ({name, x: r.x, right: r.right}))"""
        )
        assert boxes
        for box in boxes:
            assert box["x"] >= 0 and box["right"] <= 390 + 0.5, box
    finally:
        page.set_viewport_size({"width": 1200, "height": 1000})


def test_blob_urls_are_revoked_and_the_icon_is_served(
    browser: BrowserContext, gateway: servers.Process, key: str, photo: Path
) -> None:
    """A page of its own that counts blob URLs: after three runs, only those its links show are
    alive; no request of the page, its icon included, is answered with an error."""
    opened = browser.new_page()
    failed: list[str] = []
    opened.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    opened.add_init_script(
        """(() => {
          const made = URL.createObjectURL, gone = URL.revokeObjectURL;
          window.liveBlobs = new Set();
          URL.createObjectURL = (blob) => { const u = made(blob); window.liveBlobs.add(u); return u; };
          URL.revokeObjectURL = (u) => { window.liveBlobs.delete(u); gone(u); };
        })();"""
    )
    try:
        opened.goto(f"{gateway.address}/#key={key}")
        opened.wait_for_selector("body[data-ready=true]")
        _choose(opened, photo)
        for _ in range(3):
            opened.evaluate("() => { delete document.body.dataset.cutout; }")
            opened.click("#remove")
            opened.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
        live = opened.evaluate("() => [...window.liveBlobs]")
        shown = opened.evaluate("() => [...document.querySelectorAll('a[href^=\"blob:\"]')].map((a) => a.href)")
        assert sorted(live) == sorted(shown) and len(shown) == 3, (live, shown)  # cutout, matte, mask
        icon = httpx.get(f"{gateway.address}/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/png"
        assert opened.evaluate("() => document.querySelector('link[rel=icon]').href").endswith("/favicon.ico")
        assert not failed, failed
    finally:
        opened.close()


def test_the_docs_ui_renders_offline(browser: BrowserContext, gateway: servers.Process) -> None:
    """Swagger UI at /docs in the browser: every operation shown, every file it loads the gateway's own."""
    opened = browser.new_page()
    asked: list[str] = []
    opened.on("request", lambda request: asked.append(request.url))
    try:
        opened.goto(f"{gateway.address}/docs")
        opened.wait_for_selector(".opblock", timeout=60_000)
        assert opened.locator(".opblock").count() >= 7
        assert opened.locator("button.authorize").count() == 1  # the security schemes are read
        assert asked and all(url.startswith(gateway.address) or url.startswith("data:") for url in asked), asked
    finally:
        opened.close()


def test_a_route_not_set_up_is_set_up_from_the_page_with_progress(page: Page, photo: Path) -> None:
    card = page.locator(".route[data-feature='image.matte']")
    card.locator("select").select_option("u2netp/torch")
    card = page.locator(".route[data-feature='image.matte']")
    assert card.get_attribute("data-ready") == "false"
    card.locator("button.setup").click()
    page.wait_for_selector(".route[data-feature='image.matte'] progress", timeout=30_000)
    page.wait_for_selector(".route[data-feature='image.matte'][data-ready=true]", timeout=240_000)
    assert "prepared" in page.locator(".route[data-feature='image.matte'] .state").inner_text()
    # Its first run loads it: the badge says so once the run is answered (it used to stay "prepared").
    _choose(page, photo)
    page.evaluate("() => { delete document.body.dataset.cutout; }")
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=120_000)
    page.wait_for_function(
        "() => document.querySelector(\".route[data-feature='image.matte'] .state\").textContent === 'ready'",
        timeout=30_000,
    )
