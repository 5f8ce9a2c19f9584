"""The page's camera mode in a real browser (Debian's chromium, headless, driven by Playwright):
Chromium's fake camera (a made test pattern, permission granted without asking) gives the frames;
the page sends them over the frame stream (/api/v1/frames), shows each answer's cutout, over the
chosen background when one is chosen, counts them in body[data-camera-frames], and stops cleanly
(the camera released, the socket closed, the gateway's stream cancelled). A camera refused is
said in plain words."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from craftai_dev import servers
from craftai_dev.browser import CHROMIUM_FLAGS, chromium

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

FAKE_CAMERA = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]  # this test's browser only
FRAMES = 5
LEFT = "the client left; its stream was cancelled"  # the gateway's log line (craftai.web.routes.frames)
SHOWN = "(n) => Number(document.body.dataset.cameraFrames || 0) >= n"
ALPHAS = """() => {
  const canvas = document.getElementById("camera-cutout");
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let low = 255;
  for (let i = 3; i < data.length; i += 4) low = Math.min(low, data[i]);
  return [canvas.width, canvas.height, low];
}"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    """craftai_dev.browser's launch, with Chromium's fake camera."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    assert executable, "chromium is not installed: run tools/bootstrap.sh --dev (it apt-get installs it)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-camera-profile")),
            executable_path=executable,
            args=[*CHROMIUM_FLAGS, *FAKE_CAMERA],
            headless=True,
            viewport={"width": 1200, "height": 1000},
        )
        yield launched
        launched.close()


def _open(browser: BrowserContext, gateway: servers.Process, key: str, problems: list[str]) -> Page:
    page = browser.new_page()
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.goto(f"{gateway.address}/#key={key}")
    page.wait_for_selector("body[data-ready=true]")
    return page


def test_the_camera_shows_its_live_cutout_and_stops_cleanly(
    browser: BrowserContext, gateway: servers.Process, key: str
) -> None:
    problems: list[str] = []
    page = _open(browser, gateway, key, problems)
    page.click("#camera")
    page.wait_for_function(SHOWN, arg=FRAMES, timeout=120_000)
    assert page.get_attribute("#camera", "aria-pressed") == "true"
    width, height, _ = page.evaluate(ALPHAS)
    assert (width, height) == (640, 480)  # the fake camera's frames, asked at 640x480
    assert " on cpu, " in page.inner_text("#camera-caption")

    page.select_option("#background", "color")  # the next frames over the colour: opaque everywhere
    shown = int(page.evaluate("document.body.dataset.cameraFrames"))
    page.wait_for_function(SHOWN, arg=shown + 2, timeout=60_000)
    assert page.evaluate(ALPHAS)[2] == 255

    left = gateway.logs().count(LEFT)
    page.click("#camera")
    page.wait_for_selector("body[data-camera=stopped]")
    assert page.evaluate("window.craftaiPage.camera") is None
    assert page.inner_text("#camera") == "Camera" and page.is_hidden("#error")
    deadline = time.monotonic() + 30
    while gateway.logs().count(LEFT) <= left:
        assert time.monotonic() < deadline, "the gateway did not end the stream of the page that stopped"
        time.sleep(0.1)
    stopped = page.evaluate("document.body.dataset.cameraFrames")
    page.wait_for_timeout(500)
    assert page.evaluate("document.body.dataset.cameraFrames") == stopped  # nothing more is drawn
    assert not problems, problems
    page.close()


def test_a_refused_camera_is_said_in_plain_words(browser: BrowserContext, gateway: servers.Process, key: str) -> None:
    problems: list[str] = []
    page = browser.new_page()
    page.add_init_script(
        "navigator.mediaDevices.getUserMedia = () => Promise.reject(new DOMException('denied', 'NotAllowedError'));"
    )
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.goto(f"{gateway.address}/#key={key}")
    page.wait_for_selector("body[data-ready=true]")
    page.click("#camera")
    page.wait_for_selector("body[data-camera=refused]")
    assert "The camera was refused" in page.inner_text("#error-message")
    assert page.get_attribute("#camera", "aria-pressed") == "false"
    assert not problems, problems
    page.close()
