"""The page's fix mode in a real browser (Debian's chromium, headless, driven by Playwright), as
tests/web/test_page.py drives the rest of the page: after a background removal, Fix opens a cutout
session with the removal's picture and options; a click keeps, a right-click removes, a drag keeps
a box and a right-drag removes one; each change sends the whole list and the cutout shown and
linked is the service's for that list (the SDK's cutout session answers the same list with the
same bytes); undo sends the list before; a session the server forgot is opened again unseen;
leaving fix mode, choosing another picture or leaving the page closes the session; fix and select
are exclusive.

All the apps of the local key may keep one picture on the test services (tests/web/conftest.py):
every session a test opens is closed before the next is opened, the SDK's (with `with`) before or
after the page's."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from craftai import AiClient, CutoutPrompt, MatteOutput
from craftai_dev import servers, web

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

SDK_APP = "cutout-page-tests"
# Where a keep and a remove are tried (picture pixels of chelsea.png, 451x300): the first whose
# region changes the cutout on this SAM fixture (random weights) is clicked in the page.
KEEPS = [(300.5, 200.5), (225.5, 150.5), (380.5, 250.5), (100.5, 100.5), (60.5, 250.5)]
REMOVES = [(225.5, 150.5), (200.5, 120.5), (300.5, 100.5), (150.5, 200.5), (350.5, 250.5)]
GREEN, RED = (0x38, 0xA1, 0x69), (0xE5, 0x3E, 0x3E)  # the marks of keep and remove (app.js MARK_COLOURS)
PIXELS = """(id) => {
  const canvas = document.getElementById(id);
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let text = "";
  for (let i = 0; i < data.length; i += 0x8000) text += String.fromCharCode(...data.subarray(i, i + 0x8000));
  return [canvas.width, canvas.height, btoa(text)];
}"""
BLOB = """async (id) => {
  const bytes = new Uint8Array(await (await fetch(document.getElementById(id).href)).arrayBuffer());
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
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


# The pages' script errors and console errors, for the failures' messages.
PAGE_EVENTS: list[str] = []


def _open(browser: BrowserContext, gateway: servers.Process, key: str) -> Page:
    opened = browser.new_page()
    opened.on("pageerror", lambda error: PAGE_EVENTS.append(f"script error: {error}"))
    opened.on("console", lambda m: PAGE_EVENTS.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    opened.goto(f"{gateway.address}/#key={key}")
    opened.wait_for_selector("body[data-ready=true]")
    return opened


@pytest.fixture(scope="module")
def page(browser: BrowserContext, gateway: servers.Process, key: str) -> Iterator[Page]:
    opened = _open(browser, gateway, key)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def as_page(gateway: servers.Process, key: str) -> Iterator[httpx.Client]:
    """The API as the page calls it: the local key, and no app id (the gateway's default, craftai-web)."""
    with httpx.Client(base_url=gateway.address, headers={"Authorization": f"Bearer {key}"}, timeout=120) as client:
        yield client


@pytest.fixture(autouse=True)
def _no_session_left(page: Page) -> Iterator[None]:
    """A test that failed in fix mode leaves it: the next one may open the one session allowed."""
    yield
    if page.get_attribute("#fix", "aria-pressed") == "true":
        page.click("#fix")
    page.wait_for_selector("body:not([data-cutout-session])", timeout=30_000)


def _choose_and_remove(page: Page, photo: Path) -> None:
    page.set_input_files("#file", [])  # the same file chosen again is no change: no event
    page.set_input_files("#file", str(photo))
    page.wait_for_selector("#fix[disabled]", state="attached")  # until the picture's background is removed
    page.wait_for_selector("#remove:not([disabled])", timeout=60_000)
    page.evaluate("() => { delete document.body.dataset.cutout; }")
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=60_000)
    page.wait_for_selector("#fix:not([disabled])")


def _fixed(page: Page) -> int:
    return int(page.evaluate("() => Number(document.body.dataset.fixed || 0)"))


def _composed(page: Page) -> int:
    """How many composites the page has made itself (body[data-composed])."""
    return int(page.evaluate("() => Number(document.body.dataset.composed || 0)"))


def _wait_fixed(page: Page, count: int) -> None:
    """Until the page has shown its count-th cutout in fix mode; else what it showed instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector(f"body[data-fixed='{count}']", timeout=60_000)
    except PlaywrightTimeout:
        shown = page.evaluate(
            "() => ({body: {...document.body.dataset}, error: document.getElementById('error-message').textContent,"
            " prompts: window.craftaiPage.made && window.craftaiPage.made.prompts})"
        )
        raise AssertionError(f"no cutout {count} shown: page {shown}; events {PAGE_EVENTS}") from None


def _enter_fix(page: Page) -> str:
    """Fix mode on: the cutout session's id once its cutout is shown."""
    before = _fixed(page)
    page.click("#fix")
    page.wait_for_selector("#fix[aria-pressed=true]")
    _wait_fixed(page, before + 1)
    session: str = page.evaluate("() => document.body.dataset.cutoutSession")
    assert session
    return session


def _blob(page: Page, link: str) -> bytes:
    """The bytes a download link of the page holds (its blob URL read in the page)."""
    return base64.b64decode(page.evaluate(BLOB, link))


def _pixels(page: Page, canvas: str) -> npt.NDArray[np.uint8]:
    width, height, data = page.evaluate(PIXELS, canvas)
    return np.frombuffer(base64.b64decode(data), dtype=np.uint8).reshape(height, width, 4)


def _prompts(page: Page) -> list[dict[str, Any]]:
    """The fix mode's list as the page sent it last."""
    found: list[dict[str, Any]] = json.loads(page.evaluate("() => JSON.stringify(window.craftaiPage.made.prompts)"))
    return found


def _screen(page: Page, x: float, y: float) -> tuple[float, float]:
    """Where picture pixel (x, y) is on the screen (the marks canvas lies over the picture), the
    picture scrolled into the viewport first (below the options, it may not be in it)."""
    page.locator("#marks").scroll_into_view_if_needed()
    box = page.locator("#marks").bounding_box()
    size = page.evaluate("() => [document.getElementById('marks').width, document.getElementById('marks').height]")
    assert box is not None
    return box["x"] + x * box["width"] / size[0], box["y"] + y * box["height"] / size[1]


def _picture(page: Page, sx: float, sy: float) -> tuple[float, float]:
    """The picture pixel of a screen point, as the page finds it (app.js pictureXY)."""
    box = page.locator("#marks").bounding_box()
    size = page.evaluate("() => [document.getElementById('marks').width, document.getElementById('marks').height]")
    assert box is not None
    return (sx - box["x"]) * size[0] / box["width"], (sy - box["y"]) * size[1] / box["height"]


def _drag(page: Page, start: tuple[float, float], end: tuple[float, float], button: Literal["left", "right"]) -> None:
    page.mouse.move(*_screen(page, *start))
    page.mouse.down(button=button)
    page.mouse.move(*_screen(page, (start[0] + end[0]) / 2, (start[1] + end[1]) / 2), steps=4)
    page.mouse.move(*_screen(page, *end), steps=4)
    page.mouse.up(button=button)


def _options(page: Page) -> dict[str, Any]:
    """open_cutout's options for the page's removal (its query) and its select route."""
    made, chosen = page.evaluate("() => [window.craftaiPage.made.options, window.craftaiPage.chosen['image.segment']]")
    query = {name: values[0] for name, values in parse_qs(made).items()}
    assert query == {
        "recipe": "u2netp",
        "engine": "onnxruntime",
        "outputs": "cutout,matte,mask",
        "answer": "json",
        "format": "png",
    }, query
    return {
        "outputs": query["outputs"],
        "format": query["format"],
        "recipe": query["recipe"],
        "engine": query["engine"],
        "segment_recipe": chosen["recipe"],
        "segment_engine": chosen["engine"],
    }


def _clicks(
    services: servers.Process, photo: Path, options: dict[str, Any]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """A keep click that changes the cutout, and a remove click that changes it after the keep."""
    with AiClient(app_id=SDK_APP, target=services.address) as ai, ai.open_cutout(photo, **options) as cutout:
        assert cutout.result is not None and cutout.result.cutout is not None
        opened = cutout.result.cutout.data
        keep = next((p for p in KEEPS if _cutout(cutout.refine([CutoutPrompt("keep", points=[p])])) != opened), None)
        assert keep is not None, "no keep click of the list changes the cutout on this fixture"
        kept = _cutout(cutout.refine([CutoutPrompt("keep", points=[keep])]))
        for remove in REMOVES:
            asked = [CutoutPrompt("keep", points=[keep]), CutoutPrompt("remove", points=[remove])]
            if _cutout(cutout.refine(asked)) != kept:
                return keep, remove
    raise AssertionError("no remove click of the list changes the cutout on this fixture")


def _cutout(result: MatteOutput) -> bytes:
    assert result.cutout is not None
    return result.cutout.data


def _asked(prompts: list[dict[str, Any]]) -> list[CutoutPrompt]:
    """The page's list (JSON) as the SDK's prompts, its numbers as the page sent them."""
    return [
        CutoutPrompt(p["action"], points=[tuple(point) for point in p.get("points", [])], box=p.get("box"))
        for p in prompts
    ]


def _refused(as_page: httpx.Client, session: str) -> None:
    """The page's session is gone from the server: a refinement on it answers 404."""
    gone = as_page.post(f"/api/v1/cutouts/{session}/refine", json={"prompts": []})
    assert gone.status_code == 404 and gone.json()["error"]["reason"] == "SESSION_NOT_FOUND", gone.text[:300]


def test_fix_mode_keeps_removes_undoes_and_matches_the_sdk(
    page: Page, photo: Path, services: servers.Process, as_page: httpx.Client
) -> None:
    _choose_and_remove(page, photo)
    removed_cutout = _blob(page, "download-cutout")
    options = _options(page)
    (kx, ky), (rx, ry) = _clicks(services, photo, options)  # the SDK's session closed before the page's opens

    session = _enter_fix(page)
    assert page.locator("#fix-help").is_visible() and page.get_attribute("#select", "aria-pressed") == "false"
    shown: dict[str, bytes] = {"opened": _blob(page, "download-cutout")}
    assert shown["opened"] == removed_cutout  # the removal's cutout, before any prompt
    lists: dict[str, list[dict[str, Any]]] = {"opened": []}

    def step(name: str, act: Any) -> None:
        before = _fixed(page)
        act()
        _wait_fixed(page, before + 1)
        assert page.evaluate("() => document.body.dataset.error || ''") == ""
        shown[name] = _blob(page, "download-cutout")
        lists[name] = _prompts(page)
        # what the page shows is what it links for download: the same alpha
        alpha = np.asarray(Image.open(io.BytesIO(shown[name])))[..., 3]
        np.testing.assert_array_equal(_pixels(page, "cutout")[..., 3], alpha)

    # a click keeps the region there, at the picture pixel under the pointer
    click = _screen(page, kx, ky)
    step("keep", lambda: page.mouse.click(*click))
    ((point,),) = [p["points"] for p in lists["keep"]]
    assert lists["keep"][0]["action"] == "keep" and "box" not in lists["keep"][0]
    assert np.allclose(point, _picture(page, *click), atol=1e-3), (point, _picture(page, *click), (kx, ky))
    assert shown["keep"] != shown["opened"]
    assert "fixed with 1 prompt (" in page.locator("#cutout-caption").inner_text()
    assert tuple(_pixels(page, "marks")[int(point[1]), int(point[0])][:3]) == GREEN

    # a right-click removes
    step("remove", lambda: page.mouse.click(*_screen(page, rx, ry), button="right"))
    assert [p["action"] for p in lists["remove"]] == ["keep", "remove"] and lists["remove"][0] == lists["keep"][0]
    assert shown["remove"] != shown["keep"]
    rpoint = lists["remove"][1]["points"][0]
    assert tuple(_pixels(page, "marks")[int(rpoint[1]), int(rpoint[0])][:3]) == RED

    # undo: the list before, the cutout before (byte for byte)
    step("undone", lambda: page.click("#undo"))
    assert lists["undone"] == lists["keep"] and shown["undone"] == shown["keep"]
    assert not (_pixels(page, "marks")[int(rpoint[1]), int(rpoint[0])][:3] == RED).all()

    # the server forgets the session: the next change opens it again with the picture, unseen
    assert as_page.delete(f"/api/v1/cutouts/{session}").status_code == 204
    step("remove-box", lambda: _drag(page, (20, 20), (160, 130), "right"))
    assert lists["remove-box"][1]["action"] == "remove" and "points" not in lists["remove-box"][1]
    x0, y0, x1, y1 = lists["remove-box"][1]["box"]
    assert abs(x0 - 20) < 1 and abs(y0 - 20) < 1 and abs(x1 - 160) < 1 and abs(y1 - 130) < 1
    reopened = page.evaluate("() => document.body.dataset.cutoutSession")
    assert reopened and reopened != session
    session = reopened

    step("keep-box", lambda: _drag(page, (250, 150), (440, 290), "left"))
    assert [p["action"] for p in lists["keep-box"]] == ["keep", "remove", "keep"]

    # clear: the cutout as opened; undo brings the list back
    step("cleared", lambda: page.click("#clear"))
    assert lists["cleared"] == [] and shown["cleared"] == shown["opened"]
    assert page.locator("#clear").is_disabled()
    step("uncleared", lambda: page.click("#undo"))
    assert lists["uncleared"] == lists["keep-box"] and shown["uncleared"] == shown["keep-box"]
    matte = _blob(page, "download-matte")

    # leaving fix mode closes the session; the cutout shown stays as fixed
    page.click("#fix")
    page.wait_for_selector("body:not([data-cutout-session])", timeout=30_000)
    assert page.get_attribute("#fix", "aria-pressed") == "false" and page.locator("#fix-help").is_hidden()
    _refused(as_page, session)
    assert _blob(page, "download-cutout") == shown["keep-box"]

    # the SDK's cutout session answers the same clicks, then each list, with the bytes the page showed
    with AiClient(app_id=SDK_APP, target=services.address) as ai, ai.open_cutout(photo, **options) as cutout:
        assert cutout.result is not None and _cutout(cutout.result) == shown["opened"]
        assert _cutout(cutout.keep(points=[(point[0], point[1])])) == shown["keep"]
        assert _cutout(cutout.remove(points=[(rpoint[0], rpoint[1])])) == shown["remove"]
        assert _cutout(cutout.undo()) == shown["undone"]
        for name, prompts in lists.items():
            assert _cutout(cutout.refine(_asked(prompts))) == shown[name], name
        last = cutout.refine(_asked(lists["keep-box"]))
        assert last.matte is not None and last.matte.data == matte


def test_fix_and_select_are_exclusive_and_each_way_out_closes_the_session(
    page: Page,
    photo: Path,
    photos: dict[str, Path],
    browser: BrowserContext,
    gateway: servers.Process,
    key: str,
    as_page: httpx.Client,
) -> None:
    _choose_and_remove(page, photo)
    first = _enter_fix(page)
    before = _fixed(page)
    page.mouse.click(*_screen(page, *KEEPS[0]))
    _wait_fixed(page, before + 1)
    kept = _blob(page, "download-cutout")

    # Select leaves fix mode (its session closed before select's opens: one picture per app here)
    page.click("#select")
    page.wait_for_selector("#select[aria-pressed=true]", timeout=60_000)
    assert page.get_attribute("#fix", "aria-pressed") == "false"
    page.wait_for_selector("body:not([data-cutout-session])")
    _refused(as_page, first)
    assert page.evaluate("() => document.body.dataset.error || ''") == ""

    # and Fix leaves select: the list of this removal is sent again on a new session
    second = _enter_fix(page)
    assert second != first and page.get_attribute("#select", "aria-pressed") == "false"
    assert len(_prompts(page)) == 1 and _blob(page, "download-cutout") == kept
    assert page.evaluate("() => document.body.dataset.error || ''") == ""

    # a background chosen in the page is laid under each fixed cutout (no composite was asked)
    composed = _composed(page)
    page.select_option("#background", "color")
    page.fill("#bg-color", "#e0301e")
    page.wait_for_function("n => Number(document.body.dataset.composed || 0) > n", arg=composed, timeout=30_000)
    composed, before = _composed(page), _fixed(page)
    page.click("#undo")  # the list before the keep: another cutout
    _wait_fixed(page, before + 1)
    assert _composed(page) > composed and _prompts(page) == []
    cutout = np.asarray(Image.open(io.BytesIO(_blob(page, "download-cutout"))))
    assert _blob(page, "download-cutout") != kept
    shown = _pixels(page, "composite")[..., :3].astype(float)
    alpha = cutout[..., 3:].astype(float) / 255
    assert (alpha == 0).sum() > 1000 and (alpha > 0.9).sum() > 1000
    over = cutout[..., :3] * alpha + np.array([0xE0, 0x30, 0x1E]) * (1 - alpha)  # the fixed cutout over the colour
    assert np.abs(shown - over).max() <= 2  # 8-bit premultiplied arithmetic in the canvas
    assert (page.get_attribute("#download-composite", "href") or "").startswith("blob:")
    page.select_option("#background", "none")

    # another picture: the session is closed, Fix waits for its removal
    page.set_input_files("#file", str(photos["coffee.png"]))
    page.wait_for_selector("body:not([data-cutout-session])", timeout=30_000)
    assert page.locator("#fix").is_disabled() and page.get_attribute("#fix", "aria-pressed") == "false"
    _refused(as_page, second)

    # leaving the page closes it too (pagehide: a keepalive DELETE)
    other = _open(browser, gateway, key)
    third = ""
    try:
        _choose_and_remove(other, photo)
        third = _enter_fix(other)
    finally:
        other.close(run_before_unload=True)
    answers = []
    for _ in range(50):
        answers.append(as_page.post(f"/api/v1/cutouts/{third}/refine", json={"prompts": []}).status_code)
        if answers[-1] == 404:
            break
        page.wait_for_timeout(200)
    as_page.delete(f"/api/v1/cutouts/{third}")  # whatever happened: the next test may open one
    assert answers[-1] == 404, answers


def test_the_vocabulary_names_the_cutout_actions(page: Page) -> None:
    """The page's words for a prompt's action are the wire's (craftai_wire.vocabulary.CutoutAction)."""
    from craftai_wire.vocabulary import CutoutAction

    served = page.evaluate("async () => ({...(await import('/vocabulary.js')).CutoutAction})")
    assert served == {action.name: action.value for action in CutoutAction}
